import CSQLite
import FerryCore
import Foundation

/// One open SQLite database file. Sources are opened read-only and must exist; targets are
/// created when missing and refused when they cannot be written.
public final class SQLiteConnection: Connection {
    /// Digests are computed by Ferry beside the file (`DigestComputer`), in either row hash.
    public var rowHashes: [RowHash] { [.lookup3, .md5] }
    /// Row hashes are listed beside the file, for a key whose buckets the reader's SQL filters
    /// (one integer column). For another key (a key in its stored form, which hashes its text
    /// by MD5) every row of the table would be read whole to find those of the buckets: 1% of
    /// 1,000,000 bench_orders rows SQLite → SQLite took 4.9 s that way, 3.0 s reading the
    /// buckets' rows and the target's keys.
    public func listsKeyedRowHashes(key: [Column], hash: KeyHash) -> Bool { hash == .integer && key.count == 1 }
    /// Every digest is computed here, beside the file, from the rows as the reader reads them.
    public func digestsByReading(_ request: DigestRequest) -> Bool { true }
    /// Straight from the statement where the key is the rowid and every other column is compared
    /// as stored (`SQLiteStoredRowHashes`), else from the reader's batches.
    public func keyedRowHashes(_ table: TableSchema, request: DigestRequest, each: (_ key: Int64, _ hash: Int64) throws -> Void) throws {
        if let stored = SQLiteStoredRowHashes(self, table: table, request: request) { return try stored.run(self, each) }
        try DigestComputer.keyedRowHashes(self, table: table, request: request, each: each)
    }
    public let endpoint: Endpoint
    public let dialect: any Dialect = SQLiteDialect()
    public var defaultSchema: String { "main" }
    let db: OpaquePointer
    private var statementCache: [String: SQLiteStatement] = [:]
    /// Set when opening as a target created the file: if nothing was stored in it by the time
    /// the connection closes (a dry run, a failed copy), the file is removed again.
    private var createdFile: String?

    public init(endpoint: Endpoint, role: ConnectionRole) throws {
        self.endpoint = endpoint
        let path = endpoint.path
        let shown = endpoint.redacted
        let fm = FileManager.default
        var isDir: ObjCBool = false
        let exists = fm.fileExists(atPath: path, isDirectory: &isDir)
        if path != ":memory:" {
            if exists && isDir.boolValue {
                throw FerryError.connectionFailed(endpoint: shown, reason: "\(path) is a directory, not a SQLite file")
            }
            if role == .source && !exists {
                throw FerryError.connectionFailed(endpoint: shown, reason: "no such file \(path)")
            }
            if role == .target {
                let dir = (path as NSString).deletingLastPathComponent
                let folder = dir.isEmpty ? "." : dir
                if !fm.fileExists(atPath: folder) {
                    throw FerryError.connectionFailed(endpoint: shown, reason: "folder \(folder) does not exist")
                }
                if !fm.isWritableFile(atPath: folder) {
                    throw FerryError.readOnlyTarget(endpoint: shown, reason: "folder \(folder) is not writable (SQLite needs it for its journal); check its permissions or choose another target")
                }
                if exists && !fm.isWritableFile(atPath: path) {
                    throw FerryError.readOnlyTarget(endpoint: shown, reason: "file \(path) is read-only; check its permissions or choose another target")
                }
            }
        }
        var handle: OpaquePointer?
        let flags = (role == .source ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)
            | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI
        let rc = sqlite3_open_v2(path, &handle, flags, nil)
        guard rc == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
            sqlite3_close_v2(handle)
            throw FerryError.connectionFailed(endpoint: shown, reason: message)
        }
        self.db = handle
        if role == .target && !exists && path != ":memory:" { createdFile = path }
        if path != ":memory:" {
            openPath = path
            Self.openPaths.withLock { $0[path, default: 0] += 1 }
        }
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, 10_000)
        do {
            // Touch the schema: a file that is not a database fails here, not mid-copy.
            do {
                try touchSchema()
            } catch let e as SQLiteError where e.code == SQLITE_READONLY | (3 << 8) {  // SQLITE_READONLY_ROLLBACK
                // A hot journal: a writer stopped mid-transaction (killed, its machine down).
                // Reading needs it rolled back, which a read-only connection cannot do: one
                // read-write open does it (as any SQLite client would), restoring the last
                // committed state; then the read-only connection reads that.
                try Self.rollBackHotJournal(path, shown: shown)
                try touchSchema()
            }
        } catch let e as SQLiteError {
            statementCache.removeAll()
            sqlite3_close_v2(db)
            let hint = e.code & 0xff == SQLITE_NOTADB ? "\(path) is not a SQLite database" : e.message
            throw FerryError.connectionFailed(endpoint: shown, reason: hint)
        } catch {
            statementCache.removeAll()
            sqlite3_close_v2(db)
            throw error
        }
        if role == .target && sqlite3_db_readonly(db, "main") == 1 {
            statementCache.removeAll()
            sqlite3_close_v2(db)
            throw FerryError.readOnlyTarget(endpoint: shown, reason: "SQLite opened it read-only; check the file's permissions or choose another target")
        }
        if createdFile != nil {
            // A file Ferry creates gets 16 KiB pages instead of SQLite's 4 KiB: a bulk load
            // writes and splits a quarter as many pages (PostgreSQL -> SQLite, 1 M rows of
            // bench_orders: 0.55-0.70 s of system time -> 0.38-0.47 s, 2.4-3.1 s -> 2.1-2.4 s).
            // It is not a crash-safety setting. An existing file keeps its own page size, so a
            // file made empty beforehand (`PRAGMA page_size=4096; VACUUM;`) chooses another.
            try? execute("PRAGMA page_size = \(Self.createdPageSize)")
        }
    }

    deinit { close() }

    private func touchSchema() throws {
        let check = try prepare("SELECT count(*) FROM sqlite_schema")
        defer { check.reset() }
        _ = try check.step()
    }

    /// Rolls back the hot journal of `path` with a read-write connection of its own (closed at
    /// once), or says in one line why it cannot.
    static func rollBackHotJournal(_ path: String, shown: String) throws {
        var rw: OpaquePointer?
        defer { sqlite3_close_v2(rw) }
        let rc = sqlite3_open_v2(path, &rw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, nil)
        var ok = rc == SQLITE_OK && rw != nil
        if ok, let rw {
            sqlite3_busy_timeout(rw, 10_000)
            ok = sqlite3_exec(rw, "SELECT count(*) FROM sqlite_schema", nil, nil, nil) == SQLITE_OK
        }
        guard ok else {
            throw FerryError.connectionFailed(
                endpoint: shown,
                reason: "\(path) has a hot journal (a writer stopped mid-transaction) that must be rolled back before it can be read, and Ferry may not write the file or its folder: open it once with write access (sqlite3 \(path) 'PRAGMA quick_check')")
        }
    }

    /// The page size of a database file Ferry creates (README, "SQLite targets").
    static let createdPageSize = 16_384

    /// The file's device and inode (two paths to one file are one database).
    public func databaseIdentity() throws -> String? {
        guard endpoint.path != ":memory:" else { return nil }
        // Through links: attributes of a link are the link's own.
        let path = URL(fileURLWithPath: endpoint.path).resolvingSymlinksInPath().path
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
              let device = attributes[.systemNumber], let inode = attributes[.systemFileNumber]
        else { return nil }
        return "sqlite:\(device):\(inode)"
    }

    /// Connections of this process open on each file: a file this connection created and left
    /// empty is removed at close only when no other connection has it open (the service opens
    /// one per request; a request that created the file must not remove it under another's
    /// table being created).
    private static let openPaths = Locked<[String: Int]>([:])
    private var openPath: String?

    private var closed = false
    public func close() {
        guard !closed else { return }
        closed = true
        var empty = false
        if createdFile != nil, let st = try? prepare("SELECT count(*) FROM sqlite_schema"), (try? st.step()) == true {
            empty = st.columnInt(0) == 0
        }
        if let path = openPath {
            let others = Self.openPaths.withLock { paths -> Int in
                let n = (paths[path] ?? 1) - 1
                paths[path] = n > 0 ? n : nil
                return n
            }
            if others > 0 { empty = false }
        }
        if empty {
            // Nor while a connection of another process holds a lock on it.
            sqlite3_busy_timeout(db, 0)
            if (try? execute("BEGIN EXCLUSIVE")) != nil { try? execute("ROLLBACK") } else { empty = false }
        }
        statementCache.removeAll()
        sqlite3_close_v2(db)
        if empty, let path = createdFile {
            for suffix in ["", "-journal", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        }
    }

    func error(_ rc: Int32, sql: String?) -> SQLiteError {
        SQLiteError(db: db, code: rc, sql: sql, endpoint: endpoint.redacted)
    }

    /// A prepared statement, reused when the same SQL comes again (reset before reuse).
    func prepare(_ sql: String) throws -> SQLiteStatement {
        if let st = statementCache[sql] {
            st.reset()
            sqlite3_clear_bindings(st.handle)
            return st
        }
        let st = try SQLiteStatement(self, sql)
        statementCache[sql] = st
        return st
    }

    /// A reader in a rollback journal holds the file's shared lock, which no writer can commit
    /// past; in WAL readers and writers go on side by side.
    public var heldSnapshotsBlockWriters: Bool {
        guard let s = try? prepare("PRAGMA journal_mode"), (try? s.step()) == true else { return true }
        defer { s.reset() }
        return s.columnText(0)?.lowercased() != "wal"
    }

    /// Runs statements without results.
    /// Runs SQL text written by the caller (tests, tools); never text from a request.
    public func run(_ sql: String) throws { try execute(sql) }
    public func addColumn(_ column: Column, default value: ColumnDefault?, to table: TableName) throws {
        try execute(SchemaObjectSQL.addColumn(column, default: value, to: table, dialect: dialect))
    }

    /// Runs one statement written by the caller (FerrySync's bookkeeping, tests; never text
    /// from a request) with `parameters` bound to `?1…`, and returns its rows, each value as
    /// SQLite stores it (INTEGER `.int`, REAL `.double`, TEXT `.text`, BLOB `.binary`).
    @discardableResult
    public func query(_ sql: String, _ parameters: [Value] = []) throws -> [[Value]] {
        for st in statementCache.values { st.reset() }
        let st = try SQLiteStatement(self, sql)
        try st.bind(parameters)
        var rows: [[Value]] = []
        let n = sqlite3_column_count(st.handle)
        while try st.step() {
            rows.append((0..<n).map { i -> Value in
                switch sqlite3_column_type(st.handle, i) {
                case SQLITE_INTEGER: return .int(sqlite3_column_int64(st.handle, i))
                case SQLITE_FLOAT: return .double(sqlite3_column_double(st.handle, i))
                case SQLITE_TEXT: return .text(st.columnText(i) ?? "")
                case SQLITE_BLOB:
                    let count = Int(sqlite3_column_bytes(st.handle, i))
                    guard count > 0, let p = sqlite3_column_blob(st.handle, i) else { return .binary([]) }
                    return .binary(Array(UnsafeRawBufferPointer(start: p, count: count)))
                default: return .null
                }
            })
        }
        return rows
    }

    /// The declared type Ferry gives a column of `column`'s logical type in a new SQLite table.
    public func declaredType(for column: Column) throws -> String {
        guard let t = SQLiteTypeMap.declaredType(for: column.logicalType) else {
            throw FerryError.unsupportedType(table: TableName(""), column: column.name, type: column.logicalType.description, target: endpoint.redacted)
        }
        return t
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    public var changes: Int { Int(sqlite3_changes(db)) }

    func execute(_ sql: String) throws {
        // A cached statement left on a row holds a read lock that DDL (DROP, RENAME) trips on.
        for st in statementCache.values { st.reset() }
        var err: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(db, sql, nil, nil, &err)
        if rc != SQLITE_OK {
            let message = err.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(rc))
            sqlite3_free(err)
            throw SQLiteError(code: rc, message: message, sql: sql, endpoint: endpoint.redacted)
        }
    }

    // MARK: Transactions

    public func begin() throws {
        try execute("BEGIN IMMEDIATE")
        // Checked at commit: a replica's batches keep each source transaction whole, not the
        // order of its statements.
        if applyingChanges { try execute("PRAGMA defer_foreign_keys = ON") }
    }
    private var applyingChanges = false
    public func prepareToApplyChanges(repeatingCascades: Bool) throws {
        if repeatingCascades { try execute("PRAGMA foreign_keys = ON") }
        applyingChanges = true
    }
    /// A deferred transaction: its first read takes the snapshot that every later read sees
    /// (in WAL mode; in rollback-journal mode its shared lock keeps writers out meanwhile).
    /// Another handle on the file holding `BEGIN IMMEDIATE` (the write lock) while `--jobs`
    /// connections begin their read transactions: no write commits in between, so they all
    /// see one state. SQLite has no way to share a read snapshot (Debian builds it without
    /// SQLITE_ENABLE_SNAPSHOT).
    private var freezer: OpaquePointer?
    public func freezeWrites() throws -> Bool {
        let path = endpoint.path
        guard freezer == nil, path != ":memory:", FileManager.default.isWritableFile(atPath: path) else { return false }
        var handle: OpaquePointer?
        guard sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, nil) == SQLITE_OK, let handle else {
            sqlite3_close_v2(handle)
            return false
        }
        // Polled every half millisecond for up to 30 s, not through SQLite's busy handler: its
        // sleeps grow to 100 ms, and an application committing in a tight loop leaves the write
        // lock free only for moments that such sleeps almost always miss.
        var rc = sqlite3_exec(handle, "BEGIN IMMEDIATE", nil, nil, nil)
        let deadline = Date().addingTimeInterval(30)
        while (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) && Date() < deadline {
            usleep(500)
            rc = sqlite3_exec(handle, "BEGIN IMMEDIATE", nil, nil, nil)
        }
        guard rc == SQLITE_OK else {
            let message = String(cString: sqlite3_errmsg(handle))
            sqlite3_close_v2(handle)
            throw FerryError.connectionFailed(endpoint: endpoint.redacted, reason: "could not hold writes while the jobs begin reading: \(message)")
        }
        freezer = handle
        return true
    }
    public func unfreezeWrites() throws {
        guard let handle = freezer else { return }
        freezer = nil
        sqlite3_exec(handle, "ROLLBACK", nil, nil, nil)
        sqlite3_close_v2(handle)
    }

    /// A read transaction, pinned now (a deferred transaction would see the database as of
    /// its first read): every read until it ends sees this moment.
    public func beginSnapshot() throws {
        try execute("BEGIN DEFERRED")
        try execute("SELECT count(*) FROM sqlite_schema")
    }
    public var supportsSavepoints: Bool { true }
    public func savepoint(_ step: SavepointStep) throws { try execute(step.sql) }
    public func commit() throws { try execute("COMMIT") }
    public func rollback() throws {
        if sqlite3_get_autocommit(db) == 0 { try execute("ROLLBACK") }
    }

    // MARK: DDL

    public func planTable(_ schema: TableSchema, named name: TableName) throws -> PlannedTable {
        try SQLiteDDL.plan(schema, named: name, qualified: qualified(name), on: self)
    }

    public func createTable(_ table: PlannedTable) throws {
        for sql in table.statements { try execute(sql) }
    }

    public func dropTable(_ name: TableName) throws {
        try execute("DROP TABLE IF EXISTS \(dialect.quote(qualified(name)))")
    }

    public func planObjects(
        _ schema: TableSchema, on table: TableName, indexesOn: TableName, replacing: TableName?, avoiding: Set<String>
    ) throws -> PlannedObjects {
        try SQLiteDDL.planObjects(schema, on: indexesOn, qualified: qualified(indexesOn), replacing: replacing, avoiding: avoiding, on: self)
    }

    public func createIndexes(_ objects: PlannedObjects) throws -> [SkippedObject] {
        for sql in objects.indexStatements { try execute(sql) }
        return []
    }

    /// SQLite declares foreign keys in CREATE TABLE; there is nothing to add afterwards.
    public func createForeignKeys(_ objects: PlannedObjects) throws -> [SkippedObject] {
        for sql in objects.foreignKeyStatements { try execute(sql) }
        return []
    }

    /// Names of every table, index, view and trigger of `schema`, less the indexes of `except`.
    func objectNames(in schema: String, except: TableName?) throws -> Set<String> {
        let st = try prepare(
            "SELECT name FROM \(dialect.quote(schema)).sqlite_schema WHERE NOT (type = 'index' AND tbl_name = ?1)")
        try st.bind([.text(except?.name ?? "")])
        return Set(try st.rows().compactMap { $0[0] })
    }

    public func swapTable(_ staging: TableName, into target: TableName) throws {
        // Inside the load's transaction: readers see the old table until COMMIT.
        try dropTable(target)
        try execute("ALTER TABLE \(dialect.quote(qualified(staging))) RENAME TO \(dialect.quote(target.name))")
    }

    public func resetSerial(_ table: TableName, schema: TableSchema) throws {
        // A rowid alias needs nothing (SQLite uses max(rowid) + 1). AUTOINCREMENT keeps its
        // counter in sqlite_sequence, which must never move backwards.
        let sqlSt = try prepare(
            "SELECT sql FROM \(dialect.quote(schemaName(table))).sqlite_schema WHERE type = 'table' AND name = ?1")
        try sqlSt.bind([.text(table.name)])
        let found = try sqlSt.step()
        let createSQL = found ? sqlSt.columnText(0) ?? "" : ""
        sqlSt.reset()
        guard found, Self.containsKeyword(createSQL, "AUTOINCREMENT") else { return }
        let seq = "\(dialect.quote(schemaName(table))).sqlite_sequence"
        let maxSt = try prepare("SELECT max(rowid) FROM \(dialect.quote(qualified(table)))")
        _ = try maxSt.step()
        let isNull = sqlite3_column_type(maxSt.handle, 0) == SQLITE_NULL
        let maxValue = maxSt.columnInt(0)
        maxSt.reset()
        guard !isNull else { return }
        let update = try prepare("UPDATE \(seq) SET seq = max(seq, ?2) WHERE name = ?1")
        try update.bind([.text(table.name), .int(maxValue)])
        _ = try update.step()
        if sqlite3_changes(db) == 0 {
            let insert = try prepare("INSERT INTO \(seq) (name, seq) VALUES (?1, ?2)")
            try insert.bind([.text(table.name), .int(maxValue)])
            _ = try insert.step()
        }
    }

    // MARK: Reading and writing

    public func reader(table: TableSchema, columns: [Column], keyRange: KeyRange?, batchSize: Int) throws -> any BatchReader {
        // SQLite's SQL computes the integer key hash, not MD5: other bucket filters are applied
        // by Ferry beside it, in process.
        guard let buckets = keyRange?.buckets, DigestSQL.condition(buckets, in: dialect) == nil, var plain = keyRange else {
            return try SQLiteReader(connection: self, table: table, columns: columns, keyRange: keyRange, batchSize: batchSize)
        }
        plain.buckets = nil
        plain.limit = nil  // a limit counts the rows that pass the filter
        let inner = try SQLiteReader(connection: self, table: table, columns: columns, keyRange: plain, batchSize: batchSize)
        return try BucketFilteringReader(inner, columns: columns, filter: buckets, table: table.name, limit: keyRange?.limit)
    }

    public func writer(into table: TableSchema, columns: [Column]) throws -> any BatchWriter {
        try SQLiteWriter(connection: self, table: table, columns: columns)
    }

    /// Through a temporary table: the keys already there are counted, then one
    /// `INSERT … SELECT … ON CONFLICT DO UPDATE … WHERE` some column IS NOT the new value
    /// rewrites only rows that differ (sqlite3_changes counts inserted + updated).
    public func mergeRows(into table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws -> MergeCounts {
        guard !key.isEmpty else { throw FerryError.noKey(table: table.name) }
        guard !rows.isEmpty else { return MergeCounts() }
        let q = { (s: String) in self.dialect.quote(s) }
        let target = dialect.quote(qualified(table.name))
        let scratch = "temp." + q(CopyEngine.internalPrefix + "merge")
        let list = columns.map { q($0.name) }.joined(separator: ", ")
        try execute("DROP TABLE IF EXISTS \(scratch)")
        try execute("CREATE TABLE \(scratch) AS SELECT \(list) FROM \(target) WHERE 0")
        defer { try? execute("DROP TABLE IF EXISTS \(scratch)") }
        // Values are encoded for the target's columns (the scratch copies their affinity).
        let w = try SQLiteWriter(
            connection: self, table: table, columns: columns,
            sql: "INSERT INTO \(scratch) (\(list)) VALUES (" + columns.map { _ in "?" }.joined(separator: ", ") + ")")
        try w.write(rows)
        let join = key.map { "m.\(q($0)) = t.\(q($0))" }.joined(separator: " AND ")
        let existing = try prepare("SELECT count(*) FROM \(scratch) m JOIN \(target) t ON \(join)")
        _ = try existing.step()
        let present = existing.columnInt(0)
        existing.reset()
        let others = columns.map(\.name).filter { !key.contains($0) }
        let conflict = " ON CONFLICT (" + key.map(q).joined(separator: ", ") + ") "
            + (others.isEmpty ? "DO NOTHING"
                : "DO UPDATE SET " + others.map { "\(q($0)) = excluded.\(q($0))" }.joined(separator: ", ")
                    + " WHERE " + others.map { "\(q($0)) IS NOT excluded.\(q($0))" }.joined(separator: " OR "))
        try execute("INSERT INTO \(target) (\(list)) SELECT \(list) FROM \(scratch) WHERE true" + conflict)
        let changed = Int64(sqlite3_changes(db))
        // Every key written must be a row of its own, stored byte for byte: a key column
        // declared COLLATE NOCASE (or RTRIM) merges 'a' into 'A' silently. The target's column
        // on the left of `=` gives its collation; COLLATE BINARY asks for the bytes.
        let merged = try prepare(
            "SELECT " + key.map { "quote(m.\(q($0)))" }.joined(separator: ", ") + ", " + key.map { "quote(t.\(q($0)))" }.joined(separator: ", ")
                + " FROM \(scratch) m JOIN \(target) t ON " + key.map { "t.\(q($0)) = m.\(q($0))" }.joined(separator: " AND ")
                + " WHERE NOT (" + key.map { "t.\(q($0)) = m.\(q($0)) COLLATE BINARY" }.joined(separator: " AND ") + ") LIMIT 1")
        if try merged.step() {
            func shown(_ from: Int) -> String {
                "(" + key.indices.map { "\(key[$0])=\(merged.columnText(Int32(from + $0)) ?? "NULL")" }.joined(separator: ", ") + ")"
            }
            let error = FerryError.keysMerged(table: table.name, source: shown(0), target: shown(key.count))
            merged.reset()
            throw error
        }
        merged.reset()
        let inserted = Int64(rows.count) - present
        let updated = changed - inserted
        return MergeCounts(inserted: inserted, updated: updated, unchanged: present - updated)
    }

    public func moveRows(from staging: TableName, into table: TableSchema, columns: [Column], key: [String]?) throws -> MergeCounts? {
        let q = { (s: String) in self.dialect.quote(s) }
        let target = dialect.quote(qualified(table.name))
        let from = dialect.quote(qualified(staging))
        let list = columns.map { q($0.name) }.joined(separator: ", ")
        // (A condition before ON CONFLICT: the parser would read ON as a join's.)
        let insert = "INSERT INTO \(target) (\(list)) SELECT \(list) FROM \(from) WHERE true"
        var counts: MergeCounts
        if let key, !key.isEmpty {
            // As `mergeRows`: only rows that differ are rewritten, and each kind is counted. (Two
            // keys the target's collation would merge were refused by the staging table's key.)
            func count(_ sql: String) throws -> Int64 {
                let s = try prepare(sql)
                _ = try s.step()
                defer { s.reset() }
                return s.columnInt(0)
            }
            let total = try count("SELECT count(*) FROM \(from)")
            let present = try count("SELECT count(*) FROM \(from) m JOIN \(target) t ON " + key.map { "m.\(q($0)) = t.\(q($0))" }.joined(separator: " AND "))
            let others = columns.map(\.name).filter { !key.contains($0) }
            try execute(insert + " ON CONFLICT (" + key.map(q).joined(separator: ", ") + ") "
                + (others.isEmpty ? "DO NOTHING"
                    : "DO UPDATE SET " + others.map { "\(q($0)) = excluded.\(q($0))" }.joined(separator: ", ")
                        + " WHERE " + others.map { "\(q($0)) IS NOT excluded.\(q($0))" }.joined(separator: " OR ")))
            let changed = Int64(sqlite3_changes(db))
            let inserted = total - present
            counts = MergeCounts(inserted: inserted, updated: changed - inserted, unchanged: present - (changed - inserted))
        } else {
            try execute(insert)
            counts = MergeCounts(inserted: Int64(sqlite3_changes(db)))
        }
        try dropTable(staging)
        return counts
    }

    public func upsertRows(into table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws -> Int {
        guard !key.isEmpty else { throw FerryError.noKey(table: table.name) }
        let q = { (s: String) in self.dialect.quote(s) }
        let others = columns.map(\.name).filter { !key.contains($0) }
        let sql = "INSERT INTO \(dialect.quote(qualified(table.name))) (" + columns.map { q($0.name) }.joined(separator: ", ")
            + ") VALUES (" + columns.map { _ in "?" }.joined(separator: ", ") + ")"
            + (dialect.upsertClause(key: key, others: others) ?? "")
        let w = try SQLiteWriter(connection: self, table: table, columns: columns, sql: sql)
        try w.write(rows)
        return rows.count
    }

    public func deleteRows(from table: TableSchema, key: [Column], keys: RowBatch) throws -> Int {
        let sql = "DELETE FROM \(dialect.quote(qualified(table.name))) WHERE "
            + key.map { "\(dialect.quote($0.name)) = ?" }.joined(separator: " AND ")
        let w = try SQLiteWriter(connection: self, table: table, columns: key, sql: sql)
        try w.write(keys)
        return w.changed
    }
}
