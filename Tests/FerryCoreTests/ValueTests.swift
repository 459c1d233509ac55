import FerryCore
import XCTest

final class ValueTests: XCTestCase {
    func testTemporalRoundTrips() throws {
        XCTAssertEqual(Temporal.days(year: 1970, month: 1, day: 1), 0)
        XCTAssertEqual(Temporal.formatDate(-1), "1969-12-31")
        XCTAssertEqual(Temporal.formatDate(Temporal.days(year: 1, month: 1, day: 1)), "0001-01-01")
        for d in stride(from: Int64(-800_000), through: 3_000_000, by: 997) {
            XCTAssertEqual(try Temporal.parseDate(Temporal.formatDate(d)), d)
        }
        XCTAssertEqual(try Temporal.parseDate("2024-02-29"), Temporal.days(year: 2024, month: 2, day: 29))
        XCTAssertThrowsError(try Temporal.parseDate("2023-02-29"))
        XCTAssertThrowsError(try Temporal.parseDate("2023-13-01"))

        XCTAssertEqual(Temporal.formatTime(0), "00:00:00")
        XCTAssertEqual(Temporal.formatTime(1_500_000), "00:00:01.5")
        XCTAssertEqual(Temporal.formatTime(Temporal.microsPerDay - 1), "23:59:59.999999")
        XCTAssertEqual(try Temporal.parseTime("23:59:59.999999"), Temporal.microsPerDay - 1)
        XCTAssertEqual(try Temporal.parseTime("24:00:00"), Temporal.microsPerDay)
        XCTAssertEqual(try Temporal.parseTime("10:30"), 37_800_000_000)
        XCTAssertEqual(try Temporal.parseTime("00:00:00.1234560"), 123_456)
        XCTAssertThrowsError(try Temporal.parseTime("00:00:00.1234567")) { e in
            XCTAssertTrue("\(e)".contains("more than 6 fractional digits"))
        }

        let ts: Int64 = -2_208_988_800_000_001  // 1899-12-31 23:59:59.999999
        XCTAssertEqual(Temporal.formatTimestamp(ts), "1899-12-31 23:59:59.999999")
        XCTAssertEqual(try Temporal.parseTimestamp("1899-12-31 23:59:59.999999").micros, ts)
        XCTAssertEqual(try Temporal.parseTimestamp("1970-01-01T01:00:00+01:00").micros, 0)
        XCTAssertEqual(try Temporal.parseTimestamp("1970-01-01 00:00:00Z").hadOffset, true)
        XCTAssertEqual(try Temporal.parseTimestamp("2000-01-01").micros, 946_684_800_000_000)
        XCTAssertEqual(Temporal.formatTimestamp(0, utcSuffix: "+00:00"), "1970-01-01 00:00:00+00:00")
        XCTAssertThrowsError(try Temporal.parseTimestamp("yesterday"))
    }

    func testDecimalText() {
        XCTAssertEqual(DecimalText.exact(0.99), "0.99")
        XCTAssertEqual(DecimalText.exact(1.0), "1")
        XCTAssertEqual(DecimalText.exact(-2.5), "-2.5")
        XCTAssertEqual(DecimalText.exact(1e20), "100000000000000000000")
        XCTAssertEqual(DecimalText.exact(1.5e-7), "0.00000015")
        XCTAssertEqual(DecimalText.exact(-1.25e-5), "-0.0000125")
        XCTAssertEqual(Double(DecimalText.exact(123456.789e10)), 123456.789e10)
        for text in ["0", "-12.30", ".5", "+1", "1234567890123456789012345678.0123456789", "NaN", "-Infinity"] {
            XCTAssertTrue(DecimalText.isValid(text), text)
        }
        for text in ["", "-", "1e5", "1.2.3", "abc", " 1", "-NaN"] {
            XCTAssertFalse(DecimalText.isValid(text), text)
        }
    }

    func testUUIDText() {
        let bytes: [UInt8] = Array(0..<16)
        let text = UUIDText.format(bytes)
        XCTAssertEqual(text, "00010203-0405-0607-0809-0a0b0c0d0e0f")
        XCTAssertEqual(UUIDText.parse(text), bytes)
        XCTAssertEqual(UUIDText.parse("{00010203-0405-0607-0809-0A0B0C0D0E0F}"), bytes)
        XCTAssertNil(UUIDText.parse("0001"))
        // Every byte value in every position, against the digits written one by one.
        var rng = SystemRandomNumberGenerator()
        for round in 0..<64 {
            let bytes = (0..<16).map { i in round < 16 ? UInt8(truncatingIfNeeded: round * 16 + i) : UInt8.random(in: 0...255, using: &rng) }
            var expected = ""
            for (i, b) in bytes.enumerated() {
                if [4, 6, 8, 10].contains(i) { expected += "-" }
                expected += String(b, radix: 16).count == 1 ? "0" + String(b, radix: 16) : String(b, radix: 16)
            }
            XCTAssertEqual(UUIDText.format(bytes), expected)
        }
    }

    /// The hyphenated form read eight digits at a time against the digits read one by one:
    /// random 36-character texts with the hyphens in place, of hex digits of either case and
    /// the bytes next to their ranges (and bytes that only become digits with bit 5 set).
    func testUUIDsReadAtTheirFixedPlacesAsDigitByDigit() {
        func reference(_ text: [UInt8]) -> [UInt8]? {
            var out: [UInt8] = []
            var high: UInt8?
            for c in text {
                let v: UInt8
                switch c {
                case 48...57: v = c - 48
                case 97...102: v = c - 87
                case 65...70: v = c - 55
                case 45, 123, 125: continue
                default: return nil
                }
                if let h = high { out.append(h << 4 | v); high = nil } else { high = v }
            }
            return out.count == 16 && high == nil ? out : nil
        }
        let hex = Array("0123456789abcdefABCDEF".utf8)
        let near: [UInt8] = [0x2F, 0x3A, 0x40, 0x47, 0x60, 0x67, 0x10, 0x19, 0x41 - 0x20, 0x80, 0xC3, 0xB0, 0xFF, 0x00, 0x7B, 0x7D]
        var rng = SystemRandomNumberGenerator()
        var parsed = 0
        for round in 0..<20_000 {
            var text = (0..<36).map { _ in hex.randomElement(using: &rng) ?? 48 }
            for i in [8, 13, 18, 23] { text[i] = 45 }
            // Most rounds break one or two places; a few leave every digit a digit.
            for _ in 0..<(round % 3) { text[Int.random(in: 0..<36, using: &rng)] = near.randomElement(using: &rng) ?? 0 }
            let got = text.withUnsafeBytes { UUIDText.parse($0) }
            XCTAssertEqual(got, reference(text), String(decoding: text, as: UTF8.self))
            if got != nil { parsed += 1 }
        }
        XCTAssertGreaterThan(parsed, 5_000)
        XCTAssertLessThan(parsed, 20_000)
    }

    /// The fixed-place readings of `YYYY-MM-DD` and `YYYY-MM-DD HH:MM:SS[.f…]` against the
    /// general parser, which reads the same text with a `Z` after it: equal values, and
    /// refused together (impossible dates and times, a digit replaced, a dot without digits).
    func testTimestampsReadAtTheirFixedPlacesAsTheGeneralParserReadsThem() {
        var rng = SystemRandomNumberGenerator()
        func two(_ v: Int) -> String { v < 10 ? "0\(v)" : "\(v)" }
        var accepted = 0
        for round in 0..<20_000 {
            let y = Int.random(in: 0...9999, using: &rng), m = Int.random(in: 0...13, using: &rng), d = Int.random(in: 0...32, using: &rng)
            let date = String(repeating: "0", count: 4 - String(y).count) + "\(y)-\(two(m))-\(two(d))"
            let h = Int.random(in: 0...24, using: &rng), mi = Int.random(in: 0...60, using: &rng), s = Int.random(in: 0...60, using: &rng)
            let digits = Int.random(in: 0...7, using: &rng)
            let fraction = digits == 0 ? "" : "." + String((0..<digits).map { _ in Character(String(Int.random(in: 0...9, using: &rng))) })
            var text = Array((date + (round % 2 == 0 ? " " : "T") + "\(two(h)):\(two(mi)):\(two(s))" + fraction).utf8)
            if round % 5 == 0 { text[Int.random(in: 0..<text.count, using: &rng)] = [47, 58, 32, 65, 46].randomElement(using: &rng) ?? 47 }
            let fast = try? text.withUnsafeBytes { try Temporal.parseTimestamp($0) }
            let general = try? (text + Array("Z".utf8)).withUnsafeBytes { try Temporal.parseTimestamp($0) }
            XCTAssertEqual(fast?.micros, general?.micros, String(decoding: text, as: UTF8.self))
            XCTAssertEqual(fast?.hadOffset, general.map { _ in false })
            if fast != nil { accepted += 1 }
            let dateOnly = Array(text.prefix(10))
            let fastDate = try? dateOnly.withUnsafeBytes { try Temporal.parseDate($0) }
            let generalDate = try? (dateOnly + Array("Z".utf8)).withUnsafeBytes { try Temporal.parseTimestamp($0) }
            XCTAssertEqual(fastDate.map { $0 * Temporal.microsPerDay }, generalDate?.micros, String(decoding: dateOnly, as: UTF8.self))
        }
        XCTAssertGreaterThan(accepted, 2_000)
        XCTAssertThrowsError(try Temporal.parseTimestamp("2020-01-01 00:00:00."))
        XCTAssertEqual(try Temporal.parseTimestamp("2020-01-01 00:00:00.1234560").micros, try Temporal.parseTimestamp("2020-01-01 00:00:00.123456").micros)
    }

    /// The formatting fast paths (two-digit fields, four-digit years) against the general one.
    func testTemporalTextAtTheEdges() throws {
        XCTAssertEqual(Temporal.formatDate(Temporal.days(year: 999, month: 12, day: 31)), "0999-12-31")
        XCTAssertEqual(Temporal.formatDate(Temporal.days(year: 1000, month: 1, day: 1)), "1000-01-01")
        XCTAssertEqual(Temporal.formatDate(Temporal.days(year: 9999, month: 12, day: 31)), "9999-12-31")
        XCTAssertEqual(Temporal.formatDate(Temporal.days(year: 10000, month: 1, day: 1)), "10000-01-01")
        XCTAssertEqual(Temporal.formatDate(Temporal.days(year: -44, month: 3, day: 15)), "-0044-03-15")
        XCTAssertEqual(Temporal.formatTime(Temporal.microsPerDay), "24:00:00")
        XCTAssertEqual(Temporal.formatTime(838 * 3_600_000_000 + 59 * 60_000_000 + 59_000_000), "838:59:59")
        XCTAssertEqual(Temporal.formatTimestamp(Temporal.days(year: 2024, month: 2, day: 29) * Temporal.microsPerDay + 45_296_000_007),
                       "2024-02-29 12:34:56.000007")
        for d in stride(from: Int64(-800_000), through: 3_000_000, by: 7919) {
            let micros = d * Temporal.microsPerDay + (d * 1_234_567) % Temporal.microsPerDay
            XCTAssertEqual(try Temporal.parseTimestamp(Temporal.formatTimestamp(micros)).micros, micros)
        }
    }

    func testBatchesKeepEveryValue() throws {
        let types: [LogicalType] = [.int64, .float64, .text, .binary(maxLength: nil), .boolean]
        let rows: [[Value]] = [
            [.int(.min), .double(-0.0), .text(""), .binary([]), .bool(true)],
            [.null, .null, .null, .null, .null],
            [.int(.max), .double(.nan), .text("é😀\u{0}"), .binary([0, 0]), .bool(false)],
        ]
        let batch = try RowBatch(rows: rows, types: types)
        XCTAssertEqual(batch.count, 3)
        for (i, row) in rows.enumerated() {
            XCTAssertEqual(batch.row(i, types: types), row)
        }
        XCTAssertEqual(batch.columns[2].nullCount, 1)
        // One batch appended to another (a key list's chunks handed on as one batch): every
        // value, NULL and empty one after the first batch's.
        var joined = batch
        joined.append(contentsOf: try RowBatch(rows: Array(rows.reversed()), types: types))
        XCTAssertEqual(joined.count, 6)
        for (i, row) in (rows + rows.reversed()).enumerated() {
            XCTAssertEqual(joined.row(i, types: types), row, "row \(i)")
        }
        XCTAssertEqual(batch.count, 3, "the appended batch is a value: the first is unchanged")
        XCTAssertNotEqual(Value.double(0.0), Value.double(-0.0))
        XCTAssertEqual(Value.double(.nan), Value.double(.nan))
        XCTAssertThrowsError(try RowBatch(rows: [[.int(70_000)]], types: [.int16])) { e in
            XCTAssertTrue("\(e)".contains("does not fit int16"), "\(e)")
        }
        // A large batch spans many bitmap words.
        var col = ColumnBuffer(storage: .int64)
        for i in 0..<1000 { if i % 3 == 0 { col.appendNull() } else { col.append(Int64(i)) } }
        XCTAssertEqual(col.nullCount, 334)
        XCTAssertTrue(col.isNull(999))
        XCTAssertFalse(col.isNull(998))
        // Whole columns appended: without NULLs at once (fixed width), with them row by row; the
        // rows land after a count that is not a multiple of the bitmap's 64.
        for storage in [ColumnStorage.int64, .double] {
            func value(_ i: Int) -> Value { storage == .int64 ? .int(Int64(i)) : .double(Double(i) / 4) }
            let type: LogicalType = storage == .int64 ? .int64 : .float64
            var joined = ColumnBuffer(storage: storage)
            var expected: [Value] = []
            for (n, nulls) in [(70, true), (130, false), (1, false), (63, true), (200, false)] {
                var part = ColumnBuffer(storage: storage)
                for i in 0..<n {
                    let v: Value = nulls && i % 5 == 0 ? .null : value(expected.count + i)
                    try v.append(to: &part, as: type)
                }
                let before = expected.count
                expected += (0..<n).map { nulls && $0 % 5 == 0 ? .null : value(before + $0) }
                joined.append(contentsOf: part)
            }
            XCTAssertEqual(joined.count, expected.count)
            XCTAssertEqual(joined.nullCount, expected.filter { $0 == .null }.count)
            for (i, v) in expected.enumerated() { XCTAssertEqual(Value(column: joined, row: i, type: type), v, "\(storage) row \(i)") }
            // More rows after a bulk append still go to their own bits.
            joined.appendNull()
            XCTAssertTrue(joined.isNull(expected.count))
            XCTAssertFalse(joined.isNull(expected.count - 1))
        }
    }

    /// A column's arena is a value: a copy keeps its bytes while the original grows, is emptied
    /// or is refilled, and every way of appending lands the same bytes (past many regrowths).
    func testArenasAreValuesAndKeepEveryByte() {
        var column = ColumnBuffer(storage: .bytes)
        var expected: [[UInt8]] = []
        var random = [UInt8](repeating: 0, count: 300)
        for i in 0..<5_000 {
            let n = i % 97
            for k in 0..<n { random[k] = UInt8(truncatingIfNeeded: i &* 31 &+ k) }
            let bytes = Array(random[0..<n])
            switch i % 4 {
            case 0: bytes.withUnsafeBytes { column.append(bytes: $0) }
            case 1: bytes.dropFirst().withUnsafeBytes { column.append(tag: bytes.first ?? 0, bytes: $0) }
            case 2: column.append(count: n) { out in out.copyBytes(from: bytes) }
            default: column.append(bytes: bytes.lazy.map { $0 })
            }
            expected.append(i % 4 == 1 && bytes.isEmpty ? [0] : bytes)
        }
        let copy = column
        XCTAssertEqual((0..<copy.count).map { copy.bytes($0) }, expected)
        "after".utf8CString.dropLast().withUnsafeBytes { column.append(bytes: $0) }
        XCTAssertEqual(copy.count, 5_000)
        XCTAssertEqual(copy.arena.count, expected.reduce(0) { $0 + $1.count })
        XCTAssertEqual(column.string(5_000), "after")
        var emptied = copy
        emptied.removeAll()
        emptied.append(string: "new")
        XCTAssertEqual(emptied.string(0), "new")
        XCTAssertEqual((0..<copy.count).map { copy.bytes($0) }, expected)
        let pinned = copy.withPinned { p in (0..<copy.count).map { Array(p.bytes($0)) } }
        XCTAssertEqual(pinned, expected)
    }

    func testLogicalTypeJSONRoundTrip() throws {
        let types: [LogicalType] = [
            .boolean, .int16, .decimal(precision: 10, scale: 2), .decimal(precision: nil, scale: nil), .text(maxLength: 5, fixed: true),
            .binary(maxLength: nil), .time(precision: 3), .timestamp(precision: 6, timeZone: true), .uuid, .json,
            .enumeration(labels: ["a", "b'c"]), .unsupported(native: "tsvector"),
        ]
        let data = try JSONEncoder().encode(types)
        XCTAssertEqual(try JSONDecoder().decode([LogicalType].self, from: data), types)
        XCTAssertEqual(LogicalType.enumeration(labels: ["a", "b'c"]).description, "enum('a','b''c')")
    }
}
