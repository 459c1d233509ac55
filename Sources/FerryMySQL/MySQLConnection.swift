import CMariaDB
import FerryCore
import Foundation

/// A result set (MYSQL_RES), owned: freed in one place, when released — after the rest of a
/// streamed result is fetched, so the connection takes the next command. Not Sendable: it
/// belongs to the connection's thread.
final class MySQLResult {
    let handle: UnsafeMutablePointer<MYSQL_RES>
    /// Rows that arrive as the server sends them (`mysql_use_result`) must be read to the end
    /// before the handle is freed.
    private let streamed: Bool

    /// The whole result of the last statement, held by the client (`mysql_store_result`); nil
    /// when the statement returned none (or on error: check `mysql_field_count`).
    init?(storing mysql: UnsafeMutablePointer<MYSQL>) {
        guard let h = mysql_store_result(mysql) else { return nil }
        handle = h
        streamed = false
    }

    /// The result of the last statement, streamed row by row (`mysql_use_result`).
    init?(streaming mysql: UnsafeMutablePointer<MYSQL>) {
        guard let h = mysql_use_result(mysql) else { return nil }
        handle = h
        streamed = true
    }

    deinit {
        if streamed { while mysql_fetch_row(handle) != nil {} }
        mysql_free_result(handle)
    }

    var fieldCount: Int { Int(mysql_num_fields(handle)) }
    func fetchRow() -> MYSQL_ROW? { mysql_fetch_row(handle) }
    /// The lengths of the row last fetched.
    func lengths() -> UnsafeMutablePointer<UInt>? { mysql_fetch_lengths(handle) }
}

/// One libmariadb connection. The session is set up so results are exact and predictable:
/// utf8mb4 with a binary collation, UTC, a strict sql_mode, LOCAL INFILE enabled on the client.
public final class MySQLConnection: Connection {
    public let endpoint: Endpoint
    public let dialect: any Dialect = MySQLDialect()
    var myDialect: MySQLDialect { MySQLDialect() }
    let mysql: UnsafeMutablePointer<MYSQL>
    /// The database the URL names (the default schema).
    public let database: String
    public var defaultSchema: String { database }
    /// `--zero-dates null`: read 0000-00-00 as NULL instead of failing.
    let zeroDatesAsNull: Bool
    /// Range digests computed by Ferry from the rows as they are read, in PostgreSQL's row hash
    /// (`?digests=read`, the default for a server on this machine), or by MariaDB's SQL in MD5
    /// (`?digests=sql`, the default for another host, so that no table crosses the network).
    let digestsByReadingRows: Bool
    private var closed = false
    private var inTransaction = false
    /// Tables created since this transaction began (`MySQLSplitWriter` loads only those).
    private var createdInTransaction = Set<TableName>()
    /// `?load-connections=N` (1–8, default 2): connections that load a table created in the
    /// copy's transaction (`MySQLSplitWriter`).
    let loadConnections: Int

    /// URL query parameters that are Ferry's or select client options (not sent anywhere else).
    static let sessionSQL = [
        "SET NAMES utf8mb4 COLLATE utf8mb4_bin",
        "SET time_zone = '+00:00'",
        "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION'",
    ]

    /// `readTimeout`: seconds a read from the server may wait (a binlog stream's connection).
    public init(endpoint: Endpoint, role: ConnectionRole, readTimeout: UInt32? = nil) throws {
        self.endpoint = endpoint
        let shown = endpoint.redacted
        guard !endpoint.path.isEmpty else {
            throw FerryError.invalidEndpoint(text: shown, reason: "name the database after the host: mysql://user@host:3306/DATABASE")
        }
        database = endpoint.path
        zeroDatesAsNull = (endpoint.options["zero-dates"] ?? endpoint.parameter("zero-dates")) == "null"
        if let text = endpoint.parameter("load-connections") {
            guard let n = Int(text), (1...8).contains(n) else {
                throw FerryError.invalidEndpoint(text: shown, reason: "load-connections=\(text) is not a number from 1 to 8 (connections that load one new table at once)")
            }
            loadConnections = n
        } else {
            loadConnections = 2
        }
        mysql_server_init(0, nil, nil)
        guard let m = mysql_init(nil) else {
            throw FerryError.connectionFailed(endpoint: shown, reason: "libmariadb could not allocate a connection")
        }
        var on: UInt32 = 1
        var timeout: UInt32 = 10
        mysql_options(m, MYSQL_OPT_LOCAL_INFILE, &on)
        mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &timeout)
        // `--timeout`: a read or write that waits longer fails (libmariadb's own timeouts).
        let limit = endpoint.options["timeout"].flatMap(Double.init).map { UInt32(max(1, min(Double(UInt32.max), $0.rounded(.up)))) }
        if var read = readTimeout ?? limit { mysql_options(m, MYSQL_OPT_READ_TIMEOUT, &read) }
        if var write = limit { mysql_options(m, MYSQL_OPT_WRITE_TIMEOUT, &write) }
        if let limit, limit < timeout { timeout = limit; mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &timeout) }
        mysql_options(m, MYSQL_SET_CHARSET_NAME, "utf8mb4")
        let sslMode = (endpoint.parameter("ssl-mode") ?? endpoint.parameter("sslmode"))?.uppercased()
        if sslMode == "REQUIRED" || sslMode == "VERIFY_CA" || sslMode == "VERIFY_IDENTITY" || sslMode == "REQUIRE" {
            var enforce: Int8 = 1
            mysql_options(m, MYSQL_OPT_SSL_ENFORCE, &enforce)
        }
        if sslMode == "VERIFY_IDENTITY" || sslMode == "VERIFY_CA" {
            var verify: Int8 = 1
            mysql_options(m, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify)
        }
        let ca = endpoint.parameter("ssl-ca"), cert = endpoint.parameter("ssl-cert"), key = endpoint.parameter("ssl-key")
        if ca != nil || cert != nil || key != nil { mysql_ssl_set(m, key, cert, ca, nil, nil) }
        // The password: the URL, else MYSQL_PWD.
        let password = endpoint.password ?? ProcessInfo.processInfo.environment["MYSQL_PWD"]
        let socket = endpoint.parameter("socket")
        let host = socket == nil ? (endpoint.host ?? "127.0.0.1") : (endpoint.host ?? "localhost")
        digestsByReadingRows = try endpoint.digestsBesideFerry(onThisMachine: socket != nil || Endpoint.isLoopback(host), engine: "MariaDB")
        let ok = mysql_real_connect(
            m, host, endpoint.user ?? ProcessInfo.processInfo.environment["USER"], password, database,
            UInt32(endpoint.port ?? 3306), socket, UInt(CLIENT_LOCAL_FILES))
        if ok == nil {
            let code = mysql_errno(m)
            let message = String(cString: mysql_error(m))
            mysql_close(m)
            throw FerryError.connectionFailed(endpoint: shown, reason: Self.explain(code: code, message: message, endpoint: endpoint))
        }
        mysql = m
        for sql in Self.sessionSQL { try execute(sql) }
        if role == .source { try execute("SET SESSION TRANSACTION READ ONLY") }
        // Tables load in any order (and in parallel): foreign keys are checked by the source, as
        // mysqldump's own loads do.
        if role == .target { try execute("SET SESSION foreign_key_checks = 0") }
    }

    static func explain(code: UInt32, message: String, endpoint: Endpoint) -> String {
        switch code {
        case 1045: return "access denied for user \(endpoint.user ?? "(default)"): check the user and password (URL, MYSQL_PWD)"
        case 1049: return "unknown database '\(endpoint.path)': create it first or check the database name in the URL"
        case 2002, 2003, 2005, 2006, 2013:
            return "server unreachable (\(message)); check host and port, and that MySQL/MariaDB is running"
        case 1044: return "\(message); grant the user access to the database"
        default: return "\(message) (error \(code))"
        }
    }

    deinit { close() }

    /// The server's port, data directory and host name, and the database.
    public func databaseIdentity() throws -> String? {
        try query("SELECT CONCAT(@@port, '/', @@datadir, '/', @@hostname, '/', IFNULL(DATABASE(), ''))").first?.first ?? nil
    }

    public func close() {
        guard !closed else { return }
        closed = true
        settle()
        loadInFlight = nil
        mysql_close(mysql)
    }

    func error(sql: String?) -> MySQLError {
        MySQLError(code: mysql_errno(mysql), sqlState: String(cString: mysql_sqlstate(mysql)),
                   message: String(cString: mysql_error(mysql)), sql: sql, endpoint: endpoint.redacted)
    }

    /// A LOAD DATA that a writer runs on a thread of its own while it encodes the next rows.
    /// Every other use of the connection waits for it first (`settle`), so the client library
    /// is only ever used by one thread at a time.
    var loadInFlight: MySQLBackgroundLoad?

    /// Waits until no LOAD DATA runs on another thread (its outcome stays with its writer).
    func settle() { loadInFlight?.waitUnlessCalledFromIt() }

    /// Runs one statement; results, if any, are discarded.
    func execute(_ sql: String) throws {
        settle()
        let rc = sql.withCString { mysql_real_query(mysql, $0, UInt(strlen($0))) }
        guard rc == 0 else { throw error(sql: sql) }
        _ = MySQLResult(storing: mysql)
    }

    /// Runs a query and returns every row as text (NULL as nil). For catalog queries.
    func query(_ sql: String) throws -> [[String?]] {
        var rows: [[String?]] = []
        try forEachRow(sql) { rows.append($0) }
        return rows
    }

    /// Runs a query and hands its rows to `body` one at a time (as text, NULL as nil).
    func forEachRow(_ sql: String, _ body: ([String?]) throws -> Void) throws {
        settle()
        let rc = sql.withCString { mysql_real_query(mysql, $0, UInt(strlen($0))) }
        guard rc == 0 else { throw error(sql: sql) }
        guard let result = MySQLResult(storing: mysql) else {
            if mysql_field_count(mysql) == 0 { return }
            throw error(sql: sql)
        }
        let n = result.fieldCount
        while let row = result.fetchRow() {
            let lengths = result.lengths()
            try body((0..<n).map { i in
                guard let p = row[i], let lengths else { return nil }
                return String(decoding: UnsafeRawBufferPointer(start: p, count: Int(lengths[i])), as: UTF8.self)
            })
        }
    }

    /// A string literal (quoted and escaped) for catalog queries.
    func lit(_ s: String) -> String { myDialect.literal(s) }

    // MARK: Transactions

    public func begin() throws {
        try execute("START TRANSACTION")
        inTransaction = true
        createdInTransaction = []
    }
    public func beginSnapshot() throws {
        try execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        inTransaction = true
    }
    /// `FLUSH TABLES WITH READ LOCK` (needs the RELOAD privilege; waits at most 30 s for running
    /// statements): while it is held, snapshots begun on other connections see one moment.
    public func freezeWrites() throws -> Bool {
        do {
            try execute("SET SESSION lock_wait_timeout = 30")
            try execute("FLUSH TABLES WITH READ LOCK")
            return true
        } catch let e as FerryError {
            // ER_SPECIFIC_ACCESS_DENIED_ERROR (1227), ER_DBACCESS_DENIED_ERROR (1044): not allowed.
            if "\(e)".contains("RELOAD") || "\(e)".contains("denied") { return false }
            throw e
        }
    }
    public func unfreezeWrites() throws { try execute("UNLOCK TABLES") }
    /// InnoDB checks each statement at once (it cannot defer): keys are turned on only to repeat
    /// cascades the source's stream leaves out.
    public func prepareToApplyChanges(repeatingCascades: Bool) throws {
        if repeatingCascades { try execute("SET SESSION foreign_key_checks = 1") }
    }
    /// The dialect for digest SQL over `table`: which of its columns already hold UTF-8.
    private func digestDialect(_ table: TableSchema) throws -> MySQLDialect {
        var d = myDialect
        let schema = schemaOf(table.name)
        d.utf8Columns = Set(try query(
            """
            SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = \(lit(schema)) AND TABLE_NAME = \(lit(table.name.name))
            AND CHARACTER_SET_NAME IN ('utf8mb4', 'utf8mb3', 'utf8', 'ascii')
            """).compactMap { $0.first ?? nil })
        return d
    }

    /// For a key of one integer column, in SQL (other keys: the mirror reads the buckets whole).
    public func listsKeyedRowHashes(key: [Column], hash: KeyHash) -> Bool { hash == .integer && key.count == 1 }

    /// For a server on this machine (`digestsByReadingRows`), PostgreSQL's row hash
    /// (`RowHash.lookup3`), which MySQL and MariaDB have no SQL for, computed in Ferry from the
    /// rows as the reader streams them: 1,000,000 bench_orders rows digested in ~6 s by MariaDB's
    /// `MD5`, `GROUP BY` and `SUM` (a `GROUP BY` alone into 2^17 buckets takes 1.5 s), against
    /// one read of the rows (~2 s) — but every row is read, which over a network is what a mirror
    /// exists to avoid. MD5 of the row text in SQL otherwise, and with sides that know only it
    /// (the XML protocol).
    public var rowHashes: [RowHash] { digestsByReadingRows ? [.lookup3, .md5] : [.md5] }
    public func digestsByReading(_ request: DigestRequest) -> Bool { request.rowHash == .lookup3 }

    /// Where its digests are read beside Ferry, a mirror from it reads its rows once, in key order.
    public var streamsMirrorRows: Bool { digestsByReadingRows }

    public func keyedRowHashes(_ table: TableSchema, request: DigestRequest, each: (_ key: Int64, _ hash: Int64) throws -> Void) throws {
        if request.rowHash == .lookup3 { return try DigestComputer.keyedRowHashes(self, table: table, request: request, readAhead: true, each: each) }
        guard let sql = DigestSQL.keyedRowHashQuery(table.name, request, try digestDialect(table)) else {
            return try DigestComputer.keyedRowHashes(self, table: table, request: request, readAhead: true, each: each)
        }
        try forEachRow(sql) { r in
            let (k, h) = try DigestSQL.keyedRowHash(r, table: table.name)
            try each(k, h)
        }
    }

    public func bucketDigests(_ table: TableSchema, request: DigestRequest) throws -> [BucketDigest] {
        if request.rowHash == .lookup3 { return try DigestComputer.digests(self, table: table, request: request, readAhead: true) }
        let d = try digestDialect(table)
        // The GROUP BY's temporary table holds a row per bucket; past tmp_table_size (16 MiB by
        // default) MariaDB moves it to disk midway: 2^18 buckets of 1,000,000 bench_orders rows
        // took 9.5 s instead of 6.2 s. Raised for this query (never lowered), then put back.
        let limits = try query("SELECT @@SESSION.tmp_table_size, @@SESSION.max_heap_table_size").first ?? []
        let room = min(request.modulus, 1 << 21) * 128
        let raise = "SET SESSION tmp_table_size = GREATEST(@@SESSION.tmp_table_size, \(room)), max_heap_table_size = GREATEST(@@SESSION.max_heap_table_size, \(room))"
        try execute(raise)
        defer {
            if limits.count == 2, let t = limits[0].flatMap({ Int64($0) }), let h = limits[1].flatMap({ Int64($0) }) {
                try? execute("SET SESSION tmp_table_size = \(t), max_heap_table_size = \(h)")
            }
        }
        var out: [BucketDigest] = []
        out.reserveCapacity(request.expectedBuckets)
        try forEachRow(DigestSQL.query(table.name, request, d)) { out.append(try DigestSQL.digest($0, table: table.name)) }
        return out
    }
    public var supportsSavepoints: Bool { true }
    /// The last call lost the server (gone away, lost during a query, a broken pipe or socket).
    public var isLost: Bool { closed || [2006, 2013, 2026, 2055].contains(mysql_errno(mysql)) }
    public func savepoint(_ step: SavepointStep) throws { try execute(step.sql) }
    public func commit() throws {
        try execute("COMMIT")
        inTransaction = false
        createdInTransaction = []
    }
    public func rollback() throws {
        inTransaction = false
        createdInTransaction = []
        try execute("ROLLBACK")
    }

    /// Runs DDL, which commits implicitly in MySQL, and reopens the caller's transaction.
    func ddl(_ sql: String) throws {
        try execute(sql)
        if inTransaction { try execute("START TRANSACTION") }
    }

    // MARK: DDL

    public func planTable(_ schema: TableSchema, named name: TableName) throws -> PlannedTable {
        try MySQLDDL.plan(schema, named: name, on: self)
    }

    public func createTable(_ table: PlannedTable) throws {
        for sql in table.statements { try ddl(sql) }
        if inTransaction { createdInTransaction.insert(created(table.schema.name)) }
    }

    /// True when concurrent inserts into a table with an AUTO_INCREMENT column do not take
    /// turns (`innodb_autoinc_lock_mode = 2`); asked once.
    private lazy var autoIncrementInterleaved: Bool = ((try? query("SELECT @@innodb_autoinc_lock_mode"))?.first?.first ?? nil) == "2"

    /// `name` with its schema spelled out, as the set of tables created compares them.
    private func created(_ name: TableName) -> TableName { TableName(schema: schemaOf(name), name.name) }

    public func dropTable(_ name: TableName) throws {
        try ddl("DROP TABLE IF EXISTS \(dialect.quote(name))")
    }

    public func planObjects(
        _ schema: TableSchema, on table: TableName, indexesOn: TableName, replacing: TableName?, avoiding: Set<String>
    ) throws -> PlannedObjects {
        try MySQLDDL.planObjects(schema, on: table, indexesOn: indexesOn, replacing: replacing, avoiding: avoiding, on: self)
    }

    public func createIndexes(_ objects: PlannedObjects) throws -> [SkippedObject] {
        for sql in objects.indexStatements { try ddl(sql) }
        return []
    }

    /// Checks each key against the referenced rows first: loads run with foreign_key_checks
    /// off, and InnoDB adds a key without checking the rows then (checking would rebuild the table).
    public func createForeignKeys(_ objects: PlannedObjects) throws -> [SkippedObject] {
        for (fk, sql) in zip(objects.foreignKeys, objects.foreignKeyStatements) {
            try checkReferences(objects.table, fk)
            try ddl(sql)
        }
        return []
    }

    /// Fails, naming the first row, when a row of `table` references no row through `fk`.
    func checkReferences(_ table: TableName, _ fk: ForeignKey) throws {
        let q = { (s: String) in self.dialect.quote(s) }
        let join = zip(fk.columns, fk.referencedColumns).map { "p.\(q($1)) = c.\(q($0))" }.joined(separator: " AND ")
        let sql = "SELECT " + fk.columns.map { "c." + q($0) }.joined(separator: ", ") + " FROM \(dialect.quote(table)) c WHERE "
            + fk.columns.map { "c.\(q($0)) IS NOT NULL" }.joined(separator: " AND ")
            + " AND NOT EXISTS (SELECT 1 FROM \(dialect.quote(fk.referencedTable)) p WHERE \(join)) LIMIT 1"
        if let orphan = try query(sql).first {
            let key = "(" + zip(fk.columns, orphan).map { "\($0)=\($1 ?? "NULL")" }.joined(separator: ", ") + ")"
            throw FerryError.invalidValue(
                table: table, column: fk.columns.joined(separator: ", "), key: key,
                message: "foreign key \(fk.name ?? fk.summary): no row of \(fk.referencedTable) has this key")
        }
    }

    /// Foreign key names of the database (unique per schema in InnoDB), less those of `except`.
    func foreignKeyNames(except: TableName?) throws -> Set<String> {
        Set(try query(
            """
            SELECT CONSTRAINT_NAME FROM information_schema.REFERENTIAL_CONSTRAINTS
            WHERE CONSTRAINT_SCHEMA = \(lit(database)) AND TABLE_NAME <> \(lit(except?.name ?? ""))
            """).compactMap { $0[0] })
    }

    public func swapTable(_ staging: TableName, into target: TableName) throws {
        // RENAME TABLE swaps atomically: readers see the old table or the new one.
        let q = { (t: TableName) in self.dialect.quote(t) }
        if try tableExists(target) {
            // RENAME would carry other tables' foreign keys onto the old table: take them off
            // first, and put them back on the new one (InnoDB checks them against its rows).
            var children: [(TableName, ForeignKey)] = []
            for r in try query(
                """
                SELECT DISTINCT TABLE_NAME FROM information_schema.REFERENTIAL_CONSTRAINTS
                WHERE CONSTRAINT_SCHEMA = \(lit(schemaOf(target))) AND REFERENCED_TABLE_NAME = \(lit(target.name))
                  AND TABLE_NAME <> \(lit(target.name))
                """)
            {
                let child = TableName(schema: target.schema, r[0] ?? "")
                for fk in try foreignKeys(child) where fk.referencedTable.name == target.name {
                    // Checked against the new rows before anything changes (MySQL's DDL commits as it goes).
                    var onNew = fk
                    onNew.referencedTable = staging
                    try checkReferences(child, onNew)
                    children.append((child, fk))
                }
            }
            for (child, fk) in children {
                try ddl("ALTER TABLE \(q(child)) DROP FOREIGN KEY \(dialect.quote(fk.name ?? ""))")
            }
            let old = TableName(schema: target.schema, CopyEngine.internalPrefix + "old_" + target.name)
            try ddl("DROP TABLE IF EXISTS \(q(old))")
            try ddl("RENAME TABLE \(q(target)) TO \(q(old)), \(q(staging)) TO \(q(target))")
            try ddl("DROP TABLE \(q(old))")
            for (child, fk) in children {
                var again = fk
                again.referencedTable = target
                try ddl(SchemaObjectSQL.addForeignKey(again, to: child, dialect: dialect))
            }
        } else {
            try ddl("RENAME TABLE \(q(staging)) TO \(q(target))")
        }
    }

    public func resetSerial(_ table: TableName, schema: TableSchema) throws {
        // InnoDB moves its counter past explicit values already; make sure of it (never backwards).
        for c in schema.columns where c.isSerial {
            let max = try query("SELECT max(\(dialect.quote(c.name))) FROM \(dialect.quote(table))").first?.first ?? nil
            guard let m = max.flatMap({ Int64($0) }), m < Int64.max else { continue }
            let current = try query(
                "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = \(lit(table.schema ?? database)) AND TABLE_NAME = \(lit(table.name))")
            let have = current.first?.first.flatMap { $0.flatMap { Int64($0) } } ?? 0
            if have <= m { try ddl("ALTER TABLE \(dialect.quote(table)) AUTO_INCREMENT = \(m + 1)") }
        }
    }

    // MARK: Reading and writing

    public func reader(table: TableSchema, columns: [Column], keyRange: KeyRange?, batchSize: Int) throws -> any BatchReader {
        try MySQLReader(connection: self, table: table, columns: columns, keyRange: keyRange, batchSize: batchSize)
    }

    public func writer(into table: TableSchema, columns: [Column]) throws -> any BatchWriter {
        // A LOAD DATA into a table with an AUTO_INCREMENT column holds the table's AUTO-INC lock
        // to its end unless innodb_autoinc_lock_mode is 2 (MySQL 8's default; MariaDB's is 1):
        // two would take turns (SQLite -> MariaDB, 5,000,000 rows: 8.5-8.9 s either way).
        guard loadConnections > 1, createdInTransaction.contains(created(table.name)),
            !table.columns.contains(where: \.isSerial) || autoIncrementInterleaved
        else {
            return try MySQLWriter(connection: self, table: table, columns: columns)
        }
        let endpoint = self.endpoint
        return try MySQLSplitWriter(
            main: self, connections: loadConnections, open: { try MySQLConnection(endpoint: endpoint, role: .target) },
            make: { try MySQLWriter(connection: $0, table: table, columns: columns) })
    }

    /// Counts the keys already there, then one `INSERT … ON DUPLICATE KEY UPDATE`: MySQL
    /// leaves a row whose values are all equal untouched and reports affected rows as 1 per
    /// insert and 2 per update (CLIENT_FOUND_ROWS is off), which gives the three counts.
    /// ON DUPLICATE KEY UPDATE fires on any unique key, not only `key`: a row with a new key and
    /// another row's value in a second unique column would rewrite that other row and never
    /// arrive. So every key written is counted again after: one missing is refused (named),
    /// and the caller's transaction rolled back — never a row silently rewritten.
    public func mergeRows(into table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws -> MergeCounts {
        guard !key.isEmpty else { throw FerryError.noKey(table: table.name) }
        guard !rows.isEmpty else { return MergeCounts() }
        let keyIndexes = key.compactMap { k in columns.firstIndex { $0.name == k } }
        guard keyIndexes.count == key.count else { throw FerryError.noKey(table: table.name) }
        let present = try countKeys(of: table, key: key, keyIndexes: keyIndexes, columns: columns, rows: rows)
        let affected = try upsert(into: table, columns: columns, key: key, rows: rows)
        try checkEveryKeyLanded(table, key: key, keyIndexes: keyIndexes, columns: columns, rows: rows)
        try checkKeysKeptApart(table, columns: columns, key: key, keyIndexes: keyIndexes, rows: rows)
        let inserted = Int64(rows.count) - present
        let updated = (Int64(affected) - inserted) / 2
        return MergeCounts(inserted: inserted, updated: updated, unchanged: present - updated)
    }

    /// Rows of `table` whose `key` is one of `rows`' keys, counted 1,000 keys a statement (well
    /// under max_allowed_packet).
    private func countKeys(of table: TableSchema, key: [String], keyIndexes: [Int], columns: [Column], rows: RowBatch) throws -> Int64 {
        let types = columns.map(\.logicalType)
        var present: Int64 = 0
        var start = 0
        while start < rows.count {
            let end = min(start + 1_000, rows.count)
            let tuples = (start..<end).map { r -> String in
                let row = rows.row(r, types: types)
                return "(" + MySQLValueCodec.literals(keyIndexes.map { row[$0] }, self) + ")"
            }
            let sql = "SELECT count(*) FROM \(dialect.quote(table.name)) WHERE (" + key.map { dialect.quote($0) }.joined(separator: ", ") + ") IN ("
                + tuples.joined(separator: ", ") + ")"
            present += try query(sql).first?.first.flatMap { $0.flatMap { Int64($0) } } ?? 0
            start = end
        }
        return present
    }

    /// After an upsert every key written must be a row of the table. One that is not matched
    /// another row on a second unique key, and ON DUPLICATE KEY UPDATE rewrote that row instead:
    /// refused, naming the first such row (`--on-error reject` sets it aside; else the caller's
    /// transaction rolls back).
    private func checkEveryKeyLanded(_ table: TableSchema, key: [String], keyIndexes: [Int], columns: [Column], rows: RowBatch) throws {
        let landed = try countKeys(of: table, key: key, keyIndexes: keyIndexes, columns: columns, rows: rows)
        guard landed < rows.count else { return }
        // Keys counted once (a batch of changes may hold a key twice).
        let types = columns.map(\.logicalType)
        let distinct = Set((0..<rows.count).map { r in keyIndexes.map { rows.row(r, types: types)[$0].canonicalText ?? "\u{0}NULL" } }).count
        guard landed < distinct else { return }
        try refuseRedirected(table, key: key, keyIndexes: keyIndexes, columns: columns, rows: rows)
    }

    private func refuseRedirected(_ table: TableSchema, key: [String], keyIndexes: [Int], columns: [Column], rows: RowBatch) throws {
        let types = columns.map(\.logicalType)
        for r in 0..<rows.count {
            let row = rows.row(r, types: types)
            let condition = zip(key, keyIndexes).map { k, i in "\(dialect.quote(k)) = " + MySQLValueCodec.literals([row[i]], self) }.joined(separator: " AND ")
            guard try query("SELECT 1 FROM \(dialect.quote(table.name)) WHERE \(condition) LIMIT 1").isEmpty else { continue }
            let shown = zip(key, keyIndexes).map { k, i in "\(k)=\(row[i].canonicalText ?? "NULL")" }.joined(separator: ", ")
            throw BatchRowError(row: r, error: .invalidValue(
                table: table.name, column: nil, key: shown,
                message: "duplicate value for a unique key other than (\(key.joined(separator: ", "))): the row (\(shown)) matches another row there, which MySQL's upsert would rewrite in its place"))
        }
        throw FerryError.copyFailed(table: table.name, endpoint: endpoint.redacted, reason: "after the upsert fewer rows hold the keys written than were written; nothing was applied")
    }

    /// After an upsert: every key written must be a row of its own, stored byte for byte. A
    /// text key under a case-insensitive (or PAD SPACE) collation merges 'a' into 'A' silently;
    /// that is found here, both keys named, and the caller's transaction rolled back.
    private func checkKeysKeptApart(_ table: TableSchema, columns: [Column], key: [String], keyIndexes: [Int], rows: RowBatch) throws {
        let textual = keyIndexes.map { i -> Bool in
            switch columns[i].logicalType {
            case .text, .uuid, .enumeration, .json: return true
            default: return false
            }
        }
        guard textual.contains(true) else { return }
        let types = columns.map(\.logicalType)
        let keyList = "(" + key.map { dialect.quote($0) }.joined(separator: ", ") + ")"
        // MariaDB's UUID type casts to its 16 stored bytes: compare its text form instead.
        let uuid = keyIndexes.map { i -> Bool in if case .uuid = columns[i].logicalType { return true } else { return false } }
        let exactList = "(" + zip(zip(key, textual), uuid).map { kt, u in
            let (k, t) = kt
            return u ? "CAST(CAST(\(dialect.quote(k)) AS CHAR) AS BINARY)" : t ? "CAST(\(dialect.quote(k)) AS BINARY)" : dialect.quote(k)
        }.joined(separator: ", ") + ")"
        /// Row `r`'s key as a tuple of literals, and as compared byte for byte.
        func tuples(_ r: Int) -> (plain: String, exact: String) {
            let row = rows.row(r, types: types)
            let literals = keyIndexes.map { MySQLValueCodec.literals([row[$0]], self) }
            let exact = zip(literals, textual).map { l, t in t ? "CAST(\(l) AS BINARY)" : l }
            return ("(" + literals.joined(separator: ", ") + ")", "(" + exact.joined(separator: ", ") + ")")
        }
        func shown(_ values: [String?]) -> String {
            "(" + zip(key, values).map { "\($0)=\($1.map { "'\($0)'" } ?? "NULL")" }.joined(separator: ", ") + ")"
        }
        var start = 0
        while start < rows.count {
            let end = min(start + 1_000, rows.count)
            let slice = start..<end
            let keys = slice.map(tuples)
            let found = try query(
                "SELECT \(key.map { dialect.quote($0) }.joined(separator: ", ")), \(exactList) IN (" + keys.map(\.exact).joined(separator: ", ")
                    + ") FROM \(dialect.quote(table.name)) WHERE \(keyList) IN (" + keys.map(\.plain).joined(separator: ", ") + ")")
            if found.count != slice.count || found.contains(where: { $0.last.flatMap { $0 } != "1" }) {
                // Which source key landed on which row: asked key by key (a failure, so rare).
                for (r, k) in zip(slice, keys) {
                    let match = try query(
                        "SELECT \(key.map { dialect.quote($0) }.joined(separator: ", ")), \(exactList) = \(k.exact) FROM \(dialect.quote(table.name)) WHERE \(keyList) = \(k.plain) LIMIT 1")
                    if let m = match.first, m.last.flatMap({ $0 }) != "1" {
                        let row = rows.row(r, types: types)
                        throw FerryError.keysMerged(
                            table: table.name, source: shown(keyIndexes.map { row[$0].canonicalText }), target: shown(Array(m.dropLast())))
                    }
                }
                throw FerryError.copyFailed(
                    table: table.name, endpoint: endpoint.redacted,
                    reason: "\(slice.count) keys were written but \(found.count) rows hold them: the target's key comparison merges keys the source keeps apart (a case-insensitive collation?)")
            }
            start = end
        }
    }

    public func moveRows(from staging: TableName, into table: TableSchema, columns: [Column], key: [String]?) throws -> MergeCounts? {
        let q = { (s: String) in self.dialect.quote(s) }
        let target = dialect.quote(table.name)
        let from = dialect.quote(staging)
        let list = columns.map { q($0.name) }.joined(separator: ", ")
        var sql = "INSERT INTO \(target) (\(list)) SELECT \(list) FROM \(from)"
        var present: Int64 = 0
        var total: Int64 = 0
        if let key, !key.isEmpty {
            // Counted as `mergeRows` counts. (Two keys the target's collation would merge were
            // refused by the staging table's key, which has the same collation.)
            func count(_ sql: String) throws -> Int64 { try query(sql).first?.first.flatMap { $0.flatMap { Int64($0) } } ?? 0 }
            total = try count("SELECT count(*) FROM \(from)")
            present = try count("SELECT count(*) FROM \(from) m JOIN \(target) t ON " + key.map { "m.\(q($0)) = t.\(q($0))" }.joined(separator: " AND "))
            sql += dialect.upsertClause(key: key, others: columns.map(\.name).filter { !key.contains($0) }) ?? ""
        }
        try execute(sql)
        // An upsert's affected rows: 1 for a row inserted, 2 for one updated, 0 for one left equal.
        let affected = Int64(mysql_affected_rows(mysql))
        // DROP TABLE commits: the rows, and what the transaction wrote before them, at once.
        try dropTable(staging)
        guard key?.isEmpty == false else { return MergeCounts(inserted: affected) }
        let inserted = total - present
        let updated = (affected - inserted) / 2
        return MergeCounts(inserted: inserted, updated: updated, unchanged: present - updated)
    }

    public func upsertRows(into table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws -> Int {
        guard !key.isEmpty else { throw FerryError.noKey(table: table.name) }
        guard !rows.isEmpty else { return 0 }
        _ = try upsert(into: table, columns: columns, key: key, rows: rows)
        let keyIndexes = key.compactMap { k in columns.firstIndex { $0.name == k } }
        guard keyIndexes.count == key.count else { throw FerryError.noKey(table: table.name) }
        try checkEveryKeyLanded(table, key: key, keyIndexes: keyIndexes, columns: columns, rows: rows)
        return rows.count
    }

    /// `INSERT … VALUES … ON DUPLICATE KEY UPDATE` of `rows`; returns MySQL's affected rows.
    private func upsert(into table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws -> Int {
        let q = { (s: String) in self.dialect.quote(s) }
        let others = columns.map(\.name).filter { !key.contains($0) }
        let w = try MySQLWriter(
            connection: self, table: table, columns: columns,
            prefix: "INSERT INTO \(dialect.quote(table.name)) (" + columns.map { q($0.name) }.joined(separator: ", ") + ") VALUES ",
            suffix: dialect.upsertClause(key: key, others: others) ?? "")
        try w.write(rows)
        return w.affected
    }

    public func deleteRows(from table: TableSchema, key: [Column], keys: RowBatch) throws -> Int {
        guard !keys.isEmpty else { return 0 }
        let w = try MySQLWriter(
            connection: self, table: table, columns: key,
            prefix: "DELETE FROM \(dialect.quote(table.name)) WHERE (" + key.map { dialect.quote($0.name) }.joined(separator: ", ") + ") IN (",
            suffix: ")")
        try w.write(keys)
        return w.affected
    }
}

extension MySQLConnection {
    /// Runs SQL text from Ferry's own code or tests (never from a user request).
    public func run(_ sql: String) throws { try execute(sql) }
    public func addColumn(_ column: Column, default value: ColumnDefault?, to table: TableName) throws {
        try execute(SchemaObjectSQL.addColumn(column, default: value, to: table, dialect: dialect))
    }
    /// Runs a query and returns its rows as text: for tests and tools.
    public func rows(_ sql: String) throws -> [[String?]] { try query(sql) }
}
