# Sourced by the misbehaving test plugins: `hello PROTOCOL 'CAPABILITY…'` writes a handshake
# frame announcing PROTOCOL and those capabilities (names separated by spaces).
hello() {
    doc="<?xml version=\"1.0\"?><capabilities protocol=\"$1\" name=\"$(basename "$0")\" version=\"0.0.1\">"
    for c in $2; do doc="$doc<capability name=\"$c\"/>"; done
    doc="$doc</capabilities>"
    printf 'hello 0 %s\n%s' "$(printf '%s' "$doc" | wc -c | tr -d ' ')" "$doc"
}
