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
        // In place or on the stack, the same text as the String's, for every shape of number.
        var shapes = ["+001.500", "-0.00", "0", "00", "-0", "+0", "12.5", "-12.50", ".5", "5.", "-.0", "-.50", "+.5", "100", "-100.000",
                      "0.000001", "-0.5", "007", "-007.70", "12345.67", "+12345.67", "NaN", "Infinity", "-Infinity", "+Infinity", "1e5",
                      "", "abc", "NaNa", "Inf", "12345678", "-1234567"]
        for a in ["", "+", "-"] { for w in ["", "0", "00", "1", "10", "0102"] { for f in ["", ".", ".0", ".05", ".50", ".000"] { shapes.append(a + w + f) } } }
        for text in shapes {
            var t = text
            let inPlace = t.withUTF8 { DecimalText.withNormalized(UnsafeRawBufferPointer($0)) { Array($0) } }
            XCTAssertEqual(String(decoding: inPlace, as: UTF8.self), DecimalText.normalized(text), text)
        }
    }

    /// The integer key hash: what PostgreSQL and MariaDB compute in SQL (`((k % P + P) % P * A
    /// % P)`, values taken from both servers), including negative keys and the extremes.
    /// A side's keys and row hashes kept in a temporary file (`KeyedHashSpill`, more than three
    /// 1 MiB pieces of them) come back whole and in order, and the digests computed from it —
    /// a first level, and finer levels inside a few buckets (a bit set below 2^24 buckets, a set
    /// above) — are those of the rows themselves.
    func testKeyedHashSpillKeepsEveryRowAndItsDigests() throws {
        let spill = try XCTUnwrap(KeyedHashSpill())
        var random = XorShift(state: 7)
        func next() -> UInt64 { random.next() }
        var pairs: [(Int64, Int64)] = []
        for i in 0..<200_000 {
            let key = i % 5 == 0 ? -Int64(next() % 1_000_000_000_000) : Int64(next() % (1 << 62))
            pairs.append((key, Int64(bitPattern: next())))
            spill.append(key: pairs[i].0, hash: pairs[i].1)
        }
        XCTAssertFalse(spill.isComplete)
        spill.finish()
        XCTAssertTrue(spill.isComplete)
        XCTAssertEqual(spill.rows, 200_000)
        var back: [(Int64, Int64)] = []
        try spill.forEach(table: TableName("t")) { back.append(($0, $1)) }
        XCTAssertEqual(back.count, pairs.count)
        XCTAssertTrue(zip(back, pairs).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }, "the rows come back as they were kept")

        let key = [Column(name: "id", nativeType: "bigint", logicalType: .int64)]
        func expected(_ modulus: Int64, within: (Int64, Set<Int64>)?) -> [BucketDigest] {
            var d: [Int64: BucketDigest] = [:]
            for (k, h) in pairs {
                let kh = KeyHash.integer(k)
                if let w = within, !w.1.contains(kh % w.0) { continue }
                var b = d[kh % modulus] ?? BucketDigest(bucket: kh % modulus, rows: 0, sum: 0)
                b.rows += 1
                b.sum &+= h
                d[kh % modulus] = b
            }
            return d.values.sorted { $0.bucket < $1.bucket }
        }
        let first = try spill.digests(DigestRequest(key: key, columns: key, modulus: 16_384, keyHash: .integer), table: TableName("t"))
        XCTAssertEqual(first, expected(16_384, within: nil))
        XCTAssertEqual(first.reduce(0) { $0 + $1.rows }, 200_000)
        for (outer, inner) in [(Int64(16_384), Int64(262_144)), (1 << 25, 1 << 29)] {
            let residues: [Int64] = [3, 500, outer - 1]
            let request = DigestRequest(
                key: key, columns: key, modulus: inner, within: BucketFilter(key: key, modulus: outer, residues: residues, hash: .integer), keyHash: .integer)
            let finer = try spill.digests(request, table: TableName("t"))
            XCTAssertEqual(finer, expected(inner, within: (outer, Set(residues))), "within \(outer) buckets")
        }
    }

    /// A spill that sorts each piece as it writes it hands its rows back in ascending key order,
    /// merged across the pieces (4 of 65,536 rows here, the last one short), every row once.
    func testSortedSpillMergesItsPiecesInKeyOrder() throws {
        let spill = try XCTUnwrap(KeyedHashSpill(sortingPieces: true))
        var random = XorShift(state: 11)
        func next() -> UInt64 { random.next() }
        var keys = Set<Int64>()
        var pairs: [KeyHashPair] = []
        while pairs.count < 200_000 {
            let key = pairs.count == 0 ? Int64.max : pairs.count == 1 ? Int64.min : Int64(bitPattern: next())
            guard keys.insert(key).inserted else { continue }
            pairs.append(KeyHashPair(key: key, hash: Int64(bitPattern: next())))
            spill.append(key: key, hash: pairs[pairs.count - 1].hash)
        }
        XCTAssertThrowsError(try spill.sortedPairs(table: TableName("t")), "not before it is complete")
        spill.finish()
        let sorted = try spill.sortedPairs(table: TableName("t"))
        var back: [KeyHashPair] = []
        while let p = sorted.current {
            back.append(p)
            try sorted.advance()
        }
        XCTAssertEqual(back, pairs.sorted { $0.key < $1.key })
        XCTAssertThrowsError(try XCTUnwrap(KeyedHashSpill()).sortedPairs(table: TableName("t")), "a spill that did not sort its pieces")

        let empty = try XCTUnwrap(KeyedHashSpill(sortingPieces: true))
        empty.finish()
        XCTAssertNil(try empty.sortedPairs(table: TableName("t")).current)
    }

    func testIntegerKeyHashIsTheSQLArithmetic() {
        let cases: [(Int64, Int64)] = [
            (0, 0), (1, 1_103_515_245), (2, 59_546_843), (-1, 1_043_968_402), (2_147_483_647, 0),
            (Int64.max, 1_103_515_245), (Int64.min, 2_087_936_804),
        ]
        for (k, expected) in cases { XCTAssertEqual(KeyHash.integer(k), expected, "\(k)") }
    }

    /// PostgreSQL's lookup3 as a PostgreSQL 15 server computes it (`hashtextextended(t, 0)`,
    /// `hashint8extended`, `hashfloat8extended`, `hash_record_extended(ROW(…), 0)`), for texts
    /// of every length from 0 to 25 bytes (each tail length, one, two and three 12-byte blocks)
    /// and for the integers, floats and rows Ferry's digests reproduce.
    func testLookup3IsPostgreSQLsHash() {
        let prefixes: [Int64] = [
            3591986179850072241, 2833316173711343549, -6747756470228489321, -1038429303365892052, 3076356108696143428,
            290958262752763840, -6158032784613548338, -8882191227074733005, -3278210106038014113, -3183301415634409076,
            3112909444737856467, -7556637188122330412, 8871624171452417744, 4973135103275945525, 9043359162837317271,
            878954068520307163, 981995727863167554, 484589330715449564, -232611774418841497, 772495730612720881,
            7996419909667933074, 5065299895581918398, -1198571854151947912, -1933194731779935345, 5649064133428767341,
        ]
        let alphabet = Array("abcdefghijklmnopqrstuvwxy".utf8)
        for (n, expected) in prefixes.enumerated() {
            XCTAssertEqual(Int64(bitPattern: Lookup3.bytes(Array(alphabet[..<(n + 1)]))), expected, "length \(n + 1)")
        }
        XCTAssertEqual(Int64(bitPattern: Lookup3.bytes([UInt8]())), -6939563903564495251)
        XCTAssertEqual(Int64(bitPattern: Lookup3.bytes(Array("Zoë & Søren <b>".utf8))), -1191833325351146395)
        // Unaligned input hashes alike (the server reads aligned and unaligned data apart).
        let shifted: [UInt8] = [0] + alphabet
        shifted.withUnsafeBytes { raw in
            XCTAssertEqual(Int64(bitPattern: Lookup3.bytes(UnsafeRawBufferPointer(rebasing: raw[1..<13]))), -7556637188122330412)
        }
        // A tag and a payload hash as the two laid out together, at every length of the
        // payload through three blocks and from every alignment.
        let bytes = (0..<80).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
        bytes.withUnsafeBytes { raw in
            for offset in 0..<4 {
                for n in 0...(raw.count - offset) {
                    let payload = UnsafeRawBufferPointer(rebasing: raw[offset..<(offset + n)])
                    for tag in [UInt8(0), 0x69, 0xff] {
                        XCTAssertEqual(Lookup3.bytes(tag: tag, payload), Lookup3.bytes([tag] + Array(payload)), "tag \(tag), \(n) bytes at +\(offset)")
                    }
                }
            }
        }
        XCTAssertEqual(Lookup3.bytes(tag: 0x74, UnsafeRawBufferPointer(start: nil, count: 0)), Lookup3.bytes([0x74]))
        XCTAssertEqual(Int64(bitPattern: Lookup3.int8(0)), 4154612158245552303)
        XCTAssertEqual(Int64(bitPattern: Lookup3.int8(-5)), -9082176226831438310)  // hashint4extended(-5) too
        XCTAssertEqual(Int64(bitPattern: Lookup3.int8(.max)), 1977219185673256887)
        XCTAssertEqual(Int64(bitPattern: Lookup3.float8(0.1)), -4179333574236083663)
        XCTAssertEqual(Lookup3.float8(-0.0), 0)
        XCTAssertEqual(Int64(bitPattern: Lookup3.float8(.nan)), 4719788943832604568)
        XCTAssertEqual(Int64(bitPattern: Lookup3.float8(-Double.nan)), 4719788943832604568)
        // ROW(1::int8, 'x'::text, NULL::int8, 1::int4): h = 31·h + each column's hash, NULL 0.
        var h: UInt64 = 0
        for e in [Lookup3.int8(1), Lookup3.bytes(Array("x".utf8)), 0, Lookup3.int8(1)] { h = Lookup3.combine(h, e) }
        XCTAssertEqual(Int64(bitPattern: h), 2659481717572816009)
        // ROW(true), ROW(1::int4) and ROW(date '2000-01-02') all hash as the integer 1.
        XCTAssertEqual(Int64(bitPattern: Lookup3.combine(0, Lookup3.int8(1))), -3670598878359251130)
        XCTAssertEqual(Lookup3.int8(10_958 - Lookup3.dateOffset), Lookup3.int8(1))
    }
}

extension String {
    func leftPadded(_ n: Int) -> String { String(repeating: "0", count: max(0, n - count)) + self }
}

/// xorshift64*: the same numbers on every run.
private struct XorShift {
    var state: UInt64
    mutating func next() -> UInt64 {
        state ^= state >> 12
        state ^= state << 25
        state ^= state >> 27
        return state &* 2_685_821_657_736_338_717
    }
}
