import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Who runs a load: this machine, this process and this run. A lease names its owner so that a
/// cleanup never removes another process's live staging table.
public struct LoadOwner: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var pid: Int32
    public var run: String

    /// This process, with a run id of its own.
    public static let current = LoadOwner(host: LoadOwner.hostName(), pid: getpid(), run: String(UInt32.random(in: 0...UInt32.max), radix: 16))

    /// This machine's name as `gethostname` gives it (no name lookup: Foundation's `hostName`
    /// asks the resolver, which is slow and must not run where an async task waits).
    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "localhost" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? "localhost" : name
    }

    public init(host: String, pid: Int32, run: String) {
        self.host = host
        self.pid = pid
        self.run = run
    }

    /// `host pid run` as stored; nil for text of another shape.
    public init?(stored: String) {
        let parts = stored.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 3, let pid = Int32(parts[1]) else { return nil }
        self.init(host: String(parts[0]), pid: pid, run: String(parts[2]))
    }

    public var stored: String { "\(host) \(pid) \(run)" }
    public var description: String { "process \(pid) on \(host)" }

    /// False when the owner is a process of this machine that no longer exists: its lease is
    /// over at once, whatever its heartbeat says (a `kill -9` followed by `--resume`).
    var mayBeAlive: Bool {
        guard host == LoadOwner.current.host else { return true }
        if pid == LoadOwner.current.pid { return run == LoadOwner.current.run }
        return kill(pid, 0) == 0 || errno == EPERM
    }
}

/// Leases on staging tables in `_ferry_leases` of the target (hidden by the catalogs): one row
/// per staging table while a load fills it, with its owner and a heartbeat. A load claims its
/// staging table before creating it, a keeper renews the heartbeat, and the row goes with the
/// staging table. Another run removes a staging table only when its lease has expired (no
/// heartbeat for `seconds`, or its owner's process on this machine is gone).
public enum LoadLeases {
    public static let table = TableName("_ferry_leases")
    /// Seconds without a heartbeat after which a lease has expired.
    public static let defaultSeconds: Int64 = 60
    /// Seconds between heartbeats.
    public static let heartbeatSeconds = 10.0

    public struct Row: Sendable, Equatable {
        public var staging: String
        public var target: String
        public var owner: String
        public var heartbeat: Int64
        public var seconds: Int64

        public init(staging: String, target: String, owner: String, heartbeat: Int64, seconds: Int64) {
            self.staging = staging
            self.target = target
            self.owner = owner
            self.heartbeat = heartbeat
            self.seconds = seconds
        }

        /// True while the owner may still be loading.
        public func isLive(now: Int64 = LoadLeases.now()) -> Bool {
            if let o = LoadOwner(stored: owner), !o.mayBeAlive { return false }
            return now - heartbeat < seconds
        }

        /// `process 123 on host, last heard from 5 s ago`.
        public func describeOwner(now: Int64 = LoadLeases.now()) -> String {
            (LoadOwner(stored: owner)?.description ?? owner) + ", last heard from \(max(0, now - heartbeat)) s ago"
        }
    }

    static let columns: [Column] = [
        Column(name: "staging", nativeType: "", logicalType: .text(maxLength: 128, fixed: false), isNullable: false),
        Column(name: "target", nativeType: "", logicalType: .text(maxLength: 400, fixed: false), isNullable: false),
        Column(name: "owner", nativeType: "", logicalType: .text(maxLength: 400, fixed: false), isNullable: false),
        Column(name: "heartbeat", nativeType: "", logicalType: .int64, isNullable: false),
        Column(name: "seconds", nativeType: "", logicalType: .int64, isNullable: false),
    ]

    public static func now() -> Int64 { Int64(Date().timeIntervalSince1970) }

    /// The lease table's schema, created when missing (outside any transaction: a CREATE TABLE
    /// commits on MySQL).
    public static func schema(_ c: any Connection) throws -> TableSchema {
        try StateTable.schema(c, table, columns: columns, key: ["staging"])
    }

    public static func read(_ c: any Connection, _ schema: TableSchema, staging: TableName, lock: Bool = false) throws -> Row? {
        guard let v = try StateTable.row(c, schema, columns: columns, key: .text(staging.description), lock: lock) else { return nil }
        return Row(staging: v[0].textValue, target: v[1].textValue, owner: v[2].textValue, heartbeat: v[3].intValue, seconds: v[4].intValue)
    }

    static func write(_ c: any Connection, _ schema: TableSchema, _ row: Row, insert: Bool) throws {
        let values: [Value] = [.text(row.staging), .text(row.target), .text(row.owner), .int(row.heartbeat), .int(row.seconds)]
        try StateTable.write(c, schema, columns: columns, key: ["staging"], values: values, insert: insert)
    }

    /// Takes the lease on `staging` for `owner`, in a transaction of its own: refused (with the
    /// live lease) while another owner's lease is live. Returns the expired lease it replaced.
    /// Without row locks on rows that are not there (InnoDB's gap locks deadlock two jobs
    /// claiming side by side): a missing row is inserted (of two runs, the second fails on the
    /// key), and an expired one is taken by deleting exactly it (owner and heartbeat as read),
    /// which only one run can do.
    public static func claim(_ c: any Connection, _ schema: TableSchema, staging: TableName, target: TableName, owner: LoadOwner) throws -> Row? {
        let mine = Row(staging: staging.description, target: target.description, owner: owner.stored, heartbeat: now(), seconds: defaultSeconds)
        let previous = try read(c, schema, staging: staging)
        if let previous, previous.owner != owner.stored, previous.isLive() { throw LeaseHeld(lease: previous) }
        try c.begin()
        do {
            if let previous {
                let cols = try StateTable.described(schema, [columns[0], columns[2], columns[3]])
                let exact = try RowBatch(rows: [[.text(previous.staging), .text(previous.owner), .int(previous.heartbeat)]], types: cols.map(\.logicalType))
                guard try c.deleteRows(from: schema, key: cols, keys: exact) == 1 else { throw Lost() }
            }
            try write(c, schema, mine, insert: true)
            try c.commit()
            return previous?.owner == owner.stored ? nil : previous
        } catch {
            try? c.rollback()
            // Taken by another run since the read: its lease is live.
            if let now = try? read(c, schema, staging: staging), now.owner != owner.stored, now != previous { throw LeaseHeld(lease: now) }
            if error is Lost {
                throw FerryError.notReady("another run took over the unfinished load in \(staging) at the same moment: run again once it ends")
            }
            throw error
        }
    }

    private struct Lost: Error {}

    /// Renews `owner`'s leases (in a transaction of its own).
    public static func renew(_ c: any Connection, _ schema: TableSchema, _ rows: [Row]) throws {
        guard !rows.isEmpty else { return }
        try c.begin()
        do {
            for var r in rows {
                // Only a lease still ours: a finished load removed its row, and it stays removed.
                guard let now = try read(c, schema, staging: TableName(parsing: r.staging)), now.owner == r.owner else { continue }
                r.heartbeat = Self.now()
                try write(c, schema, r, insert: false)
            }
            try c.commit()
        } catch {
            try? c.rollback()
            throw error
        }
    }

    /// Every lease in the table.
    public static func all(_ c: any Connection, _ schema: TableSchema) throws -> [Row] {
        let cols = try StateTable.described(schema, columns)
        let reader = try c.reader(table: schema, columns: cols, keyRange: nil, batchSize: 1_000)
        defer { reader.close() }
        var rows: [Row] = []
        while let b = try reader.next() {
            for i in 0..<b.count {
                let v = b.row(i, types: cols.map(\.logicalType))
                rows.append(Row(staging: v[0].textValue, target: v[1].textValue, owner: v[2].textValue, heartbeat: v[3].intValue, seconds: v[4].intValue))
            }
        }
        return rows
    }

    /// A lease of this process on `staging`, for `seconds` without a heartbeat, written alone.
    public static func hold(_ c: any Connection, _ schema: TableSchema, staging: TableName, target: String, seconds: Int64) throws {
        try write(c, schema, Row(staging: staging.description, target: target, owner: LoadOwner.current.stored, heartbeat: now(), seconds: seconds), insert: true)
    }

    /// Removes the lease on `staging` (in the caller's transaction, where there is one).
    public static func release(_ c: any Connection, _ schema: TableSchema, staging: TableName) throws {
        try StateTable.delete(c, schema, key: .text(staging.description))
    }

    /// The lease of another live owner.
    public struct LeaseHeld: Error {
        public var lease: Row
    }
}

/// How far a resumable load got: one row per staging table in `_ferry_loads` of the target,
/// written in the same transaction as each chunk it records, so that after any crash the
/// target says exactly after which key the load continues.
public enum LoadProgress {
    public static let table = TableName("_ferry_loads")

    public struct Row: Sendable, Equatable {
        public var staging: String
        public var target: String
        /// What the rows are (source table, columns, key, filter): a resume continues only the same load.
        public var fingerprint: String
        /// The key of the last row committed, as `KeyText` writes it; empty before the first chunk.
        public var afterKey: String
        public var rows: Int64
        public var source: String
        public var startedAt: String
    }

    static let columns: [Column] = [
        Column(name: "staging", nativeType: "", logicalType: .text(maxLength: 128, fixed: false), isNullable: false),
        Column(name: "target", nativeType: "", logicalType: .text(maxLength: 400, fixed: false), isNullable: false),
        Column(name: "fingerprint", nativeType: "", logicalType: .text(maxLength: 40, fixed: false), isNullable: false),
        Column(name: "after_key", nativeType: "", logicalType: .text(maxLength: nil, fixed: false), isNullable: false),
        Column(name: "rows_loaded", nativeType: "", logicalType: .int64, isNullable: false),
        Column(name: "source", nativeType: "", logicalType: .text(maxLength: 400, fixed: false), isNullable: false),
        Column(name: "started_at", nativeType: "", logicalType: .text(maxLength: 40, fixed: false), isNullable: false),
    ]

    public static func schema(_ c: any Connection) throws -> TableSchema {
        try StateTable.schema(c, table, columns: columns, key: ["staging"])
    }

    public static func read(_ c: any Connection, _ schema: TableSchema, staging: TableName) throws -> Row? {
        guard let v = try StateTable.row(c, schema, columns: columns, key: .text(staging.description)) else { return nil }
        return Row(staging: v[0].textValue, target: v[1].textValue, fingerprint: v[2].textValue, afterKey: v[3].textValue,
                   rows: v[4].intValue, source: v[5].textValue, startedAt: v[6].textValue)
    }

    /// Writes `row` (in the caller's transaction: the chunk it records commits with it).
    public static func write(_ c: any Connection, _ schema: TableSchema, _ row: Row) throws {
        let values: [Value] = [.text(row.staging), .text(row.target), .text(row.fingerprint), .text(row.afterKey), .int(row.rows), .text(row.source), .text(row.startedAt)]
        try StateTable.write(c, schema, columns: columns, key: ["staging"], values: values, insert: false)
    }

    public static func remove(_ c: any Connection, _ schema: TableSchema, staging: TableName) throws {
        try StateTable.delete(c, schema, key: .text(staging.description))
    }
}

/// Who owns each resumable staging table a service's tokens made (`_ferry_staging_owners`
/// of the served database): a fingerprint of the token, never the token. Kept so that a write
/// token still owns its unfinished load after `ferry serve` restarts.
public enum StagingOwnerRecords {
    public static let table = TableName("_ferry_staging_owners")
    static let columns: [Column] = [
        Column(name: "staging", nativeType: "", logicalType: .text(maxLength: 128, fixed: false), isNullable: false),
        Column(name: "owner", nativeType: "", logicalType: .text(maxLength: 64, fixed: false), isNullable: false),
    ]

    /// The owner recorded for `staging`, or nil (no record, or no records table).
    public static func owner(_ c: any Connection, staging: TableName) throws -> String? {
        guard try c.tableExists(table) else { return nil }
        let schema = try c.describe(table, rowEstimate: false)
        return try StateTable.row(c, schema, columns: columns, key: .text(staging.description))?[1].textValue
    }

    /// Records (or, with nil, removes) the owner of `staging`, in a transaction of its own.
    public static func set(_ c: any Connection, staging: TableName, owner: String?) throws {
        if owner == nil, try !c.tableExists(table) { return }
        let schema = try StateTable.schema(c, table, columns: columns, key: ["staging"])
        try c.begin()
        do {
            if let owner {
                try StateTable.write(c, schema, columns: columns, key: ["staging"], values: [.text(staging.description), .text(owner)], insert: false)
            } else {
                try StateTable.delete(c, schema, key: .text(staging.description))
            }
            try c.commit()
        } catch {
            try? c.rollback()
            throw error
        }
    }
}

/// Ferry's own small tables in a target (one text key), read and written through the
/// `Connection` seams only: no SQL of any engine here.
enum StateTable {
    static func schema(_ c: any Connection, _ table: TableName, columns: [Column], key: [String]) throws -> TableSchema {
        if try c.tableExists(table) { return try c.describe(table, rowEstimate: false) }
        do {
            _ = try c.createTable(TableSchema(name: table, engine: c.dialect.engine, columns: columns, primaryKey: key), named: table)
        } catch {
            // Created by another run at the same moment.
            guard try c.tableExists(table) else { throw error }
        }
        return try c.describe(table, rowEstimate: false)
    }

    static func described(_ schema: TableSchema, _ columns: [Column]) throws -> [Column] {
        try columns.map { want in
            guard let col = schema.column(named: want.name) else { throw FerryError.columnNotFound(table: schema.name, column: want.name) }
            return col
        }
    }

    static func row(_ c: any Connection, _ schema: TableSchema, columns: [Column], key: Value, lock: Bool = false) throws -> [Value]? {
        let cols = try described(schema, columns)
        return try RowValues.rows(c, schema, columns: cols, keyIndexes: [0], keys: [[key]], lock: lock)[[key]]
    }

    static func write(_ c: any Connection, _ schema: TableSchema, columns: [Column], key: [String], values: [Value], insert: Bool) throws {
        let batch = try RowBatch(rows: [values], types: columns.map(\.logicalType))
        let cols = try described(schema, columns).enumerated().map { i, c in
            Column(name: c.name, nativeType: c.nativeType, logicalType: columns[i].logicalType, isNullable: c.isNullable)
        }
        if insert {
            try c.writer(into: schema, columns: cols).writeWhole(batch)
        } else {
            _ = try c.upsertRows(into: schema, columns: cols, key: key, rows: batch)
        }
    }

    static func delete(_ c: any Connection, _ schema: TableSchema, key: Value) throws {
        guard let col = schema.column(named: schema.primaryKey.first ?? "") else { return }
        _ = try c.deleteRows(from: schema, key: [col], keys: try RowBatch(rows: [[key]], types: [col.logicalType]))
    }
}

extension Value {
    var textValue: String {
        if case .text(let s) = self { return s }
        return isNull ? "" : description
    }

    var intValue: Int64 {
        switch self {
        case .int(let n): return n
        case .text(let s), .decimal(let s): return Int64(s) ?? 0
        default: return 0
        }
    }
}

/// A key's values as text that gives the same values back (the state of a resumable load):
/// one JSON array of `[tag, text]` pairs.
public enum KeyText {
    public static func encode(_ values: [Value]) -> String {
        let data = (try? JSONEncoder().encode(items(values))) ?? Data("[]".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    /// Nil for text `encode` did not write.
    public static func decode(_ text: String) -> [Value]? {
        guard let items = try? JSONDecoder().decode([[String]].self, from: Data(text.utf8)) else { return nil }
        return values(items)
    }

    /// Each value as `[tag, text]`.
    public static func items(_ values: [Value]) -> [[String]] {
        values.map { v in
            switch v {
            case .null: return ["null", ""]
            case .bool(let b): return ["bool", b ? "1" : "0"]
            case .int(let n): return ["int", String(n)]
            case .double(let d): return ["double", String(d.bitPattern)]
            case .decimal(let s): return ["decimal", s]
            case .text(let s): return ["text", s]
            case .binary(let b): return ["binary", Data(b).base64EncodedString()]
            case .date(let n): return ["date", String(n)]
            case .time(let n): return ["time", String(n)]
            case .timestamp(let n): return ["timestamp", String(n)]
            case .uuid(let b): return ["uuid", Data(b).base64EncodedString()]
            case .json(let s): return ["json", s]
            }
        }
    }

    /// The values `items` gave; nil for anything else.
    public static func values(_ items: [[String]]) -> [Value]? {
        var out: [Value] = []
        for item in items {
            guard item.count == 2 else { return nil }
            let s = item[1]
            switch item[0] {
            case "null": out.append(.null)
            case "bool": out.append(.bool(s == "1"))
            case "int": guard let n = Int64(s) else { return nil }; out.append(.int(n))
            case "double": guard let n = UInt64(s) else { return nil }; out.append(.double(Double(bitPattern: n)))
            case "decimal": out.append(.decimal(s))
            case "text": out.append(.text(s))
            case "binary": guard let d = Data(base64Encoded: s) else { return nil }; out.append(.binary([UInt8](d)))
            case "date": guard let n = Int64(s) else { return nil }; out.append(.date(n))
            case "time": guard let n = Int64(s) else { return nil }; out.append(.time(n))
            case "timestamp": guard let n = Int64(s) else { return nil }; out.append(.timestamp(n))
            case "uuid": guard let d = Data(base64Encoded: s) else { return nil }; out.append(.uuid([UInt8](d)))
            case "json": out.append(.json(s))
            default: return nil
            }
        }
        return out
    }
}
