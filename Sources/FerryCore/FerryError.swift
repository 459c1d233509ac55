/// A driver's error that says the database stayed locked by other sessions past the driver's
/// wait (SQLite's `SQLITE_BUSY`, a lock wait timeout, a deadlock victim): the same request can
/// succeed later. The service answers it with 503 instead of 500.
public protocol DatabaseBusyError: Error {
    var isBusy: Bool { get }
}

/// A driver's error that says the database had no room to write: its disk is full, or a file
/// size or quota limit was reached (SQLite's `SQLITE_FULL`, `EFBIG`, `ENOSPC`; PostgreSQL's
/// disk_full; MySQL's disk or table full). The service answers it with 507: the request may
/// succeed once space is freed, and nothing was changed.
public protocol DatabaseFullError: Error {
    var isFull: Bool { get }
}

/// A driver's error in the database's own words, without the statement or the endpoint: why it
/// refused a row (a constraint, a value out of range), as a reject file and a service's answer
/// give it.
public protocol DatabaseRefusal: Error {
    var refusal: String { get }
}

/// What can go wrong in Ferry's core, each case rendered as one line a user can act on:
/// what happened, where (endpoint with the password masked, table, column, key), what to do.
///
/// Drivers throw their own error types (`SQLiteError`, …) for engine failures; the copy
/// engine wraps them with the table they happened in.
public enum FerryError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A URL Ferry cannot parse (`text` is already redacted).
    case invalidEndpoint(text: String, reason: String)
    /// A URL whose scheme no registered driver serves.
    case unknownScheme(scheme: String, known: [String], hint: String? = nil)
    /// A command-line option or argument that makes no sense.
    case invalidOption(String)
    /// Could not open the database at all.
    case connectionFailed(endpoint: String, reason: String)
    /// A connection that worked ended under the work (a driver plugin died or stopped answering).
    case connectionLost(endpoint: String, reason: String)
    /// The target cannot be written to.
    case readOnlyTarget(endpoint: String, reason: String)
    case tableNotFound(table: TableName, endpoint: String)
    /// `--mode create` and the table is already there.
    case targetTableExists(table: TableName, endpoint: String)
    /// Keyed work on a table that has no primary key, no usable unique key and no `--key`.
    case noKey(table: TableName)
    /// A key named with `--key` that two rows share.
    case keyNotUnique(table: TableName, key: [String], value: String)
    /// A column named by the user that the table does not have.
    case columnNotFound(table: TableName, column: String)
    /// A keyed write found the target comparing two different keys as one (a case- or
    /// accent-insensitive collation, trailing spaces ignored): `source` would land on `target`.
    case keysMerged(table: TableName, source: String, target: String)
    /// A value that cannot travel as it is (narrowing, wrong storage class, bad text form).
    case invalidValue(table: TableName?, column: String?, key: String?, message: String)
    /// The target has no type for a column's logical type.
    case unsupportedType(table: TableName, column: String, type: String, target: String)
    /// A table's copy failed; `reason` is the driver's one-line message.
    case copyFailed(table: TableName, endpoint: String, reason: String)
    /// Several tables failed; each reason is one line.
    case someTablesFailed(count: Int, total: Int)
    /// The one table a command worked on failed: its own one-line message (what, where, what to do).
    case tableFailed(String)
    /// The caller cancelled (a `Cancellation`, a cancelled Swift task).
    case cancelled
    /// A step the state of a database or a plan does not allow yet (units missing, a snapshot
    /// gone, a load another run holds); the message says what to do. A failure, not a usage error.
    case notReady(String)

    /// True for mistakes in how Ferry was called (exit code 2), false for failures (exit code 1).
    public var isUsage: Bool {
        switch self {
        case .invalidEndpoint, .unknownScheme, .invalidOption: return true
        default: return false
        }
    }

    public var description: String {
        switch self {
        case let .invalidEndpoint(text, reason):
            return "invalid database URL '\(text)': \(reason) (examples: sqlite:data/app.db, postgres://user@host:5432/db, mysql://user@host:3306/db)"
        case let .unknownScheme(scheme, known, hint):
            return "unknown URL scheme '\(scheme):': Ferry knows \(known.map { $0 + ":" }.joined(separator: ", ")) (e.g. sqlite:path/to/file.db)"
                + (hint.map { "; \($0)" } ?? "")
        case let .invalidOption(message), let .notReady(message), let .tableFailed(message):
            return message
        case let .connectionFailed(endpoint, reason):
            return "cannot open \(endpoint): \(reason)"
        case let .connectionLost(endpoint, reason):
            return "lost the connection to \(endpoint): \(reason)"
        case let .readOnlyTarget(endpoint, reason):
            return "cannot write to \(endpoint): \(reason)"
        case let .tableNotFound(table, endpoint):
            return "table \(table) not found in \(endpoint); run `ferry tables \(endpoint)` to list the tables"
        case let .targetTableExists(table, endpoint):
            return "table \(table) already exists in \(endpoint); use --mode replace to overwrite it, --mode append to add rows, or --exclude \(table)"
        case let .noKey(table):
            return "table \(table) has no primary key and no unique key over NOT NULL columns; name one with --key \(table)=col1,col2"
        case let .keyNotUnique(table, key, value):
            return "--key \(table)=\(key.joined(separator: ",")) is not unique: two rows have \(value); name columns that identify one row"
        case let .columnNotFound(table, column):
            return "table \(table) has no column \(column)"
        case let .keysMerged(table, source, target):
            return "table \(table): the source key \(source) would land on the row with key \(target), because the target compares keys "
                + "without regard to case, accents or trailing spaces (its collation); nothing was changed. Give the key columns a binary "
                + "or case-sensitive collation on the target (MySQL: ALTER TABLE … MODIFY … COLLATE utf8mb4_bin; SQLite: no COLLATE NOCASE)"
        case let .invalidValue(table, column, key, message):
            var place: [String] = []
            if let table { place.append("table \(table)") }
            if let column { place.append("column \(column)") }
            if let key { place.append("key \(key)") }
            return place.isEmpty ? message : place.joined(separator: ", ") + ": " + message
        case let .unsupportedType(table, column, type, target):
            return "table \(table), column \(column): \(target) has no type for \(type); skip the column or cast it"
        case let .copyFailed(table, endpoint, reason):
            return "copying \(table) to \(endpoint) failed: \(reason)"
        case .cancelled:
            return "cancelled: the table being written was rolled back; tables not started were not touched"
        case let .someTablesFailed(count, total):
            return "\(count) of \(total) tables failed (see the messages above); tables that failed were left as they were"
        }
    }

    /// Fills in table, column and key on an `invalidValue` raised where they were not known.
    /// The same error about `table` instead (a value refused in a scratch table is refused for
    /// the table the rows were meant for).
    public func naming(table: TableName) -> FerryError {
        guard case let .invalidValue(_, c, k, message) = self else { return self }
        return .invalidValue(table: table, column: c, key: k, message: message)
    }

    public func adding(table: TableName? = nil, column: String? = nil, key: String? = nil) -> FerryError {
        guard case let .invalidValue(t, c, k, message) = self else { return self }
        return .invalidValue(table: t ?? table, column: c ?? column, key: k ?? key, message: message)
    }
}
