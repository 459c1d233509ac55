import Foundation

/// Base64 decoded piece by piece (the pieces of one value may split a 4-character group).
/// Characters outside the alphabet (line breaks, spaces) are skipped, as Foundation's
/// `.ignoreUnknownCharacters` does; `=` padding ends the value.
struct Base64Decoder {
    private var quad: UInt32 = 0
    private var count = 0
    private var padding = 0
    private var done = false

    static let table: [UInt8] = {
        var t = [UInt8](repeating: 255, count: 256)
        for (i, ch) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8.enumerated() { t[Int(ch)] = UInt8(i) }
        t[Int(UInt8(ascii: "="))] = 254
        return t
    }()

    /// Decodes `text` into `out`; false when it is not base64.
    mutating func decode(_ text: UnsafeBufferPointer<UInt8>, into out: inout [UInt8]) -> Bool {
        if out.capacity < out.count + text.count / 4 * 3 + 3 {
            // Grow geometrically: reserving exactly per piece would copy the value every time.
            out.reserveCapacity(max(out.count * 2, out.count + text.count / 4 * 3 + 3))
        }
        return Self.table.withUnsafeBufferPointer { t in
            for ch in text {
                let v = t[Int(ch)]
                if v == 255 { continue }
                if done { return false }  // something after the padded last group
                if v == 254 {
                    // `=` only completes a last group of two or three characters.
                    guard count >= 2 else { return false }
                    padding += 1
                    if count + padding == 4 { flush(into: &out) }
                    continue
                }
                if padding > 0 { return false }
                quad = quad << 6 | UInt32(v)
                count += 1
                if count == 4 {
                    out.append(UInt8(truncatingIfNeeded: quad >> 16))
                    out.append(UInt8(truncatingIfNeeded: quad >> 8))
                    out.append(UInt8(truncatingIfNeeded: quad))
                    quad = 0
                    count = 0
                }
            }
            return true
        }
    }

    /// A padded last group: two or three characters, then `=` up to four.
    private mutating func flush(into out: inout [UInt8]) {
        let bits = quad << (6 * UInt32(4 - count))
        out.append(UInt8(truncatingIfNeeded: bits >> 16))
        if count == 3 { out.append(UInt8(truncatingIfNeeded: bits >> 8)) }
        quad = 0
        count = 0
        padding = 0
        done = true
    }

    /// True when the value ended on a whole group.
    func finish() -> Bool { count == 0 && padding == 0 }
}
