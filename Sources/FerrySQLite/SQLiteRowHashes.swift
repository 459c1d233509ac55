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
        var room = 256
        var scratch = UnsafeMutableRawPointer.allocate(byteCount: room, alignment: 8)
        defer { scratch.deallocate() }
        /// The lookup3 hash of a tag and `count` payload bytes at `p`, laid out as the stored form.
        func hashStored(_ tag: UInt8, _ p: UnsafeRawPointer?, _ count: Int) -> UInt64 {
            if count + 1 > room {
                scratch.deallocate()
                room = max(count + 1, room * 2)
                scratch = .allocate(byteCount: room, alignment: 8)
            }
            scratch.storeBytes(of: tag, as: UInt8.self)
            if count > 0, let p { (scratch + 1).copyMemory(from: p, byteCount: count) }
            return Lookup3.bytes(UnsafeRawBufferPointer(start: scratch, count: count + 1))
        }
        while try statement.step() {
            var h: UInt64 = 0
            var key: Int64 = 0
            for i in 0..<isKey.count {
                let c = Int32(i)
                let storage = sqlite3_column_type(st, c)
                if isKey[i] {
                    key = sqlite3_column_int64(st, c)
                    h = Lookup3.combine(h, Lookup3.int8(key))
                    continue
                }
                let e: UInt64
                switch storage {
                case SQLITE_NULL:
                    h = Lookup3.combine(h, 0)
                    continue
                case SQLITE_INTEGER:
                    var v = UInt64(bitPattern: sqlite3_column_int64(st, c)).bigEndian
                    e = withUnsafeBytes(of: &v) { hashStored(StoredForm.integer, $0.baseAddress, 8) }
                case SQLITE_FLOAT:
                    var v = sqlite3_column_double(st, c).bitPattern.bigEndian
                    e = withUnsafeBytes(of: &v) { hashStored(StoredForm.real, $0.baseAddress, 8) }
                case SQLITE_TEXT:
                    // sqlite3_column_text before sqlite3_column_bytes: the length of the UTF-8 form.
                    let p = sqlite3_column_text(st, c)
                    e = hashStored(StoredForm.text, UnsafeRawPointer(p), Int(sqlite3_column_bytes(st, c)))
                default:
                    let p = sqlite3_column_blob(st, c)
                    e = hashStored(StoredForm.blob, p, Int(sqlite3_column_bytes(st, c)))
                }
                h = Lookup3.combine(h, e)
            }
            try each(key, Int64(bitPattern: h))
        }
    }
}
