import CSQLite
import FerryCore

/// A prepared statement, finalized when released. Not `Sendable`: it belongs to its
/// connection's thread.
final class SQLiteStatement {
    let handle: OpaquePointer
    let sql: String
    unowned let connection: SQLiteConnection

    init(_ connection: SQLiteConnection, _ sql: String) throws {
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v2(connection.db, sql, -1, &stmt, nil)
        guard rc == SQLITE_OK, let stmt else {
            throw connection.error(rc, sql: sql)
        }
        self.handle = stmt
        self.sql = sql
        self.connection = connection
    }

    deinit { sqlite3_finalize(handle) }

    /// Steps once: true when a row is available, false when done.
    @inline(__always)
    func step() throws -> Bool {
        let rc = sqlite3_step(handle)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        throw connection.error(rc, sql: sql)
    }

    func reset() { sqlite3_reset(handle) }

    func bind(_ values: [Value]) throws {
        for (i, v) in values.enumerated() {
            let idx = Int32(i + 1)
            let rc: Int32
            switch v {
            case .null: rc = sqlite3_bind_null(handle, idx)
            case .bool(let b): rc = sqlite3_bind_int64(handle, idx, b ? 1 : 0)
            case .int(let x), .date(let x), .time(let x), .timestamp(let x): rc = sqlite3_bind_int64(handle, idx, x)
            case .double(let d): rc = sqlite3_bind_double(handle, idx, d)
            case .decimal(let s), .text(let s), .json(let s): rc = sqlite3_bind_text(handle, idx, s, -1, ferry_sqlite_transient())
            case .binary(let b), .uuid(let b):
                rc = b.withUnsafeBytes { sqlite3_bind_blob(handle, idx, $0.baseAddress, Int32($0.count), ferry_sqlite_transient()) }
            }
            guard rc == SQLITE_OK else { throw connection.error(rc, sql: sql) }
        }
    }

    func columnText(_ i: Int32) -> String? {
        guard sqlite3_column_type(handle, i) != SQLITE_NULL, let p = sqlite3_column_text(handle, i) else { return nil }
        return String(cString: p)
    }

    func columnInt(_ i: Int32) -> Int64 { sqlite3_column_int64(handle, i) }

    func isNull(_ i: Int32) -> Bool { sqlite3_column_type(handle, i) == SQLITE_NULL }

    /// Runs a query and returns all rows as text (catalog queries).
    func rows() throws -> [[String?]] {
        var out: [[String?]] = []
        let n = sqlite3_column_count(handle)
        while try step() {
            out.append((0..<n).map { columnText($0) })
        }
        return out
    }
}
