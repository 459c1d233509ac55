import CSQLite
import FerryCore

/// Each row's key and `lookup3` row hash of a whole table whose key is its rowid and whose
/// other columns are all compared in their stored form (a comparison with another SQLite
/// database), hashed straight from the statement's values: no batch is built, no value is
/// copied into a column buffer. What `DigestComputer` computes from the reader's batches for
/// the same request, tag and payload alike (`StoredForm`); the request's other shapes (any
/// column read in another form, a filter, a bucket filter) go through the reader.
///
/// 1,000,000 bench_orders rows, SQLite → SQLite mirror: the reader's batches cost about as
/// much CPU as the hashing itself.
struct SQLiteStoredRowHashes {
    let sql: String
    /// Per column: true for the key (read as an integer), false for a stored value.
    let isKey: [Bool]

    /// Nil when `request` over `table` is not of that shape.
    init?(_ connection: SQLiteConnection, table: TableSchema, request: DigestRequest) {
        guard request.rowHash == .lookup3, request.keyHash == .integer, request.filter == nil, request.within == nil,
            request.key.count == 1, request.hashForms.count == request.columns.count,
            let keyColumn = table.column(named: request.key[0].name), keyColumn.serial == .rowid || keyColumn.serial == .autoincrement
        else { return nil }
        var isKey: [Bool] = []
        for (c, form) in zip(request.columns, request.hashForms) {
            if c.name == keyColumn.name {
                // The key as an integer, hashed as one (the rowid is never NULL, never another class).
                guard form == .integer, !c.readHints.contains(.storedForm), !c.travelsNatively else { return nil }
                guard case .int64 = c.logicalType else { return nil }
                isKey.append(true)
            } else {
                guard c.readHints.contains(.storedForm), c.travelsNatively,
                    !c.readHints.contains(.textForm), !c.readHints.contains(.jsonForm)
                else { return nil }
                isKey.append(false)
            }
        }
        guard isKey.filter({ $0 }).count == 1 else { return nil }
        let d = connection.dialect
        sql = "SELECT " + request.columns.map { d.quote($0.name) }.joined(separator: ", ") + " FROM " + d.quote(connection.qualified(table.name))
        self.isKey = isKey
    }

    /// Steps the whole table, handing each row's key and hash to `each`.
    func run(_ connection: SQLiteConnection, _ each: (_ key: Int64, _ hash: Int64) throws -> Void) throws {
        let statement = try SQLiteStatement(connection, sql)
        defer { statement.reset() }
        let st = statement.handle
        /// The lookup3 hash of a tag and `count` payload bytes at `p`, laid out as the stored form.
        func hashStored(_ tag: UInt8, _ p: UnsafeRawPointer?, _ count: Int) -> UInt64 {
            guard let p, count > 0 else { return Lookup3.bytes(tag: tag, UnsafeRawBufferPointer(start: nil, count: 0)) }
            return Lookup3.bytes(tag: tag, UnsafeRawBufferPointer(start: p, count: count))
        }
        while try statement.step() {
            var h: UInt64 = 0
            var key: Int64 = 0
            for i in 0..<isKey.count {
                // One call into the statement per value, then its value's own accessors: every
                // sqlite3_column_* call enters the connection and leaves through its error check
                // (sqlite3ApiExit), a quarter of the instructions of this loop (callgrind). The
                // value needs no mutex: the connection is opened in the multi-thread mode
                // (NOMUTEX), where SQLite's unprotected values are its protected ones.
                let v = sqlite3_column_value(st, Int32(i))
                if isKey[i] {
                    key = sqlite3_value_int64(v)
                    h = Lookup3.combine(h, Lookup3.int8(key))
                    continue
                }
                let e: UInt64
                switch sqlite3_value_type(v) {
                case SQLITE_NULL:
                    h = Lookup3.combine(h, 0)
                    continue
                case SQLITE_INTEGER:
                    var x = UInt64(bitPattern: sqlite3_value_int64(v)).bigEndian
                    e = withUnsafeBytes(of: &x) { hashStored(StoredForm.integer, $0.baseAddress, 8) }
                case SQLITE_FLOAT:
                    var x = sqlite3_value_double(v).bitPattern.bigEndian
                    e = withUnsafeBytes(of: &x) { hashStored(StoredForm.real, $0.baseAddress, 8) }
                case SQLITE_TEXT:
                    // sqlite3_value_text before sqlite3_value_bytes: the length of the UTF-8 form.
                    let p = sqlite3_value_text(v)
                    e = hashStored(StoredForm.text, UnsafeRawPointer(p), Int(sqlite3_value_bytes(v)))
                default:
                    let p = sqlite3_value_blob(v)
                    e = hashStored(StoredForm.blob, p, Int(sqlite3_value_bytes(v)))
                }
                h = Lookup3.combine(h, e)
            }
            try each(key, Int64(bitPattern: h))
        }
    }
}
