import CSQLite
import FerryCore

/// Steps one prepared SELECT into batches. Each value's storage class is checked against the
/// column's logical type: what can be carried exactly is converted (an INTEGER in a REAL
/// column, a REAL in a NUMERIC column as its exact decimal text), anything else is an error
/// naming table, column and key — never a silent change. A column that travels natively
/// (into another SQLite database) is read as stored, whatever its storage class.
final class SQLiteReader: BatchReader {
    private let statement: SQLiteStatement
    private let types: [LogicalType]
    private let kinds: [ReadKind]
    private let columns: [Column]
    private let table: TableName
    private let batchSize: Int
    private let keyIndexes: [(name: String, index: Int32)]
    private var done = false
    /// Per column, the value bytes of the last batch (and an eighth more): room reserved for
    /// the next at once (a stored-form batch of bench_orders regrew its arenas several times).
    private var arenaHint: [Int] = []

    init(connection: SQLiteConnection, table: TableSchema, columns: [Column], keyRange: KeyRange?, batchSize: Int) throws {
        let d = connection.dialect
        // A cast may ask for a value's text (CAST AS TEXT) or JSON (json_quote) form.
        var sql = "SELECT " + columns.map { c in
            c.readHints.contains(.jsonForm) ? "json_quote(\(d.quote(c.name)))"
                : c.readHints.contains(.textForm) ? "CAST(\(d.quote(c.name)) AS TEXT)" : d.quote(c.name)
        }.joined(separator: ", ")
            + " FROM " + d.quote(connection.qualified(table.name))
        var binds: [Value] = []
        if let range = keyRange {
            sql += range.sqlSuffix(dialect: d) { values in
                binds += values
                return values.map { _ in "?" }.joined(separator: ", ")
            }
        }
        // A dedicated statement (not the connection's cache): a reader lives as long as the copy.
        statement = try SQLiteStatement(connection, sql)
        // Bounds in the form the values are stored in (SQLiteValueCodec), or they compare wrongly.
        // `binds` holds the lower bound's key, then the upper bound's (KeyRange.sqlSuffix's order).
        // Then each tuple of a key list (`keyColumns` order).
        // A key column read in its stored form has its bounds in that form too.
        func keyColumn(_ k: String) -> Column {
            columns.first { $0.name == k } ?? table.column(named: k) ?? Column(name: k, nativeType: "", logicalType: .text)
        }
        let keyColumns = (keyRange?.key ?? []).map(keyColumn)
        let listColumns = (keyRange?.keyColumns ?? []).map(keyColumn)
        let boundColumns = (keyRange?.since.map { [keyColumn($0.column)] } ?? [])
            + (keyRange?.after == nil || keyColumns.isEmpty ? [] : keyColumns) + (keyRange?.upTo == nil || keyColumns.isEmpty ? [] : keyColumns)
            + Array(repeating: listColumns, count: keyRange?.keys?.count ?? 0).flatMap { $0 }
        let rc = try SQLiteValueCodec.bind(statement.handle, values: binds, columns: boundColumns)
        guard rc == SQLITE_OK else { throw connection.error(rc, sql: sql) }
        self.columns = columns
        self.types = columns.map(\.logicalType)
        self.kinds = columns.map { $0.travelsNatively ? .stored : ReadKind($0.logicalType) }
        self.table = table.name
        self.batchSize = batchSize
        let key = table.preferredKey?.columns ?? []
        self.keyIndexes = key.compactMap { k in columns.firstIndex { $0.name == k }.map { (k, Int32($0)) } }
    }

    /// Steps `sql` — Ferry's own statement (a replica's change query), never a request's — whose
    /// result columns are `columns`, with `binds` (integers) bound in order.
    init(connection: SQLiteConnection, sql: String, binds: [Int64], columns: [Column], table: TableName, batchSize: Int) throws {
        statement = try SQLiteStatement(connection, sql)
        for (i, v) in binds.enumerated() {
            let rc = sqlite3_bind_int64(statement.handle, Int32(i + 1), v)
            guard rc == SQLITE_OK else { throw connection.error(rc, sql: sql) }
        }
        self.columns = columns
        self.types = columns.map(\.logicalType)
        self.kinds = columns.map { $0.travelsNatively ? .stored : ReadKind($0.logicalType) }
        self.table = table
        self.batchSize = batchSize
        self.keyIndexes = []
    }

    /// Releases the statement's read lock even when the read stopped early.
    func close() { statement.reset() }

    func next() throws -> RowBatch? {
        guard !done else { return nil }
        var batch = RowBatch(types: types, capacity: batchSize, arenaBytes: arenaHint)
        let st = statement.handle
        var n = 0
        while !batch.isFull(rows: n, limit: batchSize) {
            guard try statement.step() else {
                done = true
                break
            }
            for i in 0..<kinds.count {
                try read(st, Int32(i), into: &batch.columns[i], kind: kinds[i])
            }
            n += 1
        }
        arenaHint = batch.arenaBytes.map { $0 + $0 / 8 }
        return n == 0 ? nil : batch
    }

    private func problem(_ column: Int32, _ message: String) -> FerryError {
        var key: String?
        if !keyIndexes.isEmpty {
            key = "(" + keyIndexes.map { "\($0.name)=\(statement.columnText($0.index) ?? "NULL")" }.joined(separator: ", ") + ")"
        }
        return .invalidValue(table: table, column: columns[Int(column)].name, key: key, message: message)
    }

    private func storageName(_ t: Int32) -> String {
        switch t {
        case SQLITE_INTEGER: return "an INTEGER"
        case SQLITE_FLOAT: return "a REAL"
        case SQLITE_TEXT: return "a TEXT"
        case SQLITE_BLOB: return "a BLOB"
        default: return "a NULL"
        }
    }

    private func mismatch(_ st: OpaquePointer, _ i: Int32, _ storage: Int32, _ type: LogicalType, hint: String = "") -> FerryError {
        let shown = storageName(storage)
        let sample = storage == SQLITE_BLOB ? "" : " '" + String((statement.columnText(i) ?? "").prefix(40)) + "'"
        return problem(
            i,
            "\(shown) value\(sample) in a column declared \(columns[Int(i)].nativeType.isEmpty ? "without a type" : columns[Int(i)].nativeType) (read as \(type)) cannot be carried exactly\(hint)")
    }

    @inline(__always)
    private func text(_ v: OpaquePointer?) -> UnsafeRawBufferPointer {
        let p = sqlite3_value_text(v)
        let n = Int(sqlite3_value_bytes(v))
        return UnsafeRawBufferPointer(start: p, count: n)
    }

    @inline(__always)
    private func blob(_ v: OpaquePointer?) -> UnsafeRawBufferPointer {
        let p = sqlite3_value_blob(v)
        let n = Int(sqlite3_value_bytes(v))
        return UnsafeRawBufferPointer(start: p, count: n)
    }

    @inline(__always)
    private func read(_ st: OpaquePointer, _ i: Int32, into col: inout ColumnBuffer, kind: ReadKind) throws {
        // One call into the statement per value, then the value's own accessors: each
        // sqlite3_column_* call enters the connection and leaves through its error check. The
        // value needs no mutex: the connection is opened in the multi-thread mode (NOMUTEX),
        // where SQLite's unprotected values are its protected ones.
        let v = sqlite3_column_value(st, i)
        let storage = sqlite3_value_type(v)
        if storage == SQLITE_NULL {
            col.appendNull()
            return
        }
        let type = types[Int(i)]
        switch kind {
        case .stored:
            StoredForm.read(v, storage: storage, into: &col)
        case .integer, .boolean:
            switch storage {
            case SQLITE_INTEGER:
                let v = sqlite3_value_int64(v)
                if kind == .boolean, v != 0 && v != 1 {
                    throw problem(i, "\(v) in a boolean column is neither 0 nor 1")
                }
                col.append(v)
            default: throw mismatch(st, i, storage, type)
            }
        case .double:
            switch storage {
            case SQLITE_FLOAT: col.append(sqlite3_value_double(v))
            case SQLITE_INTEGER:
                let v = sqlite3_value_int64(v)
                guard let d = Double(exactly: v) else {
                    throw problem(i, "the integer \(v) has no exact floating-point form")
                }
                col.append(d)
            default: throw mismatch(st, i, storage, type)
            }
        case .decimal:
            switch storage {
            case SQLITE_INTEGER: col.append(string: String(sqlite3_value_int64(v)))
            case SQLITE_FLOAT: col.append(string: DecimalText.exact(sqlite3_value_double(v)))
            case SQLITE_TEXT:
                let bytes = text(v)
                guard DecimalText.isValid(bytes) else {
                    throw mismatch(st, i, storage, type, hint: ": it is not a decimal number")
                }
                col.append(bytes: bytes)
            default: throw mismatch(st, i, storage, type)
            }
        case .text:
            switch storage {
            case SQLITE_TEXT: col.append(bytes: text(v))
            // A number in a text column (NUMERIC-affinity names like STRING): carried as its text.
            case SQLITE_INTEGER: col.append(string: String(sqlite3_value_int64(v)))
            case SQLITE_FLOAT: col.append(string: DecimalText.exact(sqlite3_value_double(v)))
            default: throw mismatch(st, i, storage, type)
            }
        case .binary:
            switch storage {
            case SQLITE_BLOB: col.append(bytes: blob(v))
            case SQLITE_TEXT: col.append(bytes: text(v))
            default: throw mismatch(st, i, storage, type)
            }
        case .uuid:
            switch storage {
            case SQLITE_BLOB where sqlite3_value_bytes(v) == 16: col.append(bytes: blob(v))
            case SQLITE_TEXT:
                var u: UUIDText.Bytes = (0, 0)
                guard UUIDText.parse(text(v), into: &u) else { throw mismatch(st, i, storage, type, hint: ": it is not a UUID") }
                withUnsafeBytes(of: &u) { col.append(bytes: $0) }
            default: throw mismatch(st, i, storage, type)
            }
        case .date, .time, .timestamp:
            guard storage == SQLITE_TEXT else {
                throw mismatch(st, i, storage, type, hint: ": Ferry reads SQLite dates and times as ISO-8601 text")
            }
            let s = text(v)
            do {
                switch kind {
                case .date: col.append(try Temporal.parseDate(s))
                case .time: col.append(try Temporal.parseTime(s))
                default: col.append(try Temporal.parseTimestamp(s).micros)
                }
            } catch let e as Temporal.ParseError {
                throw problem(i, e.description)
            }
        case .unsupported:
            throw problem(i, "type \(columns[Int(i)].nativeType) cannot be read")
        }
    }

    /// How a column is read, decided once per reader rather than per value.
    enum ReadKind: Equatable {
        case integer, boolean, double, decimal, text, binary, uuid, date, time, timestamp, unsupported
        /// Any storage class, as stored (`StoredForm`).
        case stored

        init(_ type: LogicalType) {
            switch type {
            case .boolean: self = .boolean
            case .int16, .int32, .int64: self = .integer
            case .float32, .float64: self = .double
            case .decimal: self = .decimal
            case .text, .enumeration, .json: self = .text
            case .binary: self = .binary
            case .uuid: self = .uuid
            case .date: self = .date
            case .time: self = .time
            case .timestamp: self = .timestamp
            case .unsupported: self = .unsupported
            }
        }
    }
}
