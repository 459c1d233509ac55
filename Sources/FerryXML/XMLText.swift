import Foundation

/// Escaping for XML 1.0 text and attribute values, byte by byte, exact both ways:
/// `& < > " '` become entity references, CR becomes `&#13;` (parsers would turn CR LF into LF),
/// and text XML 1.0 cannot hold (other control characters) is flagged so it travels as base64.
public enum XMLText {
    /// True when `bytes` (UTF-8) can travel as escaped XML text; false when it needs base64
    /// (C0 controls other than TAB, LF and CR, or invalid UTF-8, or U+FFFE/U+FFFF).
    public static func isRepresentable(_ bytes: UnsafeRawBufferPointer) -> Bool {
        isXMLText(bytes, controlsAllowed: false)
    }

    /// True when `bytes` is valid UTF-8 (any control characters allowed): what a document must be
    /// before a parser sees it. (`String(validating:)` needs macOS 15; this builds everywhere.)
    public static func isValidUTF8(_ bytes: UnsafeRawBufferPointer) -> Bool {
        isXMLText(bytes, controlsAllowed: true)
    }

    static func isXMLText(_ bytes: UnsafeRawBufferPointer, controlsAllowed: Bool) -> Bool {
        var i = 0
        let n = bytes.count
        guard let base = bytes.baseAddress else { return true }
        while i < n {
            // ASCII eight bytes at a time (no byte with its high bit set, and, unless controls
            // are allowed, none below 0x20), straight to the first byte that needs a look.
            if i + 8 <= n {
                let w = base.loadUnaligned(fromByteOffset: i, as: UInt64.self)
                let look = textLook(w, controlsAllowed: controlsAllowed)
                if look == 0 {
                    i += 8
                    continue
                }
                i += look.trailingZeroBitCount >> 3
            }
            let b = bytes[i]
            if b < 0x20 {
                if !controlsAllowed && b != 0x09 && b != 0x0A && b != 0x0D { return false }
                i += 1
            } else if b < 0x80 {
                i += 1
            } else {
                let len = sequenceLength(base, at: i, end: n, lead: b, controlsAllowed: controlsAllowed)
                guard len > 0 else { return false }
                i += len
            }
        }
        return true
    }

    /// The length of the UTF-8 sequence at `i` whose first byte is `b` (from 0x80), or 0 when it is
    /// not valid UTF-8 (overlong, a surrogate, past U+10FFFF, cut short at `end`) or, unless
    /// `controlsAllowed`, is U+FFFE or U+FFFF (EF BF BE / EF BF BF), which XML 1.0 excludes.
    @inline(__always)
    static func sequenceLength(_ base: UnsafeRawPointer, at i: Int, end n: Int, lead b: UInt8, controlsAllowed: Bool) -> Int {
        @inline(__always) func next(_ k: Int) -> UInt8 { base.load(fromByteOffset: i + k, as: UInt8.self) }
        if b >= 0xC2 && b < 0xE0 {
            return i + 2 <= n && next(1) & 0xC0 == 0x80 ? 2 : 0
        }
        if b >= 0xE0 && b < 0xF0 {
            guard i + 3 <= n else { return 0 }
            let b1 = next(1), b2 = next(2)
            guard b1 & 0xC0 == 0x80, b2 & 0xC0 == 0x80 else { return 0 }
            if b == 0xE0 && b1 < 0xA0 { return 0 }  // overlong
            if b == 0xED && b1 >= 0xA0 { return 0 }  // surrogates
            if !controlsAllowed && b == 0xEF && b1 == 0xBF && b2 >= 0xBE { return 0 }
            return 3
        }
        if b >= 0xF0 && b <= 0xF4 {
            guard i + 4 <= n else { return 0 }
            let b1 = next(1)
            guard b1 & 0xC0 == 0x80, next(2) & 0xC0 == 0x80, next(3) & 0xC0 == 0x80 else { return 0 }
            if b == 0xF0 && b1 < 0x90 { return 0 }  // overlong
            if b == 0xF4 && b1 >= 0x90 { return 0 }  // past U+10FFFF
            return 4
        }
        return 0
    }

    /// Appends `bytes` escaped for element content or a double-quoted attribute. Runs of bytes
    /// that need no escaping are copied in one piece.
    public static func appendEscaped(_ bytes: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        appendEscaped(bytes, content: false, into: &out)
    }

    /// `appendEscaped` for element content, where `"` and `'` stay as they are.
    public static func appendContent(_ bytes: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        appendEscaped(bytes, content: true, into: &out)
    }

    /// `content`: element content (quotes plain, scanned eight bytes at a time), else an
    /// attribute's text.
    static func appendEscaped<Out: ByteAppending>(_ bytes: UnsafeRawBufferPointer, content: Bool, into out: inout Out) {
        var start = 0
        var i = 0
        let n = bytes.count
        guard let base = bytes.baseAddress else { return }
        (content ? contentClass : escapeClass).withUTF8Buffer { table in
            while i < n {
                if content && i + 8 <= n {
                    let look = contentLook(base.loadUnaligned(fromByteOffset: i, as: UInt64.self))
                    if look == 0 {
                        i += 8
                        continue
                    }
                    i += look.trailingZeroBitCount >> 3
                }
                let b = bytes[i]
                i += 1
                guard table[Int(b)] == 49 else { continue }
                if i - 1 > start { out.append(bytes: UnsafeRawBufferPointer(rebasing: bytes[start..<i - 1])) }
                start = i
                appendEntity(b, into: &out)
            }
        }
        if start < bytes.count { out.append(bytes: UnsafeRawBufferPointer(rebasing: bytes[start...])) }
    }

    /// `appendEscaped` and `isRepresentable` in one pass: appends `bytes` escaped and returns
    /// true, or, when XML 1.0 cannot hold them, leaves `out` as it was and returns false.
    /// For element content: `"` and `'` stay as they are.
    public static func appendEscapedIfRepresentable(_ bytes: UnsafeRawBufferPointer, into out: inout [UInt8]) -> Bool {
        escapedIfRepresentable(bytes, into: &out)
    }

    /// `appendEscapedIfRepresentable` into any `ByteAppending`.
    static func escapedIfRepresentable<Out: ByteAppending>(_ bytes: UnsafeRawBufferPointer, into out: inout Out) -> Bool {
        let mark = out.count
        var start = 0
        var i = 0
        let n = bytes.count
        guard let base = bytes.baseAddress else { return true }
        let ok = contentClass.withUTF8Buffer { table -> Bool in
            while i < n {
                // Most text is plain ASCII: eight bytes at a time, then straight to the first
                // byte that needs a look (the mask is exact: its lowest flag is that byte).
                if i + 8 <= n {
                    let look = contentLook(base.loadUnaligned(fromByteOffset: i, as: UInt64.self))
                    if look == 0 {
                        i += 8
                        continue
                    }
                    i += look.trailingZeroBitCount >> 3
                }
                let b = bytes[i]
                switch table[Int(b)] {
                case 48:  // plain ASCII
                    i += 1
                case 49:  // & < > " ' CR
                    if i > start { out.append(bytes: UnsafeRawBufferPointer(rebasing: bytes[start..<i])) }
                    appendEntity(b, into: &out)
                    i += 1
                    start = i
                case 50:  // a C0 control XML 1.0 has no place for
                    return false
                default:  // UTF-8 sequences, checked as `isRepresentable` does, in line: a run of
                    // them (Greek, Japanese) without a word test and a table look per character
                    var lead = b
                    repeat {
                        let len = sequenceLength(base, at: i, end: n, lead: lead, controlsAllowed: false)
                        guard len > 0 else { return false }
                        i += len
                        guard i < n else { break }
                        lead = base.load(fromByteOffset: i, as: UInt8.self)
                    } while lead >= 0x80
                }
            }
            return true
        }
        guard ok else {
            out.truncate(to: mark)
            return false
        }
        if start < n { out.append(bytes: UnsafeRawBufferPointer(rebasing: bytes[start...])) }
        return true
    }

    // Eight bytes at a time, as a little-endian word (after "Bit Twiddling Hacks"), with one
    // flag per byte (its bit 7) that is exact: no sum below carries out of its byte, so the
    // lowest flag is the first byte that needs a look, found with one trailing-zero count.
    static let highBits: UInt64 = 0x8080_8080_8080_8080
    static let low7Bits: UInt64 = 0x7F7F_7F7F_7F7F_7F7F

    /// Bit 7 of each of eight bytes that needs a look in element content: below 0x20, from
    /// 0x80 (UTF-8 sequences are checked), `&`, `<` or `>`. Zero when the eight bytes go out as
    /// they are. Each test is on the byte without its bit 7 (`t`), so a sum never leaves its byte,
    /// and leaves bit 7 clear where the byte matches: below 0x20 (`t + 0x60`), `&` (`t ^ 0x26`
    /// is zero), `<` or `>` (they differ only in bit 1).
    @inline(__always) static func contentLook(_ w: UInt64) -> UInt64 {
        let t = w & low7Bits
        let control = t &+ 0x6060_6060_6060_6060
        let amp = (t ^ 0x2626_2626_2626_2626) &+ low7Bits
        let angle = ((t | 0x0202_0202_0202_0202) ^ 0x3E3E_3E3E_3E3E_3E3E) &+ low7Bits
        return (~(control & amp & angle) | w) & highBits
    }

    /// `contentLook` as a decoder reads a value's text: bytes below 0x20, `<` and `&` (bytes
    /// from 0x80 are plain here).
    @inline(__always) static func valueLook(_ w: UInt64) -> UInt64 {
        let t = w & low7Bits
        let control = t &+ 0x6060_6060_6060_6060
        let lt = (t ^ 0x3C3C_3C3C_3C3C_3C3C) &+ low7Bits
        let amp = (t ^ 0x2626_2626_2626_2626) &+ low7Bits
        return ~(control & lt & amp | w) & highBits
    }

    /// Bytes from 0x80 and, unless `controlsAllowed`, below 0x20.
    @inline(__always) static func textLook(_ w: UInt64, controlsAllowed: Bool) -> UInt64 {
        controlsAllowed ? w & highBits : (~((w & low7Bits) &+ 0x6060_6060_6060_6060) | w) & highBits
    }

    @inline(__always) static func appendEntity<Out: ByteAppending>(_ b: UInt8, into out: inout Out) {
        switch b {
        case 0x26: out.appendASCII("&amp;")
        case 0x3C: out.appendASCII("&lt;")
        case 0x3E: out.appendASCII("&gt;")
        case 0x22: out.appendASCII("&quot;")
        case 0x27: out.appendASCII("&apos;")
        default: out.appendASCII("&#13;")
        }
    }

    /// Per byte: `0` plain ASCII, `1` escaped (`& < > " '` and CR), `2` a control character XML
    /// 1.0 cannot hold (TAB and LF are plain), `3` a byte of a UTF-8 sequence.
    static let escapeClass: StaticString = """
        22222222200221222222222222222222\
        00100011000000000000000000001010\
        00000000000000000000000000000000\
        00000000000000000000000000000000\
        33333333333333333333333333333333\
        33333333333333333333333333333333\
        33333333333333333333333333333333\
        33333333333333333333333333333333
        """

    /// `escapeClass` for element content, where quotes need no escaping (JSON text then goes
    /// as it is).
    static let contentClass: StaticString = """
        22222222200221222222222222222222\
        00000010000000000000000000001010\
        00000000000000000000000000000000\
        00000000000000000000000000000000\
        33333333333333333333333333333333\
        33333333333333333333333333333333\
        33333333333333333333333333333333\
        33333333333333333333333333333333
        """

    /// Appends `text` escaped for a double-quoted attribute: TAB and LF become character
    /// references too, since parsers normalise whitespace in attribute values.
    public static func appendAttribute(_ text: String, into out: inout [UInt8]) {
        var t = text
        t.withUTF8 { raw in
            for b in UnsafeRawBufferPointer(raw) {
                switch b {
                case 0x09: out.append(contentsOf: Array("&#9;".utf8))
                case 0x0A: out.append(contentsOf: Array("&#10;".utf8))
                default: withUnsafeBytes(of: b) { appendEscaped($0, into: &out) }
                }
            }
        }
    }

    public static func appendEscaped(_ text: String, into out: inout [UInt8]) {
        var t = text
        t.withUTF8 { appendEscaped(UnsafeRawBufferPointer($0), into: &out) }
    }

    public static func escaped(_ text: String) -> String {
        var out: [UInt8] = []
        appendEscaped(text, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends the base64 of `bytes` (standard alphabet, padded, no line breaks), written
    /// straight into `out`.
    public static func appendBase64(_ bytes: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        base64(bytes, into: &out)
    }

    /// `appendBase64` into any `ByteAppending`.
    static func base64<Out: ByteAppending>(_ bytes: UnsafeRawBufferPointer, into out: inout Out) {
        let n = bytes.count
        guard n > 0 else { return }
        let length = (n + 2) / 3 * 4
        out.write(maxBytes: length) { o in
            base64Alphabet.withUTF8Buffer { a in
                var w = 0
                var i = 0
                while i + 3 <= n {
                    let v = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
                    o[w] = a[Int(v >> 18)]
                    o[w + 1] = a[Int(v >> 12 & 63)]
                    o[w + 2] = a[Int(v >> 6 & 63)]
                    o[w + 3] = a[Int(v & 63)]
                    i += 3
                    w += 4
                }
                if i < n {
                    let two = i + 1 < n
                    let v = UInt32(bytes[i]) << 16 | (two ? UInt32(bytes[i + 1]) << 8 : 0)
                    o[w] = a[Int(v >> 18)]
                    o[w + 1] = a[Int(v >> 12 & 63)]
                    o[w + 2] = two ? a[Int(v >> 6 & 63)] : 61
                    o[w + 3] = 61
                }
            }
            return length
        }
    }

    static let base64Alphabet: StaticString = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
}
