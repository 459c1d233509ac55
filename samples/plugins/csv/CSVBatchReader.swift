import FerryCore
import Foundation

/// Reads a table's file into batches, streaming: memory holds one batch (and, for a descending
/// read, at most `limit` rows or one chunk of them).
///
/// A keyed table's file is sorted by its key, so every `KeyRange` is served while streaming:
/// rows up to `after` are skipped (or not even read, when a page ended there before: see
/// `CSVFileFacts`), the read stops past `upTo` or at `limit`, a key list (`keys`) filters rows,
/// and a descending read keeps the range's last `limit` rows and returns them largest first.
/// Key-hash buckets are filtered by `BucketFilteringReader` around this reader. A `filter`
/// (SQL from `--where`) is refused: a folder of CSV files runs no SQL.
final class CSVBatchReader: BatchReader {
    /// How a requested column is read from its field.
    private enum Plan {
        /// Parsed as this type (the stored one, or a compatible one a cast asked for).
        case value(LogicalType)
        /// The value's text (a cast to text: `textForm`).
        case text
        /// The value's JSON (`jsonForm`).
        case json
        /// The field's own bytes (`nativeForm`).
        case native
    }

    private let table: TableName
    private let source: CSVRowSource
    private let schema: TableSchema
    private let columns: [Column]
    private let types: [LogicalType]
    /// Per requested column: its position among the file's fields, and how it is read.
    private let positions: [Int]
    private let plans: [Plan]
    private let batchSize: Int

    // Key range state.
    private var keyReader: CSVKeyReader?
    private let signature: String
    private let after: CSVKey?
    private var passedAfter: Bool
    private let upTo: CSVKey?
    private var remaining: Int?
    private let descending: Bool
    private var listReader: CSVKeyReader?
    private let list: [CSVKey]?
    private var previous: CSVKey?
    /// The last row returned: its key, and where the file goes on after it (a read may have
    /// looked at rows past it: the one past `upTo`, rows not in `keys`).
    private var lastReturnedKey: CSVKey?
    private var lastReturnedEnd = CSVResumePoint(offset: 0, rowsBefore: 0)
    /// The read runs from the top of the file to its end: what it learns (row count, last
    /// key) is a fact about the whole file.
    private let whole: Bool
    private var done = false
    /// A descending read's rows, largest key first, once gathered.
    private var reversed: CSVReversedRows?

    init(table: TableName, csv: String, shown: String, schema: TableSchema, columns: [Column], keyRange: KeyRange?, batchSize: Int) throws {
        self.table = table
        self.schema = schema
        self.columns = columns
        self.types = columns.map(\.logicalType)
        self.batchSize = max(batchSize, 1)
        var positions: [Int] = []
        var plans: [Plan] = []
        for c in columns {
            guard let i = schema.columns.firstIndex(where: { $0.name == c.name }) else {
                throw FerryError.columnNotFound(table: table, column: c.name)
            }
            positions.append(i)
            let stored = schema.columns[i].logicalType
            if c.readHints.contains(.nativeForm) {
                plans.append(.native)
            } else if c.readHints.contains(.jsonForm) {
                plans.append(.json)
            } else if c.readHints.contains(.textForm) || (c.logicalType.isTextual && !stored.isTextual) {
                plans.append(.text)
            } else {
                plans.append(.value(c.logicalType))
            }
        }
        self.positions = positions
        self.plans = plans

        let fileKey = schema.preferredKey?.columns ?? []
        let keyColumns = try fileKey.map { k -> Column in
            guard let c = schema.column(named: k) else { throw FerryError.columnNotFound(table: table, column: k) }
            return c
        }
        signature = CSVFileFacts.signature(keyColumns)
        var after: CSVKey?
        var upTo: CSVKey?
        var list: [CSVKey]?
        if let range = keyRange {
            if let filter = range.filter {
                throw FerryError.invalidOption(
                    "table \(table): a folder of CSV files runs no SQL, so --where '\(filter.prefix(60))' cannot be applied; copy the whole table, then filter it in the target")
            }
            if !range.key.isEmpty {
                guard range.key == fileKey else {
                    throw FerryError.invalidOption(
                        fileKey.isEmpty
                            ? "table \(table) has no key in its sidecar, so its file is in no key order: it cannot be read by key (\(range.key.joined(separator: ", "))); give it a primary key in \(table.name).schema.xml"
                            : "table \(table)'s file is kept sorted by its key (\(fileKey.joined(separator: ", "))), not by (\(range.key.joined(separator: ", ")))")
                }
                keyReader = CSVKeyReader(
                    indexes: keyColumns.compactMap { k in schema.columns.firstIndex { $0.name == k.name } },
                    types: keyColumns.map(\.logicalType), names: fileKey, table: table)
                let keyTypes = keyColumns.map(\.logicalType)
                func bound(_ values: [Value]?, _ what: String) throws -> CSVKey? {
                    guard let values else { return nil }
                    guard values.count == keyTypes.count else {
                        throw FerryError.invalidOption("table \(table): \(what) has \(values.count) values for a key of \(keyTypes.count) columns")
                    }
                    do { return try CSVKey(values: values, types: keyTypes) } catch {
                        throw FerryError.invalidOption("table \(table): \(what) \(values) does not fit the key's types: \(error)")
                    }
                }
                after = try bound(range.after, "the lower bound")
                upTo = try bound(range.upTo, "the upper bound")
            }
            if let keys = range.keys {
                let listColumns = try range.keyColumns.map { k -> Column in
                    guard let c = schema.column(named: k) else { throw FerryError.columnNotFound(table: table, column: k) }
                    return c
                }
                let listTypes = listColumns.map(\.logicalType)
                listReader = CSVKeyReader(
                    indexes: listColumns.compactMap { k in schema.columns.firstIndex { $0.name == k.name } },
                    types: listTypes, names: range.keyColumns, table: table)
                list = try keys.map { try CSVKey(values: $0, types: listTypes) }.sorted()
            }
            remaining = range.limit.map { max($0, 0) }
            descending = range.descending && keyReader != nil
        } else {
            descending = false
        }
        self.after = after
        self.upTo = upTo
        self.list = list
        self.passedAfter = after == nil
        whole = after == nil && upTo == nil && list == nil && remaining == nil
        // A page that starts after the key another page ended on starts at that page's end.
        let signature = self.signature
        var resume: ((CSVFileSystem.Identity) -> CSVResumePoint?)?
        if let key = after, !(keyRange?.descending ?? false) {
            resume = { CSVFileFacts.shared.resumePoint($0, signature: signature, after: key) }
        }
        source = try CSVRowSource(path: csv, shown: shown, table: table, resumeAt: resume)
        source.skipsBlankLines = schema.columns.count > 1
        if source.resumed {
            passedAfter = true
        } else if let header = source.header, header != schema.columns.map(\.name) {
            source.close()
            throw FerryError.invalidValue(
                table: table, column: nil, key: nil,
                message: "the header of \(shown) (\(header.joined(separator: ", "))) does not name the table's columns (\(schema.columns.map(\.name).joined(separator: ", ")))")
        }
    }

    deinit { close() }

    func close() {
        source.close()
        reversed?.discard()
    }

    func next() throws -> RowBatch? {
        if descending {
            if reversed == nil { reversed = try gatherReversed() }
            return try reversed?.next(into: self)
        }
        guard !done, remaining != 0 else { return nil }
        var batch = RowBatch(types: types, capacity: min(batchSize, 1024))
        var n = 0
        while !batch.isFull(rows: n, limit: batchSize) {
            guard let (fields, _) = try nextInRange() else {
                done = true
                break
            }
            try append(fields, row: source.rowsRead, to: &batch)
            n += 1
            if let r = remaining {
                remaining = r - 1
                if r - 1 == 0 {
                    done = true
                    break
                }
            }
        }
        if let key = lastReturnedKey, n > 0 {
            // Where the next page starts, should it start after this batch's last key.
            CSVFileFacts.shared.setResumePoint(source.identity, signature: signature, after: key, lastReturnedEnd)
        }
        return n == 0 ? nil : batch
    }

    /// The next row in the range (fields and key), ascending; nil past its end.
    private func nextInRange() throws -> ([String], CSVKey?)? {
        while let fields = try source.next() {
            let row = source.rowsRead
            guard fields.count == schema.columns.count else {
                throw FerryError.invalidValue(
                    table: table, column: nil, key: nil,
                    message: "row \(row) of \(source.shown) has \(fields.count) fields where the header names \(schema.columns.count) columns")
            }
            var key: CSVKey?
            if let reader = keyReader {
                let k = try reader.key(fields, row: row)
                if let previous {
                    let order = CSVKey.compare(previous, k)
                    if order == 0 { throw CSVExternalSort.duplicate(k, reader: reader, table: table) }
                    if order > 0 { throw CSVExternalSort.unsorted(source.shown, row: row, reader: reader, table: table) }
                }
                previous = k
                key = k
                if !passedAfter, let after {
                    if CSVKey.compare(k, after) <= 0 { continue }
                    passedAfter = true
                }
                if let upTo, CSVKey.compare(k, upTo) > 0 {
                    // Sorted: nothing further is in range.
                    return nil
                }
            }
            if let list, let reader = listReader {
                guard Self.contains(list, try reader.key(fields, row: row)) else { continue }
            }
            lastReturnedKey = key
            lastReturnedEnd = CSVResumePoint(offset: source.offset, rowsBefore: source.rowsRead)
            return (fields, key)
        }
        if whole {
            // Read from the top to the end: the file's row count (and last key) are known now.
            CSVFileFacts.shared.setRows(source.identity, source.rowsRead)
            if keyReader != nil { CSVFileFacts.shared.setLastKey(source.identity, signature: signature, previous) }
        }
        return nil
    }

    private static func contains(_ sorted: [CSVKey], _ key: CSVKey) -> Bool {
        var lo = 0, hi = sorted.count
        while lo < hi {
            let mid = (lo + hi) / 2
            let c = CSVKey.compare(sorted[mid], key)
            if c == 0 { return true }
            if c < 0 { lo = mid + 1 } else { hi = mid }
        }
        return false
    }

    /// Appends a row of the file (all its fields) to `batch`.
    func append(_ fields: [String], row: Int64, to batch: inout RowBatch) throws {
        for (c, position) in positions.enumerated() {
            do {
                switch plans[c] {
                case .value(let type): try CSVValueCodec.append(fields[position], as: type, to: &batch.columns[c])
                case .text: try CSVValueCodec.appendText(fields[position], stored: schema.columns[position].logicalType, to: &batch.columns[c])
                case .json: try CSVValueCodec.appendJSON(fields[position], stored: schema.columns[position].logicalType, to: &batch.columns[c])
                case .native:
                    if fields[position] == CSVValueCodec.nullField { batch.columns[c].appendNull() } else { batch.columns[c].append(string: fields[position]) }
                }
            } catch {
                throw FerryError.invalidValue(table: table, column: columns[c].name, key: nil, message: "row \(row) of \(source.shown): \(error)")
            }
        }
    }

    func makeBatch() -> RowBatch { RowBatch(types: types, capacity: min(batchSize, 1024)) }
    var rowLimit: Int { batchSize }

    /// Reads the whole range, keeping its last `limit` rows (all of them without a limit), for
    /// a descending read.
    private func gatherReversed() throws -> CSVReversedRows {
        let rows = CSVReversedRows(limit: remaining, table: table)
        do {
            while let (fields, _) = try nextInRange() {
                try rows.add(fields, row: source.rowsRead)
            }
            try rows.seal()
        } catch {
            rows.discard()
            throw error
        }
        source.close()
        return rows
    }
}
