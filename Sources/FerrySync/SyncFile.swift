import FerryCore
import FerrySQLite
import Foundation

/// One synchronised table, as the snapshot file records it.
public struct SyncedTable: Sendable, Codable {
    /// The table's name in the snapshot (always in `main`).
    public var local: String
    /// The origin's table: its name and the columns the snapshot carries, as the origin
    /// describes them (so the file works, and drift shows, with no connection).
    public var origin: TableSchema
    /// The table as created in the snapshot (what Ferry's writers encode for).
    public var localSchema: TableSchema
    /// The key rows are matched by, on both sides.
    public var key: [String]
    /// `--where`: the origin rows the snapshot holds, in the origin's SQL.
    public var filter: String?
    /// The serial key column, when the origin numbers new rows itself.
    public var serial: String?
    /// Rows inserted offline into a serial table get keys above this (see `Snapshot`); the
    /// origin's own keys stay below it, so a pull never collides with an offline row.
    public var localKeyBase: Int64?

    public var name: TableName { TableName(local) }
    /// Offline keys are above `localKeyBase`: pushed without them, renumbered by the origin.
    public func isLocalKey(_ key: [Value]) -> Bool {
        guard let base = localKeyBase, key.count == 1, case .int(let v) = key[0] else { return false }
        return v > base
    }
}

/// A snapshot file: a SQLite database holding the synchronised tables and Ferry's bookkeeping
/// beside them, all in tables whose names start with `_ferry_` (never listed, never copied):
///
/// - `_ferry_sync_meta` (name, value): format, origin URL without password, last push and pull,
///   the push in flight.
/// - `_ferry_sync_tables` (name, position, definition): one `SyncedTable` per table, as JSON.
/// - `_ferry_sync_state` (capture): 1, except inside Ferry's own transactions, which write
///   without being recorded as local changes (other programs never see the 0: it is not committed).
/// - `_ferry_base_T`, per table: the **base** of every row changed locally since the last sync
///   — its image as the origin last had it (`_ferry_existed` = 1), or only its key when the row
///   did not exist (`_ferry_existed` = 0). A row with no entry is unchanged. Triggers fill it
///   on the first change of a row and keep that first image; whatever program edits the file.
/// - `_ferry_pushed_T`, per table: the images a push in flight is committing at the origin
///   (they become the new bases once the origin has committed; where `_ferry_local` = 1 the
///   local row becomes that image too, unless a program edited the row meanwhile: the capture
///   triggers then clear the flag, and the edit stays, pending against the new base).
/// - `_ferry_sync_rekeys` (tbl, old, new): the keys a push in flight gives offline rows.
public final class SyncFile {
    public static let formatVersion = "1"
    public let path: String
    public let db: SQLiteConnection
    public private(set) var tables: [SyncedTable]

    static let meta = "_ferry_sync_meta"
    static let tablesTable = "_ferry_sync_tables"
    static let state = "_ferry_sync_state"
    static let rekeys = "_ferry_sync_rekeys"
    static func base(_ t: String) -> String { "_ferry_base_" + t }
    static func pushed(_ t: String) -> String { "_ferry_pushed_" + t }
    static let existed = "_ferry_existed"
    static let setLocal = "_ferry_local"

    init(path: String, db: SQLiteConnection, tables: [SyncedTable]) {
        self.path = path
        self.db = db
        self.tables = tables
    }

    /// Opens an existing snapshot.
    public static func open(_ path: String) throws -> SyncFile {
        guard FileManager.default.fileExists(atPath: path) else {
            throw SyncError.notASnapshot(path: path, reason: "no such file")
        }
        let db: SQLiteConnection
        do {
            db = try SQLiteConnection(endpoint: try Endpoint(parsing: "sqlite:" + path), role: .target)
        } catch {
            throw SyncError.notASnapshot(path: path, reason: "\(error)")
        }
        let found = try db.query("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN (?1, ?2, ?3)",
                                 [.text(meta), .text(tablesTable), .text(state)])
        guard found.first?.first == .int(3) else {
            db.close()
            throw SyncError.notASnapshot(path: path, reason: "it has no Ferry sync bookkeeping")
        }
        let file = SyncFile(path: path, db: db, tables: [])
        guard let format = try file.meta("format"), format == formatVersion else {
            db.close()
            throw SyncError.notASnapshot(path: path, reason: "its format is not \(formatVersion) (made by another Ferry version?)")
        }
        try file.loadTables()
        return file
    }

    public func close() { db.close() }

    func loadTables() throws {
        let decoder = JSONDecoder()
        tables = try db.query("SELECT definition FROM \(q(Self.tablesTable)) ORDER BY position").map { row in
            guard case .text(let json) = row[0] else { throw SyncError.notASnapshot(path: path, reason: "a table definition is not text") }
            do { return try decoder.decode(SyncedTable.self, from: Data(json.utf8)) } catch {
                throw SyncError.notASnapshot(path: path, reason: "a table definition does not read (\(error))")
            }
        }
    }

    func saveTables() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try db.query("DELETE FROM \(q(Self.tablesTable))")
        for (i, t) in tables.enumerated() {
            let json = String(decoding: try encoder.encode(t), as: UTF8.self)
            try db.query("INSERT INTO \(q(Self.tablesTable)) (name, position, definition) VALUES (?1, ?2, ?3)",
                         [.text(t.local), .int(Int64(i)), .text(json)])
        }
    }

    func setTables(_ t: [SyncedTable]) { tables = t }

    func replace(_ table: SyncedTable) {
        if let i = tables.firstIndex(where: { $0.local == table.local }) { tables[i] = table }
    }

    // MARK: Metadata

    public func meta(_ name: String) throws -> String? {
        guard case .text(let v)? = try db.query("SELECT value FROM \(q(Self.meta)) WHERE name = ?1", [.text(name)]).first?.first else { return nil }
        return v
    }

    func setMeta(_ name: String, _ value: String?) throws {
        if let value {
            try db.query("INSERT INTO \(q(Self.meta)) (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                         [.text(name), .text(value)])
        } else {
            try db.query("DELETE FROM \(q(Self.meta)) WHERE name = ?1", [.text(name)])
        }
    }

    /// The origin as recorded (no password, no token).
    public func origin() throws -> String {
        guard let o = try meta("origin") else { throw SyncError.notASnapshot(path: path, reason: "it records no origin") }
        return o
    }

    /// Creates the bookkeeping tables of a new snapshot.
    static func createBookkeeping(_ db: SQLiteConnection) throws {
        try db.run("""
            CREATE TABLE \(quote(meta)) (name TEXT PRIMARY KEY, value TEXT);
            CREATE TABLE \(quote(tablesTable)) (name TEXT PRIMARY KEY, position INTEGER NOT NULL, definition TEXT NOT NULL);
            CREATE TABLE \(quote(state)) (capture INTEGER NOT NULL);
            INSERT INTO \(quote(state)) (capture) VALUES (1);
            CREATE TABLE \(quote(rekeys)) (tbl TEXT NOT NULL, old INTEGER NOT NULL, new INTEGER NOT NULL, PRIMARY KEY (tbl, old));
            """)
    }

    // MARK: Transactions in which Ferry's own writes are not captured

    /// Runs `body` in one local write transaction in which Ferry's own writes are not recorded
    /// as local changes; commits when it returns, rolls back when it throws.
    func quietly<T>(_ body: () throws -> T) throws -> T {
        try db.begin()
        do {
            try db.run("UPDATE \(q(Self.state)) SET capture = 0; PRAGMA defer_foreign_keys = ON")
            let result = try body()
            try db.run("UPDATE \(q(Self.state)) SET capture = 1")
            try db.commit()
            return result
        } catch {
            try? db.rollback()
            throw error
        }
    }

    // MARK: Change capture

    func q(_ s: String) -> String { Self.quote(s) }
    /// An identifier quoted by SQLite's rules (its dialect's).
    static func quote(_ s: String) -> String { SQLiteDialect().quote(s) }

    /// Declared types of `table`'s columns, as SQLite has them.
    func declaredTypes(_ table: String) throws -> [String: String] {
        var out: [String: String] = [:]
        for row in try db.query("SELECT name, type FROM pragma_table_info(?1)", [.text(table)]) {
            if case .text(let n) = row[0], case .text(let t) = row[1] { out[n] = t }
        }
        return out
    }

    /// Column sets of `table`'s unique indexes (an `INSERT OR REPLACE` deletes the rows that
    /// conflict on any of them, with no delete trigger: the insert trigger records them).
    func uniqueColumnSets(_ table: String) throws -> [[String]] {
        var sets: [[String]] = []
        for row in try db.query("SELECT name FROM pragma_index_list(?1) WHERE \"unique\" = 1", [.text(table)]) {
            guard case .text(let index) = row[0] else { continue }
            let cols = try db.query("SELECT name FROM pragma_index_info(?1) ORDER BY seqno", [.text(index)])
            var names: [String] = []
            for c in cols { if case .text(let n) = c[0] { names.append(n) } else { names = []; break } }
            if !names.isEmpty { sets.append(names) }
        }
        return sets
    }

    /// Creates `table`'s base and pushed tables and its capture triggers (replacing old ones).
    func installCapture(_ table: SyncedTable) throws {
        let t = table.local
        let columns = table.localSchema.columns.map(\.name)
        let types = try declaredTypes(t)
        let defs = columns.map { q($0) + " " + (types[$0] ?? "") }.joined(separator: ", ")
        let pk = "PRIMARY KEY (" + table.key.map(q).joined(separator: ", ") + ")"
        let all = columns.map(q).joined(separator: ", ")
        let keyList = table.key.map(q).joined(separator: ", ")
        let when = "WHEN (SELECT capture FROM \(q(Self.state)))"
        let base = q(Self.base(t))
        func match(_ cols: [String], _ row: String) -> String {
            cols.map { "o.\(q($0)) = \(row).\(q($0))" }.joined(separator: " AND ")
        }
        var keySets = [table.key]
        for set in try uniqueColumnSets(t) where !keySets.contains(set) { keySets.append(set) }
        // No conflict clause in the trigger bodies: an outer `INSERT OR REPLACE` would impose its
        // own on them (SQLite's rule), so each insert checks for an entry itself — the first
        // image of a row is the one kept.
        func absent(_ row: String) -> String {
            "NOT EXISTS (SELECT 1 FROM \(base) x WHERE " + table.key.map { "x.\(q($0)) = \(row).\(q($0))" }.joined(separator: " AND ") + ")"
        }
        // A push in flight that will set a row to the origin's (or a merged) image once it is
        // settled leaves a row edited meanwhile as the edit made it: the edit releases it.
        let pushed = q(Self.pushed(t))
        let held = "\(q(Self.setLocal)) = 1"
        func release(_ row: String) -> String {
            "UPDATE \(pushed) SET \(q(Self.setLocal)) = 0 WHERE \(held) AND " + table.key.map { "\(q($0)) = \(row).\(q($0))" }.joined(separator: " AND ") + ";"
        }
        let before = keySets.map {
            "INSERT INTO \(base) (\(q(Self.existed)), \(all)) SELECT 1, \(all) FROM \(q(t)) o WHERE \(match($0, "NEW")) AND \(absent("o"));\n  "
                + "UPDATE \(pushed) SET \(q(Self.setLocal)) = 0 WHERE \(held) AND EXISTS (SELECT 1 FROM \(q(t)) o WHERE \(match($0, "NEW")) AND "
                + table.key.map { "o.\(q($0)) = \(pushed).\(q($0))" }.joined(separator: " AND ") + ");"
        }.joined(separator: "\n  ")
        let old = columns.map { "OLD.\(q($0))" }.joined(separator: ", ")
        let newKey = table.key.map { "NEW.\(q($0))" }.joined(separator: ", ")
        let keepOld = "INSERT INTO \(base) (\(q(Self.existed)), \(all)) SELECT 1, \(old) WHERE \(absent("OLD"));"
        let keepNew = "INSERT INTO \(base) (\(q(Self.existed)), \(keyList)) SELECT 0, \(newKey) WHERE \(absent("NEW"));"
        try dropCapture(t)
        try db.run("""
            CREATE TABLE IF NOT EXISTS \(base) (\(q(Self.existed)) INTEGER NOT NULL, \(defs), \(pk));
            CREATE TABLE IF NOT EXISTS \(q(Self.pushed(t))) (\(q(Self.existed)) INTEGER NOT NULL, \(q(Self.setLocal)) INTEGER NOT NULL DEFAULT 0, \(defs), \(pk));
            CREATE TRIGGER \(q("_ferry_bi_" + t)) BEFORE INSERT ON \(q(t)) \(when) BEGIN
              \(before)
            END;
            CREATE TRIGGER \(q("_ferry_ai_" + t)) AFTER INSERT ON \(q(t)) \(when) BEGIN
              \(keepNew)
              \(release("NEW"))
            END;
            CREATE TRIGGER \(q("_ferry_bu_" + t)) BEFORE UPDATE ON \(q(t)) \(when) BEGIN
              \(before)
            END;
            CREATE TRIGGER \(q("_ferry_au_" + t)) AFTER UPDATE ON \(q(t)) \(when) BEGIN
              \(keepOld)
              \(keepNew)
              \(release("OLD"))
              \(release("NEW"))
            END;
            CREATE TRIGGER \(q("_ferry_ad_" + t)) AFTER DELETE ON \(q(t)) \(when) BEGIN
              \(keepOld)
              \(release("OLD"))
            END;
            """)
    }

    func dropCapture(_ t: String) throws {
        for kind in ["bi", "ai", "bu", "au", "ad"] { try db.run("DROP TRIGGER IF EXISTS \(q("_ferry_\(kind)_" + t))") }
    }

    // MARK: Reading rows

    /// The columns rows are read with: the origin's logical types, integers widened to 64 bits
    /// (offline keys of a 32-bit serial lie above its range).
    static func readColumns(_ table: SyncedTable) -> [Column] {
        table.origin.columns.map { c in
            var c = c
            if c.logicalType == .int16 || c.logicalType == .int32 { c.logicalType = .int64 }
            c.readHints = []
            c.declaredType = nil
            return c
        }
    }

    /// A temporary view over the snapshot, readable with Ferry's readers.
    func view(_ name: String, _ sql: String, table: SyncedTable, columns: [Column]) throws -> TableSchema {
        let viewName = "_ferry_v_" + name + "_" + table.local
        try db.run("DROP VIEW IF EXISTS temp.\(q(viewName)); CREATE TEMP VIEW \(q(viewName)) AS \(sql)")
        return TableSchema(name: TableName(schema: "temp", viewName), engine: .sqlite, columns: columns, primaryKey: table.key)
    }

    /// Every row of `schema` (a table or view of `connection`) in `range`, as values.
    static func readAll(_ connection: any Connection, _ schema: TableSchema, columns: [Column], range: KeyRange? = nil) throws -> [[Value]] {
        let reader = try connection.reader(table: schema, columns: columns, keyRange: range, batchSize: 2_000)
        defer { reader.close() }
        var rows: [[Value]] = []
        let types = columns.map(\.logicalType)
        while let batch = try reader.next() {
            for r in 0..<batch.count { rows.append(batch.row(r, types: types)) }
        }
        return rows
    }

    /// The pending changes of `table`: for each key with a base entry, the base image (nil when
    /// the row did not exist) and the local row now (nil when it is gone); entries that change
    /// nothing (a row edited back, inserted and deleted again) are left out.
    func pending(_ table: SyncedTable) throws -> [PendingChange] {
        let cols = Self.readColumns(table)
        let all = cols.map { q($0.name) }.joined(separator: ", ")
        let tq = q(table.local)
        let bq = q(Self.base(table.local))
        let join = table.key.map { "b.\(q($0)) = t.\(q($0))" }.joined(separator: " AND ")
        let local = try view("local", "SELECT \(cols.map { "t." + q($0.name) }.joined(separator: ", ")) FROM main.\(tq) t WHERE EXISTS (SELECT 1 FROM main.\(bq) b WHERE \(join))",
                             table: table, columns: cols)
        let base = try view("base", "SELECT \(all) FROM main.\(bq) WHERE \(q(Self.existed)) = 1", table: table, columns: cols)
        let keyCols = table.key.compactMap { k in cols.first { $0.name == k } }
        let keys = try view("keys", "SELECT \(table.key.map(q).joined(separator: ", ")) FROM main.\(bq)", table: table, columns: keyCols)
        let keyIdx = table.key.compactMap { k in cols.firstIndex { $0.name == k } }
        var locals: [[Value]: [Value]] = [:]
        for row in try Self.readAll(db, local, columns: cols) { locals[keyIdx.map { row[$0] }] = row }
        var bases: [[Value]: [Value]] = [:]
        for row in try Self.readAll(db, base, columns: cols) { bases[keyIdx.map { row[$0] }] = row }
        var out: [PendingChange] = []
        for key in try Self.readAll(db, keys, columns: keyCols) {
            let l = locals[key]
            let b = bases[key]
            if l == nil && b == nil { continue }
            if let l, let b, Row.same(l, b) { continue }
            out.append(PendingChange(key: key, base: b, local: l))
        }
        return out
    }
}

/// One locally changed row: its base (as the origin last had it; nil: it did not exist) and
/// its local image now (nil: deleted).
public struct PendingChange: Sendable {
    public var key: [Value]
    public var base: [Value]?
    public var local: [Value]?
    public var kind: ChangeKind { base == nil ? .insert : local == nil ? .delete : .update }
}

public enum ChangeKind: String, Sendable, Codable {
    case insert, update, delete
}

/// Row comparisons by value (decimals by value: `12.50` = `12.5`).
typealias Row = RowValues
