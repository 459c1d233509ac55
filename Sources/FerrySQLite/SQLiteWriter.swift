import CSQLite
import FerryCore
#if os(Linux)
import Glibc
#endif

/// Inserts batches with a prepared multi-row INSERT (and a one-row one for the rest of a
/// batch), reused for every batch; the caller holds the transaction. Values are bound in
/// Ferry's SQLite forms (SQLiteValueCodec), or as stored when they come from another SQLite
/// database (`StoredForm`); values SQLite would change are refused: NaN (stored as NULL) and -0.0 in a column whose
/// affinity stores it as the integer 0.
final class SQLiteWriter: BatchWriter {
    private let statement: SQLiteStatement
    /// The default INSERT with `rowsPerStatement` rows of parameters: one statement per row
    /// costs SQLite a cursor opened and closed, a statement halted and their allocations per row
    /// (a sixth of all instructions of a narrow copy, measured with callgrind); nil for a custom
    /// statement or when one row fills SQLite's parameter limit.
    private let multiRow: SQLiteStatement?
    private let rowsPerStatement: Int
    private let columns: [Column]
    private let kinds: [SQLiteValueCodec.Form]
    /// Per formatted column (dates, times, timestamps, UUIDs): its batch's text, bound in place.
    private let formatted: [SQLiteFormattedColumn?]
    /// Per column: true when -0.0 would lose its sign (REAL, NUMERIC, INTEGER affinity).
    private let signedZeroLost: [Bool]
    private let table: TableName

    #if os(Linux)
    /// The database file opened once more (read-only), to start its writeback every
    /// `writebackBytes` of rows loaded: the commit's `fdatasync` then finds most pages already
    /// on their way to the disk instead of all of them (1,000,000 bench_orders rows into a file
    /// on disk: that one call took 0.16 s of a 1.8–2.0 s copy). -1 for a file in memory.
    private let writeback: Int32
    private var sinceWriteback = 0
    static let writebackBytes = 32 << 20
    #endif

    /// Total rows changed by the statements run (sqlite3_changes after each step).
    private(set) var changed = 0
    var rowsStored: Int64? { Int64(changed) }

    /// Rows per multi-row INSERT, at most (fewer when the columns would pass SQLite's parameter
    /// limit). Measured copying 500,000 rows of two integers from PostgreSQL (callgrind,
    /// instructions of the whole copy): 1 row 4.70 G, 16 rows 2.46 G, 64 rows 2.26 G, 256 rows
    /// 2.19 G; wall time 0.50 s → 0.23 s, and 200,000 rows of bench_orders 0.65 s → 0.53 s.
    static let maxRowsPerStatement = 256

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
        let row = "(" + columns.map { _ in "?" }.joined(separator: ", ") + ")"
        let insert = "INSERT INTO \(d.quote(connection.qualified(table))) ("
            + columns.map { d.quote($0.name) }.joined(separator: ", ") + ") VALUES "
        statement = try SQLiteStatement(connection, custom ?? insert + row)
        let limit = Int(sqlite3_limit(connection.db, SQLITE_LIMIT_VARIABLE_NUMBER, -1))
        let rows = columns.isEmpty ? 1 : min(Self.maxRowsPerStatement, limit / columns.count)
        if custom == nil && rows > 1 {
            multiRow = try SQLiteStatement(connection, insert + Array(repeating: row, count: rows).joined(separator: ", "))
            rowsPerStatement = rows
        } else {
            multiRow = nil
            rowsPerStatement = 1
        }
        self.columns = columns
        self.kinds = columns.map { SQLiteValueCodec.Form($0, storedIn: target.column(named: $0.name)?.logicalType) }
        self.formatted = kinds.map { SQLiteValueCodec.isFormatted($0) ? SQLiteFormattedColumn() : nil }
        self.table = table
        #if os(Linux)
        // Only for a load (the default INSERT): the writers of merges, upserts and deletes are
        // made per batch.
        if custom == nil, let name = sqlite3_db_filename(connection.db, "main"), name.pointee != 0 {
            writeback = open(name, O_RDONLY | O_CLOEXEC)
        } else {
            writeback = -1
        }
        #endif
    }

    deinit {
        #if os(Linux)
        if writeback >= 0 { close(writeback) }
        #endif
    }

    func finish() throws {}

    /// Nothing runs between calls: resets the statements and clears their bindings (which point
    /// into the last batch).
    func abort() {
        for s in [statement] + (multiRow.map { [$0] } ?? []) {
            s.reset()
            sqlite3_clear_bindings(s.handle)
        }
    }

    func write(_ batch: RowBatch) throws {
        try PinnedBatch.with(batch) { try write(pinned: $0) }
        #if os(Linux)
        if writeback >= 0 {
            sinceWriteback += batch.byteSize
            if sinceWriteback >= Self.writebackBytes {
                sinceWriteback = 0
                _ = ferry_start_writeback(writeback)  // best effort: the commit syncs anyway
            }
        }
        #endif
    }

    private func write(pinned: PinnedBatch) throws {
        // Dates, times, timestamps and UUIDs are formatted for the whole batch first, then bound
        // in place.
        var scratch: [UInt8] = []
        let cols = pinned.columns
        for c in formatted.indices { formatted[c]?.fill(cols[c], count: pinned.count, form: kinds[c]) }
        var row = 0
        if let multi = multiRow {
            let st = multi.handle
            let n = Int32(columns.count)
            while pinned.count - row >= rowsPerStatement {
                for r in 0..<rowsPerStatement {
                    try bind(st, cols, row: row + r, first: Int32(r) * n + 1, scratch: &scratch)
                }
                let rc = sqlite3_step(st)
                sqlite3_reset(st)
                if rc == SQLITE_DONE {
                    changed += Int(sqlite3_changes(statement.connection.db))
                } else if !Self.isRowError(rc) {
                    // The file's or the connection's (disk full, I/O, a lock): no row is to blame,
                    // and SQLite may have rolled the transaction back.
                    throw statement.connection.error(rc, sql: nil)
                } else {
                    // A failed INSERT changes nothing (its statement is rolled back whole): the same
                    // rows one by one find the one refused, and its error.
                    try writeRows(pinned, row..<row + rowsPerStatement, scratch: &scratch)
                }
                row += rowsPerStatement
            }
        }
        try writeRows(pinned, row..<pinned.count, scratch: &scratch)
    }

    /// Rows `rows`, one statement each.
    private func writeRows(_ pinned: PinnedBatch, _ rows: Range<Int>, scratch: inout [UInt8]) throws {
        let st = statement.handle
        let cols = pinned.columns
        for row in rows {
            try bind(st, cols, row: row, first: 1, scratch: &scratch)
            let rc = sqlite3_step(st)
            if rc == SQLITE_DONE { changed += Int(sqlite3_changes(statement.connection.db)) }
            sqlite3_reset(st)
            guard rc == SQLITE_DONE else {
                let e = statement.connection.error(rc, sql: nil)
                guard Self.isRowError(rc) else { throw e }
                throw BatchRowError(row: row, error: .invalidValue(table: table, column: nil, key: nil, message: e.message))
            }
        }
    }

    /// False for the errors of the file or the connection rather than of a row: a full disk or a
    /// file that may not grow (`ulimit -f`), I/O, memory, a lock, a read-only or damaged file.
    /// SQLite answers some of them by rolling the transaction back: the rows are not tried one
    /// by one (each would fail as "no such table"), and the error is the connection's.
    static func isRowError(_ rc: Int32) -> Bool {
        switch rc & 0xff {
        case SQLITE_FULL, SQLITE_IOERR, SQLITE_NOMEM, SQLITE_CORRUPT, SQLITE_NOTADB, SQLITE_READONLY, SQLITE_CANTOPEN,
             SQLITE_BUSY, SQLITE_LOCKED, SQLITE_INTERRUPT, SQLITE_PROTOCOL, SQLITE_ABORT:
            return false
        default:
            return true
        }
    }

    /// Binds row `row`'s values to parameters `first`, `first + 1`, …
    @inline(__always)
    private func bind(_ st: OpaquePointer, _ cols: [PinnedBatch.Column], row: Int, first: Int32, scratch: inout [UInt8]) throws {
        for c in 0..<kinds.count {
            let col = cols[c]
            let idx = first + Int32(c)
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
                if let f = formatted[c] {
                    rc = f.bind(st, idx, row: row)
                } else {
                    rc = SQLiteValueCodec.bind(st, idx, form: kinds[c], column: col, row: row, scratch: &scratch)
                }
            }
            guard rc == SQLITE_OK else {
                let message = rc == SQLITE_MISMATCH && kinds[c].isStored
                    ? "the value is not a SQLite stored value (a tag i, r, t or b and its bytes)"
                    : statement.connection.error(rc, sql: nil).message
                throw BatchRowError(row: row, error: .invalidValue(table: table, column: columns[c].name, key: nil, message: message))
            }
        }
    }
}
