/// A block of rows in columnar form: one `ColumnBuffer` per column, in the order of the
/// reader's column list. Batches are values, so they cross threads freely.
public struct RowBatch: Sendable {
    public var columns: [ColumnBuffer]

    public init(columns: [ColumnBuffer]) {
        self.columns = columns
    }

    /// An empty batch laid out for these logical types.
    public init(types: [LogicalType], capacity: Int) {
        self.columns = types.map { ColumnBuffer(storage: $0.storage, capacity: capacity) }
    }

    /// An empty batch laid out for these logical types, with room for `capacity` rows and, per
    /// column, `arenaBytes` bytes of values (what the reader's last batch held: `arenaBytes`),
    /// so that a reader's batches do not regrow each arena from nothing.
    public init(types: [LogicalType], capacity: Int, arenaBytes: [Int]) {
        self.columns = types.enumerated().map { i, t in
            ColumnBuffer(storage: t.storage, capacity: capacity, arenaBytes: i < arenaBytes.count ? arenaBytes[i] : nil)
        }
    }

    /// Per column, the bytes its values take in the arena (0 for fixed-width columns).
    public var arenaBytes: [Int] { columns.map(\.arena.count) }

    /// An empty batch with room for as many rows and value bytes as `other` holds: a reader
    /// whose batches end at the byte limit fills the next without regrowing each array from
    /// nothing (the XML decoder's did a dozen times a batch).
    public init(sizedLike other: RowBatch) {
        self.columns = other.columns.map { ColumnBuffer(sizedLike: $0) }
    }

    /// Rows in the batch (every column has the same count).
    public var count: Int { columns.first?.count ?? 0 }
    public var isEmpty: Bool { count == 0 }

    /// Approximate memory held, for bounding queues.
    public var byteSize: Int {
        columns.reduce(0) { $0 + $1.ints.count * 8 + $1.doubles.count * 8 + $1.arena.count + $1.offsets.count * 8 }
    }

    /// Bytes of values after which every reader ends a batch, whatever its row limit: memory
    /// follows bytes, not rows. A batch holds at most this much plus one row, so a table of
    /// 20 MB documents travels one row per batch and a table of integers `batchSize` rows.
    /// Measured on 200,000 `bench_orders` rows (13 columns, ~250 bytes a row): batches of 4 MiB
    /// (10,000 rows) and of 1 MiB (~4,000 rows) copy in the same time (SQLite → SQLite 0.41–0.47
    /// s both, SQLite → PostgreSQL 0.56 s both), and 1 MiB takes 6–11 MB less peak memory (the
    /// copy's queue and the batches around it); through `ferry serve` 77 MB → 60 MB.
    public static let byteLimit = 1 << 20

    /// True when a reader that has put `rows` rows in this batch must end it: `rows` reached
    /// `limit`, or the values reached `byteLimit`.
    @inline(__always)
    public func isFull(rows: Int, limit: Int) -> Bool {
        if rows >= limit { return true }
        var bytes = 0
        // By index: `for c in columns` copies each column (five arrays retained) per row.
        for i in columns.indices { bytes += columns[i].arena.count }
        return bytes + rows * 8 * columns.count >= Self.byteLimit
    }

    /// Row `row` as `Value`s, interpreted with these types (non-hot code: sync, tests, errors).
    public func row(_ row: Int, types: [LogicalType]) -> [Value] {
        zip(columns, types).map { Value(column: $0, row: row, type: $1) }
    }

    /// Builds a batch from `Value` rows (tests, sync, small writes). Throws when a value does
    /// not fit its column's type.
    public init(rows: [[Value]], types: [LogicalType]) throws {
        self.init(types: types, capacity: rows.count)
        for (r, values) in rows.enumerated() {
            guard values.count == types.count else {
                throw FerryError.invalidValue(
                    table: nil, column: nil, key: nil,
                    message: "row \(r) has \(values.count) values for \(types.count) columns")
            }
            for (i, value) in values.enumerated() {
                try value.append(to: &columns[i], as: types[i])
            }
        }
    }
}

extension RowBatch {
    /// Appends every row of `other` (a batch of the same column storages).
    public mutating func append(contentsOf other: RowBatch) {
        for c in columns.indices { columns[c].append(contentsOf: other.columns[c]) }
    }
}

extension RowBatch {
    /// Rows `range` of this batch, as a batch of their own.
    public func rows(_ range: Range<Int>) -> RowBatch {
        var out = RowBatch(columns: columns.map { ColumnBuffer(storage: $0.storage, capacity: range.count) })
        for c in columns.indices {
            for r in range { out.columns[c].append(row: r, of: columns[c]) }
        }
        return out
    }
}
