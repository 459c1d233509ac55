import FerryCore
import Foundation

/// The service's (or a plugin's) failure answers, as Ferry's errors: one line each, naming the
/// endpoint (masked) and the table.
extension ProtocolClient {
    func error(_ reply: HTTPReply, table: TableName?) -> any Error {
        let decoded = XMLDocuments.decodeError(reply.body)
        let message = decoded?.message ?? "HTTP \(reply.status)"
        switch reply.status {
        case 401: return FerryError.connectionFailed(endpoint: endpoint.redacted, reason: transport.unauthorizedAdvice)
        case 403: return FerryError.readOnlyTarget(endpoint: endpoint.redacted, reason: message)
        case 404 where table != nil: return FerryError.tableNotFound(table: table ?? TableName(""), endpoint: endpoint.redacted)
        case 409 where decoded == nil || decoded?.code == "exists":
            return FerryError.targetTableExists(table: table ?? TableName(""), endpoint: endpoint.redacted)
        case 409:
            // A conflict the service explains (keys a target would merge, an apply's row count).
            return FerryError.copyFailed(table: table ?? TableName(""), endpoint: endpoint.redacted, reason: message)
        case 422 where decoded?.code == "too_many_refused":
            // Past a load's `reject=N` (the connection names the copy's limit and table again).
            return RefusedRowsPastLimit(table: table ?? TableName(""), limit: 0, last: message)
        case 422:
            let e = FerryError.invalidValue(table: table, column: decoded?.column, key: nil, message: message)
            // A value the database refused: the engine names its key from the row.
            if let row = decoded?.row, row >= 1 { return BatchRowError(row: row - 1, error: e) }
            return e
        default:
            guard let table else { return FerryError.connectionFailed(endpoint: endpoint.redacted, reason: "\(transport.peer) answered \(reply.status): \(message)") }
            return FerryError.copyFailed(table: table, endpoint: endpoint.redacted, reason: "\(message) (HTTP \(reply.status))")
        }
    }
}
