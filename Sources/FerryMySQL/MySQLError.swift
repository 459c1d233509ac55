import FerryCore

/// A failure reported by MySQL/MariaDB (or the client library): error number, SQLSTATE,
/// message, and where (endpoint with the password masked, and the statement when there is one).
public struct MySQLError: Error, Sendable, CustomStringConvertible {
    public var code: UInt32
    public var sqlState: String
    public var message: String
    public var sql: String?
    public var endpoint: String

    public var description: String {
        var s = "MySQL error \(code)" + (sqlState.isEmpty || sqlState == "00000" ? "" : " (\(sqlState))") + ": \(message) in \(endpoint)"
        if let advice { s += "; \(advice)" }
        if let sql {
            let oneLine = sql.split(whereSeparator: \.isNewline).joined(separator: " ")
            s += " - while executing `\(oneLine.count > 160 ? String(oneLine.prefix(160)) + "…" : oneLine)`"
        }
        return s
    }

    /// What to do, for the failures users meet most.
    var advice: String? {
        switch code {
        case 1142, 1143, 1044: return "grant the user the privilege it needs, or connect as another user"
        case 1062: return "the target already holds this key: use --mode replace, or copy into an empty table"
        case 1146: return "check the table name with `ferry tables`"
        case 1406: return "the value is longer than the column allows"
        default: return nil
        }
    }
}

extension MySQLError: DatabaseFullError {
    /// ER_DISK_FULL, ER_RECORD_FILE_FULL (the table is full).
    public var isFull: Bool { code == 1021 || code == 1114 }
}

extension MySQLError: DatabaseBusyError {
    /// ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK.
    public var isBusy: Bool { code == 1205 || code == 1213 }
}

extension MySQLError: DatabaseRefusal {
    public var refusal: String { "MySQL error \(code): \(message)" }
}
