/// An open session with one database. A connection is used from one thread at a time; the
/// copy engine hands it from thread to thread, never shares it.
///
/// Transactions: `begin`/`commit`/`rollback` wrap a table load so that a failure leaves the
/// target exactly as it was (where the engine's DDL is transactional; see `Dialect`).
public protocol Connection: AnyObject {
    /// The endpoint this connection was opened with (print it with `description`, never raw).
    var endpoint: Endpoint { get }
    /// Capabilities and naming rules of the engine.
    var dialect: any Dialect { get }

    /// The schema that unqualified names (`TableName.schema == nil`) live in: `main`, `public`,
    /// the MySQL database.
    var defaultSchema: String { get }

    /// User tables, excluding the engine's own and Ferry's bookkeeping tables.
    func listTables() throws -> [TableInfo]
    /// The names `listTables` lists, without the row estimates: where an estimate costs a scan
    /// (SQLite counts each table's rows), choosing the tables of a copy must not read every
    /// table of the database. Default: `listTables`' names.
    func listTableNames() throws -> [TableName]
    /// Exact row count.
    func countRows(_ table: TableName) throws -> Int64
    /// Columns, types, keys, serial columns and a row estimate. Throws `FerryError.tableNotFound`.
    func describe(_ table: TableName) throws -> TableSchema
    /// `describe`, with the row estimate only when `rowEstimate` is true: where the estimate
    /// costs a scan of the table (SQLite counts its rows), a caller that never shows it (the
    /// service describes the table on every page and every pushed batch) asks without.
    /// Default: `describe`.
    func describe(_ table: TableName, rowEstimate: Bool) throws -> TableSchema
    func tableExists(_ table: TableName) throws -> Bool

    /// A reader over `columns` of `table` (a subset of its schema's columns, in that order),
    /// optionally limited to a key range, delivering batches of at most `batchSize` rows.
    /// Each batch holds one buffer per column, laid out for the column's logical type.
    func reader(table: TableSchema, columns: [Column], keyRange: KeyRange?, batchSize: Int) throws -> any BatchReader

    /// Plans a table of this schema named `name` on this engine: the DDL (types mapped from
    /// logical to native, named enum types created when missing) and the table it makes. Reads
    /// the catalog at most; changes nothing. Throws `FerryError.unsupportedType` for a type the
    /// engine cannot hold.
    func planTable(_ schema: TableSchema, named name: TableName) throws -> PlannedTable
    /// Runs a planned table's statements, as planned.
    func createTable(_ table: PlannedTable) throws
    /// Runs `deferredKeys.create` of a planned table (the table without its keys), for a load
    /// of plain inserts; `addDeferredKeys` adds them after the rows. Default: `createTable`
    /// (keys with the table) for planned tables without deferred keys.
    func createTableDeferringKeys(_ table: PlannedTable) throws
    /// Adds the keys `createTableDeferringKeys` left out, in the caller's transaction.
    func addDeferredKeys(_ table: PlannedTable) throws

    /// Plans the secondary indexes and foreign keys of `schema` (already limited to what the
    /// copy carries; foreign keys name the target's tables) for the table `table` on this
    /// engine, the indexes built on `indexesOn` (the table itself, or a replace's staging
    /// table): names that are free (`replacing` is a table whose own indexes and keys go away
    /// before these are created), what the engine cannot express skipped with a reason. Reads
    /// the catalog at most; changes nothing. Index names in `avoiding` (planned for other
    /// tables of the same copy) are taken too.
    func planObjects(
        _ schema: TableSchema, on table: TableName, indexesOn: TableName, replacing: TableName?, avoiding: Set<String>
    ) throws -> PlannedObjects
    /// Creates planned indexes, as planned. Runs in the caller's transaction. Returns what the
    /// engine declined (the XML service plans on its side), each with its reason.
    func createIndexes(_ objects: PlannedObjects) throws -> [SkippedObject]
    /// Adds planned foreign keys, as planned (the referenced tables hold their rows by then).
    /// Runs in the caller's transaction. Returns what the engine declined, with reasons.
    func createForeignKeys(_ objects: PlannedObjects) throws -> [SkippedObject]
    /// Views, triggers, materialized views, sequences no serial column owns, and other objects
    /// a copy of tables does not carry, so that a copy can report them by name.
    func listOtherObjects() throws -> [OtherObject]
    func dropTable(_ name: TableName) throws
    /// Replaces `target` by `staging` (dropping the old `target` if there is one) so that
    /// readers see either the old or the new table, never neither. Foreign keys of other
    /// tables that referenced the old `target` reference the new one afterwards (checked
    /// against its rows where the engine checks them).
    func swapTable(_ staging: TableName, into target: TableName) throws

    /// A writer inserting rows laid out for `columns` (the values' logical types, named as the
    /// target's columns) into the existing table `table` — the target as its catalog described
    /// it, or as `planTable` planned it. Writers encode for the target's types from `table`;
    /// they never look the table up again.
    func writer(into table: TableSchema, columns: [Column]) throws -> any BatchWriter

    /// Inserts each row of `rows` (laid out for `columns`) into `table` (as for `writer`) or,
    /// when a row with the same `key` exists, updates its other columns. Returns the number of
    /// rows given. Runs in the caller's transaction.
    func upsertRows(into table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws -> Int

    /// Upserts `rows` (laid out for `columns`) into `table` by `key`: inserts the new ones,
    /// rewrites only the rows whose values differ, and counts each kind. Runs in the caller's
    /// transaction; a row the target refuses throws a `BatchRowError` naming it.
    func mergeRows(into table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws -> MergeCounts

    /// Deletes the rows of `table` whose key equals a row of `keys` (laid out for `key`, in key
    /// order). Returns how many rows were deleted — or 0 where deletes are staged for `commit`
    /// (then `committedCounts` has them). Runs in the caller's transaction.
    func deleteRows(from table: TableSchema, key: [Column], keys: RowBatch) throws -> Int

    /// Moves every row of `staging` (a table of this database holding `columns`, as made by
    /// `createStaging`) into `table` in the caller's transaction — appended, or with `key`
    /// upserted by it — and drops `staging` with them: how a resumable append or upsert is made
    /// visible whole. Returns what the engine counted, nil where it does not say. Where DDL
    /// commits (MySQL) the drop commits the rows and whatever the transaction wrote before.
    func moveRows(from staging: TableName, into table: TableSchema, columns: [Column], key: [String]?) throws -> MergeCounts?

    /// Where keyed writes are staged for `commit` (`stagesKeyedWrites`): moves an incremental
    /// copy's watermark in the same transaction as the staged rows of `table` (keyed by `key`),
    /// only if it still holds `move.from`. Default: refused.
    func stageWatermark(_ move: WatermarkMove, with table: TableSchema, key: [String]) throws

    /// Range digests of `request` over `table` (see `BucketDigest`), computed next to the data:
    /// in the engine's SQL where its dialect is a `DigestSQLDialect`, else by Ferry reading
    /// the rows (the default; right for engines in the same process, such as SQLite).
    func bucketDigests(_ table: TableSchema, request: DigestRequest) throws -> [BucketDigest]
    /// The row hashes `bucketDigests` computes (see `RowHash`): `md5` everywhere (the default);
    /// also `lookup3` where Ferry digests beside the data (the default `bucketDigests`: SQLite)
    /// or the engine's SQL reproduces it (PostgreSQL 14 or later). A comparison uses `lookup3`
    /// when both sides offer it.
    var rowHashes: [RowHash] { get }
    /// For a request whose key is one integer column (`KeyHash.integer`): each row's key and
    /// row hash (as `bucketDigests` sums them), handed to `each` in no particular order — what
    /// a mirror compares key by key inside the buckets whose digests differ, so that it reads
    /// only the rows that differ. Computed next to the data like `bucketDigests`.
    func keyedRowHashes(_ table: TableSchema, request: DigestRequest, each: (_ key: Int64, _ hash: Int64) throws -> Void) throws
    /// True where `keyedRowHashes` runs next to the data for a key like `key` hashed with
    /// `hash`: SQLite, PostgreSQL and MySQL/MariaDB for one integer column (whose buckets their
    /// SQL filters). False (the default) where it would read the rows across a network to hash
    /// them (the XML service): there a mirror reads the differing buckets whole.
    func listsKeyedRowHashes(key: [Column], hash: KeyHash) -> Bool
    /// True where `keyedRowHashes` over the whole table costs about what `bucketDigests` for
    /// `request` does: where Ferry reads every row and hashes it anyway (SQLite; MySQL/MariaDB on
    /// this machine, in PostgreSQL's row hash), or where a server on this machine sends each
    /// row's key and hash as cheaply as it groups them (PostgreSQL). A comparison then lists
    /// each row's key and hash once and computes the digests, any finer level and the keyed
    /// listing from that list (`KeyedHashSpill`) instead of reading the table again. False (the
    /// default) where the engine's SQL should compute the digests (a server across a network).
    func digestsByReading(_ request: DigestRequest) -> Bool
    /// True where a mirror from this source should read its rows whole, in key order, and
    /// compare each with the target's row hash as it arrives (`CopyEngine.mirrorByStreaming`):
    /// where Ferry hashes this source's rows from its reader's batches anyway (MySQL/MariaDB on
    /// this machine), so that reading them once more, by key, for those that differ — and
    /// writing them only after the whole table was read — is what the comparison would add.
    /// False (the default) where the rows' hashes cost less than the rows (an engine's SQL,
    /// SQLite's stored values).
    var streamsMirrorRows: Bool { get }

    /// Keyed writes into `table` must leave it holding exactly `rows` rows (inside `filter`):
    /// a key comparison that merged keys the source keeps apart shows here. Checked at once
    /// (the default) where writes apply as they are made, at `commit` where they are staged
    /// and applied by the commit (the XML service: a failed check applies nothing).
    func expectRows(_ table: TableSchema, key: [Column], rows: Int64, filter: String?) throws

    /// The counts of keyed writes that the last `commit` applied, where `mergeRows` and
    /// `deleteRows` could only stage them (the XML service applies a table's staged rows in
    /// one server-side transaction at commit; until then they count as nothing). Nil where
    /// writes apply as they are made.
    var committedCounts: MergeCounts? { get }
    /// True where keyed writes in a transaction are only staged, and reads in it do not see
    /// them until `commit` applies them (the XML service). False (the default) where a
    /// transaction's reads see its own writes.
    var stagesKeyedWrites: Bool { get }

    func begin() throws
    /// Starts a read-only transaction whose reads all see one snapshot of the database
    /// (PostgreSQL REPEATABLE READ, MySQL WITH CONSISTENT SNAPSHOT, SQLite a read
    /// transaction); ended with `commit` or `rollback`.
    func beginSnapshot() throws
    /// Inside `beginSnapshot`'s transaction: an id other connections to the same database
    /// can start their snapshot from (PostgreSQL `pg_export_snapshot()`), or nil when the
    /// engine cannot share one.
    func exportSnapshot() throws -> String?
    /// Starts a read-only transaction that sees the snapshot `id` exported by another
    /// connection.
    func beginSnapshot(importing id: String) throws
    /// Where snapshots cannot be shared: briefly blocks writes to the whole database so that
    /// several connections can begin their snapshots at one moment (MySQL `FLUSH TABLES WITH
    /// READ LOCK`, as mydumper does), until `unfreezeWrites`. Returns false where the engine
    /// has no such lock (the default) or the user may not take it.
    func freezeWrites() throws -> Bool
    func unfreezeWrites() throws
    func commit() throws
    func rollback() throws

    /// True once the connection itself is gone — the server closed it or went away, the
    /// network cut it, a wait ran out — so nothing more can be done on it (not for an error the
    /// database answered). A copy reading in an exported snapshot may then read the table again
    /// on a new connection (`--retries`). Default false: not known.
    var isLost: Bool { get }

    /// True where `savepoint` works inside a write transaction (SQLite, PostgreSQL, MySQL):
    /// what `--on-error reject` needs to set refused rows aside and keep the rest. False (the
    /// default) where a transaction cannot be rolled back in part (the XML service, plugins).
    var supportsSavepoints: Bool { get }
    /// Sets, rolls back to, or releases Ferry's one savepoint in the caller's transaction (a
    /// rollback leaves it set: release it after). Default: refused.
    func savepoint(_ step: SavepointStep) throws
    /// True where the target sets the rows it refuses aside on its own side when asked
    /// (`setRefusedRowsAside`): the XML service and plugins that declare `rejects`, whose
    /// requests are transactions of their own, roll a batch back to a savepoint there and send
    /// the refused rows back. What `--on-error reject` needs where `supportsSavepoints` is false.
    var setsRefusedRowsAside: Bool { get }
    /// From now on, rows the target refuses — when written, or when the commit merges or
    /// applies what was staged — are set aside (in `refusedRows`) and the rest written; past
    /// `limit` of them the write fails with `RefusedRowsPastLimit`. Starts `refusedRows` anew.
    /// Default: refused.
    func setRefusedRowsAside(limit: Int) throws
    /// The rows set aside since `setRefusedRowsAside`, each a one-row batch laid out as written.
    var refusedRows: [RefusedRow] { get }

    /// Moves the serial counters of `table` past the largest values now in it, so the next
    /// generated value is max + 1.
    func resetSerial(_ table: TableName, schema: TableSchema) throws

    /// Applies `push` all together or not at all, each change guarded by the image it expects
    /// (see `GuardedPush`); recorded under the push's id in the same transaction. Default:
    /// `GuardedPushApplier` on this connection (the XML service's driver sends it whole).
    func applyGuardedPush(_ push: any GuardedPushRows) throws -> GuardedPushOutcome
    /// True when a guarded push with this id was committed here.
    func pushCommitted(_ id: String) throws -> Bool

    func close()
    /// What this connection can do: everything for the built-in engines; for the protocol's
    /// client, what the service or plugin declared. Planners refuse work that needs more.
    var capabilities: Capabilities { get }

    /// Adds `column` (its type the target's, as a plan gives it) to `table`, nullable, with
    /// `default` where the engine can express it: a column the source added while it was
    /// followed. Default: refused (the engine cannot).
    func addColumn(_ column: Column, default: ColumnDefault?, to table: TableName) throws

    /// From now on this connection applies a replica's changes: each transaction it begins
    /// checks foreign keys at its commit where the engine can defer them (PostgreSQL: the keys
    /// Ferry creates are DEFERRABLE; SQLite: `defer_foreign_keys`), since a source's changes
    /// hold its keys at its commits, not always statement by statement (a SQLite source's
    /// window). With `repeatingCascades` the target's foreign keys are enforced and run their
    /// actions (ON DELETE CASCADE, SET NULL) — for a source whose stream leaves cascaded changes
    /// out (MariaDB's binlog); otherwise they stay as the copy left them. Default: nothing.
    func prepareToApplyChanges(repeatingCascades: Bool) throws

    /// True where a copy keeps the leases and progress of its loads in Ferry's tables of this
    /// database (`_ferry_leases`, `_ferry_loads`). False where another party owns the staging
    /// tables (the XML service checks which token's loads made them). Default: true.
    var keepsLoadState: Bool { get }

    /// True where a snapshot held open (`beginSnapshot` until it ends) keeps every writer of the
    /// database waiting until it ends — a SQLite file in a rollback journal, whose readers hold
    /// its shared lock; false where readers and writers do not block each other (MVCC, WAL).
    /// The service then lets only tokens that may write hold one. Default: false.
    var heldSnapshotsBlockWriters: Bool { get }

    /// This source's change capture (`ChangeCapture`: what `ferry replicate` follows), or nil
    /// where the engine has none (the default). It opens what it needs beside this connection.
    func changeCapture() throws -> (any ChangeCapture)?

    /// The records of the replicas this target holds (`ReplicationState`): by default rows of
    /// Ferry's state table in this database, written in the transaction under way.
    func replicaStates() throws -> any ReplicaStates

    /// Sets `columns` (the key among them, values as the target's columns take them) in the
    /// rows that have `rows`' keys, in the transaction under way; the other columns keep their
    /// values. Every key must have a row: a replica's update of a row it lacks is an error.
    /// Default: the rows are read by key, the columns set in them, and they are written whole.
    func updateColumns(of table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws

    /// Text equal for two connections to the same database (a SQLite file's device and inode;
    /// a server's address, port, data directory or start, and database), so that a copy of a
    /// table onto itself is refused instead of waiting on its own lock. Nil where unknown (the
    /// default).
    func databaseIdentity() throws -> String?
}

extension Connection {
    public func listTableNames() throws -> [TableName] { try listTables().map(\.name) }

    public func describe(_ table: TableName, rowEstimate: Bool) throws -> TableSchema {
        try describe(table)
    }

    public func bucketDigests(_ table: TableSchema, request: DigestRequest) throws -> [BucketDigest] {
        try DigestComputer.digests(self, table: table, request: request)
    }

    public var rowHashes: [RowHash] { [.md5] }

    public func keyedRowHashes(_ table: TableSchema, request: DigestRequest, each: (_ key: Int64, _ hash: Int64) throws -> Void) throws {
        try DigestComputer.keyedRowHashes(self, table: table, request: request, each: each)
    }

    public func listsKeyedRowHashes(key: [Column], hash: KeyHash) -> Bool { false }

    public func digestsByReading(_ request: DigestRequest) -> Bool { false }

    public var streamsMirrorRows: Bool { false }

    public func expectRows(_ table: TableSchema, key: [Column], rows: Int64, filter: String?) throws {
        // A count where there is no filter: the one-bucket digest hashed every key to count them.
        let landed = filter == nil
            ? try countRows(table.name)
            : try bucketDigests(table, request: DigestRequest(key: key, columns: key, modulus: 1, filter: filter)).reduce(0) { $0 + $1.rows }
        guard landed == rows else {
            throw FerryError.copyFailed(
                table: table.name, endpoint: endpoint.redacted,
                reason: "after the write \(table.name) would hold \(landed) rows where the source has \(rows); "
                    + "the target's key comparison merges keys the source keeps apart (a case-insensitive collation?); nothing was changed")
        }
    }

    public var committedCounts: MergeCounts? { nil }
    public var stagesKeyedWrites: Bool { false }

    public func applyGuardedPush(_ push: any GuardedPushRows) throws -> GuardedPushOutcome {
        try GuardedPushApplier.apply(push, on: self)
    }

    public func pushCommitted(_ id: String) throws -> Bool {
        guard let ledger = try PushLedger.schema(self, create: false) else { return false }
        return try PushLedger.contains(self, ledger, id: id)
    }

    public func createTableDeferringKeys(_ table: PlannedTable) throws { try createTable(table) }
    public func addDeferredKeys(_ table: PlannedTable) throws {}

    public var capabilities: Capabilities { .all }
    public func databaseIdentity() throws -> String? { nil }
    public func changeCapture() throws -> (any ChangeCapture)? { nil }
    public func replicaStates() throws -> any ReplicaStates { TableReplicaStates(self) }
    public func updateColumns(of table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws {
        try ReplicaUpdate.apply(self, table, columns: columns, key: key, rows: rows)
    }
    public func prepareToApplyChanges(repeatingCascades: Bool) throws {}
    public func addColumn(_ column: Column, default: ColumnDefault?, to table: TableName) throws {
        throw FerryError.invalidOption("\(endpoint.redacted) cannot add the column \(column.name) to \(table): add it yourself and run again")
    }
    public func beginSnapshot() throws { try begin() }
    public func exportSnapshot() throws -> String? { nil }
    public func beginSnapshot(importing id: String) throws { try beginSnapshot() }
    public func freezeWrites() throws -> Bool { false }
    public func unfreezeWrites() throws {}
    public var keepsLoadState: Bool { true }
    public var heldSnapshotsBlockWriters: Bool { false }
    public var supportsSavepoints: Bool { false }
    public var isLost: Bool { false }
    public func savepoint(_ step: SavepointStep) throws {
        throw FerryError.invalidOption("\(endpoint.redacted) cannot roll back part of a transaction: load it without --on-error reject")
    }
    public var setsRefusedRowsAside: Bool { false }
    public func setRefusedRowsAside(limit: Int) throws {
        throw FerryError.invalidOption("\(endpoint.redacted) cannot set refused rows aside: load it without --on-error reject")
    }
    public var refusedRows: [RefusedRow] { [] }

    public func stageWatermark(_ move: WatermarkMove, with table: TableSchema, key: [String]) throws {
        throw FerryError.invalidOption("\(endpoint.redacted) cannot move a watermark with its rows: --incremental into it is not supported")
    }

    public func moveRows(from staging: TableName, into table: TableSchema, columns: [Column], key: [String]?) throws -> MergeCounts? {
        throw FerryError.copyFailed(
            table: table.name, endpoint: endpoint.redacted,
            reason: "this target cannot move a staging table's rows into a table: load it without --resume")
    }

    /// Deletes the rows of `table` inside `range` (nil: every row) by their `key`: the keys read
    /// first (the connection reads or writes, not both at once), then deleted, in the caller's
    /// transaction. Returns the keys deleted (where deletes are staged, as the service's are, the
    /// rows go at `commit`).
    @discardableResult
    public func deleteRows(from table: TableSchema, key: [Column], in range: KeyRange?) throws -> Int {
        let reader = try self.reader(table: table, columns: key, keyRange: range, batchSize: 10_000)
        var batches: [RowBatch] = []
        do {
            while let b = try reader.next() { batches.append(b) }
            reader.close()
        } catch {
            reader.close()
            throw error
        }
        for b in batches { _ = try deleteRows(from: table, key: key, keys: b) }
        return batches.reduce(0) { $0 + $1.count }
    }

    /// A table named `staging` of `columns` typed as in `table` (as described), with no index,
    /// default or serial, and no key but `key` when given (a resumable load trims and continues
    /// by it): rows are loaded into it and moved into `table` whole later. Returns it as created.
    @discardableResult
    public func createStaging(_ staging: TableName, shapedLike table: TableSchema, columns: [Column], key: [String]? = nil) throws -> TableSchema {
        var schema = table
        for c in columns where schema.column(named: c.name) == nil {
            throw FerryError.columnNotFound(table: table.name, column: c.name)
        }
        schema.columns = columns.compactMap { c in table.column(named: c.name) }.map { c in
            var c = c
            c.serial = nil
            c.defaultValue = nil
            c.defaultExpression = nil
            c.updateExpression = nil
            return c
        }
        schema.primaryKey = key.flatMap { key in key.allSatisfy { k in schema.columns.contains { $0.name == k } } ? key : nil } ?? []
        schema.uniqueKeys = []
        schema.indexes = []
        schema.foreignKeys = []
        schema.checks = []
        return try createTable(schema, named: staging)
    }

    /// Plans and creates a table of `schema` named `name`; returns the table as created.
    @discardableResult
    public func createTable(_ schema: TableSchema, named name: TableName) throws -> TableSchema {
        let planned = try planTable(schema, named: name)
        try createTable(planned)
        return planned.schema
    }
}

/// A step of `Connection.savepoint`.
public enum SavepointStep: Sendable {
    case set, rollback, release

    /// The statement, the same in SQLite, PostgreSQL and MySQL (a fixed name: savepoints are
    /// never nested, one is set, then released or rolled back to and released).
    public var sql: String {
        switch self {
        case .set: return "SAVEPOINT ferry_rows"
        case .rollback: return "ROLLBACK TO SAVEPOINT ferry_rows"
        case .release: return "RELEASE SAVEPOINT ferry_rows"
        }
    }
}

/// What a keyed write did to the rows it was given.
public struct MergeCounts: Sendable, Hashable, Codable {
    public var inserted: Int64 = 0
    public var updated: Int64 = 0
    public var unchanged: Int64 = 0
    public var deleted: Int64 = 0
    public init(inserted: Int64 = 0, updated: Int64 = 0, unchanged: Int64 = 0, deleted: Int64 = 0) {
        self.inserted = inserted
        self.updated = updated
        self.unchanged = unchanged
        self.deleted = deleted
    }
    public static func + (a: MergeCounts, b: MergeCounts) -> MergeCounts {
        MergeCounts(inserted: a.inserted + b.inserted, updated: a.updated + b.updated, unchanged: a.unchanged + b.unchanged,
                    deleted: a.deleted + b.deleted)
    }
}

/// Delivers a table's rows in batches.
public protocol BatchReader: AnyObject {
    /// The next batch, or nil at the end. Batches are never empty, and end at the reader's
    /// `batchSize` rows or `RowBatch.byteLimit` bytes (`RowBatch.isFull`), whichever comes first.
    func next() throws -> RowBatch?
    func close()
}

/// Writes batches into a table. A writer is sequential: `write` returns when the batch is
/// with the server (or failed), and owns no thread; the copy engine overlaps reading with
/// writing.
public protocol BatchWriter: AnyObject {
    /// Writes every row of `batch` (one buffer per column, in the writer's column order).
    func write(_ batch: RowBatch) throws
    /// Flushes whatever the writer buffers. The enclosing transaction is the caller's.
    func finish() throws
    /// Gives up after a failure (of this writer, the reader or anything else): waits for or
    /// cancels whatever is in flight and leaves the connection ready for the caller's
    /// `rollback`. Never throws; calling it twice, or after `finish`, does nothing.
    func abort()
    /// Rows the target reported stored by this writer's statements (PostgreSQL's `COPY n`,
    /// MySQL's affected rows, SQLite's changes), once `finish` returned; nil when the writer
    /// cannot say, and the engine counts the table instead (a scan).
    var rowsStored: Int64? { get }
}

extension BatchWriter {
    public var rowsStored: Int64? { nil }

    /// Writes `batch` and finishes; aborts on failure.
    public func writeWhole(_ batch: RowBatch) throws {
        do {
            try write(batch)
            try finish()
        } catch {
            abort()
            throw error
        }
    }
}
