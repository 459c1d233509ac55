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
        // Whole groups of the alphabet (the last one perhaps padded), nothing pending: four
        // characters at a time, straight into room made once (per byte through `append` was
        // 750 instructions for a 16-byte value). Anything else takes the general path.
        if count == 0 && padding == 0 && !done && !text.isEmpty && text.count % 4 == 0 {
            let start = out.count
            let room = text.count / 4 * 3
            out.append(contentsOf: repeatElement(0, count: room))
            if let written = Self.wholeGroups(text, into: &out, at: start) {
                out.removeLast(room - written.bytes)
                done = written.padded
                return true
            }
            out.removeLast(room)
        }
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

    /// Decodes `text` (whole groups) into `out` from `at`; nil at anything but the alphabet and
    /// the padding of the last group.
    private static func wholeGroups(_ text: UnsafeBufferPointer<UInt8>, into out: inout [UInt8], at start: Int) -> (bytes: Int, padded: Bool)? {
        out.withUnsafeMutableBufferPointer { o -> (bytes: Int, padded: Bool)? in
            guard let base = o.baseAddress else { return nil }
            return decodeWhole(text, into: base + start)
        }
    }

    /// Decodes `text`, whole groups of the alphabet (the last one perhaps padded), into `out`,
    /// which has room for `text.count / 4 * 3` bytes: the bytes written, or nil at anything else
    /// (a character outside the alphabet, a group cut short), which the general path reads.
    @inline(__always)
    static func decodeWhole(_ text: UnsafeBufferPointer<UInt8>, into o: UnsafeMutablePointer<UInt8>) -> (bytes: Int, padded: Bool)? {
        guard text.count % 4 == 0 else { return nil }
        return table.withUnsafeBufferPointer { t -> (bytes: Int, padded: Bool)? in
            let groups = text.count / 4
            var w = 0
            for g in 0..<groups {
                let i = 4 * g
                let a = t[Int(text[i])], b = t[Int(text[i + 1])], c = t[Int(text[i + 2])], d = t[Int(text[i + 3])]
                // Alphabet values are below 64; `=` is 254, anything else 255.
                if a | b | c | d < 64 {
                    let v = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    o[w] = UInt8(truncatingIfNeeded: v >> 16)
                    o[w + 1] = UInt8(truncatingIfNeeded: v >> 8)
                    o[w + 2] = UInt8(truncatingIfNeeded: v)
                    w += 3
                    continue
                }
                guard g == groups - 1, a | b < 64, d == 254, c < 64 || c == 254 else { return nil }
                let v = UInt32(a) << 18 | UInt32(b) << 12 | (c < 64 ? UInt32(c) << 6 : 0)
                o[w] = UInt8(truncatingIfNeeded: v >> 16)
                w += 1
                if c < 64 {
                    o[w] = UInt8(truncatingIfNeeded: v >> 8)
                    w += 1
                }
                return (w, true)
            }
            return (w, false)
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
