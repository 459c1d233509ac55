import CSQLite
import FerryCore

/// Inserts batches with one prepared INSERT, reused for every row; the caller holds the
/// transaction. Values are bound in Ferry's SQLite forms (SQLiteValueCodec), or as stored when
/// they come from another SQLite database (`StoredForm`);
/// values SQLite would change are refused: NaN (stored as NULL) and -0.0 in a column whose
/// affinity stores it as the integer 0.
final class SQLiteWriter: BatchWriter {
    private let statement: SQLiteStatement
    private let columns: [Column]
    private let kinds: [SQLiteValueCodec.Form]
    /// Per column: true when -0.0 would lose its sign (REAL, NUMERIC, INTEGER affinity).
    private let signedZeroLost: [Bool]
    private let table: TableName

    /// Total rows changed by the statements run (sqlite3_changes after each step).
    private(set) var changed = 0

    /// `sql` is the statement run once per row with the row's values bound in column order
    /// (default: the INSERT).
    init(connection: SQLiteConnection, table target: TableSchema, columns: [Column], sql custom: String? = nil) throws {
        let d = connection.dialect
        let table = target.name
        // The target's declared types (as described or planned) decide affinity; every column must exist there.
        var declared: [String: String] = [:]
        for c in columns {
            guard let t = target.column(named: c.name) else { throw FerryError.columnNotFound(table: table, column: c.name) }
            declared[c.name] = t.nativeType
        }
        signedZeroLost = columns.map {
            let a = SQLiteTypeMap.affinity(of: declared[$0.name] ?? "")
            return a != .blob && a != .text
        }
        let sql = "INSERT INTO \(d.quote(connection.qualified(table))) ("
            + columns.map { d.quote($0.name) }.joined(separator: ", ") + ") VALUES ("
            + columns.map { _ in "?" }.joined(separator: ", ") + ")"
        statement = try SQLiteStatement(connection, custom ?? sql)
        self.columns = columns
        self.kinds = columns.map { SQLiteValueCodec.Form($0, storedIn: target.column(named: $0.name)?.logicalType) }
        self.table = table
    }

    func finish() throws {}

    /// Nothing runs between calls: resets the statement and clears its bindings (which point
    /// into the last batch).
    func abort() {
        statement.reset()
        sqlite3_clear_bindings(statement.handle)
    }

    func write(_ batch: RowBatch) throws {
        try PinnedBatch.with(batch) { try write(pinned: $0) }
    }

    private func write(pinned: PinnedBatch) throws {
        let st = statement.handle
        let cols = pinned.columns
        // Dates, times, timestamps and UUIDs are formatted into one reused buffer.
        var scratch: [UInt8] = []
        scratch.reserveCapacity(64)
        for row in 0..<pinned.count {
            for c in 0..<kinds.count {
                let col = cols[c]
                let idx = Int32(c + 1)
                var rc = SQLITE_OK
                if col.isNull(row) {
                    rc = sqlite3_bind_null(st, idx)
                } else {
                    if case .double = kinds[c] {
                        let v = col.double(row)
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
                    }
                    rc = SQLiteValueCodec.bind(st, idx, form: kinds[c], column: col, row: row, scratch: &scratch)
                }
                guard rc == SQLITE_OK else {
                    let message = rc == SQLITE_MISMATCH && kinds[c].isStored
                        ? "the value is not a SQLite stored value (a tag i, r, t or b and its bytes)"
                        : statement.connection.error(rc, sql: nil).message
                    throw BatchRowError(row: row, error: .invalidValue(table: table, column: columns[c].name, key: nil, message: message))
                }
            }
            let rc = sqlite3_step(st)
            if rc == SQLITE_DONE { changed += Int(sqlite3_changes(statement.connection.db)) }
            sqlite3_reset(st)
            guard rc == SQLITE_DONE else {
                let e = statement.connection.error(rc, sql: nil)
                throw BatchRowError(row: row, error: .invalidValue(table: table, column: nil, key: nil, message: e.message))
            }
        }
    }
}
