import FerryCore
import Foundation

/// A folder of CSV files as a Ferry database: one table per `NAME.csv`, its schema in
/// `NAME.schema.xml` (see `CSVCatalog`).
///
/// Writes are copy-on-write (`CSVTransaction`): every change goes to a temporary file in the
/// folder, renamed over the table's file at commit; outside `begin`/`commit` each call is its
/// own transaction. A keyed table's file is kept sorted by its key, which is what keyed reads
/// (`CSVBatchReader`) and keyed writes (`CSVKeyedMerge`) stream along. A read snapshot is a set
/// of hard links to the files of the moment (`CSVSnapshot`).
///
/// A source connection never creates or changes anything in the folder; a target creates the
/// folder when it is missing.
public final class CSVConnection: Connection {
    public let endpoint: Endpoint
    public let dialect: any Dialect = CSVDialect()
    public var defaultSchema: String { CSVCatalog.defaultSchema }
    public var capabilities: Capabilities { CSVDriver.capabilities }

    let catalog: CSVCatalog
    let role: ConnectionRole
    private var transaction: CSVTransaction?
    private var snapshot: CSVSnapshot?
    private var closed = false

    /// Where a table's rows are, as this connection sees them now (its transaction's new file,
    /// its snapshot's link, or the folder's file), and its schema.
    struct TableState {
        let stem: String
        let csv: String
        let schema: TableSchema
        /// The table's file in the folder, as messages name it.
        let shown: String
    }

    /// Opens the folder `directory`: a source's must exist; a target's is created if missing.
    public init(endpoint: Endpoint, directory: String, role: ConnectionRole) throws {
        self.endpoint = endpoint
        self.role = role
        catalog = CSVCatalog(directory: directory, endpoint: endpoint.redacted)
        let shown = endpoint.redacted
        if !CSVFileSystem.isDirectory(directory) {
            if CSVFileSystem.exists(directory) {
                throw FerryError.connectionFailed(endpoint: shown, reason: "\(directory) is a file, not a folder of CSV files")
            }
            guard role == .target else {
                throw FerryError.connectionFailed(
                    endpoint: shown, reason: "no folder \(directory) (a source folder must exist; a target's is created)")
            }
            do { try CSVFileSystem.makeDirectories(directory) } catch {
                throw FerryError.connectionFailed(endpoint: shown, reason: "\(error)")
            }
        }
        if role == .target && !FileManager.default.isWritableFile(atPath: directory) {
            throw FerryError.readOnlyTarget(endpoint: shown, reason: "the folder \(directory) is not writable; check its permissions or choose another target")
        }
    }

    deinit { close() }

    public func close() {
        guard !closed else { return }
        closed = true
        transaction?.rollback()
        transaction = nil
        snapshot?.release()
        snapshot = nil
    }

    // MARK: Catalog

    /// The folder reads come from: the snapshot's links while one is held.
    private var root: String { snapshot?.directory ?? catalog.directory }

    func state(_ name: TableName) throws -> TableState? {
        guard let stem = CSVCatalog.stem(name) else { return nil }
        if let change = transaction?.changes[stem] {
            switch change {
            case .dropped: return nil
            case .written(let csv, var schema, _):
                schema.rowEstimate = CSVFileSystem.identity(path: csv).flatMap { CSVFileFacts.shared.rows($0) }
                return TableState(stem: stem, csv: csv, schema: schema, shown: catalog.csvPath(stem))
            }
        }
        let csv = catalog.csvPath(stem, in: root)
        guard CSVFileSystem.identity(path: csv) != nil else { return nil }
        return TableState(
            stem: stem, csv: csv, schema: try catalog.schema(stem: stem, csv: csv, sidecar: catalog.schemaPath(stem, in: root)),
            shown: catalog.csvPath(stem))
    }

    private func requireState(_ name: TableName) throws -> TableState {
        guard let s = try state(name) else { throw FerryError.tableNotFound(table: name, endpoint: endpoint.redacted) }
        return s
    }

    public func listTables() throws -> [TableInfo] {
        var stems = Set(try catalog.stems(in: root))
        for (stem, change) in transaction?.changes ?? [:] {
            switch change {
            case .written: stems.insert(stem)
            case .dropped: stems.remove(stem)
            }
        }
        // Ferry's staging tables are its own business, as on every engine.
        return try stems.filter { !$0.hasPrefix(CopyEngine.internalPrefix) }.sorted().map { stem in
            TableInfo(name: TableName(stem), rowEstimate: try countRows(TableName(stem)))
        }
    }

    public func countRows(_ table: TableName) throws -> Int64 {
        try count(try requireState(table))
    }

    /// The exact row count: known when this process wrote or read the file in this state,
    /// else counted by framing the file's records (no fields parsed).
    private func count(_ s: TableState) throws -> Int64 {
        if let id = CSVFileSystem.identity(path: s.csv), let known = CSVFileFacts.shared.rows(id) { return known }
        let (rows, id) = try CSVRowSource.countRows(path: s.csv, skipsBlankLines: s.schema.columns.count > 1)
        CSVFileFacts.shared.setRows(id, rows)
        return rows
    }

    public func describe(_ table: TableName) throws -> TableSchema {
        let s = try requireState(table)
        var schema = s.schema
        if schema.rowEstimate == nil { schema.rowEstimate = try count(s) }
        return schema
    }

    public func tableExists(_ table: TableName) throws -> Bool {
        guard let stem = CSVCatalog.stem(table) else { return false }
        if let change = transaction?.changes[stem] {
            if case .dropped = change { return false }
            return true
        }
        return CSVFileSystem.identity(path: catalog.csvPath(stem, in: root)) != nil
    }

    /// CSV files have no views, triggers or sequences.
    public func listOtherObjects() throws -> [OtherObject] { [] }

    // MARK: Reading

    public func reader(table: TableSchema, columns: [Column], keyRange: KeyRange?, batchSize: Int) throws -> any BatchReader {
        let s = try requireState(table.name)
        // Key-hash buckets are filtered beside the reader, which reads the range without them
        // (a limit counts the rows that pass the filter).
        guard let buckets = keyRange?.buckets, var plain = keyRange else {
            return try CSVBatchReader(table: s.schema.name, csv: s.csv, shown: s.shown, schema: s.schema, columns: columns, keyRange: keyRange, batchSize: batchSize)
        }
        plain.buckets = nil
        plain.limit = nil
        let inner = try CSVBatchReader(table: s.schema.name, csv: s.csv, shown: s.shown, schema: s.schema, columns: columns, keyRange: plain, batchSize: batchSize)
        return try BucketFilteringReader(inner, columns: columns, filter: buckets, table: s.schema.name, limit: keyRange?.limit)
    }

    // MARK: Tables

    public func planTable(_ schema: TableSchema, named name: TableName) throws -> PlannedTable {
        guard let stem = CSVCatalog.stem(name) else { throw invalidName(name) }
        guard !schema.columns.isEmpty else {
            throw FerryError.invalidOption("table \(name) has no columns to write into \(stem).csv")
        }
        var seen = Set<String>()
        for c in schema.columns {
            if case .unsupported = c.logicalType {
                throw FerryError.unsupportedType(table: name, column: c.name, type: c.logicalType.description, target: endpoint.redacted)
            }
            guard !c.name.isEmpty, seen.insert(c.name).inserted, CSVValueCodec.isWritable(c.name) else {
                throw FerryError.invalidOption(
                    "table \(name): column name '\(c.name)' cannot head a column of \(stem).csv (empty, repeated, or a double quote joined to a combining mark)")
            }
        }
        for k in schema.primaryKey + schema.uniqueKeys.flatMap({ $0 }) where schema.column(named: k) == nil {
            throw FerryError.columnNotFound(table: name, column: k)
        }
        var stored = CSVCatalog.stored(schema, named: stem)
        stored.name = TableName(stem)
        var skipped = schema.checks.map {
            SkippedObject(kind: "check", name: $0.name ?? $0.expression, table: name.description, reason: "CSV files have no check constraints")
        }
        for c in schema.columns {
            if case .expression(let sql)? = c.defaultValue {
                skipped.append(SkippedObject(kind: "default", name: c.name, table: name.description, reason: "a CSV file holds values, not SQL (\(SkippedObject.shortened(sql)))"))
            }
        }
        let statement = "create \(catalog.csvPath(stem)) (header: \(stored.columns.map(\.name).joined(separator: ", "))) and \(catalog.schemaPath(stem))"
        return PlannedTable(schema: stored, statements: [statement], skipped: skipped)
    }

    public func createTable(_ table: PlannedTable) throws {
        let name = table.schema.name
        guard let stem = CSVCatalog.stem(name) else { throw invalidName(name) }
        let schema = CSVCatalog.stored(table.schema, named: stem)
        try changing { tx in
            guard try !tableExists(name) else { throw FerryError.targetTableExists(table: name, endpoint: endpoint.redacted) }
            let sink = try CSVRowSink(path: catalog.temporaryPath(stem, "csv.tmp"))
            do {
                try sink.writeHeader(schema.columns.map(\.name))
                let id = try sink.finish()
                CSVFileFacts.shared.setRows(id, 0)
                if let key = schema.preferredKey?.columns {
                    CSVFileFacts.shared.setLastKey(id, signature: CSVFileFacts.signature(key.compactMap { schema.column(named: $0) }), nil)
                }
            } catch {
                sink.discard()
                throw error
            }
            tx.set(stem, .written(csv: sink.path, schema: schema, newSchema: true))
        }
    }

    public func dropTable(_ name: TableName) throws {
        try changing { tx in
            guard let stem = CSVCatalog.stem(name), try tableExists(name) else { return }
            tx.set(stem, .dropped)
        }
    }

    public func swapTable(_ staging: TableName, into target: TableName) throws {
        guard let stem = CSVCatalog.stem(target) else { throw invalidName(target) }
        try changing { tx in
            let s = try requireState(staging)
            guard s.stem != stem else { return }
            // The staging table's file under a temporary name of the target: a second hard link
            // (no copy), renamed over the target's file at commit.
            let path = catalog.temporaryPath(stem, "csv.tmp")
            if !CSVFileSystem.link(s.csv, path) {
                let fd = try CSVFileSystem.createExclusive(path)
                defer { CSVFileSystem.closeFile(fd) }
                tx.adopt(path)
                try CSVFileSystem.copyFile(s.csv, to: fd, path: path)
                try CSVFileSystem.sync(fd, path: path)
            }
            tx.set(stem, .written(csv: path, schema: CSVCatalog.stored(s.schema, named: stem), newSchema: true))
            tx.set(s.stem, .dropped)
        }
    }

    /// CSV files have no indexes or foreign keys: every one is skipped, with the reason.
    public func planObjects(
        _ schema: TableSchema, on table: TableName, indexesOn: TableName, replacing: TableName?, avoiding: Set<String>
    ) throws -> PlannedObjects {
        var planned = PlannedObjects(table: table, indexesOn: indexesOn)
        planned.skipped = schema.indexes.map {
            SkippedObject(kind: "index", name: $0.name, table: table.description, reason: "CSV files have no indexes")
        } + schema.foreignKeys.map {
            SkippedObject(kind: "foreign key", name: $0.name ?? $0.columns.joined(separator: ","), table: table.description, reason: "CSV files have no foreign keys")
        }
        return planned
    }

    public func createIndexes(_ objects: PlannedObjects) throws -> [SkippedObject] { [] }
    public func createForeignKeys(_ objects: PlannedObjects) throws -> [SkippedObject] { [] }

    /// Nothing to move: a row written without its serial value gets one more than the
    /// largest in the file (`CSVBatchWriter`).
    public func resetSerial(_ table: TableName, schema: TableSchema) throws {}

    private func invalidName(_ name: TableName) -> FerryError {
        .invalidOption(
            "table name '\(name)' cannot be a file of \(catalog.directory): a CSV table's name must not hold '/', '\\', '..' or NUL, start with '.', "
                + "be longer than \(CSVCatalog.maxNameBytes) bytes, or name a schema other than \(CSVCatalog.defaultSchema)")
    }

    // MARK: Writing

    public func writer(into table: TableSchema, columns: [Column]) throws -> any BatchWriter {
        try requireWritable()
        return try CSVBatchWriter(connection: self, state: try requireState(table.name), columns: columns)
    }

    public func upsertRows(into table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws -> Int {
        _ = try mergeRows(into: table, columns: columns, key: key, rows: rows)
        return rows.count
    }

    public func mergeRows(into table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws -> MergeCounts {
        guard !rows.isEmpty else { return MergeCounts() }
        return try changing { tx in
            let s = try requireState(table.name)
            let result = try CSVKeyedMerge.merge(s, catalog: catalog, columns: columns, key: key, rows: rows)
            if let file = result.file { tx.set(s.stem, .written(csv: file, schema: s.schema, newSchema: false)) }
            return result.counts
        }
    }

    public func deleteRows(from table: TableSchema, key: [Column], keys: RowBatch) throws -> Int {
        guard !keys.isEmpty else { return 0 }
        return try changing { tx in
            let s = try requireState(table.name)
            let result = try CSVKeyedMerge.delete(s, catalog: catalog, key: key, keys: keys)
            if let file = result.file { tx.set(s.stem, .written(csv: file, schema: s.schema, newSchema: false)) }
            return Int(result.counts.deleted)
        }
    }

    // MARK: Transactions

    public func begin() throws {
        guard transaction == nil else {
            throw FerryError.invalidOption("a transaction is open on \(endpoint.redacted) already")
        }
        transaction = CSVTransaction(catalog: catalog)
    }

    /// Hard links to every table's files, read until the snapshot ends.
    public func beginSnapshot() throws {
        guard snapshot == nil else { return }
        snapshot = try CSVSnapshot(catalog: catalog)
    }

    public func commit() throws {
        if let s = snapshot {
            snapshot = nil
            s.release()
        }
        guard let tx = transaction else { return }
        transaction = nil
        try tx.commit()
    }

    public func rollback() throws {
        if let s = snapshot {
            snapshot = nil
            s.release()
        }
        transaction?.rollback()
        transaction = nil
    }

    /// The transaction a write joins: the open one, or a new one the write commits itself
    /// (`implicit`) when it ends.
    func writeTransaction() throws -> (transaction: CSVTransaction, implicit: Bool) {
        try requireWritable()
        if let tx = transaction { return (tx, false) }
        let tx = CSVTransaction(catalog: catalog)
        transaction = tx
        return (tx, true)
    }

    /// Ends a transaction a write began by itself.
    func endImplicit(_ tx: CSVTransaction, commit: Bool) throws {
        guard transaction === tx else { return }
        transaction = nil
        if commit { try tx.commit() } else { tx.rollback() }
    }

    /// Runs `body` in the open transaction, or in one of its own, committed when it returns.
    private func changing<T>(_ body: (CSVTransaction) throws -> T) throws -> T {
        let (tx, implicit) = try writeTransaction()
        do {
            let result = try body(tx)
            if implicit { try endImplicit(tx, commit: true) }
            return result
        } catch {
            if implicit { try? endImplicit(tx, commit: false) }
            throw error
        }
    }

    func requireWritable() throws {
        if role == .source {
            throw FerryError.readOnlyTarget(endpoint: endpoint.redacted, reason: "it was opened as a source, which is only read")
        }
        if snapshot != nil {
            throw FerryError.readOnlyTarget(endpoint: endpoint.redacted, reason: "this connection holds a read snapshot")
        }
    }
}
