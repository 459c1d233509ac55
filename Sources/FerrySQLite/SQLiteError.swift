import CSQLite
import FerryCore
import Foundation

/// A failure reported by SQLite, with the context Ferry adds: where (the file) and, for
/// statements, which SQL (never bound values).
public struct SQLiteError: Error, Sendable, CustomStringConvertible {
    /// SQLite's extended result code.
    public var code: Int32
    public var message: String
    public var sql: String?
    public var endpoint: String
    /// The file system refused the write for want of room (full, a size limit, a quota).
    public var noRoom = false

    public init(code: Int32, message: String, sql: String? = nil, endpoint: String) {
        self.code = code
        self.message = message
        self.sql = sql
        self.endpoint = endpoint
    }

    init(db: OpaquePointer?, code: Int32, sql: String?, endpoint: String) {
        var message = db.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(code))
        var noRoom = code & 0xff == SQLITE_FULL
        // A write the system refused: why, from the failed call's errno.
        if let db, [SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_READONLY].contains(code & 0xff) {
            let errno = sqlite3_system_errno(db)
            if [EFBIG, ENOSPC, EDQUOT].contains(errno) { noRoom = true }
            switch errno {
            case EFBIG: message += " (the file may not grow past its size limit: ulimit -f)"
            case ENOSPC: message += " (no space left on the device)"
            case EROFS: message += " (a read-only file system)"
            case EDQUOT: message += " (the disk quota is used up)"
            case EACCES, EPERM: message += " (permission denied)"
            default: break
            }
        }
        self.init(code: code, message: message, sql: sql, endpoint: endpoint)
        self.noRoom = noRoom
    }

    public var description: String {
        var s = "SQLite error \(code & 0xff): \(message) in \(endpoint)"
        if let sql {
            let oneLine = sql.split(whereSeparator: \.isNewline).joined(separator: " ")
            s += " - while executing `\(oneLine.count > 160 ? String(oneLine.prefix(160)) + "…" : oneLine)`"
        }
        return s
    }

    /// True for constraint violations (UNIQUE, NOT NULL, CHECK, …).
    public var isConstraint: Bool { code & 0xff == SQLITE_CONSTRAINT }
}

extension SQLiteError: DatabaseBusyError {
    /// Another connection held a lock past the busy timeout (or this one's own, for LOCKED).
    public var isBusy: Bool { code & 0xff == SQLITE_BUSY || code & 0xff == SQLITE_LOCKED }
}

extension SQLiteError: DatabaseFullError {
    public var isFull: Bool { noRoom }
}

extension SQLiteError: DatabaseRefusal {
    public var refusal: String { message }
}
