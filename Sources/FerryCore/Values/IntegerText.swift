/// The decimal text of an integer, appended without a String (the wire encoder and the
/// digests' canonical text both write one per integer value).
public enum IntegerText {
    @inline(__always) public static func append(_ v: Int64, into out: inout [UInt8]) {
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes of room for 20 characters
        var magnitude = v.magnitude
        withUnsafeMutableBytes(of: &digits) { buf in
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
            out.append(bytes: UnsafeRawBufferPointer(rebasing: buf[at...]))
        }
    }
}
