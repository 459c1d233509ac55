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
        while i < n {
            let b = bytes[i]
            if b < 0x20 {
                if !controlsAllowed && b != 0x09 && b != 0x0A && b != 0x0D { return false }
                i += 1
            } else if b < 0x80 {
                i += 1
            } else {
                // Validate the UTF-8 sequence and exclude U+FFFE / U+FFFF (EF BF BE / EF BF BF).
                let len: Int
                if b & 0xE0 == 0xC0 { len = 2 } else if b & 0xF0 == 0xE0 { len = 3 } else if b & 0xF8 == 0xF0 { len = 4 } else { return false }
                guard i + len <= n else { return false }
                for k in 1..<len where bytes[i + k] & 0xC0 != 0x80 { return false }
                if len == 2 && b < 0xC2 { return false }
                if len == 3 {
                    let b1 = bytes[i + 1]
                    if b == 0xE0 && b1 < 0xA0 { return false }
                    if b == 0xED && b1 >= 0xA0 { return false }  // surrogates
                    if !controlsAllowed && b == 0xEF && b1 == 0xBF && (bytes[i + 2] == 0xBE || bytes[i + 2] == 0xBF) { return false }
                }
                if len == 4 {
                    let b1 = bytes[i + 1]
                    if b == 0xF0 && b1 < 0x90 { return false }
                    if b > 0xF4 || (b == 0xF4 && b1 >= 0x90) { return false }
                }
                i += len
            }
        }
        return true
    }

    /// Appends `bytes` escaped for element content or a double-quoted attribute. Runs of bytes
    /// that need no escaping are copied in one piece.
    public static func appendEscaped(_ bytes: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        var start = 0
        for i in 0..<bytes.count {
            let b = bytes[i]
            guard b == 0x26 || b == 0x3C || b == 0x3E || b == 0x22 || b == 0x27 || b == 0x0D else { continue }
            if i > start { out.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[start..<i])) }
            start = i + 1
            switch b {
            case 0x26: out.append(contentsOf: [0x26, 0x61, 0x6D, 0x70, 0x3B])  // &amp;
            case 0x3C: out.append(contentsOf: [0x26, 0x6C, 0x74, 0x3B])  // &lt;
            case 0x3E: out.append(contentsOf: [0x26, 0x67, 0x74, 0x3B])  // &gt;
            case 0x22: out.append(contentsOf: [0x26, 0x71, 0x75, 0x6F, 0x74, 0x3B])  // &quot;
            case 0x27: out.append(contentsOf: [0x26, 0x61, 0x70, 0x6F, 0x73, 0x3B])  // &apos;
            default: out.append(contentsOf: [0x26, 0x23, 0x31, 0x33, 0x3B])  // &#13;
            }
        }
        if start < bytes.count { out.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[start...])) }
    }

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

    /// Appends the base64 of `bytes`.
    public static func appendBase64(_ bytes: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        out.append(contentsOf: Data(bytes).base64EncodedString().utf8)
    }
}
