import FerryCore
import XCTest

/// The pieces range digests rest on: MD5 as every engine computes it, and PostgreSQL's text
/// of floats (what `float8::text` prints, taken from a PostgreSQL 15 server).
final class DigestTests: XCTestCase {
    func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    func testMD5MatchesKnownDigestsAcrossBlockBoundaries() {
        let cases: [(String, String)] = [
            ("", "d41d8cd98f00b204e9800998ecf8427e"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("The quick brown fox jumps over the lazy dog", "9e107d9d372bb6826bd81d3542a419d6"),
            (String(repeating: "z", count: 55), "b687791f373f9a09b6f18a1d845aecbf"),
            (String(repeating: "z", count: 56), "fa2cae340242b29bd7ded21c7bc11da1"),
            (String(repeating: "x", count: 63), "7dc2ca208106a2f703567bdff99d8981"),
            (String(repeating: "y", count: 64), "b0c4864f4e28d2d76929c38d87db7ed5"),
            (String(repeating: "a", count: 200), "887f30b43b2867f4a9accceee7d16e6c"),
        ]
        for (text, expected) in cases {
            XCTAssertEqual(hex(MD5.digest(Array(text.utf8))), expected, "\(text.count) bytes")
            // Fed in pieces, the same.
            var m = MD5()
            for chunk in stride(from: 0, to: text.utf8.count, by: 7) {
                m.update(Array(Array(text.utf8)[chunk..<min(chunk + 7, text.utf8.count)]))
            }
            XCTAssertEqual(hex(m.finalize()), expected, "\(text.count) bytes in pieces")
            // The allocation-free prefix the digests use: the first 16 hex digits.
            XCTAssertEqual(String(MD5.prefix(Array(text.utf8)), radix: 16).leftPadded(16), String(expected.prefix(16)), "\(text.count) bytes, prefix")
        }
    }

    func testFloatsPrintAsPostgreSQLPrintsThem() {
        let cases: [(Double, String)] = [
            (142857.14285714287, "142857.14285714287"), (1.0 / 3, "0.3333333333333333"), (2.0 / 3, "0.6666666666666666"),
            (1e100, "1e+100"), (1.5e-7, "1.5e-07"), (123456789012345680, "1.2345678901234568e+17"), (1e15, "1e+15"),
            (1e14, "100000000000000"), (0.0001, "0.0001"), (0.00001, "1e-05"), (1, "1"), (-0.0, "-0"), (0, "0"), (0.1, "0.1"),
            (-2.5, "-2.5"), (.nan, "NaN"), (-.infinity, "-Infinity"), (Double(Float(1.0 / 3)), "0.3333333432674408"),
        ]
        for (value, expected) in cases {
            XCTAssertEqual(CanonicalText.float(value, float32: false), expected, "\(value)")
        }
    }

    func testDecimalsNormalizeInPlaceAsTheirTextDoes() {
        for text in ["+001.500", "-0.00", "0", "12.5", "-12.50", ".5", "5.", "-.0", "100", "-100.000", "0.000001", "NaN", "Infinity", "-Infinity", "1e5", "", "abc"] {
            var out: [UInt8] = []
            var t = text
            t.withUTF8 { DecimalText.appendNormalized(UnsafeRawBufferPointer($0), into: &out) }
            XCTAssertEqual(String(decoding: out, as: UTF8.self), DecimalText.normalized(text), text)
        }
    }

    /// The integer key hash: what PostgreSQL and MariaDB compute in SQL (`((k % P + P) % P * A
    /// % P)`, values taken from both servers), including negative keys and the extremes.
    func testIntegerKeyHashIsTheSQLArithmetic() {
        let cases: [(Int64, Int64)] = [
            (0, 0), (1, 1_103_515_245), (2, 59_546_843), (-1, 1_043_968_402), (2_147_483_647, 0),
            (Int64.max, 1_103_515_245), (Int64.min, 2_087_936_804),
        ]
        for (k, expected) in cases { XCTAssertEqual(KeyHash.integer(k), expected, "\(k)") }
    }
}

extension String {
    func leftPadded(_ n: Int) -> String { String(repeating: "0", count: max(0, n - count)) + self }
}
