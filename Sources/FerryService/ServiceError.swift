import FerryCore
import FerryXML
import Foundation

/// An error the service answers with: an HTTP status and `<error code="…" table="…">`.
public struct ServiceError: Error, Sendable {
    public var status: Int
    public var code: String
    var table: String?
    public var message: String
    /// For a value the database refused: its row (1-based) in the request's rows, and its column.
    var row: Int?
    var column: String?
    /// What the service logs and never sends: the engine's own message, its SQL, file paths.
    public var detail: String?

    public init(status: Int, code: String, table: String? = nil, message: String, row: Int? = nil, column: String? = nil, detail: String? = nil) {
        self.status = status
        self.code = code
        self.table = table
        self.message = message
        self.row = row
        self.column = column
        self.detail = detail
    }

    /// A failure inside the database or the service: the client learns that it happened, the
    /// log learns what it was.
    public static func internalFailure(_ detail: String, table: TableName?) -> ServiceError {
        ServiceError(
            status: 500, code: "failed", table: table?.description,
            message: "the service could not complete this request (the details are in the service's log)", detail: detail)
    }

    public static func notFound(_ table: TableName) -> ServiceError {
        ServiceError(status: 404, code: "not_found", table: table.description, message: "table \(table) is not served here; GET /v1/tables lists the tables")
    }
    public static let unauthorized = ServiceError(status: 401, code: "unauthorized", message: "a bearer token is required (Authorization: Bearer TOKEN)")
    public static func forbidden(scope: TokenScope, needed: TokenScope, doing: String) -> ServiceError {
        let how = needed == .manage
            ? "a manage token (from the service's --token-file) may; tokens from its --write-token-file write rows only"
            : "a write token (from the service's --write-token-file or --token-file) may"
        return ServiceError(status: 403, code: "forbidden", message: "this token may only \(scope == .read ? "read" : "write rows"), not \(doing); \(how)")
    }
    public static func badRequest(_ message: String, table: String? = nil) -> ServiceError {
        ServiceError(status: 400, code: "bad_request", table: table, message: message)
    }
    /// The database stayed locked past the driver's wait: another writer, or (on SQLite) a read
    /// snapshot a client holds open (one killed mid-read holds it until the idle limit).
    public static func busy(_ detail: String, table: TableName?) -> ServiceError {
        ServiceError(
            status: 503, code: "busy", table: table?.description,
            message: "the database is busy: another session holds a lock this request needs (a long write, or on SQLite a read snapshot a client left open, which ends after the idle limit); nothing was changed; try again shortly",
            detail: detail)
    }
    /// The served database could not be reached (down, restarting, refusing connections): the
    /// client may try again; nothing was changed.
    public static func unavailable(_ detail: String, table: TableName?) -> ServiceError {
        ServiceError(
            status: 503, code: "unavailable", table: table?.description,
            message: "the service cannot reach its database now (it may be restarting); nothing was changed; try again shortly",
            detail: detail)
    }
    /// The served database had no room to write (disk full, a size or quota limit).
    public static func full(_ detail: String, table: TableName?) -> ServiceError {
        ServiceError(
            status: 507, code: "full", table: table?.description,
            message: "the served database has no room to write (its disk is full, or a size or quota limit was reached); nothing was changed; free space where it is stored and try again",
            detail: detail)
    }
    public static func tooLarge(_ limit: Int) -> ServiceError {
        ServiceError(status: 413, code: "too_large", message: "the request body is larger than \(limit) bytes; send smaller batches")
    }

    /// Maps any error from the core, a driver or the wire format to a status and code.
    public static func from(_ error: any Error, table: TableName?) -> ServiceError {
        if let e = error as? ServiceError { return e }
        if let e = error as? RefusedRowsPastLimit {
            // A load's `reject=N` ran out: the client names its own table and limit again.
            return ServiceError(status: 422, code: "too_many_refused", table: table?.description, message: e.last)
        }
        if let e = error as? ColumnsAdded {
            return ServiceError(status: 409, code: "columns_added", table: e.table.description, message: e.description)
        }
        if let e = error as? any DatabaseBusyError, e.isBusy { return .busy("\(error)", table: table) }
        if let e = error as? any DatabaseFullError, e.isFull { return .full("\(error)", table: table) }
        if let e = error as? XMLWireError {
            if case .limitExceeded = e { return ServiceError(status: 413, code: "too_large", table: table?.description, message: e.description) }
            return .badRequest(e.description, table: table?.description)
        }
        if let e = error as? FerryError {
            switch e {
            case .tableNotFound(let t, _): return .notFound(t)
            case .targetTableExists: return ServiceError(status: 409, code: "exists", table: table?.description, message: e.description)
            case .invalidValue, .columnNotFound, .unsupportedType, .noKey:
                return ServiceError(status: 422, code: "invalid", table: table?.description, message: e.description)
            case .readOnlyTarget: return ServiceError(status: 403, code: "read_only", table: table?.description, message: e.description)
            case .keysMerged: return ServiceError(status: 409, code: "conflict", table: table?.description, message: e.description)
            case .invalidOption: return .badRequest(e.description, table: table?.description)
            case .connectionFailed, .connectionLost: return .unavailable(e.description, table: table)
            default: return .internalFailure(e.description, table: table)
            }
        }
        if let e = error as? BatchRowError {
            var column: String?
            var message = e.error.description
            if case let .invalidValue(_, c, _, m) = e.error {
                column = c
                message = m
            }
            return ServiceError(
                status: 422, code: "invalid", table: table?.description, message: message, row: e.row + 1, column: column)
        }
        return .internalFailure("\(error)", table: table)
    }

    public var document: Data { XMLDocuments.error(code: code, table: table, message: message, row: row, column: column) }
}
