import FerryCore
import FerrySQLite
import Foundation

/// What `ferry snapshot` copies.
public struct SnapshotOptions: Sendable {
    /// Tables to take (empty: all), tables to leave out.
    public var tables: [TableName] = []
    public var exclude: [TableName] = []
    /// `--where TABLE=CONDITION` (the origin's SQL): only those rows are in the snapshot, and
    /// pulls keep to them.
    public var filters: [String] = []
    /// `--key TABLE=COL1,COL2` for tables without a primary or unique NOT NULL key.
    public var keys: [TableName: [String]] = [:]
    public var batchSize = 10_000
    public init() {}
}

/// What `ferry snapshot` did.
public struct SnapshotReport: Sendable, Codable {
    public var file: String
    public var origin: String
    public var tables: [Table]
    public var seconds: Double
    public struct Table: Sendable, Codable {
        public var name: String
        public var rows: Int64
        public var key: [String]
        /// Offline rows of a serial table are numbered from here on (re-keyed by the origin on push).
        public var offlineKeysFrom: Int64?
        public var skippedColumns: [SkippedColumn]
    }
}

/// Offline snapshots and two-way sync between a SQLite snapshot file and its origin (any
/// engine Ferry has a driver for, the XML service included).
///
/// ```swift
/// let sync = Sync(registry: Ferry.drivers)
/// let file = try SyncFile.open("laptop.db")
/// let status = try sync.status(file)
/// let report = try sync.sync(file, origin: try Endpoint(parsing: "https://data.example.com/"), policy: .merge)
/// ```
public struct Sync: Sendable {
    public let registry: DriverRegistry
    public init(registry: DriverRegistry) { self.registry = registry }

    /// Offline keys of a serial table start above this: beyond a 32-bit serial's range, or
    /// at 2^53 for a 64-bit one (above any key an origin hands out in practice, and still
    /// exact in a double for apps that read keys as numbers).
    static func localKeyBase(for type: LogicalType) -> Int64 {
        type == .int64 ? 1 << 53 : 1 << 31
    }

    /// The origin's URL as a snapshot records it: no password, no token.
    public static func recordedOrigin(_ endpoint: Endpoint) -> String {
        var e = endpoint
        e.password = nil
        e.options = [:]
        return e.redacted
    }

    /// Copies the chosen tables of `origin` into a new SQLite file at `path` with keys,
    /// serials, indexes and foreign keys, then adds change capture and Ferry's bookkeeping.
    /// Every table needs a key. The file is removed again if anything fails.
    public func snapshot(origin endpoint: Endpoint, to path: String, options: SnapshotOptions, progress: ProgressReporter) throws -> SnapshotReport {
        let started = Date()
        if FileManager.default.fileExists(atPath: path) { throw SyncError.fileExists(path: path) }
        let origin = try registry.connect(endpoint, role: .source)
        defer { origin.close() }
        try origin.capabilities.require(.keyedReads, for: "a snapshot (later pulls compare key ranges)", endpoint: endpoint.redacted)
        let target = try SQLiteConnection(endpoint: try Endpoint(parsing: "sqlite:" + path), role: .target)
        var done = false
        defer {
            target.close()
            if !done { for s in ["", "-journal", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + s) } }
        }
        var copy = CopyOptions()
        copy.mode = .create
        copy.tables = options.tables
        copy.exclude = options.exclude
        copy.filters = options.filters
        copy.keys = options.keys
        copy.batchSize = options.batchSize
        let engine = CopyEngine(registry: registry)
        var plan = try engine.plan(source: origin, target: target, options: copy)
        var refused: [String] = []
        var seen: [String: TableName] = [:]
        for t in plan.tables {
            if t.key == nil {
                refused.append("\(t.source) has no primary key or unique NOT NULL key (name one with --key \(t.source.name)=COLUMN)")
            }
            if let other = seen[t.target.name.lowercased()] {
                refused.append("\(t.source) and \(other) would both be \(t.target.name) in the snapshot (take one with --tables)")
            }
            seen[t.target.name.lowercased()] = t.source
        }
        guard refused.isEmpty else { throw SyncError.tablesRefused(refused) }
        // A serial key is SQLite's AUTOINCREMENT in the snapshot, so that offline rows take
        // keys from the snapshot's own range (see `localKeyBase`), never max + 1.
        for i in plan.tables.indices {
            guard let serial = Self.serialKey(plan.tables[i].sourceSchema, key: plan.tables[i].key?.columns ?? []),
                  let c = plan.tables[i].targetSchema.columns.firstIndex(where: { $0.name == serial }),
                  plan.tables[i].targetSchema.columns[c].serial == .rowid
            else { continue }
            plan.tables[i].targetSchema.columns[c].serial = .autoincrement
            plan.tables[i].creates = try target.planTable(plan.tables[i].targetSchema, named: plan.tables[i].target)
        }
        let summary = engine.run(plan, source: origin, target: target, options: copy, progress: progress, cancellation: nil)
        if let failed = summary.tables.first(where: { $0.status != .ok }) {
            throw FerryError.copyFailed(table: TableName(parsing: failed.source), endpoint: endpoint.redacted, reason: failed.error ?? "not copied")
        }
        if !summary.ok { throw FerryError.someTablesFailed(count: summary.tables.filter { $0.status != .ok }.count, total: summary.tables.count) }

        try SyncFile.createBookkeeping(target)
        let file = SyncFile(path: path, db: target, tables: [])
        var report = SnapshotReport(file: path, origin: Self.recordedOrigin(endpoint), tables: [], seconds: 0)
        try target.begin()
        do {
            var synced: [SyncedTable] = []
            for t in Self.parentsFirst(plan.tables.map { ($0.target.name, $0) }) {
                var origin = t.sourceSchema
                // The origin's columns as read; one copied in its stored form (SQLite into the
                // snapshot: byte for byte) is recorded as the origin types it, for push and pull.
                origin.columns = t.columns.map { c in
                    guard c.travelsNatively, let typed = t.sourceSchema.column(named: c.name), typed.logicalType.isSupported else { return c }
                    return typed
                }
                let key = t.key?.columns ?? []
                let serial = Self.serialKey(t.sourceSchema, key: key)
                var table = SyncedTable(local: t.target.name, origin: origin, localSchema: t.writesInto, key: key, filter: t.filter, serial: serial)
                if let serial, let c = origin.column(named: serial) {
                    let base = Self.localKeyBase(for: c.logicalType)
                    table.localKeyBase = base
                    try target.query("UPDATE sqlite_sequence SET seq = max(seq, ?2) WHERE name = ?1", [.text(table.local), .int(base)])
                    if target.changes == 0 {
                        try target.query("INSERT INTO sqlite_sequence (name, seq) VALUES (?1, ?2)", [.text(table.local), .int(base)])
                    }
                }
                synced.append(table)
                let rows = summary.tables.first { $0.target == t.target.description || $0.source == t.source.description }?.rows ?? 0
                report.tables.append(SnapshotReport.Table(
                    name: table.local, rows: rows, key: key, offlineKeysFrom: table.localKeyBase.map { $0 + 1 }, skippedColumns: t.skipped))
            }
            file.setTables(synced)
            try file.saveTables()
            for t in synced { try file.installCapture(t) }
            try file.setMeta("format", SyncFile.formatVersion)
            try file.setMeta("origin", report.origin)
            try file.setMeta("created", Self.timestamp(Date()))
            try file.setMeta("last_pull", Self.timestamp(started))
            try target.commit()
        } catch {
            try? target.rollback()
            throw error
        }
        done = true
        report.seconds = Date().timeIntervalSince(started)
        return report
    }

    /// The serial column of a single-column integer key, if the origin numbers it.
    static func serialKey(_ schema: TableSchema, key: [String]) -> String? {
        guard key.count == 1, let c = schema.column(named: key[0]), c.isSerial, [.int16, .int32, .int64].contains(c.logicalType) else { return nil }
        return c.name
    }

    /// Tables ordered so that a table comes after every table its foreign keys reference
    /// (a cycle is broken where it closes; a table referencing itself is ordered row by row).
    static func parentsFirst<T>(_ items: [(name: String, plan: T)]) -> [T] where T: HasForeignKeys {
        var order: [T] = []
        var state: [String: Int] = [:]  // 1 visiting, 2 done
        let byName = Dictionary(items.map { ($0.name.lowercased(), $0.plan) }, uniquingKeysWith: { a, _ in a })
        func visit(_ name: String) {
            let key = name.lowercased()
            guard state[key] == nil, let item = byName[key] else { return }
            state[key] = 1
            for parent in item.referencedTables where parent.lowercased() != key { visit(parent) }
            state[key] = 2
            order.append(item)
        }
        for (name, _) in items { visit(name) }
        return order
    }

    static func timestamp(_ date: Date) -> String { ISOTime.string(date) }
}

protocol HasForeignKeys {
    var referencedTables: [String] { get }
}

extension TablePlan: HasForeignKeys {
    var referencedTables: [String] { targetSchema.foreignKeys.map(\.referencedTable.name) }
}

extension SyncedTable: HasForeignKeys {
    var referencedTables: [String] { localSchema.foreignKeys.map(\.referencedTable.name) + origin.foreignKeys.map(\.referencedTable.name) }
}

