import FerryCore
import Foundation

/// Keyed writes (upsert, merge, delete by key) as one pass over the table's file into a new
/// temporary file: the batch — one batch, so it fits in memory — is encoded and sorted by key,
/// then merged with the file as it streams by (the file is sorted by the same key): rows of the
/// file before the next key of the batch are copied, a row with that key is updated (or kept,
/// when every value is the same), a batch key the file lacks is inserted in its place.
///
/// A table without a key (one whose schema was inferred) is matched by the key the caller
/// names, with the batch's keys in a hash table, and new rows are added at the end.
enum CSVKeyedMerge {
    /// The file a keyed write made, to take the table's place at commit.
    struct Result {
        var counts: MergeCounts
        /// Nil when nothing changed (the table keeps its file).
        var file: String?
    }

    /// Inserts the rows of `rows` (laid out for `columns`) whose `key` is new, and rewrites the
    /// rows whose key exists and whose values differ.
    static func merge(_ state: CSVConnection.TableState, catalog: CSVCatalog, columns: [Column], key: [String], rows: RowBatch) throws -> Result {
        let schema = state.schema
        let table = schema.name
        guard !key.isEmpty else { throw FerryError.noKey(table: table) }
        for k in key where !columns.contains(where: { $0.name == k }) {
            throw FerryError.invalidOption("table \(table): keyed writes need the key column \(k) among the columns written")
        }
        let fileKey = schema.preferredKey?.columns ?? []
        guard fileKey.isEmpty || fileKey == key else {
            throw FerryError.invalidOption(
                "table \(table)'s file is sorted by its key (\(fileKey.joined(separator: ", "))); keyed writes must use that key, not (\(key.joined(separator: ", ")))")
        }
        let encoder = try CSVRowEncoder(schema: schema, columns: columns)
        let reader = try keyReader(schema, key)
        let defaults = schema.columns.map { c in CSVValueCodec.defaultField(for: c) ?? CSVValueCodec.nullField }

        // The batch, encoded (nil: a column not written) and keyed.
        var incoming: [(key: CSVKey, fields: [String?], row: Int)] = []
        incoming.reserveCapacity(rows.count)
        for r in 0..<rows.count {
            let fields = try encoder.fields(rows, row: r)
            let key: CSVKey
            do { key = try reader.key(fields.map { $0 ?? "" }, row: Int64(r + 1)) } catch let e as FerryError {
                throw BatchRowError(row: r, error: e)
            }
            incoming.append((key, fields, r))
        }
        incoming.sort { CSVKey.compare($0.key, $1.key) < 0 }
        for i in incoming.indices.dropFirst() where CSVKey.compare(incoming[i - 1].key, incoming[i].key) == 0 {
            throw FerryError.invalidValue(
                table: nil, column: nil, key: reader.describe(incoming[i].key), message: "the rows written hold this key twice")
        }

        /// The row as inserted: the columns not written get their default, or NULL.
        func inserted(_ item: (key: CSVKey, fields: [String?], row: Int)) throws -> [String] {
            try item.fields.enumerated().map { c, f in
                let field = f ?? defaults[c]
                if field == CSVValueCodec.nullField && !schema.columns[c].isNullable {
                    throw BatchRowError(row: item.row, error: .invalidValue(
                        table: nil, column: schema.columns[c].name, key: nil, message: "NULL in a NOT NULL column (the write does not give it, and it has no default)"))
                }
                return field
            }
        }
        /// The row as updated: the columns written replace the file's.
        func updated(_ existing: [String], _ item: (key: CSVKey, fields: [String?], row: Int)) -> [String] {
            zip(existing, item.fields).map { old, new in new ?? old }
        }

        var counts = MergeCounts()
        let source = try open(state)
        defer { source.close() }
        let out = try CSVRowSink(path: catalog.temporaryPath(state.stem, "csv.tmp"))
        do {
            try out.writeHeader(schema.columns.map(\.name))
            var lastKey: CSVKey?
            if !fileKey.isEmpty {
                // Sorted merge: the file and the batch in one key order.
                var j = 0
                var previous: CSVKey?
                while let fields = try source.next() {
                    try check(fields, source, schema)
                    let k = try reader.key(fields, row: source.rowsRead)
                    if let previous, CSVKey.compare(previous, k) >= 0 {
                        throw CSVKey.compare(previous, k) == 0
                            ? CSVExternalSort.duplicate(k, reader: reader, table: table)
                            : CSVExternalSort.unsorted(source.shown, row: source.rowsRead, reader: reader, table: table)
                    }
                    previous = k
                    while j < incoming.count && CSVKey.compare(incoming[j].key, k) < 0 {
                        try out.write(try inserted(incoming[j]))
                        counts.inserted += 1
                        j += 1
                    }
                    if j < incoming.count && CSVKey.compare(incoming[j].key, k) == 0 {
                        let new = updated(fields, incoming[j])
                        if new == fields { counts.unchanged += 1 } else { counts.updated += 1 }
                        try out.write(new)
                        j += 1
                    } else {
                        try out.write(fields)
                    }
                    lastKey = k
                }
                while j < incoming.count {
                    try out.write(try inserted(incoming[j]))
                    counts.inserted += 1
                    lastKey = incoming[j].key
                    j += 1
                }
            } else {
                // No key order: match by a hash of the key; new rows go at the end.
                var index: [CSVKey: Int] = [:]
                for (i, item) in incoming.enumerated() { index[item.key] = i }
                var matched = [Bool](repeating: false, count: incoming.count)
                while let fields = try source.next() {
                    try check(fields, source, schema)
                    let k = try reader.key(fields, row: source.rowsRead)
                    if let i = index[k] {
                        let new = updated(fields, incoming[i])
                        if !matched[i] {
                            if new == fields { counts.unchanged += 1 } else { counts.updated += 1 }
                            matched[i] = true
                        }
                        try out.write(new)
                    } else {
                        try out.write(fields)
                    }
                }
                for i in incoming.indices.sorted(by: { incoming[$0].row < incoming[$1].row }) where !matched[i] {
                    try out.write(try inserted(incoming[i]))
                    counts.inserted += 1
                }
            }
            guard counts.inserted + counts.updated > 0 else {
                out.discard()
                return Result(counts: counts, file: nil)
            }
            let identity = try out.finish()
            CSVFileFacts.shared.setRows(identity, out.rows)
            if !fileKey.isEmpty { CSVFileFacts.shared.setLastKey(identity, signature: CSVFileFacts.signature(keyColumns(schema, fileKey)), lastKey) }
            return Result(counts: counts, file: out.path)
        } catch {
            out.discard()
            throw error
        }
    }

    /// Deletes the rows of the table whose `key` equals one of `keys` (laid out for `key`).
    static func delete(_ state: CSVConnection.TableState, catalog: CSVCatalog, key: [Column], keys: RowBatch) throws -> Result {
        let schema = state.schema
        let table = schema.name
        guard !key.isEmpty else { throw FerryError.noKey(table: table) }
        let stored = try key.map { k -> Column in
            guard let c = schema.column(named: k.name) else { throw FerryError.columnNotFound(table: table, column: k.name) }
            return c
        }
        // The keys as the file writes them, read back as the file's values are.
        let listReader = CSVKeyReader(indexes: Array(stored.indices), types: stored.map(\.logicalType), names: stored.map(\.name), table: table)
        var doomed = Set<CSVKey>()
        for r in 0..<keys.count {
            let fields = zip(key.indices, stored).map { i, s in
                CSVValueCodec.field(keys.columns[i], row: r, type: key[i].logicalType, stored: s.logicalType)
            }
            doomed.insert(try listReader.key(fields, row: Int64(r + 1)))
        }
        let reader = try keyReader(schema, stored.map(\.name))
        let source = try open(state)
        defer { source.close() }
        let out = try CSVRowSink(path: catalog.temporaryPath(state.stem, "csv.tmp"))
        var deleted: Int64 = 0
        do {
            try out.writeHeader(schema.columns.map(\.name))
            while let fields = try source.next() {
                try check(fields, source, schema)
                if doomed.contains(try reader.key(fields, row: source.rowsRead)) {
                    deleted += 1
                } else {
                    try out.write(fields)
                }
            }
            guard deleted > 0 else {
                out.discard()
                return Result(counts: MergeCounts(), file: nil)
            }
            let identity = try out.finish()
            CSVFileFacts.shared.setRows(identity, out.rows)
            return Result(counts: MergeCounts(deleted: deleted), file: out.path)
        } catch {
            out.discard()
            throw error
        }
    }

    private static func keyColumns(_ schema: TableSchema, _ key: [String]) -> [Column] {
        key.compactMap { schema.column(named: $0) }
    }

    private static func keyReader(_ schema: TableSchema, _ key: [String]) throws -> CSVKeyReader {
        var indexes: [Int] = []
        for k in key {
            guard let i = schema.columns.firstIndex(where: { $0.name == k }) else { throw FerryError.columnNotFound(table: schema.name, column: k) }
            indexes.append(i)
        }
        return CSVKeyReader(indexes: indexes, types: indexes.map { schema.columns[$0].logicalType }, names: key, table: schema.name)
    }

    private static func open(_ state: CSVConnection.TableState) throws -> CSVRowSource {
        let source = try CSVRowSource(path: state.csv, shown: state.shown, table: state.schema.name)
        source.skipsBlankLines = state.schema.columns.count > 1
        if let header = source.header, header != state.schema.columns.map(\.name) {
            source.close()
            throw FerryError.invalidValue(
                table: state.schema.name, column: nil, key: nil,
                message: "the header of \(state.shown) (\(header.joined(separator: ", "))) does not name the table's columns")
        }
        return source
    }

    private static func check(_ fields: [String], _ source: CSVRowSource, _ schema: TableSchema) throws {
        guard fields.count == schema.columns.count else {
            throw FerryError.invalidValue(
                table: schema.name, column: nil, key: nil,
                message: "row \(source.rowsRead) of \(source.shown) has \(fields.count) fields where the header names \(schema.columns.count) columns")
        }
    }
}
