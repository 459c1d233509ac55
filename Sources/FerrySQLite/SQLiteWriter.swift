import CSQLite
import FerryCore

/// Inserts batches with one prepared INSERT, reused for every row; the caller holds the
/// transaction. Values are bound in Ferry's SQLite conventions (docs/type-mapping.md);
/// values SQLite would change are refused: NaN (stored as NULL) and -0.0 in a column whose
/// affinity stores it as the integer 0.
final class SQLiteWriter: BatchWriter {
    private let statement: SQLiteStatement
    private let columns: [Column]
    private let types: [LogicalType]
    /// Per column: true when -0.0 would lose its sign (REAL, NUMERIC, INTEGER affinity).
    private let signedZeroLost: [Bool]
    private let table: TableName

    init(connection: SQLiteConnection, table: TableName, columns: [Column]) throws {
        let d = connection.dialect
        // The target's declared types decide affinity; every column must exist there.
        let info = try connection.prepare("SELECT name, type FROM pragma_table_xinfo(?1, ?2)")
        try info.bind([.text(table.name), .text(connection.schemaName(table))])
        var declared: [String: String] = [:]
        for row in try info.rows() { if let n = row[0] { declared[n] = row[1] ?? "" } }
        for c in columns where declared[c.name] == nil {
            throw FerryError.columnNotFound(table: table, column: c.name)
        }
        signedZeroLost = columns.map {
            let a = SQLiteTypeMap.affinity(of: declared[$0.name] ?? "")
            return a != .blob && a != .text
        }
        let sql = "INSERT INTO \(d.quote(connection.qualified(table))) ("
            + columns.map { d.quote($0.name) }.joined(separator: ", ") + ") VALUES ("
            + columns.map { _ in "?" }.joined(separator: ", ") + ")"
        statement = try SQLiteStatement(connection, sql)
        self.columns = columns
        self.types = columns.map(\.logicalType)
        self.table = table
    }

    func finish() throws {}

    func write(_ batch: RowBatch) throws {
        let st = statement.handle
        // Pin each byte column's arena for the batch, so values bind without a copy each.
        var pinned: [UnsafeMutableRawBufferPointer?] = []
        pinned.reserveCapacity(columns.count)
        defer { for p in pinned { p?.deallocate() } }
        for col in batch.columns {
            if col.storage == .bytes {
                let p = UnsafeMutableRawBufferPointer.allocate(byteCount: max(col.arena.count, 1), alignment: 1)
                col.withUnsafeArena { src in if src.count > 0 { p.copyMemory(from: src) } }
                pinned.append(p)
            } else {
                pinned.append(nil)
            }
        }
        let transient = ferry_sqlite_transient()
        for row in 0..<batch.count {
            for c in 0..<columns.count {
                let col = batch.columns[c]
                let idx = Int32(c + 1)
                var rc = SQLITE_OK
                if col.isNull(row) {
                    rc = sqlite3_bind_null(st, idx)
                } else {
                    switch types[c] {
                    case .boolean, .int16, .int32, .int64:
                        rc = sqlite3_bind_int64(st, idx, col.ints[row])
                    case .float32, .float64:
                        let v = col.doubles[row]
                        if v.isNaN {
                            throw BatchRowError(row: row, error: .invalidValue(
                                table: table, column: columns[c].name, key: nil,
                                message: "NaN cannot be stored in SQLite (it would become NULL)"))
                        }
                        if v == 0 && v.sign == .minus && signedZeroLost[c] {
                            throw BatchRowError(row: row, error: .invalidValue(
                                table: table, column: columns[c].name, key: nil,
                                message: "-0.0 would lose its sign in a SQLite REAL column (stored as 0)"))
                        }
                        rc = sqlite3_bind_double(st, idx, v)
                    case .date:
                        rc = sqlite3_bind_text(st, idx, Temporal.formatDate(col.ints[row]), -1, transient)
                    case .time:
                        rc = sqlite3_bind_text(st, idx, Temporal.formatTime(col.ints[row]), -1, transient)
                    case .timestamp(_, let tz):
                        rc = sqlite3_bind_text(
                            st, idx, Temporal.formatTimestamp(col.ints[row], utcSuffix: tz ? "+00:00" : nil), -1, transient)
                    case .uuid:
                        rc = sqlite3_bind_text(st, idx, UUIDText.format(col.bytes(row)), -1, transient)
                    case .binary:
                        let r = col.range(row)
                        rc = sqlite3_bind_blob(st, idx, pinned[c]?.baseAddress?.advanced(by: r.lowerBound), Int32(r.count), nil)
                    case .decimal, .text, .json, .enumeration, .unsupported:
                        let r = col.range(row)
                        let base = pinned[c]?.baseAddress?.advanced(by: r.lowerBound).assumingMemoryBound(to: CChar.self)
                        rc = sqlite3_bind_text(st, idx, base, Int32(r.count), nil)
                    }
                }
                guard rc == SQLITE_OK else {
                    throw BatchRowError(row: row, error: .invalidValue(
                        table: table, column: columns[c].name, key: nil, message: statement.connection.error(rc, sql: nil).message))
                }
            }
            let rc = sqlite3_step(st)
            sqlite3_reset(st)
            guard rc == SQLITE_DONE else {
                let e = statement.connection.error(rc, sql: nil)
                throw BatchRowError(row: row, error: .invalidValue(table: table, column: nil, key: nil, message: e.message))
            }
        }
    }
}
