import FerryCore
import Foundation

/// Appends rows to a table, copy-on-write: the new state is a temporary file that starts as a
/// copy of the table's file (a reflink or an in-kernel copy, not a parse) and gets the new rows
/// after it; `finish` hands it to the transaction, which renames it over the table's file at
/// commit. A failed load leaves the table's file as it was.
///
/// A keyed table's file stays sorted by its key. Rows that arrive in key order after the last
/// key of the file are simply appended (the common case: a copy reads its source in key
/// order). From the first row out of order on, rows are sorted externally instead (runs of at
/// most 100,000 rows or 32 MB, then a k-way merge with the file), so memory stays bounded
/// whatever the size of the load. A key two rows share is refused, naming it.
///
/// Columns the writer is not given get their serial value (one more than the largest so far),
/// their default, or NULL; a NULL in a NOT NULL column is refused.
final class CSVBatchWriter: BatchWriter {
    private enum Fill {
        case null
        case field(String)
        /// The next value of a serial column.
        case serial(Int64)
    }

    private let connection: CSVConnection
    /// The committed state of the table's file the write started from (see `CSVTransaction.touch`).
    private let base: CSVFileSystem.Identity??
    private let stem: String
    /// The table's file, as messages name it.
    private let shown: String
    private let table: TableName
    private let schema: TableSchema
    private let encoder: CSVRowEncoder
    private var fills: [Fill]
    private let keyReader: CSVKeyReader?
    private let signature: String
    /// The new file: a copy of the table's, then the rows appended in key order.
    private var appended: CSVRowSink?
    /// The last key in `appended`.
    private var lastKey: CSVKey?
    /// Rows out of key order, once there are any.
    private var sorter: CSVExternalSort?
    private var existingRows: Int64?
    private var added: Int64 = 0
    private var ended = false

    init(connection: CSVConnection, state: CSVConnection.TableState, columns: [Column]) throws {
        self.connection = connection
        stem = state.stem
        shown = state.shown
        schema = state.schema
        table = state.schema.name
        encoder = try CSVRowEncoder(schema: state.schema, columns: columns)
        let encoder = self.encoder
        // Only the columns the writer is not given are filled in.
        fills = state.schema.columns.indices.map { c in encoder.sources[c] == nil ? Self.fill(for: state.schema.columns[c]) : .null }
        let stored = state.schema
        let key = stored.preferredKey?.columns ?? []
        let keyColumns = key.compactMap { stored.column(named: $0) }
        signature = CSVFileFacts.signature(keyColumns)
        keyReader = key.isEmpty ? nil : CSVKeyReader(
            indexes: key.compactMap { k in stored.columns.firstIndex { $0.name == k } },
            types: keyColumns.map(\.logicalType), names: key, table: stored.name)

        let catalog = connection.catalog
        try connection.requireWritable()
        // The committed file this write starts from, when it is not the transaction's own.
        let current = CSVFileSystem.identity(path: state.csv)
        base = state.csv == catalog.csvPath(stem) ? .some(current) : nil
        do {
            let sink = try CSVRowSink(path: catalog.temporaryPath(stem, "csv.tmp"))
            appended = sink
            if let current, current.size > 0 {
                try learnExisting(state.csv, identity: current)
                try sink.copy(from: state.csv)
            } else {
                existingRows = 0
                try sink.writeHeader(schema.columns.map(\.name))
            }
        } catch {
            appended?.discard()
            throw error
        }
    }

    deinit { abort() }

    /// What the file holds already: its row count and, for a keyed table, its last key (known
    /// when this process wrote or read the file, else read from it), and the largest value of
    /// each serial column the writer must fill in.
    private func learnExisting(_ path: String, identity: CSVFileSystem.Identity) throws {
        let facts = CSVFileFacts.shared
        existingRows = facts.rows(identity)
        var needsKey = false
        if keyReader != nil {
            if let known = facts.lastKey(identity, signature: signature) { lastKey = known } else { needsKey = true }
        }
        let serials = fills.indices.filter { if case .serial = fills[$0] { return true } else { return false } }
        guard needsKey || !serials.isEmpty || existingRows == nil else { return }
        if !needsKey && serials.isEmpty {
            existingRows = try CSVRowSource.countRows(path: path, skipsBlankLines: schema.columns.count > 1).rows
            return
        }
        // One pass over the rows: the last key (checking the order), the serial maximums.
        let source = try CSVRowSource(path: path, shown: shown, table: table)
        defer { source.close() }
        source.skipsBlankLines = schema.columns.count > 1
        var previous: CSVKey?
        var maxima = [Int64](repeating: 0, count: schema.columns.count)
        while let fields = try source.next() {
            guard fields.count == schema.columns.count else {
                throw FerryError.invalidValue(
                    table: table, column: nil, key: nil,
                    message: "row \(source.rowsRead) of \(shown) has \(fields.count) fields where the header names \(schema.columns.count) columns")
            }
            if needsKey, let reader = keyReader {
                let k = try reader.key(fields, row: source.rowsRead)
                if let previous {
                    let order = CSVKey.compare(previous, k)
                    if order == 0 { throw CSVExternalSort.duplicate(k, reader: reader, table: table) }
                    if order > 0 { throw CSVExternalSort.unsorted(shown, row: source.rowsRead, reader: reader, table: table) }
                }
                previous = k
            }
            for i in serials {
                if let v = Int64(fields[i]), v > maxima[i] { maxima[i] = v }
            }
        }
        if needsKey {
            lastKey = previous
            facts.setLastKey(identity, signature: signature, previous)
        }
        existingRows = source.rowsRead
        facts.setRows(identity, source.rowsRead)
        for i in serials { fills[i] = .serial(maxima[i] + 1) }
    }

    /// What a column the writer is not given holds.
    private static func fill(for column: Column) -> Fill {
        if column.serial != nil, column.logicalType.integerRange != nil, column.logicalType != .boolean { return .serial(1) }
        return CSVValueCodec.defaultField(for: column).map { .field($0) } ?? .null
    }

    func write(_ batch: RowBatch) throws {
        guard !ended, let appended else { throw CSVFileError("the writer of \(table) has ended") }
        for r in 0..<batch.count {
            var fields: [String] = []
            fields.reserveCapacity(schema.columns.count)
            for (c, given) in try encoder.fields(batch, row: r).enumerated() {
                var field: String
                if let given {
                    field = given
                } else {
                    switch fills[c] {
                    case .null: field = CSVValueCodec.nullField
                    case .field(let f): field = f
                    case .serial(let next):
                        field = String(next)
                        fills[c] = .serial(next + 1)
                    }
                    if !schema.columns[c].isNullable && field == CSVValueCodec.nullField {
                        throw BatchRowError(row: r, error: .invalidValue(
                            table: nil, column: schema.columns[c].name, key: nil, message: "NULL in a NOT NULL column (the load does not give it, and it has no default)"))
                    }
                }
                fields.append(field)
            }
            if let reader = keyReader {
                let key: CSVKey
                do { key = try reader.key(fields, row: added + 1) } catch let e as FerryError {
                    throw BatchRowError(row: r, error: e)
                }
                if let sorter {
                    try sorter.add(.init(key: key, fields: fields))
                } else if let last = lastKey, CSVKey.compare(key, last) <= 0 {
                    if CSVKey.compare(key, last) == 0 {
                        throw BatchRowError(row: r, error: .invalidValue(
                            table: nil, column: nil, key: nil,
                            message: "another row has this key; a keyed CSV table holds one row per key (\(reader.names.joined(separator: ", ")))"))
                    }
                    // Out of order from here on: sort what follows, merge at the end.
                    let s = CSVExternalSort(catalog: connection.catalog, stem: stem, table: table, keyReader: reader)
                    sorter = s
                    try s.add(.init(key: key, fields: fields))
                } else {
                    try appended.write(fields)
                    lastKey = key
                }
            } else {
                try appended.write(fields)
            }
            added += 1
        }
    }

    func finish() throws {
        guard !ended, let appended else { return }
        ended = true
        let file: String
        do {
            let path: String
            let identity: CSVFileSystem.Identity
            var rows = existingRows.map { $0 + added }
            if let sorter {
                // Rows came out of order: merge the file (in order) with the sorted runs.
                try appended.finish()
                let ordered = try CSVRowSource(path: appended.path, shown: shown, table: table)
                ordered.skipsBlankLines = schema.columns.count > 1
                let out = try CSVRowSink(path: connection.catalog.temporaryPath(stem, "csv.tmp"))
                do {
                    try out.writeHeader(schema.columns.map(\.name))
                    lastKey = try sorter.merge([ordered], into: out)
                    ordered.close()
                    identity = try out.finish()
                } catch {
                    ordered.close()
                    out.discard()
                    throw error
                }
                appended.discard()
                sorter.discard()
                path = out.path
                rows = out.rows
            } else {
                identity = try appended.finish()
                path = appended.path
            }
            if let rows { CSVFileFacts.shared.setRows(identity, rows) }
            if keyReader != nil { CSVFileFacts.shared.setLastKey(identity, signature: signature, lastKey) }
            file = path
        } catch {
            cleanUp()
            throw error
        }
        // The write joins the transaction open now (Ferry's service makes the writer, then
        // begins the transaction it writes in), or commits by itself.
        let transaction: CSVTransaction
        let implicit: Bool
        do { (transaction, implicit) = try connection.writeTransaction() } catch {
            CSVFileSystem.remove(file)
            throw error
        }
        transaction.touch(stem, base: base)
        transaction.set(stem, .written(csv: file, schema: schema, newSchema: false))
        if implicit { try connection.endImplicit(transaction, commit: true) }
    }

    /// Deletes the files made so far: the table stays as it was (the transaction, the caller's,
    /// has nothing of this write).
    func abort() {
        guard !ended else { return }
        ended = true
        cleanUp()
    }

    private func cleanUp() {
        appended?.discard()
        sorter?.discard()
        sorter = nil
    }
}
