import Foundation

// Range digests: how a mirror (and, later, a pull) finds what differs between two copies of
// a table without reading either across the network. Rows are put in buckets by a hash of
// their key — the first 32 bits of MD5 over the key's canonical text, modulo the bucket
// count — so both sides agree on which rows share a bucket whatever their collations, and
// each side sums a hash of every row's canonical text per bucket, next to its data (in SQL
// where the engine can, else in Ferry beside it). Only buckets whose digests differ are
// split further (a finer modulus, a multiple of the last) and finally read.
//
// A digest is a filter, never the judge: equal digests mean equal rows (the canonical text
// is exact: every digit, every microsecond, NULL apart from ''), but different digests may
// also come from two engines writing the same value differently (a float outside the range
// where every engine prints it alike); such buckets are read and the target's keyed write
// decides, row by row, what is really different.

/// Rows whose key hash modulo `modulus` is one of `residues`.
public struct BucketFilter: Sendable, Hashable {
    /// The key columns, as the side that reads them names and types them.
    public var key: [Column]
    public var modulus: Int64
    public var residues: [Int64]
    public init(key: [Column], modulus: Int64, residues: [Int64]) {
        self.key = key
        self.modulus = modulus
        self.residues = residues
    }
}

/// What to digest: `columns` (key columns among them) of the rows matching `filter` and
/// `within`, in `modulus` buckets of their key hash.
public struct DigestRequest: Sendable, Hashable {
    public var key: [Column]
    public var columns: [Column]
    public var modulus: Int64
    public var within: BucketFilter?
    /// A row condition in the engine's own SQL, from the user (`--where`), never from a request.
    public var filter: String?
    public init(key: [Column], columns: [Column], modulus: Int64, within: BucketFilter? = nil, filter: String? = nil) {
        self.key = key
        self.columns = columns
        self.modulus = modulus
        self.within = within
        self.filter = filter
    }
}

/// One bucket's digest: its row count and two sums of 32-bit row hashes. Buckets with no
/// rows are not listed.
public struct BucketDigest: Sendable, Hashable, Codable {
    public var bucket: Int64
    public var rows: Int64
    public var sum0: Int64
    public var sum1: Int64
    public init(bucket: Int64, rows: Int64, sum0: Int64, sum1: Int64) {
        self.bucket = bucket
        self.rows = rows
        self.sum0 = sum0
        self.sum1 = sum1
    }
}

/// Ferry's canonical text of a value: the form every engine's digest SQL reproduces.
///
/// booleans `1`/`0`; integers in decimal; decimals without trailing zeros (`12.5`, `0`);
/// floats (float4 widened to float8) in PostgreSQL's shortest round-trip form (`0.1`, `1e+100`); text, JSON and enum
/// labels as their UTF-8 bytes; binary as lowercase hex; UUIDs lowercase with hyphens; dates
/// `YYYY-MM-DD`; times `HH:MM:SS.ffffff`; timestamps `YYYY-MM-DD HH:MM:SS.ffffff` (UTC for
/// time-zone-aware ones). A row's text is, for each column in order, `n` for NULL or
/// `v<byte length>:<text>`.
public enum CanonicalText {
    static let hex: [UInt8] = Array("0123456789abcdef".utf8)

    /// Appends the field (`n` or `v<len>:<text>`) of row `row` of `column` typed `type`. The
    /// text is written in place and its length put in front of it (no buffer per field).
    public static func appendField(_ column: ColumnBuffer, row: Int, type: LogicalType, into out: inout [UInt8]) {
        if column.isNull(row) {
            out.append(UInt8(ascii: "n"))
            return
        }
        out.append(UInt8(ascii: "v"))
        let start = out.count
        append(column, row: row, type: type, into: &out)
        var length = out.count - start
        var digits = 1
        while length >= 10 { length /= 10; digits += 1 }
        out.insert(contentsOf: repeatElement(UInt8(ascii: ":"), count: digits + 1), at: start)
        length = out.count - start - digits - 1
        for i in stride(from: start + digits - 1, through: start, by: -1) {
            out[i] = UInt8(ascii: "0") + UInt8(length % 10)
            length /= 10
        }
    }

    /// Appends the fields of the columns at `at` of row `row` (a key's or a row's text).
    /// `stored`: per column, true when its values are stored values taken as their bytes.
    public static func appendFields(_ batch: RowBatch, row: Int, at: [Int], types: [LogicalType], stored: [Bool] = [], into out: inout [UInt8]) {
        // Columns and types used in place: a ColumnBuffer or LogicalType taken out of its array
        // is retained and released, per field of every row.
        batch.columns.withUnsafeBufferPointer { columns in
            types.withUnsafeBufferPointer { types in
                for i in at {
                    if i < stored.count && stored[i] {
                        appendBytesField(columns[i], row: row, into: &out)
                    } else {
                        appendField(columns[i], row: row, type: types[i], into: &out)
                    }
                }
            }
        }
    }

    /// `n`, or `v<length>:` and the value's bytes as they are.
    static func appendBytesField(_ column: ColumnBuffer, row: Int, into out: inout [UInt8]) {
        if column.isNull(row) {
            out.append(UInt8(ascii: "n"))
            return
        }
        let range = column.range(row)
        out.append(UInt8(ascii: "v"))
        IntegerText.append(Int64(range.count), into: &out)
        out.append(UInt8(ascii: ":"))
        column.withUnsafeArena { out.append(contentsOf: UnsafeRawBufferPointer(rebasing: $0[range])) }
    }

    /// Appends the canonical text of a non-NULL value.
    public static func append(_ column: ColumnBuffer, row: Int, type: LogicalType, into out: inout [UInt8]) {
        switch type {
        case .boolean: out.append(column.ints[row] != 0 ? UInt8(ascii: "1") : UInt8(ascii: "0"))
        case .int16, .int32, .int64: IntegerText.append(column.ints[row], into: &out)
        // float4 widened to float8 (exact), so engines that print float4 with fewer digits agree.
        case .float32, .float64: out.append(contentsOf: float(column.doubles[row], float32: false).utf8)
        case .decimal: out.append(contentsOf: DecimalText.normalized(column.string(row)).utf8)
        case .date: Temporal.appendDate(column.ints[row], into: &out)
        case .time: Temporal.appendTime(column.ints[row], fractionDigits: 6, into: &out)
        case .timestamp: Temporal.appendTimestamp(column.ints[row], fractionDigits: 6, into: &out)
        case .binary:
            column.withUnsafeArena { appendHex(UnsafeRawBufferPointer(rebasing: $0[column.range(row)]), into: &out) }
        case .uuid:
            for (i, b) in column.arena[column.range(row)].enumerated() {
                if i == 4 || i == 6 || i == 8 || i == 10 { out.append(UInt8(ascii: "-")) }
                out.append(hex[Int(b >> 4)])
                out.append(hex[Int(b & 15)])
            }
        case .text, .json, .enumeration, .unsupported: out.append(contentsOf: column.arena[column.range(row)])
        }
    }

    /// Lowercase hex of `bytes`, written into `out` in one piece (two appends a byte cost more
    /// than the MD5 of the text).
    static func appendHex(_ bytes: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        guard !bytes.isEmpty else { return }
        let digits = hexDigits.utf8Start
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 2 * bytes.count) { o in
            var w = 0
            for b in bytes {
                o[w] = digits[Int(b >> 4)]
                o[w + 1] = digits[Int(b & 15)]
                w += 2
            }
            out.append(contentsOf: UnsafeBufferPointer(o))
        }
    }

    static let hexDigits: StaticString = "0123456789abcdef"

    /// PostgreSQL's text of a float: the shortest digits that read back as the same value,
    /// in exponent form when the decimal exponent is below -4 or at least 15 (6 for float4).
    public static func float(_ value: Double, float32: Bool) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value < 0 ? "-Infinity" : "Infinity" }
        if value == 0 { return value.sign == .minus ? "-0" : "0" }
        let shortest = float32 ? Float(value).description : value.description
        // Digits and decimal exponent of Swift's shortest form ("1.25e-07", "123.5", "1e+16").
        var mantissa = Substring(shortest)
        var exponent = 0
        let negative = mantissa.first == "-"
        if negative { mantissa = mantissa.dropFirst() }
        if let e = mantissa.firstIndex(where: { $0 == "e" || $0 == "E" }) {
            exponent = Int(mantissa[mantissa.index(after: e)...]) ?? 0
            mantissa = mantissa[..<e]
        }
        var digits = ""
        var pointAt = mantissa.count
        for (i, ch) in mantissa.enumerated() {
            if ch == "." { pointAt = i } else { digits.append(ch) }
        }
        // value = 0.digits × 10^(pointAt + exponent); strip leading and trailing zeros.
        var scale = pointAt + exponent
        while digits.first == "0" && digits.count > 1 {
            digits.removeFirst()
            scale -= 1
        }
        while digits.last == "0" && digits.count > 1 { digits.removeLast() }
        let x = scale - 1  // d1.d2… × 10^x
        var out = negative ? "-" : ""
        guard let first = digits.first else { return shortest }
        if x < -4 || x >= (float32 ? 6 : 15) {
            out += String(first)
            if digits.count > 1 { out += "." + digits.dropFirst() }
            out += x < 0 ? "e-" : "e+"
            let e = String(abs(x))
            out += e.count < 2 ? "0" + e : e
        } else if x >= 0 {
            if digits.count <= x + 1 {
                out += digits + String(repeating: "0", count: x + 1 - digits.count)
            } else {
                out += digits.prefix(x + 1) + "." + digits.dropFirst(x + 1)
            }
        } else {
            out += "0." + String(repeating: "0", count: -x - 1) + digits
        }
        return out
    }
}

/// Computes range digests in Ferry from rows read through an ordinary reader — for engines
/// Ferry runs beside (SQLite, in the same process) and as the reference the SQL of the
/// others must agree with.
public enum DigestComputer {
    /// The 32-bit key hash and two 32-bit row hashes of row `row` (columns as typed);
    /// `scratch` is reused from row to row. `stored`: columns holding stored values
    /// (`ReadHints.storedForm`), whose row text is their bytes as they are rather than hex —
    /// only ever compared with another SQLite database's, digested here too (the key text, which
    /// buckets a row, stays the canonical one).
    static func hashes(
        _ batch: RowBatch, row: Int, types: [LogicalType], keyIndexes: [Int], allIndexes: [Int], rowText: Bool, stored: [Bool] = [],
        scratch: inout [UInt8]
    ) -> (key: Int64, r0: Int64, r1: Int64) {
        scratch.removeAll(keepingCapacity: true)
        CanonicalText.appendFields(batch, row: row, at: keyIndexes, types: types, into: &scratch)
        let k = MD5.prefix(scratch)
        guard rowText else { return (Int64(k >> 32), 0, 0) }
        scratch.removeAll(keepingCapacity: true)
        CanonicalText.appendFields(batch, row: row, at: allIndexes, types: types, stored: stored, into: &scratch)
        let r = MD5.prefix(scratch)
        return (Int64(k >> 32), Int64(r >> 32), Int64(r & 0xFFFF_FFFF))
    }

    /// Positions of `key` among `columns`; throws when one is missing.
    static func keyIndexes(_ key: [Column], in columns: [Column], table: TableName) throws -> [Int] {
        try key.map { k in
            guard let i = columns.firstIndex(where: { $0.name == k.name }) else {
                throw FerryError.copyFailed(table: table, endpoint: "", reason: "key column \(k.name) is not among the digested columns")
            }
            return i
        }
    }

    /// The 32-bit key hashes of `keys` (values typed as `types`): a key's bucket is its hash
    /// modulo the bucket count, on every engine.
    public static func keyHashes(_ keys: [[Value]], types: [LogicalType]) throws -> [Int64] {
        let batch = try RowBatch(rows: keys, types: types)
        var scratch: [UInt8] = []
        let at = Array(types.indices)
        return (0..<batch.count).map { hashes(batch, row: $0, types: types, keyIndexes: at, allIndexes: [], rowText: false, scratch: &scratch).key }
    }

    /// Digests of `request` over the rows of `table`, read through `connection`'s reader.
    public static func digests(_ connection: any Connection, table: TableSchema, request: DigestRequest, batchSize: Int = 10_000) throws -> [BucketDigest] {
        let keyIndexes = try keyIndexes(request.key, in: request.columns, table: table.name)
        let types = request.columns.map(\.logicalType)
        let reader = try connection.reader(
            table: table, columns: request.columns, keyRange: request.filter.map { KeyRange(key: [], filter: $0) }, batchSize: batchSize)
        defer { reader.close() }
        let within = request.within.map { (modulus: $0.modulus, residues: Set($0.residues)) }
        // A first level's buckets (one per ~16 rows, at most 2^20) are counted in arrays; a finer
        // level's, spread over up to 2^31, in a dictionary.
        let dense = within == nil && request.modulus <= 1 << 20
        var counts = [Int64](repeating: 0, count: dense ? Int(request.modulus) : 0)
        var sum0 = counts, sum1 = counts
        var sums: [Int64: BucketDigest] = [:]
        var scratch: [UInt8] = []
        let all = Array(types.indices)
        let stored = request.columns.map { $0.readHints.contains(.storedForm) }
        while let batch = try reader.next() {
            for row in 0..<batch.count {
                let h = hashes(batch, row: row, types: types, keyIndexes: keyIndexes, allIndexes: all, rowText: true, stored: stored, scratch: &scratch)
                if let within, !within.residues.contains(h.key % within.modulus) { continue }
                let b = h.key % request.modulus
                if dense {
                    counts[Int(b)] += 1
                    sum0[Int(b)] &+= h.r0
                    sum1[Int(b)] &+= h.r1
                    continue
                }
                var d = sums[b] ?? BucketDigest(bucket: b, rows: 0, sum0: 0, sum1: 0)
                d.rows += 1
                d.sum0 &+= h.r0
                d.sum1 &+= h.r1
                sums[b] = d
            }
        }
        if dense {
            return counts.indices.filter { counts[$0] > 0 }.map { BucketDigest(bucket: Int64($0), rows: counts[$0], sum0: sum0[$0], sum1: sum1[$0]) }
        }
        return sums.values.sorted { $0.bucket < $1.bucket }
    }
}

/// A reader that passes on only the rows in `filter`'s buckets (for engines whose SQL cannot
/// compute the key hash). Its columns must include the key.
public final class BucketFilteringReader: BatchReader {
    let inner: any BatchReader
    let types: [LogicalType]
    let keyIndexes: [Int]
    let modulus: Int64
    let residues: Set<Int64>
    var scratch: [UInt8] = []

    /// Rows still to pass when the range asked for at most so many.
    var remaining: Int?

    public init(_ inner: any BatchReader, columns: [Column], filter: BucketFilter, table: TableName, limit: Int? = nil) throws {
        self.inner = inner
        self.remaining = limit
        self.types = columns.map(\.logicalType)
        self.keyIndexes = try DigestComputer.keyIndexes(filter.key, in: columns, table: table)
        self.modulus = filter.modulus
        self.residues = Set(filter.residues)
    }

    public func next() throws -> RowBatch? {
        if remaining == 0 { return nil }
        while let batch = try inner.next() {
            var keep: [Int] = []
            for row in 0..<batch.count {
                let h = DigestComputer.hashes(batch, row: row, types: types, keyIndexes: keyIndexes, allIndexes: [], rowText: false, scratch: &scratch)
                if residues.contains(h.key % modulus) { keep.append(row) }
                if let r = remaining, keep.count == r { break }
            }
            if keep.isEmpty { continue }
            if let r = remaining { remaining = r - keep.count }
            if keep.count == batch.count { return batch }
            return batch.selecting(keep)
        }
        return nil
    }

    public func close() { inner.close() }
}

extension RowBatch {
    /// The rows at `rows` (ascending), as a new batch.
    public func selecting(_ rows: [Int]) -> RowBatch {
        RowBatch(columns: columns.map { c in
            var out = ColumnBuffer(storage: c.storage, capacity: rows.count)
            for r in rows {
                if c.isNull(r) {
                    out.appendNull()
                    continue
                }
                switch c.storage {
                case .int64: out.append(c.ints[r])
                case .double: out.append(c.doubles[r])
                case .bytes: c.withUnsafeArena { out.append(bytes: UnsafeRawBufferPointer(rebasing: $0[c.range(r)])) }
                }
            }
            return out
        })
    }
}
