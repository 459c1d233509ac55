import Foundation

// Range digests: how a mirror (and a pull) finds what differs between two copies of a table
// without reading either across the network. Rows are put in buckets by a hash of their key
// (`KeyHash`: integer arithmetic for a single integer column, else the first 32 bits of MD5
// over the key's canonical text), modulo the bucket count, so both sides agree on which rows
// share a bucket whatever their collations, and each side sums a 64-bit hash of every row's
// canonical text per bucket, next to its data (in SQL where the engine can, else in Ferry
// beside it). Only buckets whose digests differ are split further (a finer modulus, a
// multiple of the last) and finally read.
//
// A digest is a filter, never the judge: equal digests mean equal rows (the canonical text
// is exact: every digit, every microsecond, NULL apart from ''), but different digests may
// also come from two engines writing the same value differently (a float outside the range
// where every engine prints it alike); such buckets are read and the target's keyed write
// decides, row by row, what is really different.

/// How a key is hashed into buckets. Both sides of a comparison must use the same: `RangeDiff`
/// takes `integer` only when both keys are one integer column.
public enum KeyHash: String, Sendable, Hashable, CaseIterable {
    /// One integer column `k`: `((k mod P) + P) mod P × A mod P` with P = 2^31 − 1 and
    /// A = 1,103,515,245 — 64-bit integer arithmetic that every engine's SQL does alike, without
    /// a text or an MD5 per row (a bijection on [0, P), so consecutive keys spread evenly).
    case integer
    /// Any other key: the first 32 bits of the MD5 of the key's canonical text.
    case md5

    static let prime: Int64 = 2_147_483_647
    static let multiplier: Int64 = 1_103_515_245

    /// `integer` for a key of one integer column (read as an integer, not in a stored form).
    public static func suited(to key: [Column]) -> KeyHash {
        guard key.count == 1, !key[0].travelsNatively else { return .md5 }
        switch key[0].logicalType {
        case .int16, .int32, .int64: return .integer
        default: return .md5
        }
    }

    /// The integer hash of `k`.
    @inline(__always) public static func integer(_ k: Int64) -> Int64 {
        let m = k % prime
        return (m < 0 ? m + prime : m) * multiplier % prime
    }
}

/// Rows whose key hash modulo `modulus` is one of `residues`.
public struct BucketFilter: Sendable, Hashable {
    /// The key columns, as the side that reads them names and types them.
    public var key: [Column]
    public var modulus: Int64
    public var residues: [Int64]
    /// How the key is hashed (the same on both sides of a comparison).
    public var hash: KeyHash
    public init(key: [Column], modulus: Int64, residues: [Int64], hash: KeyHash? = nil) {
        self.key = key
        self.modulus = modulus
        self.residues = residues
        self.hash = hash ?? KeyHash.suited(to: key)
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
    /// How the key is hashed (`within`, when given, hashes the same way).
    public var keyHash: KeyHash
    /// Per column: its field in the row text is `<text>,` rather than `n`/`v<len>:<text>` (see
    /// `CanonicalText`). Both sides of a comparison must agree column by column: `RangeDiff`
    /// delimits a column only when its type on both sides is delimitable.
    public var delimited: [Bool]
    /// How each row is hashed (`md5`, the default, everywhere; `lookup3` where both sides
    /// compute it).
    public var rowHash: RowHash
    /// Per column, the form the `lookup3` row hash gives it (both sides agree on each: see
    /// `ColumnHashForm.agreed`); unused by `md5`.
    public var hashForms: [ColumnHashForm]
    public init(
        key: [Column], columns: [Column], modulus: Int64, within: BucketFilter? = nil, filter: String? = nil, keyHash: KeyHash? = nil,
        delimited: [Bool]? = nil, rowHash: RowHash = .md5, hashForms: [ColumnHashForm]? = nil
    ) {
        self.key = key
        self.columns = columns
        self.modulus = modulus
        self.within = within
        self.filter = filter
        self.keyHash = keyHash ?? within?.hash ?? KeyHash.suited(to: key)
        self.delimited = delimited ?? columns.map(CanonicalText.isDelimitable)
        self.rowHash = rowHash
        self.hashForms = hashForms.flatMap { $0.count == columns.count ? $0 : nil } ?? columns.map(ColumnHashForm.init)
    }
}

extension DigestRequest {
    /// Room for the answer of a first level (a bucket for each residue, at most 2^20), reserved
    /// once rather than grown by doubling; 0 for a finer level (a few of its many residues).
    public var expectedBuckets: Int { within == nil ? Int(min(modulus, 1 << 20)) : 0 }
}

/// One bucket's digest: its row count and the sum, modulo 2^64, of its rows' 64-bit hashes (the
/// first 64 bits of the MD5 of each row's canonical text). Buckets with no rows are not listed.
/// 24 bytes: a first level of 2^18 buckets is 6 MB a side.
public struct BucketDigest: Sendable, Hashable, Codable {
    public var bucket: Int64
    public var rows: Int64
    public var sum: Int64
    public init(bucket: Int64, rows: Int64, sum: Int64) {
        self.bucket = bucket
        self.rows = rows
        self.sum = sum
    }
}

/// Computes range digests in Ferry from rows read through an ordinary reader — for engines
/// Ferry runs beside (SQLite, in the same process) and as the reference the SQL of the
/// others must agree with.
public enum DigestComputer {
    /// The key hash (`KeyHash`) of row `row`; `scratch` is reused from row to row.
    @inline(__always)
    static func keyHash(_ batch: RowBatch, row: Int, types: [LogicalType], keyIndexes: [Int], hash: KeyHash, scratch: inout [UInt8]) -> Int64 {
        if hash == .integer, keyIndexes.count == 1 {
            // Through the array: a ColumnBuffer taken out of it is copied per row. A NULL key
            // (never in a key column) hashes as 0.
            let k = keyIndexes[0]
            return batch.columns[k].isNull(row) ? 0 : KeyHash.integer(batch.columns[k].ints[row])
        }
        scratch.removeAll(keepingCapacity: true)
        CanonicalText.appendFields(batch, row: row, at: keyIndexes, types: types, into: &scratch)
        return Int64(MD5.prefix(scratch) >> 32)
    }

    /// The 64-bit hash of row `row`'s text (the columns at `allIndexes`). `stored`: columns
    /// holding stored values (`ReadHints.storedForm`), whose row text is their bytes as they
    /// are rather than hex — only ever compared with another SQLite database's, digested here
    /// too (the key text, which buckets a row, stays the canonical one).
    @inline(__always)
    static func rowHash(
        _ batch: RowBatch, row: Int, types: [LogicalType], allIndexes: [Int], stored: [Bool], delimited: [Bool], scratch: inout [UInt8]
    ) -> Int64 {
        scratch.removeAll(keepingCapacity: true)
        CanonicalText.appendFields(batch, row: row, at: allIndexes, types: types, stored: stored, delimited: delimited, into: &scratch)
        return Int64(bitPattern: MD5.prefix(scratch))
    }

    /// How the rows of one request are hashed, decided once per request: the row hash, and per
    /// column whether it is a stored value, delimited, or (for `lookup3`) in which form.
    struct RowHasher {
        let types: [LogicalType]
        let all: [Int]
        let stored: [Bool]
        let delimited: [Bool]
        let lookup3: Bool
        let forms: [ColumnHashForm]

        init(_ request: DigestRequest) {
            types = request.columns.map(\.logicalType)
            all = Array(types.indices)
            stored = request.columns.map { $0.readHints.contains(.storedForm) }
            delimited = request.delimited.count == types.count ? zip(request.delimited, stored).map { $0 && !$1 } : []
            lookup3 = request.rowHash == .lookup3
            // A stored value is hashed as its bytes whatever form the other side agreed on, and so
            // is a text whose canonical text is its bytes (text, JSON, enum labels).
            forms = zip(zip(request.hashForms, stored), types).map { pair, type in
                pair.1 || (pair.0 == .text && !CanonicalText.hasOwnText(type)) ? ColumnHashForm.bytes : pair.0
            }
        }

        /// Every row's hash of `batch`, in order, handed to `each` with its row. `lookup3` reads
        /// the batch's buffers pinned (`PinnedBatch`): through the batch's arrays each value
        /// of a text or bytes column copied its column buffer (five retains and releases), and
        /// each decimal was normalized into an array (callgrind: a fifth of a MariaDB → SQLite
        /// mirror's instructions went to hashing from the batches).
        @inline(__always)
        func hashRows(_ batch: RowBatch, scratch: inout [UInt8], _ each: (_ row: Int, _ hash: Int64) throws -> Void) throws {
            guard lookup3 else {
                for row in 0..<batch.count {
                    try each(row, DigestComputer.rowHash(
                        batch, row: row, types: types, allIndexes: all, stored: stored, delimited: delimited, scratch: &scratch))
                }
                return
            }
            try PinnedBatch.with(batch) { pinned in
                try pinned.columns.withUnsafeBufferPointer { cols in
                    try types.withUnsafeBufferPointer { types in
                        try forms.withUnsafeBufferPointer { forms in
                            for row in 0..<pinned.count {
                                try each(row, DigestComputer.lookup3RowHash(
                                    cols, row: row, batch: batch, types: types, forms: forms, scratch: &scratch))
                            }
                        }
                    }
                }
            }
        }
    }

    /// The `lookup3` hash (`RowHash.lookup3`) of row `row` of a pinned batch: each column's in
    /// its form, combined as PostgreSQL's `hash_record_extended` does, NULL as 0. `forms` as
    /// `RowHasher` decides them (a text kept as its bytes is `bytes`).
    @inline(__always)
    static func lookup3RowHash(
        _ cols: UnsafeBufferPointer<PinnedBatch.Column>, row: Int, batch: RowBatch, types: UnsafeBufferPointer<LogicalType>,
        forms: UnsafeBufferPointer<ColumnHashForm>, scratch: inout [UInt8]
    ) -> Int64 {
        var h: UInt64 = 0
        for c in 0..<forms.count {
            let col = cols[c]
            guard !col.isNull(row) else {
                h = Lookup3.combine(h, 0)
                continue
            }
            let e: UInt64
            switch forms[c] {
            case .integer, .time: e = Lookup3.int8(col.int(row))
            case .date: e = Lookup3.int8(col.int(row) &- Lookup3.dateOffset)
            case .timestamp: e = Lookup3.int8(col.int(row) &- Lookup3.timestampOffset)
            case .float: e = Lookup3.float8(col.double(row))
            case .bytes, .stored: e = Lookup3.bytes(col.bytes(row))
            case .text:
                if case .decimal = types[c] {
                    e = DecimalText.withNormalized(col.bytes(row)) { Lookup3.bytes($0) }
                } else {
                    scratch.removeAll(keepingCapacity: true)
                    CanonicalText.append(batch.columns, c, row: row, type: types[c], into: &scratch)
                    e = Lookup3.bytes(scratch)
                }
            }
            h = Lookup3.combine(h, e)
        }
        return Int64(bitPattern: h)
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

    /// The key hashes of `keys` (values typed as `types`) as `hash` computes them: a key's
    /// bucket is its hash modulo the bucket count, on every engine.
    public static func keyHashes(_ keys: [[Value]], types: [LogicalType], hash: KeyHash) throws -> [Int64] {
        let batch = try RowBatch(rows: keys, types: types)
        var scratch: [UInt8] = []
        let at = Array(types.indices)
        return (0..<batch.count).map { keyHash(batch, row: $0, types: types, keyIndexes: at, hash: hash, scratch: &scratch) }
    }

    /// Each row's key and row hash for `request` (a key of one integer column), read through
    /// `connection`'s reader (`Connection.keyedRowHashes`).
    public static func keyedRowHashes(
        _ connection: any Connection, table: TableSchema, request: DigestRequest, batchSize: Int = 10_000, readAhead: Bool = false,
        each: (_ key: Int64, _ hash: Int64) throws -> Void
    ) throws {
        let keyIndexes = try keyIndexes(request.key, in: request.columns, table: table.name)
        guard request.keyHash == .integer, keyIndexes.count == 1 else {
            throw FerryError.copyFailed(table: table.name, endpoint: connection.endpoint.redacted, reason: "row hashes are listed by a key of one integer column only")
        }
        let k = keyIndexes[0]
        try forEachRowHash(connection, table: table, request: request, batchSize: batchSize, readAhead: readAhead) { batch, row, hash in
            try each(batch.columns[k].ints[row], hash)
        }
    }

    /// Reads the rows of `request` and hands each row's hash (as `request.rowHash` computes it)
    /// to `body` with its batch and row. `readAhead`: the next batch is read on a thread of its
    /// own while this one is hashed (for a server that would wait meanwhile; not for a file
    /// read on this machine, whose reading is CPU work that a second thread only contends).
    static func forEachRowHash(
        _ connection: any Connection, table: TableSchema, request: DigestRequest, batchSize: Int, readAhead: Bool = false,
        _ body: (_ batch: RowBatch, _ row: Int, _ hash: Int64) throws -> Void
    ) throws {
        let range = request.filter == nil && request.within == nil ? nil : KeyRange(key: [], filter: request.filter, buckets: request.within)
        let direct = try connection.reader(table: table, columns: request.columns, keyRange: range, batchSize: batchSize)
        let reader: any BatchReader = readAhead ? ReadAhead(direct, name: "ferry-digest-read") : direct
        defer { reader.close() }
        var scratch: [UInt8] = []
        let hasher = RowHasher(request)
        while let batch = try reader.next() {
            try hasher.hashRows(batch, scratch: &scratch) { row, hash in try body(batch, row, hash) }
        }
    }

    /// Digests of `request` over the rows of `table`, read through `connection`'s reader.
    public static func digests(_ connection: any Connection, table: TableSchema, request: DigestRequest, batchSize: Int = 10_000, readAhead: Bool = false) throws -> [BucketDigest] {
        let keyIndexes = try keyIndexes(request.key, in: request.columns, table: table.name)
        let types = request.columns.map(\.logicalType)
        // `within` goes to the reader, which passes only those rows: an engine that computes the
        // key hash in its SQL (SQLite, for an integer key) reads only them, others filter in
        // Ferry (`BucketFilteringReader`).
        let range = request.filter == nil && request.within == nil ? nil : KeyRange(key: [], filter: request.filter, buckets: request.within)
        let direct = try connection.reader(table: table, columns: request.columns, keyRange: range, batchSize: batchSize)
        let reader: any BatchReader = readAhead ? ReadAhead(direct, name: "ferry-digest-read") : direct
        defer { reader.close() }
        let sums = DigestAccumulator(request)
        var scratch: [UInt8] = []
        let hash = request.keyHash
        let hasher = RowHasher(request)
        var keyScratch: [UInt8] = []
        while let batch = try reader.next() {
            try hasher.hashRows(batch, scratch: &scratch) { row, rowHash in
                let k = keyHash(batch, row: row, types: types, keyIndexes: keyIndexes, hash: hash, scratch: &keyScratch)
                sums.add(keyHash: k, rowHash: rowHash)
            }
        }
        return sums.result()
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
    let hash: KeyHash
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
        self.hash = filter.hash
    }

    public func next() throws -> RowBatch? {
        if remaining == 0 { return nil }
        while let batch = try inner.next() {
            var keep: [Int] = []
            for row in 0..<batch.count {
                let k = DigestComputer.keyHash(batch, row: row, types: types, keyIndexes: keyIndexes, hash: hash, scratch: &scratch)
                if residues.contains(k % modulus) { keep.append(row) }
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
            for r in rows { out.append(row: r, of: c) }
            return out
        })
    }
}
