import CSQLite
import FerryCore

/// Inserts batches with one prepared INSERT, reused for every row; the caller holds the
/// transaction. Values are bound in Ferry's SQLite conventions (docs/type-mapping.md);
/// values SQLite would change are refused: NaN (stored as NULL) and -0.0 in a column whose
/// affinity stores it as the integer 0.
final class SQLiteWriter: BatchWriter {
    private let statement: SQLiteStatement
    private let columns: [Column]
    private let kinds: [BindKind]
    /// Per column: true when -0.0 would lose its sign (REAL, NUMERIC, INTEGER affinity).
    private let signedZeroLost: [Bool]
    private let table: TableName

    /// Total rows changed by the statements run (sqlite3_changes after each step).
    private(set) var changed = 0

    /// `sql` is the statement run once per row with the row's values bound in column order
    /// (default: the INSERT).
    init(connection: SQLiteConnection, table: TableName, columns: [Column], sql custom: String? = nil) throws {
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
        statement = try SQLiteStatement(connection, custom ?? sql)
        self.columns = columns
        self.kinds = columns.map { BindKind($0.logicalType) }
        self.table = table
    }

    func finish() throws {}

    func write(_ batch: RowBatch) throws {
        let st = statement.handle
        let pinned = PinnedBatch(batch)
        let cols = pinned.columns
        let transient = ferry_sqlite_transient()
        // Dates, times, timestamps and UUIDs are formatted into one reused buffer.
        var scratch: [UInt8] = []
        scratch.reserveCapacity(64)
        func bindScratch(_ idx: Int32) -> Int32 {
            scratch.withUnsafeBufferPointer {
                sqlite3_bind_text(st, idx, UnsafeRawPointer($0.baseAddress)?.assumingMemoryBound(to: CChar.self), Int32($0.count), transient)
            }
        }
        for row in 0..<pinned.count {
            for c in 0..<kinds.count {
                let col = cols[c]
                let idx = Int32(c + 1)
                var rc = SQLITE_OK
                if col.isNull(row) {
                    rc = sqlite3_bind_null(st, idx)
                } else {
                    switch kinds[c] {
                    case .integer:
                        rc = sqlite3_bind_int64(st, idx, col.int(row))
                    case .double:
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
                        rc = sqlite3_bind_double(st, idx, v)
                    case .date:
                        scratch.removeAll(keepingCapacity: true)
                        Temporal.appendDate(col.int(row), into: &scratch)
                        rc = bindScratch(idx)
                    case .time(let digits):
                        scratch.removeAll(keepingCapacity: true)
                        Temporal.appendTime(col.int(row), fractionDigits: digits, into: &scratch)
                        rc = bindScratch(idx)
                    case .timestamp(let digits, let utc):
                        scratch.removeAll(keepingCapacity: true)
                        Temporal.appendTimestamp(col.int(row), fractionDigits: digits, into: &scratch)
                        if utc { scratch.append(contentsOf: Self.utcSuffix) }
                        rc = bindScratch(idx)
                    case .uuid:
                        scratch.removeAll(keepingCapacity: true)
                        UUIDText.append(col.bytes(row), into: &scratch)
                        rc = bindScratch(idx)
                    case .blob:
                        let b = col.bytes(row)
                        rc = sqlite3_bind_blob(st, idx, b.baseAddress, Int32(b.count), nil)
                    case .text:
                        let b = col.bytes(row)
                        rc = sqlite3_bind_text(st, idx, b.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(b.count), nil)
                    }
                }
                guard rc == SQLITE_OK else {
                    throw BatchRowError(row: row, error: .invalidValue(
                        table: table, column: columns[c].name, key: nil, message: statement.connection.error(rc, sql: nil).message))
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

    private static let utcSuffix = Array("+00:00".utf8)

    /// How a column is bound, decided once per writer rather than per value.
    enum BindKind {
        case integer, double, date, blob, text, uuid
        case time(digits: Int?)
        case timestamp(digits: Int?, utc: Bool)

        init(_ type: LogicalType) {
            switch type {
            case .boolean, .int16, .int32, .int64: self = .integer
            case .float32, .float64: self = .double
            case .date: self = .date
            // Text keeps the declared precision, so DATETIME(6) values keep all six digits.
            case .time(let p): self = .time(digits: p)
            case .timestamp(let p, let tz): self = .timestamp(digits: p, utc: tz)
            case .uuid: self = .uuid
            case .binary: self = .blob
            case .decimal, .text, .json, .enumeration, .unsupported: self = .text
            }
        }
    }
}
