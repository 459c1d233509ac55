import FerryCore
import Foundation

/// A table as a binlog TABLE_MAP event describes it: each column's binlog type and metadata, and
/// how a row image of it is read. Row images are decoded here from the binlog's own layout
/// (Connector/C's `mariadb_rpl_extract_rows` misreads CHAR, ENUM and SET lengths and TIMESTAMP's
/// byte order in 3.3), each value into the form `MySQLReader` gives the same value from a SELECT,
/// so that a replicated row is the copied row.
struct BinlogTableMap {
    let database: String
    let table: String
    /// Per column: the binlog type and its metadata bytes (0–2 of them).
    let types: [UInt8]
    let meta: [(UInt8, UInt8)]

    /// Binlog type codes (`enum_field_types`).
    enum T {
        static let decimal: UInt8 = 0, tiny: UInt8 = 1, short: UInt8 = 2, long: UInt8 = 3, float: UInt8 = 4, double: UInt8 = 5
        static let null: UInt8 = 6, timestamp: UInt8 = 7, longlong: UInt8 = 8, int24: UInt8 = 9, date: UInt8 = 10, time: UInt8 = 11
        static let datetime: UInt8 = 12, year: UInt8 = 13, newdate: UInt8 = 14, varchar: UInt8 = 15, bit: UInt8 = 16
        static let timestamp2: UInt8 = 17, datetime2: UInt8 = 18, time2: UInt8 = 19, json: UInt8 = 245, newdecimal: UInt8 = 246
        static let enumeration: UInt8 = 247, set: UInt8 = 248, tinyBlob: UInt8 = 249, mediumBlob: UInt8 = 250, longBlob: UInt8 = 251
        static let blob: UInt8 = 252, varString: UInt8 = 253, string: UInt8 = 254, geometry: UInt8 = 255
    }

    /// Reads the metadata block of a TABLE_MAP event: 0, 1 or 2 bytes per column by type.
    init?(database: String, table: String, types: [UInt8], metadata: UnsafeRawBufferPointer) {
        self.database = database
        self.table = table
        var at = 0
        var meta: [(UInt8, UInt8)] = []
        meta.reserveCapacity(types.count)
        var resolved = types
        for (i, t) in types.enumerated() {
            let size: Int
            switch t {
            case T.float, T.double, T.blob, T.tinyBlob, T.mediumBlob, T.longBlob, T.geometry, T.json, T.timestamp2, T.datetime2, T.time2:
                size = 1
            case T.varchar, T.varString, T.bit, T.newdecimal, T.string, T.enumeration, T.set:
                size = 2
            default:
                size = 0
            }
            guard at + size <= metadata.count else { return nil }
            let m0 = size > 0 ? metadata[at] : 0, m1 = size > 1 ? metadata[at + 1] : 0
            at += size
            // A STRING column's first metadata byte is its real type (CHAR, ENUM or SET); a CHAR
            // longer than 255 bytes keeps two bits of its length there.
            if t == T.string, m0 == T.enumeration || m0 == T.set {
                resolved[i] = m0
            }
            meta.append((m0, m1))
        }
        self.types = resolved
        self.meta = meta
    }

    /// Where one column's value lies in a row image, or that it is NULL.
    struct Field {
        var at: Int
        var count: Int
        var isNull: Bool
    }

    enum Failure: Error {
        case truncated
        case unsupported(column: Int, type: UInt8)
        case absent(column: Int)
    }

    /// Finds every column's value in the row image at `p[at...]` (its null bitmap first), for a
    /// table whose columns are all present (`binlog_row_image = FULL`). Returns the image's end.
    func scan(_ p: UnsafeRawBufferPointer, at start: Int, present: UnsafeRawBufferPointer, into fields: inout [Field]) throws(Failure) -> Int {
        let n = types.count
        var presentCount = 0
        for i in 0..<n where present[i / 8] >> (i % 8) & 1 == 1 { presentCount += 1 }
        let nullBytes = (presentCount + 7) / 8
        guard start + nullBytes <= p.count else { throw .truncated }
        var at = start + nullBytes
        var bit = 0
        fields.removeAll(keepingCapacity: true)
        for i in 0..<n {
            guard present[i / 8] >> (i % 8) & 1 == 1 else { throw .absent(column: i) }
            let isNull = p[start + bit / 8] >> (bit % 8) & 1 == 1
            bit += 1
            if isNull {
                fields.append(Field(at: at, count: 0, isNull: true))
                continue
            }
            let (skip, length) = try size(i, p, at)
            guard at + skip + length <= p.count else { throw .truncated }
            fields.append(Field(at: at + skip, count: length, isNull: false))
            at += skip + length
        }
        return at
    }

    /// A value's length prefix and length at `p[at...]`.
    private func size(_ i: Int, _ p: UnsafeRawBufferPointer, _ at: Int) throws(Failure) -> (Int, Int) {
        let (m0, m1) = meta[i]
        func le(_ k: Int) throws(Failure) -> Int {
            guard at + k <= p.count else { throw .truncated }
            var v = 0
            for j in 0..<k { v |= Int(p[at + j]) << (8 * j) }
            return v
        }
        func fraction(_ fsp: UInt8) -> Int { Int(fsp + 1) / 2 }
        switch types[i] {
        case T.tiny, T.year: return (0, 1)
        case T.short: return (0, 2)
        case T.int24, T.date, T.newdate, T.time: return (0, 3)
        case T.long, T.timestamp: return (0, 4)
        case T.longlong, T.datetime: return (0, 8)
        case T.float, T.double: return (0, Int(m0))
        case T.newdecimal: return (0, Self.decimalSize(precision: Int(m0), scale: Int(m1)))
        case T.bit: return (0, Int(m1) + (m0 > 0 ? 1 : 0))
        case T.timestamp2: return (0, 4 + fraction(m0))
        case T.datetime2: return (0, 5 + fraction(m0))
        case T.time2: return (0, 3 + fraction(m0))
        case T.varchar, T.varString:
            let max = Int(m0) | Int(m1) << 8
            let k = max < 256 ? 1 : 2
            return (k, try le(k))
        case T.string:
            let max = (m0 & 0x30) != 0x30 ? Int(m1) | Int((m0 & 0x30) ^ 0x30) << 4 : Int(m1)
            let k = max < 256 ? 1 : 2
            return (k, try le(k))
        case T.enumeration, T.set: return (0, Int(m1))
        case T.blob, T.tinyBlob, T.mediumBlob, T.longBlob, T.geometry, T.json:
            let k = Int(m0)
            guard (1...4).contains(k) else { throw .unsupported(column: i, type: types[i]) }
            return (k, try le(k))
        default:
            throw .unsupported(column: i, type: types[i])
        }
    }

    static let digitBytes = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]

    /// The bytes of a binary DECIMAL(precision, scale).
    static func decimalSize(precision: Int, scale: Int) -> Int {
        let whole = max(0, precision - scale)
        return whole / 9 * 4 + digitBytes[whole % 9] + scale / 9 * 4 + digitBytes[scale % 9]
    }

    /// The text of a binary DECIMAL, as MySQL prints it (every scale digit, no leading zeros).
    static func decimalText(_ b: UnsafeRawBufferPointer, precision: Int, scale: Int) -> [UInt8]? {
        let whole = max(0, precision - scale)
        guard b.count == decimalSize(precision: precision, scale: scale), b.count > 0 else { return nil }
        var bytes = [UInt8](b)
        let negative = bytes[0] & 0x80 == 0
        bytes[0] ^= 0x80
        if negative { for i in bytes.indices { bytes[i] ^= 0xFF } }
        var at = 0
        func group(_ k: Int) -> Int {
            var v = 0
            for _ in 0..<k {
                v = v << 8 | Int(bytes[at])
                at += 1
            }
            return v
        }
        func digits(_ v: Int, _ width: Int, into out: inout [UInt8]) {
            var tmp = [UInt8](repeating: 48, count: width)
            var x = v
            var i = width - 1
            while i >= 0 {
                tmp[i] = UInt8(48 + x % 10)
                x /= 10
                i -= 1
            }
            out.append(contentsOf: tmp)
        }
        var integer: [UInt8] = []
        let lead = whole % 9
        if lead > 0 { digits(group(digitBytes[lead]), lead, into: &integer) }
        for _ in 0..<(whole / 9) { digits(group(4), 9, into: &integer) }
        var fraction: [UInt8] = []
        for _ in 0..<(scale / 9) { digits(group(4), 9, into: &fraction) }
        let tail = scale % 9
        if tail > 0 { digits(group(digitBytes[tail]), tail, into: &fraction) }
        // Digits beyond a group's width would mean a corrupt value.
        guard integer.count == whole, fraction.count == scale else { return nil }
        var firstDigit = 0
        while firstDigit < integer.count - 1 && integer[firstDigit] == 48 { firstDigit += 1 }
        var out: [UInt8] = []
        let zero = integer.allSatisfy { $0 == 48 } && fraction.allSatisfy { $0 == 48 }
        if negative && !zero { out.append(45) }
        if integer.isEmpty { out.append(48) } else { out.append(contentsOf: integer[firstDigit...]) }
        if scale > 0 {
            out.append(46)
            out.append(contentsOf: fraction)
        }
        return out
    }
}

/// Decodes the values of one followed table's row images into its columns' buffers.
struct BinlogRowDecoder {
    let table: TableSchema
    let map: BinlogTableMap
    let zeroDatesAsNull: Bool
    /// Per column: its unsigned flag, labels (ENUM, SET) and fixed binary length.
    private let unsigned: [Bool]
    private let labels: [[String]]
    private let fixedBinary: [Int?]

    init(table: TableSchema, map: BinlogTableMap, zeroDatesAsNull: Bool) {
        self.table = table
        self.map = map
        self.zeroDatesAsNull = zeroDatesAsNull
        let parsed = table.columns.map { MySQLTypeMap.ColumnType($0.nativeType) }
        unsigned = parsed.map(\.unsigned)
        labels = parsed.map { $0.base == "enum" || $0.base == "set" ? $0.args : [] }
        fixedBinary = parsed.map { $0.base == "binary" ? ($0.intArgs.first ?? 1) : nil }
    }

    private func problem(_ i: Int, _ message: String) -> FerryError {
        .invalidValue(table: table.name, column: table.columns[i].name, key: nil, message: message)
    }

    /// Appends column `i`'s value (at `f` in the image `p`) to `col`.
    func decode(_ i: Int, _ f: BinlogTableMap.Field, _ p: UnsafeRawBufferPointer, into col: inout ColumnBuffer) throws {
        if f.isNull {
            col.appendNull()
            return
        }
        let b = UnsafeRawBufferPointer(rebasing: p[f.at..<(f.at + f.count)])
        let type = map.types[i]
        let (m0, m1) = map.meta[i]
        let T = BinlogTableMap.T.self
        let logical = table.columns[i].logicalType
        func le() -> UInt64 {
            var v: UInt64 = 0
            for j in 0..<b.count { v |= UInt64(b[j]) << (8 * UInt64(j)) }
            return v
        }
        func be(_ from: Int, _ k: Int) -> Int64 {
            var v: Int64 = 0
            for j in from..<(from + k) { v = v << 8 | Int64(b[j]) }
            return v
        }
        /// The fractional microseconds stored after `from` for a precision `fsp`.
        func micros(_ from: Int, _ fsp: UInt8) -> Int64 {
            switch fsp {
            case 1, 2: return be(from, 1) * 10_000
            case 3, 4: return be(from, 2) * 100
            case 5, 6: return be(from, 3)
            default: return 0
            }
        }
        func zeroDate(_ text: String) throws {
            guard zeroDatesAsNull else {
                throw problem(i, "the zero date '\(text)' has no value in other engines; use --zero-dates null to read it as NULL")
            }
            col.appendNull()
        }
        func timestamp(days: Int64, seconds: Int64, micros: Int64) -> Int64 {
            days * Temporal.microsPerDay + seconds * Temporal.microsPerSecond + micros
        }
        switch type {
        case T.tiny, T.short, T.int24, T.long, T.longlong:
            let raw = le()
            let width = UInt64(b.count * 8)
            let value: Int64
            var unsignedValue: UInt64?
            if unsigned[i] {
                unsignedValue = raw
                value = Int64(bitPattern: raw)
            } else if width < 64, raw & (1 << (width - 1)) != 0 {
                value = Int64(bitPattern: raw | ~((1 << width) - 1))
            } else {
                value = Int64(bitPattern: raw)
            }
            switch logical {
            case .boolean:
                guard value == 0 || value == 1 else {
                    throw problem(i, "\(value) in a TINYINT(1) column read as boolean is neither 0 nor 1; cast the column to an integer")
                }
                col.append(value)
            case .decimal:
                col.append(string: unsignedValue.map { String($0) } ?? String(value))
            default:
                col.append(value)
            }
        case T.year:
            let v = Int64(b[0])
            col.append(v == 0 ? 0 : v + 1900)
        case T.float:
            guard b.count == 4 else { throw problem(i, "a FLOAT of \(b.count) bytes") }
            col.append(Double(Float(bitPattern: UInt32(truncatingIfNeeded: le()))))
        case T.double:
            guard b.count == 8 else { throw problem(i, "a DOUBLE of \(b.count) bytes") }
            col.append(Double(bitPattern: le()))
        case T.newdecimal:
            guard let text = BinlogTableMap.decimalText(b, precision: Int(m0), scale: Int(m1)) else {
                throw problem(i, "a corrupt DECIMAL in the binlog")
            }
            col.append(bytes: text)
        case T.bit:
            switch logical {
            case .boolean: col.append(Int64(b.last ?? 0))
            case .binary:
                col.append(bytes: b)
            default:
                col.append(be(0, b.count))
            }
        case T.date, T.newdate:
            let v = Int64(le())
            let day = v & 31, month = (v >> 5) & 15, year = v >> 9
            if year == 0 || month == 0 || day == 0 {
                try zeroDate(String(format: "%04d-%02d-%02d", year, month, day))
                return
            }
            col.append(Temporal.days(year: year, month: month, day: day))
        case T.timestamp, T.timestamp2:
            let seconds = type == T.timestamp ? Int64(le()) : be(0, 4)
            let fraction = type == T.timestamp ? 0 : micros(4, m0)
            if seconds == 0 && fraction == 0 {
                try zeroDate("0000-00-00 00:00:00")
                return
            }
            col.append(seconds * Temporal.microsPerSecond + fraction)
        case T.datetime2:
            let packed = be(0, 5) - 0x80_0000_0000
            let ym = (packed >> 22) & 0x1FFFF
            let year = ym / 13, month = ym % 13, day = (packed >> 17) & 31
            let hour = (packed >> 12) & 31, minute = (packed >> 6) & 63, second = packed & 63
            if year == 0 || month == 0 || day == 0 {
                try zeroDate(String(format: "%04d-%02d-%02d", year, month, day))
                return
            }
            col.append(timestamp(days: Temporal.days(year: year, month: month, day: day), seconds: hour * 3600 + minute * 60 + second, micros: micros(5, m0)))
        case T.datetime:
            let v = Int64(bitPattern: le())
            let date = v / 1_000_000, time = v % 1_000_000
            let year = date / 10000, month = date / 100 % 100, day = date % 100
            if year == 0 || month == 0 || day == 0 {
                try zeroDate(String(format: "%04d-%02d-%02d", year, month, day))
                return
            }
            col.append(timestamp(days: Temporal.days(year: year, month: month, day: day), seconds: time / 10000 * 3600 + time / 100 % 100 * 60 + time % 100, micros: 0))
        case T.time2, T.time:
            var hour: Int64, minute: Int64, second: Int64, fraction: Int64 = 0
            if type == T.time {
                let v = Int64(le())
                (hour, minute, second) = (v / 10000, v / 100 % 100, v % 100)
            } else {
                let whole = be(0, 3) - 0x80_0000
                fraction = micros(3, m0)
                guard whole >= 0 else {
                    throw problem(i, "a negative TIME is not a time of day (00:00:00 to 23:59:59.999999); MySQL intervals are not carried")
                }
                (hour, minute, second) = ((whole >> 12) & 0x3FF, (whole >> 6) & 63, whole & 63)
            }
            guard hour < 24 else {
                throw problem(i, "the TIME \(hour):\(minute):\(second) is not a time of day (00:00:00 to 23:59:59.999999); MySQL intervals are not carried")
            }
            col.append((hour * 3600 + minute * 60 + second) * Temporal.microsPerSecond + fraction)
        case T.enumeration:
            let index = Int(le())
            let l = labels[i]
            guard index <= l.count else { throw problem(i, "ENUM index \(index) past the column's \(l.count) labels (was the column changed?)") }
            col.append(string: index == 0 ? "" : l[index - 1])
        case T.set:
            let bits = le()
            let l = labels[i]
            var parts: [String] = []
            for (j, label) in l.enumerated() where j < 64 && bits >> UInt64(j) & 1 == 1 { parts.append(label) }
            col.append(string: parts.joined(separator: ","))
        case T.string where fixedBinary[i] != nil:
            // BINARY(n) is padded with zero bytes to n, as a SELECT returns it.
            let n = fixedBinary[i] ?? 0
            col.append(count: max(n, b.count)) { out in
                out.copyMemory(from: b)
                if n > b.count, let base = out.baseAddress { memset(base + b.count, 0, n - b.count) }
            }
        case T.varchar, T.varString, T.string, T.blob, T.tinyBlob, T.mediumBlob, T.longBlob:
            if case .uuid = logical {
                var u: UUIDText.Bytes = (0, 0)
                guard UUIDText.parse(b, into: &u) else { throw problem(i, "'\(String(decoding: b, as: UTF8.self))' is not a UUID") }
                withUnsafeBytes(of: &u) { col.append(bytes: $0) }
            } else {
                col.append(bytes: b)
            }
        default:
            throw problem(i, "binlog type \(type) cannot be read")
        }
    }
}
