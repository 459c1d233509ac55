/// An engine Ferry can talk to. A driver is a small stateless factory: the registry maps URL
/// schemes to drivers, and `connect` opens a `Connection`.
public protocol Driver: Sendable {
    /// A short stable name (`sqlite`, `postgres`, `mysql`, `http`), used in schemas and plans.
    var name: String { get }
    /// URL schemes served, lowercased and without the colon (`["postgres", "postgresql"]`).
    var schemes: [String] { get }
    /// The engine's naming rules and type maps, without a connection (plans, describe, docs).
    var dialect: any Dialect { get }
    /// The settings this driver takes besides its URL (`DriverOption`), read from
    /// `Endpoint.options`. Default: none.
    var options: [DriverOption] { get }
    /// Opens a connection. `role` says whether it will be read from or written to, so a
    /// driver can open read-only, refuse a read-only target early, or create a missing file.
    func connect(_ endpoint: Endpoint, role: ConnectionRole) throws -> any Connection
}

/// What a connection will be used for.
public enum ConnectionRole: Sendable {
    /// Only read: never create or modify anything.
    case source
    /// Read and written: the database may be created when the engine allows it.
    case target
}

/// How the copy writes into a target table.
public enum WriteMode: String, Sendable, Codable, CaseIterable {
    /// Create the table; fail when it exists.
    case create
    /// Load into a staging table, then swap it in: the old table survives any failure.
    case replace
    /// Insert into the table (created when missing).
    case append
    /// By the table's key: insert new rows, update rows that differ, leave equal rows as they
    /// are (the table is created when missing). Needs a key.
    case upsert
    /// By the table's key: upsert, then delete the target's rows whose key the source lacks,
    /// so the target ends equal to the source. Only key ranges whose digests differ are read.
    case mirror

    /// Modes that write by key.
    public var isKeyed: Bool { self == .upsert || self == .mirror }
}

/// A slice of a table by key, for chunked reads: rows whose key is > `after` (when set) and
/// <= `upTo` (when set), compared as a tuple in key-column order.
public struct KeyRange: Sendable, Hashable {
    public var key: [String]
    public var after: [Value]?
    public var upTo: [Value]?
    /// At most this many rows (keyset paging).
    public var limit: Int?
    /// Largest key first: with `limit: 1`, the table's last key (an index lookup), which a
    /// keyed walk compares with the last key it read to prove it reached the end.
    public var descending: Bool
    /// A row condition in the source engine's own SQL, given by the user (`--where`); never
    /// taken from a request. Readers that cannot apply SQL (the http driver) refuse it.
    public var filter: String?
    /// Only rows in these key-hash buckets (range digests; see `BucketFilter`). Readers whose
    /// SQL cannot compute the hash filter in Ferry (`BucketFilteringReader`).
    public var buckets: BucketFilter?
    /// Lock the rows read until the transaction ends (`Dialect.rowLockClause`), so that a
    /// guarded write that checked them cannot race a concurrent writer.
    public var lockRows = false
    /// Only rows whose key (`keyColumns`, in order) is one of these tuples: a few index lookups
    /// where `Dialect.selectsByKeyList` (see `RowValues.rows`).
    public var keys: [[Value]]?
    /// The columns `keys` are tuples of (the table's key; independent of `key`, which orders).
    public var keyColumns: [String] = []
    /// Only rows whose `since.column` is above `since.value` (an incremental copy's watermark):
    /// a structured condition, rendered by the driver like the key's bounds.
    public var since: ColumnBound?
    /// Only a random sample of about this fraction of the rows (`Dialect.tableSample` or
    /// `sampleCondition`): how a plan finds where to cut a large table's key.
    public var sample: Double?
    public init(
        key: [String], after: [Value]? = nil, upTo: [Value]? = nil, limit: Int? = nil, descending: Bool = false, filter: String? = nil,
        buckets: BucketFilter? = nil
    ) {
        self.key = key
        self.after = after
        self.upTo = upTo
        self.limit = limit
        self.descending = descending
        self.filter = filter
        self.buckets = buckets
    }
}

/// `column > value`: the lower bound of an incremental copy's rows.
public struct ColumnBound: Sendable, Hashable {
    public var column: String
    public var value: Value
    public init(column: String, value: Value) {
        self.column = column
        self.value = value
    }
}

extension KeyRange {
    /// ` WHERE (k1, k2) > (…) AND (k1, k2) <= (…) ORDER BY k1, k2` for this range, with values
    /// rendered by the driver (`render` returns placeholders or literals for a key tuple).
    /// With no key, only the filter's ` WHERE (…)`.
    public func sqlSuffix(dialect: any Dialect, render: ([Value]) throws -> String) rethrows -> String {
        var conditions: [String] = filter.map { ["(" + $0 + ")"] } ?? []
        if let buckets, let condition = DigestSQL.condition(buckets, in: dialect) { conditions.append(condition) }
        if let sample, dialect.tableSample(sample) == nil, let condition = dialect.sampleCondition(sample) { conditions.append(condition) }
        let lock = lockRows ? dialect.rowLockClause.map { " " + $0 } ?? "" : ""
        let tuple = "(" + key.map { dialect.quote($0) }.joined(separator: ", ") + ")"
        // First among the rendered values: drivers that bind values take them in this order.
        if let since { conditions.append("\(dialect.quote(since.column)) > \(try render([since.value]))") }
        if !key.isEmpty, let after { conditions.append("\(tuple) > (\(try render(after)))") }
        if !key.isEmpty, let upTo { conditions.append("\(tuple) <= (\(try render(upTo)))") }
        // After the bounds: drivers that bind values expect the bounds' values first.
        if let keys {
            if keys.isEmpty {
                conditions.append("1 = 0")
            } else if keyColumns.count == 1 {
                // `k IN (…)`: one index lookup per key on every engine.
                conditions.append(dialect.quote(keyColumns[0]) + " IN (" + (try keys.map { try render($0) }).joined(separator: ", ") + ")")
            } else {
                // Row-value IN lists differ by engine (SQLite takes only a subquery): equalities
                // joined by OR, which every engine answers from the key's index.
                let columns = keyColumns.map(dialect.quote)
                conditions.append("(" + (try keys.map { tuple in
                    "(" + (try zip(columns, tuple).map { "\($0) = \(try render([$1]))" }).joined(separator: " AND ") + ")"
                }).joined(separator: " OR ") + ")")
            }
        }
        guard !key.isEmpty else { return (conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")) + lock }
        return (conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND "))
            + " ORDER BY " + key.map { dialect.quote($0) + (descending ? " DESC" : "") }.joined(separator: ", ")
            + (limit.map { " LIMIT \(max($0, 0))" } ?? "") + lock
    }
}
