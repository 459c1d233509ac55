import CLibPQ
import FerryCore
import Foundation

/// A libpq result (PGresult), owned: cleared in one place, when released. Every result Ferry
/// receives is wrapped (`exec`, `query`, `nextResult`), so none is cleared twice or leaked on an
/// error path. Not Sendable: it belongs to the connection's thread.
final class PostgresResult {
    let handle: OpaquePointer
    init(_ handle: OpaquePointer) { self.handle = handle }
    deinit { PQclear(handle) }

    var status: ExecStatusType { PQresultStatus(handle) }
    var count: Int { Int(PQntuples(handle)) }
    /// The row count of the command tag (`COPY 120000`, `DELETE 3`), when it has one.
    var commandRows: Int? { PQcmdTuples(handle).flatMap { Int(String(cString: $0)) } }

    func value(_ row: Int, _ column: Int) -> String? {
        if PQgetisnull(handle, Int32(row), Int32(column)) == 1 { return nil }
        guard let p = PQgetvalue(handle, Int32(row), Int32(column)) else { return nil }
        return String(cString: p)
    }

    func string(_ row: Int, _ column: Int) -> String { value(row, column) ?? "" }
    func int(_ row: Int, _ column: Int) -> Int64? { value(row, column).flatMap { Int64($0) } }
    func bool(_ row: Int, _ column: Int) -> Bool { value(row, column) == "t" }
}

/// One libpq connection. The session is set up for exact, predictable transfers: UTF-8, UTC,
/// ISO dates, standard-conforming strings, all float digits.
public final class PostgresConnection: Connection {
    public let endpoint: Endpoint
    public var dialect: any Dialect { pgDialect }
    public var defaultSchema: String { "public" }
    /// Knows the server's encoding (digests skip a conversion on a UTF-8 database).
    let pgDialect: PostgresDialect
    let conn: OpaquePointer
    private var closed = false
    /// Inside `beginSnapshot`'s read-only transaction (reads take savepoints; see `guardedRead`).
    var inReadSnapshot = false
    /// `digestsByListing`: a mirror lists this server's keys and row hashes whole.
    let listsRowHashesWhole: Bool
    /// `--timeout`: seconds one wait for the server may last (an answer, the next rows of a COPY,
    /// room to send). With it the connection is non-blocking and every wait is a `poll` with
    /// that deadline — libpq's blocking calls would wait for ever on a peer that stalls while
    /// its kernel still acknowledges. Nil: as long as it takes.
    let waitLimit: Double?
    /// A wait ran out: the connection is not used again (its state is unknown).
    private(set) var stalled = false

    /// URL query parameters that are Ferry's, not libpq's.
    static let ferryParameters: Set<String> = ["schema", "zero-dates", "token-file", "ca-file", "digests"]

    public init(endpoint: Endpoint, role: ConnectionRole) throws {
        self.endpoint = endpoint
        listsRowHashesWhole = try Self.digestsByListing(endpoint)
        let handle = try Self.connect(endpoint)
        conn = handle
        waitLimit = endpoint.options["timeout"].flatMap(Double.init).flatMap { $0 > 0 ? $0 : nil }
        if waitLimit != nil { PQsetnonblocking(handle, 1) }
        // Reported at connect: no query.
        let encoding = PQparameterStatus(handle, "server_encoding").map { String(cString: $0) }
        pgDialect = PostgresDialect(serverEncodingIsUTF8: encoding == "UTF8")
        // libpq prints NOTICEs on stderr by default; Ferry reports what matters itself.
        PQsetNoticeProcessor(conn, { _, _ in }, nil)
        try execute("""
            SET client_encoding = 'UTF8'; SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD';
            SET standard_conforming_strings = on; SET extra_float_digits = 3; SET IntervalStyle = 'iso_8601'
            """)
        if role == .source {
            try execute("SET default_transaction_read_only = on")
        }
    }

    /// Opens a libpq connection to `endpoint` (its URL parameters that are libpq's passed on;
    /// `extra` added, such as a replication connection's `replication=database`), or throws
    /// one line saying why and what to do.
    static func connect(_ endpoint: Endpoint, extra: [(String, String)] = []) throws -> OpaquePointer {
        var keys: [String] = []
        var values: [String] = []
        func add(_ k: String, _ v: String?) {
            guard let v, !v.isEmpty else { return }
            keys.append(k)
            values.append(v)
        }
        add("host", endpoint.host)
        add("port", endpoint.port.map(String.init))
        add("dbname", endpoint.path.isEmpty ? nil : endpoint.path)
        add("user", endpoint.user)
        add("password", endpoint.password)
        add("application_name", "ferry")
        add("connect_timeout", "10")
        for (k, v) in endpoint.parameters where !Self.ferryParameters.contains(k) { add(k, v) }
        for (k, v) in extra { add(k, v) }
        let handle: OpaquePointer? = withArrayOfCStrings(keys) { kp in
            withArrayOfCStrings(values) { vp in PQconnectdbParams(kp, vp, 0) }
        }
        guard let handle else {
            throw FerryError.connectionFailed(endpoint: endpoint.redacted, reason: "libpq could not allocate a connection")
        }
        if PQstatus(handle) != CONNECTION_OK {
            let raw = String(cString: PQerrorMessage(handle))
            PQfinish(handle)
            throw FerryError.connectionFailed(endpoint: endpoint.redacted, reason: Self.explain(connectError: raw, endpoint: endpoint))
        }
        return handle
    }

    /// One line from libpq's multi-line connection errors, with what to do.
    static func explain(connectError raw: String, endpoint: Endpoint) -> String {
        let lines = raw.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        let message = lines.last(where: { $0.hasPrefix("FATAL:") || $0.contains("error") }) ?? lines.last ?? raw
        let clean = message.replacingOccurrences(of: "FATAL:  ", with: "").replacingOccurrences(of: "connection to server at ", with: "server ")
        if raw.contains("password authentication failed") || raw.contains("no password supplied") {
            return "authentication failed for user \(endpoint.user ?? "(default)"): check the password (URL, PGPASSWORD or ~/.pgpass)"
        }
        if raw.contains("does not exist") && raw.contains("database") {
            return "\(clean); create it first or check the database name in the URL"
        }
        if raw.contains("Connection refused") || raw.contains("could not translate host name") || raw.contains("timeout expired")
            || raw.contains("No route to host") || raw.contains("Name or service not known")
        {
            return "server unreachable (\(clean)); check host and port, and that PostgreSQL is running"
        }
        return clean
    }

    deinit { close() }

    /// The server's port and start, and the database: equal only for one database of one running server.
    public func databaseIdentity() throws -> String? {
        try rows("SELECT current_setting('port') || '/' || pg_postmaster_start_time()::text || '/' || current_database()").first?.first ?? nil
    }

    public func close() {
        guard !closed else { return }
        closed = true
        PQfinish(conn)
    }

    func error(_ result: OpaquePointer?, sql: String?) -> PostgresError {
        PostgresError(result, connection: conn, sql: sql, endpoint: endpoint)
    }

    // MARK: Waiting for the server (--timeout)

    /// Waits until the socket is ready for `events` (POLLIN, POLLOUT), at most `waitLimit`.
    func wait(for events: Int32) throws {
        guard let limit = waitLimit else { return }
        var p = pollfd(fd: PQsocket(conn), events: Int16(events), revents: 0)
        let deadline = Date().addingTimeInterval(limit)
        while true {
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else {
                stalled = true
                throw FerryError.connectionLost(
                    endpoint: endpoint.redacted,
                    reason: "the server sent nothing for \(Self.seconds(limit)) (--timeout): the connection stalled")
            }
            let r = poll(&p, 1, Int32(min(left, 3600) * 1000) + 1)
            if r > 0 { return }
            if r < 0 && errno != EINTR { throw error(nil, sql: nil) }
        }
    }

    static func seconds(_ s: Double) -> String { s == s.rounded() ? "\(Int(s)) s" : "\(s) s" }

    /// Refuses to use a connection whose wait ran out.
    func usable() throws {
        guard !stalled else {
            throw FerryError.connectionLost(endpoint: endpoint.redacted, reason: "the connection stalled earlier (--timeout) and is not used again")
        }
    }

    /// Reads what the server sent, waiting for it at most `waitLimit`.
    func awaitInput() throws {
        try wait(for: POLLIN)
        guard PQconsumeInput(conn) == 1 else { throw error(nil, sql: nil) }
    }

    /// The next result of the command in progress, nil when there is none; with `waitLimit`,
    /// waited for within it.
    func awaitResult() throws -> PostgresResult? {
        if waitLimit != nil {
            try usable()
            while PQisBusy(conn) == 1 { try awaitInput() }
        }
        return PQgetResult(conn).map(PostgresResult.init)
    }

    /// Sends what libpq holds (a non-blocking connection queues), within `waitLimit`.
    func flushOut() throws {
        guard waitLimit != nil else { return }
        while true {
            let r = PQflush(conn)
            if r == 0 { return }
            if r < 0 { throw error(nil, sql: nil) }
            try wait(for: POLLOUT | POLLIN)
            guard PQconsumeInput(conn) == 1 else { throw error(nil, sql: nil) }
        }
    }

    /// What `PQexec` returns, from a command sent without waiting: the first failed result, else
    /// the last; a COPY's result as soon as it starts.
    private func collect(_ sql: String) throws -> PostgresResult {
        try flushOut()
        guard let result = try Self.collect(next: awaitResult) else { throw error(nil, sql: sql) }
        return result
    }

    /// What `PQexec` returns, from the results `next` hands out until it gives nil: the first
    /// failed one, else the last; a COPY's as soon as it starts (the replication connection's
    /// commands are collected the same way).
    static func collect(next: () throws -> PostgresResult?) throws -> PostgresResult? {
        var last: PostgresResult?
        var failed: PostgresResult?
        while let r = try next() {
            if r.status == PGRES_COPY_OUT || r.status == PGRES_COPY_IN || r.status == PGRES_COPY_BOTH { return r }
            if failed == nil && r.status != PGRES_COMMAND_OK && r.status != PGRES_TUPLES_OK && r.status != PGRES_EMPTY_QUERY { failed = r }
            last = r
        }
        return failed ?? last
    }

    /// Runs a query with text parameters and text results.
    @discardableResult
    func query(_ sql: String, _ params: [String?] = []) throws -> PostgresResult {
        let result: PostgresResult
        if waitLimit != nil {
            try usable()
            let sent = withArrayOfOptionalCStrings(params) { pp in PQsendQueryParams(conn, sql, Int32(params.count), nil, pp, nil, nil, 0) }
            guard sent == 1 else { throw error(nil, sql: sql) }
            result = try collect(sql)
        } else {
            let raw: OpaquePointer? = withArrayOfOptionalCStrings(params) { pp in
                PQexecParams(conn, sql, Int32(params.count), nil, pp, nil, nil, 0)
            }
            guard let raw else { throw error(nil, sql: sql) }
            result = PostgresResult(raw)
        }
        guard result.status == PGRES_TUPLES_OK || result.status == PGRES_COMMAND_OK else { throw error(result.handle, sql: sql) }
        return result
    }

    /// Runs a query and hands its rows over one at a time (libpq's single-row mode: each a
    /// result of one row), so a long answer is never held whole. Every result is taken before
    /// it returns, also when `body` throws, so the connection takes the next command.
    func forEachRow(_ sql: String, _ body: (PostgresResult) throws -> Void) throws {
        try usable()
        guard PQsendQuery(conn, sql) == 1 else { throw error(nil, sql: sql) }
        guard PQsetSingleRowMode(conn) == 1 else {
            drainResults()
            throw error(nil, sql: sql)
        }
        try flushOut()
        var failure: (any Error)?
        while let r = try awaitResult() {
            switch r.status {
            case PGRES_SINGLE_TUPLE:
                guard failure == nil else { continue }
                do { try body(r) } catch { failure = error }
            case PGRES_TUPLES_OK, PGRES_COMMAND_OK:
                continue
            default:
                if failure == nil { failure = error(r.handle, sql: sql) }
            }
        }
        if let failure { throw failure }
    }

    /// Runs statements without parameters (several may be separated by semicolons).
    func execute(_ sql: String) throws {
        let r = try exec(sql)
        guard r.status == PGRES_COMMAND_OK || r.status == PGRES_TUPLES_OK || r.status == PGRES_EMPTY_QUERY else {
            throw error(r.handle, sql: sql)
        }
    }

    /// Sends `sql` (PQexec) and returns its result, whatever its status.
    func exec(_ sql: String) throws -> PostgresResult {
        if waitLimit != nil {
            try usable()
            guard PQsendQuery(conn, sql) == 1 else { throw error(nil, sql: sql) }
            return try collect(sql)
        }
        guard let raw = PQexec(conn, sql) else { throw error(nil, sql: sql) }
        return PostgresResult(raw)
    }

    /// Discards the results still pending, so the connection takes a new command (after a
    /// stall there is nothing to wait for).
    func drainResults() {
        while !stalled, let r = try? awaitResult() { _ = r }
    }

    // MARK: Transactions

    public func begin() throws {
        try execute("BEGIN")
        if applyingChanges { try execute("SET CONSTRAINTS ALL DEFERRED") }
    }
    /// A replica's transactions check their (deferrable) foreign keys at commit.
    private var applyingChanges = false
    public func prepareToApplyChanges(repeatingCascades: Bool) throws { applyingChanges = true }
    public func beginSnapshot() throws {
        try execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        inReadSnapshot = true
    }
    public func exportSnapshot() throws -> String? { try rows("SELECT pg_export_snapshot()").first?.first ?? nil }
    public func beginSnapshot(importing id: String) throws {
        try execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        inReadSnapshot = true
        try execute("SET TRANSACTION SNAPSHOT " + pgDialect.literal(id))
    }

    /// Runs `body` so that a failure inside a copy's read snapshot (a table the role may not
    /// read) does not abort the snapshot for the tables after it: a savepoint, rolled back to
    /// on failure.
    func guardedRead<T>(_ body: () throws -> T) throws -> T {
        guard inReadSnapshot else { return try body() }
        try execute("SAVEPOINT ferry_read")
        do {
            let result = try body()
            try execute("RELEASE SAVEPOINT ferry_read")
            return result
        } catch {
            try? execute("ROLLBACK TO SAVEPOINT ferry_read")
            throw error
        }
    }

    /// `lookup3` where the server has `hash_record_extended` (PostgreSQL 14) and hashes bytes
    /// as a little-endian machine does (what Ferry reproduces; a big-endian server would differ
    /// on every row: its buckets would all be read).
    public var rowHashes: [RowHash] {
        PQserverVersion(conn) >= 140_000 ? [.lookup3, .md5] : [.md5]
    }

    /// For a key of one integer column, in SQL (other keys: the mirror reads the buckets whole).
    public func listsKeyedRowHashes(key: [Column], hash: KeyHash) -> Bool { hash == .integer && key.count == 1 }
    /// On this machine (`digestsByListing`) every row's key and hash is listed by a binary COPY
    /// and summed by Ferry, which costs about what the server's own `GROUP BY` does.
    public func digestsByReading(_ request: DigestRequest) -> Bool { listsRowHashesWhole }

    public func keyedRowHashes(_ table: TableSchema, request: DigestRequest, each: (_ key: Int64, _ hash: Int64) throws -> Void) throws {
        try guardedRead {
            let from = (try readsWithOnly(table.name) ? "ONLY " : "") + pgDialect.quote(table.name)
            guard let sql = DigestSQL.keyedRowHashQuery(table.name, request, pgDialect, from: from) else {
                return try DigestComputer.keyedRowHashes(self, table: table, request: request, each: each)
            }
            try forEachInt64Pair(sql, table: table.name, each)
        }
    }

    public func bucketDigests(_ table: TableSchema, request: DigestRequest) throws -> [BucketDigest] {
        try guardedRead {
            let from = (try readsWithOnly(table.name) ? "ONLY " : "") + pgDialect.quote(table.name)
            var out: [BucketDigest] = []
            out.reserveCapacity(request.expectedBuckets)
            // Row by row: a first level's 2^18 buckets held as one result took 20 MB.
            try forEachRow(DigestSQL.query(table.name, request, pgDialect, from: from)) { r in
                out.append(try DigestSQL.digest([r.value(0, 0), r.value(0, 1), r.value(0, 2)], table: table.name))
            }
            return out
        }
    }
    public var supportsSavepoints: Bool { true }
    public func savepoint(_ step: SavepointStep) throws { try execute(step.sql) }
    public var isLost: Bool { closed || stalled || PQstatus(conn) == CONNECTION_BAD }
    public func commit() throws {
        inReadSnapshot = false
        try execute("COMMIT")
    }
    public func rollback() throws {
        inReadSnapshot = false
        if PQtransactionStatus(conn) != PQTRANS_IDLE { try execute("ROLLBACK") }
    }

    // MARK: DDL

    public func planTable(_ schema: TableSchema, named name: TableName) throws -> PlannedTable {
        try PostgresDDL.plan(schema, named: name, on: self)
    }

    /// Runs the planned statements. A planned `CREATE TYPE` that another table of the same copy
    /// ran first (two tables sharing an enum type) is skipped when the type has the same labels.
    public func createTable(_ table: PlannedTable) throws {
        try run(table.statements, of: table)
    }

    public func createTableDeferringKeys(_ table: PlannedTable) throws {
        try run(table.deferredKeys?.create ?? table.statements, of: table)
    }

    public func addDeferredKeys(_ table: PlannedTable) throws {
        for sql in table.deferredKeys?.keys ?? [] { try execute(sql) }
    }

    /// Runs `statements`, skipping the creation of an enum type that exists with the same labels.
    private func run(_ statements: [String], of table: PlannedTable) throws {
        var alreadyThere = Set<String>()
        for c in table.schema.columns {
            guard case .enumeration(let labels) = c.logicalType else { continue }
            let sql = PostgresDDL.createEnum(c.nativeType, labels: labels, dialect: pgDialect)
            if statements.contains(sql), try enumLabels(c.nativeType) == labels { alreadyThere.insert(sql) }
        }
        for sql in statements where !alreadyThere.contains(sql) { try execute(sql) }
    }

    /// The labels of the enum type named `quotedName` (as DDL writes it), nil when there is no
    /// type of that name; an empty list for a type that is not an enum.
    func enumLabels(_ quotedName: String) throws -> [String]? {
        let oid = try query("SELECT to_regtype($1)::oid::text", [quotedName])
        guard oid.count > 0, let id = oid.value(0, 0) else { return nil }
        let labels = try query("SELECT enumlabel FROM pg_enum WHERE enumtypid = $1::oid ORDER BY enumsortorder", [id])
        return (0..<labels.count).map { labels.string($0, 0) }
    }

    public func planObjects(
        _ schema: TableSchema, on table: TableName, indexesOn: TableName, replacing: TableName?, avoiding: Set<String>
    ) throws -> PlannedObjects {
        try PostgresDDL.planObjects(schema, on: table, indexesOn: indexesOn, replacing: replacing, avoiding: avoiding, on: self)
    }

    public func createIndexes(_ objects: PlannedObjects) throws -> [SkippedObject] {
        for sql in objects.indexStatements { try execute(sql) }
        return []
    }

    public func createForeignKeys(_ objects: PlannedObjects) throws -> [SkippedObject] {
        for sql in objects.foreignKeyStatements { try execute(sql) }
        return []
    }

    /// Names of the relations (tables, indexes, sequences, views, types' tables) of `schema`
    /// (the default schema when nil), less the indexes of `except`, which go away with it.
    func relationNames(in schema: String?, except: TableName?) throws -> Set<String> {
        let r = try query(
            """
            SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = coalesce($1, current_schema(), 'public')
              AND NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
                              WHERE i.indexrelid = c.oid AND t.relname = $2 AND t.relnamespace = n.oid)
            """, [schema, except?.name])
        return Set((0..<r.count).map { r.string($0, 0) })
    }

    public func dropTable(_ name: TableName) throws {
        try execute("DROP TABLE IF EXISTS \(dialect.quote(name))")
    }

    public func swapTable(_ staging: TableName, into target: TableName) throws {
        // Foreign keys of other tables that reference the old table: dropped with it, added
        // again (and checked against the new rows) once the new one has its name.
        var children: [(table: String, name: String, definition: String)] = []
        if let old = try relationOID(target) {
            let r = try query(
                """
                SELECT con.conrelid::regclass::text, con.conname, pg_get_constraintdef(con.oid)
                FROM pg_constraint con WHERE con.confrelid = $1::oid AND con.contype = 'f' AND con.conrelid <> con.confrelid
                  AND con.conparentid = 0
                ORDER BY 1, 2
                """, [old])
            for i in 0..<r.count {
                children.append((r.string(i, 0), r.string(i, 1), r.string(i, 2)))
                // regclass text is quoted as needed already.
                try execute("ALTER TABLE \(r.string(i, 0)) DROP CONSTRAINT \(dialect.quote(r.string(i, 1)))")
            }
        }
        try dropTable(target)
        try execute("ALTER TABLE \(dialect.quote(staging)) RENAME TO \(dialect.quote(target.name))")
        // Indexes, constraints and identity sequences were named after the staging table.
        let renamed = TableName(schema: staging.schema, target.name)
        let stagingPrefix = staging.name
        let rel = try relationOID(renamed)
        let indexes = try query(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1", [rel])
        for r in 0..<indexes.count {
            let old = indexes.string(r, 0)
            guard old.hasPrefix(stagingPrefix) else { continue }
            let new = target.name + old.dropFirst(stagingPrefix.count)
            try execute("ALTER INDEX \(dialect.quote(TableName(schema: renamed.schema, old))) RENAME TO \(dialect.quote(new))")
        }
        let seqs = try query(
            """
            SELECT s.relname, n.nspname FROM pg_depend d JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
            JOIN pg_namespace n ON n.oid = s.relnamespace WHERE d.refobjid = $1 AND d.deptype IN ('a', 'i')
            """, [rel])
        for r in 0..<seqs.count {
            let old = seqs.string(r, 0)
            guard old.hasPrefix(stagingPrefix) else { continue }
            let new = target.name + old.dropFirst(stagingPrefix.count)
            try execute("ALTER SEQUENCE \(dialect.quote(TableName(schema: seqs.string(r, 1), old))) RENAME TO \(dialect.quote(new))")
        }
        for child in children {
            try execute("ALTER TABLE \(child.table) ADD CONSTRAINT \(dialect.quote(child.name)) \(child.definition)")
        }
    }

    public func resetSerial(_ table: TableName, schema: TableSchema) throws {
        let q = dialect.quote(table)
        for c in schema.columns where c.isSerial {
            let seq = try query("SELECT pg_get_serial_sequence($1, $2)", [q, c.name])
            guard let name = seq.value(0, 0) else { continue }
            // is_called = false: the next nextval() returns exactly max + 1.
            try query(
                "SELECT setval($1::regclass, greatest(coalesce((SELECT max(\(dialect.quote(c.name))) FROM \(q)), 0) + 1, 1), false)",
                [name])
        }
    }

    // MARK: Reading and writing

    public func reader(table: TableSchema, columns: [Column], keyRange: KeyRange?, batchSize: Int) throws -> any BatchReader {
        try PostgresReader(connection: self, table: table, columns: columns, keyRange: keyRange, batchSize: batchSize)
    }

    public func writer(into table: TableSchema, columns: [Column]) throws -> any BatchWriter {
        try PostgresWriter(connection: self, table: table, columns: columns)
    }

    /// Loads `rows` into a scratch table shaped like `columns` of `table` (binary COPY, exact
    /// values), runs `statement` with it, drops it; all inside the caller's transaction.
    private func withScratch(_ target: TableSchema, columns: [Column], rows: RowBatch, _ statement: (String) -> String) throws -> Int {
        try withScratchResult(target, columns: columns, rows: rows, statement).commandRows ?? 0
    }

    /// As `withScratch`, returning the statement's result.
    private func withScratchResult(_ target: TableSchema, columns: [Column], rows: RowBatch, _ statement: (String) -> String) throws -> PostgresResult {
        let q = { (s: String) in self.dialect.quote(s) }
        let table = target.name
        let scratch = TableName(schema: table.schema, CopyEngine.internalPrefix + "changes_" + String(UInt32.random(in: 0...UInt32.max), radix: 16))
        try execute("CREATE TABLE \(dialect.quote(scratch)) AS SELECT " + columns.map { q($0.name) }.joined(separator: ", ")
                    + " FROM \(dialect.quote(table)) WITH NO DATA")
        // The scratch table has the target's column types: its writer encodes as for the target.
        var shape = target
        shape.name = scratch
        let w = try PostgresWriter(connection: self, table: shape, columns: columns)
        do {
            try w.write(rows)
            try w.finish()
        } catch let e as BatchRowError {
            w.abort()
            // The writer had this one batch: the row is at its place in `rows`.
            throw BatchRowError(row: (e.batch == nil ? e.rowsBefore ?? 0 : 0) + e.row, error: e.error.naming(table: table), batch: e.batch ?? rows)
        }
        let result = try query(statement(dialect.quote(scratch)))
        try execute("DROP TABLE \(dialect.quote(scratch))")
        return result
    }

    /// From a COPY-loaded scratch table: `INSERT … ON CONFLICT (key) DO UPDATE … WHERE` some
    /// column IS DISTINCT FROM the new value, so equal rows are not rewritten; RETURNING tells
    /// inserted rows (xmax = 0) from updated ones.
    public func mergeRows(into table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws -> MergeCounts {
        guard !key.isEmpty else { throw FerryError.noKey(table: table.name) }
        guard !rows.isEmpty else { return MergeCounts() }
        let q = { (s: String) in self.dialect.quote(s) }
        let list = columns.map { q($0.name) }.joined(separator: ", ")
        let conflict = mergeConflict(table, columns: columns, key: key)
        let r = try withScratchResult(table, columns: columns, rows: rows) { scratch in
            "WITH r AS (INSERT INTO \(dialect.quote(table.name)) AS t (\(list)) OVERRIDING SYSTEM VALUE SELECT \(list) FROM \(scratch)"
                + conflict + " RETURNING (xmax = 0) AS inserted) SELECT count(*) FILTER (WHERE inserted), count(*) FILTER (WHERE NOT inserted) FROM r"
        }
        let inserted = r.int(0, 0) ?? 0
        let updated = r.int(0, 1) ?? 0
        return MergeCounts(inserted: inserted, updated: updated, unchanged: Int64(rows.count) - inserted - updated)
    }

    /// The upsert clause of a merge into `table` (aliased `t`): rows whose other columns differ
    /// are updated, equal ones left alone.
    private func mergeConflict(_ table: TableSchema, columns: [Column], key: [String]) -> String {
        let q = { (s: String) in self.dialect.quote(s) }
        let others = columns.map(\.name).filter { !key.contains($0) }
        let differs = others.map { name -> String in
            // json has no equality operator: compare its text.
            let cast = table.column(named: name)?.logicalType == .json ? "::text" : ""
            return "t.\(q(name))\(cast) IS DISTINCT FROM excluded.\(q(name))\(cast)"
        }.joined(separator: " OR ")
        return " ON CONFLICT (" + key.map(q).joined(separator: ", ") + ") "
            + (others.isEmpty ? "DO NOTHING"
                : "DO UPDATE SET " + others.map { "\(q($0)) = excluded.\(q($0))" }.joined(separator: ", ") + " WHERE " + differs)
    }

    public func moveRows(from staging: TableName, into table: TableSchema, columns: [Column], key: [String]?) throws -> MergeCounts? {
        let q = { (s: String) in self.dialect.quote(s) }
        let list = columns.map { q($0.name) }.joined(separator: ", ")
        let insert = "INSERT INTO \(dialect.quote(table.name)) AS t (\(list)) OVERRIDING SYSTEM VALUE SELECT \(list) FROM \(dialect.quote(staging))"
        let counts: MergeCounts
        if let key {
            // As `mergeRows`: rows that differ are rewritten, and each kind is counted.
            let r = try query("WITH r AS (" + insert + mergeConflict(table, columns: columns, key: key) + " RETURNING (xmax = 0) AS inserted) "
                              + "SELECT count(*) FILTER (WHERE inserted), count(*) FILTER (WHERE NOT inserted), "
                              + "(SELECT count(*) FROM \(dialect.quote(staging))) FROM r")
            let inserted = r.int(0, 0) ?? 0
            let updated = r.int(0, 1) ?? 0
            counts = MergeCounts(inserted: inserted, updated: updated, unchanged: (r.int(0, 2) ?? 0) - inserted - updated)
        } else {
            counts = MergeCounts(inserted: Int64(try query(insert).commandRows ?? 0))
        }
        try dropTable(staging)
        return counts
    }

    public func upsertRows(into table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws -> Int {
        guard !key.isEmpty else { throw FerryError.noKey(table: table.name) }
        let q = { (s: String) in self.dialect.quote(s) }
        let list = columns.map { q($0.name) }.joined(separator: ", ")
        let others = columns.map(\.name).filter { !key.contains($0) }
        _ = try withScratch(table, columns: columns, rows: rows) { scratch in
            "INSERT INTO \(dialect.quote(table.name)) (\(list)) OVERRIDING SYSTEM VALUE SELECT \(list) FROM \(scratch)"
                + (dialect.upsertClause(key: key, others: others) ?? "")
        }
        return rows.count
    }

    public func deleteRows(from table: TableSchema, key: [Column], keys: RowBatch) throws -> Int {
        let q = { (s: String) in self.dialect.quote(s) }
        return try withScratch(table, columns: key, rows: keys) { scratch in
            "DELETE FROM \(dialect.quote(table.name)) t USING \(scratch) k WHERE "
                + key.map { "t.\(q($0.name)) = k.\(q($0.name))" }.joined(separator: " AND ")
        }
    }
}

/// Calls `body` with a NULL-terminated array of C strings.
func withArrayOfCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
    let copies = strings.map { strdup($0) }
    defer { copies.forEach { free($0) } }
    var pointers: [UnsafePointer<CChar>?] = copies.map { UnsafePointer($0) }
    pointers.append(nil)
    return pointers.withUnsafeBufferPointer { body($0.baseAddress.unsafelyUnwrapped) }  // never empty: the NULL terminator
}

/// Calls `body` with an array of C strings where nil stays NULL (SQL NULL parameters).
func withArrayOfOptionalCStrings<R>(_ strings: [String?], _ body: (UnsafePointer<UnsafePointer<CChar>?>?) -> R) -> R {
    let copies = strings.map { $0.map { strdup($0) } ?? nil }
    defer { copies.forEach { free($0) } }
    let pointers: [UnsafePointer<CChar>?] = copies.map { $0.map { UnsafePointer($0) } }
    return pointers.withUnsafeBufferPointer { body($0.baseAddress) }
}

extension PostgresConnection {
    /// Runs SQL text from Ferry's own code or tests (never from a user request).
    public func run(_ sql: String) throws { try execute(sql) }
    public func addColumn(_ column: Column, default value: ColumnDefault?, to table: TableName) throws {
        try execute(SchemaObjectSQL.addColumn(column, default: value, to: table, dialect: dialect))
    }

    /// Runs a query and returns its rows as text (NULL as nil): for tests and tools.
    public func rows(_ sql: String, _ params: [String?] = []) throws -> [[String?]] {
        let r = try query(sql, params)
        let n = Int(PQnfields(r.handle))
        return (0..<r.count).map { i in (0..<n).map { r.value(i, $0) } }
    }
}
