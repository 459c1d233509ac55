import CLibPQ
import FerryCore

/// A failure reported by PostgreSQL: SQLSTATE, the server's message, and where (endpoint with
/// the password masked, and the statement when there is one — never bound values).
public struct PostgresError: Error, Sendable, CustomStringConvertible {
    /// The five-character SQLSTATE, or empty when libpq reported a client-side failure.
    public var sqlState: String
    public var message: String
    public var detail: String?
    public var hint: String?
    public var context: String?
    public var sql: String?
    public var endpoint: String

    public var description: String {
        var s = "PostgreSQL error" + (sqlState.isEmpty ? "" : " \(sqlState)") + ": \(message)"
        if let detail, !detail.isEmpty { s += " (\(detail))" }
        s += " in \(endpoint)"
        if let hint = advice ?? hint, !hint.isEmpty { s += "; \(hint)" }
        if let sql {
            let oneLine = sql.split(whereSeparator: \.isNewline).joined(separator: " ")
            s += " - while executing `\(oneLine.count > 160 ? String(oneLine.prefix(160)) + "…" : oneLine)`"
        }
        return s
    }

    /// What to do, for the failures users meet most.
    var advice: String? {
        switch sqlState {
        case "42501": return "grant the role the privilege it needs (e.g. GRANT SELECT ON the table) or connect as another role"
        case "42P01": return "check the table name with `ferry tables`"
        case "22001": return "the value is longer than the column allows"
        case "23505": return "the target already holds this key: use --mode replace, or copy into an empty table"
        default: return nil
        }
    }
}

extension PostgresError: DatabaseRefusal {
    public var refusal: String {
        message + (detail.map { $0.isEmpty ? "" : " (\($0))" } ?? "") + (sqlState.isEmpty ? "" : " (SQLSTATE \(sqlState))")
    }
}

extension PostgresError: DatabaseFullError {
    /// disk_full.
    public var isFull: Bool { sqlState == "53100" }
}

extension PostgresError: DatabaseBusyError {
    /// lock_not_available, deadlock_detected, serialization_failure.
    public var isBusy: Bool { ["55P03", "40P01", "40001"].contains(sqlState) }
}

extension PostgresError {
    /// The error of `result` (its fields), or of the connection where there is no result.
    init(_ result: OpaquePointer?, connection: OpaquePointer, sql: String?, endpoint: Endpoint) {
        func field(_ code: UInt8) -> String? {
            guard let result, let p = PQresultErrorField(result, Int32(code)) else { return nil }
            return String(cString: p)
        }
        // libpq's own messages span lines ("server closed the connection unexpectedly\n\tThis
        // probably means…"): one line, as every Ferry error is.
        let raw = field(UInt8(ascii: "M")) ?? String(cString: PQerrorMessage(connection))
        let primary = raw.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: " ")
        self.init(
            sqlState: field(UInt8(ascii: "C")) ?? "", message: primary, detail: field(UInt8(ascii: "D")),
            hint: field(UInt8(ascii: "H")), context: field(UInt8(ascii: "W")), sql: sql, endpoint: endpoint.redacted)
    }
}
