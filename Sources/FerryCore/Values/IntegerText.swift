/// The decimal text of an integer, appended without a String (the wire encoder and the
/// digests' canonical text both write one per integer value).
public enum IntegerText {
    /// The most bytes `write` writes (`-9223372036854775808`).
    public static let maxBytes = 20

    @inline(__always) public static func append(_ v: Int64, into out: inout [UInt8]) {
        render(v) { out.append(bytes: $0) }
    }

    /// Writes the decimal digits of `v` (with `-`) at `p` (room for `maxBytes`); returns their count.
    @inline(__always) public static func write(_ v: Int64, to p: UnsafeMutablePointer<UInt8>) -> Int {
        render(v) { text in
            if let from = text.baseAddress { UnsafeMutableRawPointer(p).copyMemory(from: from, byteCount: text.count) }
            return text.count
        }
    }

    /// Hands `body` the text of `v`, written backwards into a stack buffer.
    @inline(__always) static func render<R>(_ v: Int64, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes of room for 20 characters
        var magnitude = v.magnitude
        return withUnsafeMutableBytes(of: &digits) { buf in
            var at = buf.count
            repeat {
                at -= 1
                buf[at] = UInt8(truncatingIfNeeded: magnitude % 10) &+ 48
                magnitude /= 10
            } while magnitude != 0
            if v < 0 {
                at -= 1
                buf[at] = 45
            }
            return body(UnsafeRawBufferPointer(rebasing: buf[at...]))
        }
    }
}
