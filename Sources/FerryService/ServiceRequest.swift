import FerryCore
import FerryXML
import Foundation
import Logging

/// What a token (or a plugin's caller) may do. Each scope includes the ones before it.
public enum TokenScope: Int, Sendable, Comparable, CustomStringConvertible {
    /// Read tables, rows, digests, counts; hold read snapshots.
    case read
    /// Also write rows: inserts, change sets, appends, upserts, mirrors, guarded pushes — and
    /// create the staging tables its own loads need, and drop only those.
    case write
    /// Also create, drop and replace served tables, their indexes and foreign keys.
    case manage

    public static func < (a: TokenScope, b: TokenScope) -> Bool { a.rawValue < b.rawValue }
    public var description: String { ["read", "write", "manage"][rawValue] }
}

/// Who is asking: the token's scope and its position among the service's tokens (never the
/// token itself). A plugin's caller is the user who started it: `manage`.
public struct RequestPrincipal: Sendable {
    public var scope: TokenScope
    public var token: Int
    /// A fingerprint of the token (never the token): what a record of who owns a staging table
    /// keeps, the same after a restart whatever the token's place in its file.
    public var identity: String
    /// Who holds the token, for the audit log: its label, else its fingerprint's start.
    public var label: String
    public init(scope: TokenScope, token: Int, identity: String = "", label: String = "") {
        self.scope = scope
        self.token = token
        self.identity = identity
        self.label = label
    }

    /// The fingerprint of a labelled token's holder: loads belong to the label, so a token
    /// rotated under the same label keeps them.
    public static func identity(ofLabel label: String) -> String {
        identity(of: "label:" + label)
    }

    /// The fingerprint of `token`: MD5 of the token behind a fixed prefix, in hex.
    public static func identity(of token: String) -> String {
        var md5 = MD5()
        md5.update(Array(("ferry staging owner:" + token).utf8))
        return md5.finalize().map { String(format: "%02x", $0) }.joined()
    }
    /// The user who started a plugin process.
    public static let owner = RequestPrincipal(scope: .manage, token: -1)

    /// Refuses the request unless the caller has `needed`; `doing` says what was refused.
    public func require(_ needed: TokenScope, _ doing: String) throws {
        guard scope >= needed else { throw ServiceError.forbidden(scope: scope, needed: needed, doing: doing) }
    }
}

/// A request body, piece by piece as the transport receives it.
public struct RequestBody: Sendable {
    private let nextPiece: @Sendable () async throws -> [UInt8]?
    /// `next` returns the next piece, nil at the end of the body.
    public init(next: @escaping @Sendable () async throws -> [UInt8]?) { nextPiece = next }
    public static let empty = RequestBody { nil }
    public func next() async throws -> [UInt8]? { try await nextPiece() }
}

/// One parsed request, whatever carried it (HTTP, a plugin's pipe).
public struct ServiceRequest: Sendable {
    public var route: ProtocolRoute
    /// Path parameters (`table`, `id`) as they appear in the path: percent-encoded.
    public var parameters: [String: String]
    /// Query parameters, decoded, in order.
    public var query: [(String, String)]
    /// Header fields, names lowercased (`accept-encoding`).
    public var headers: [String: String]
    public var body: RequestBody
    public var principal: RequestPrincipal
    public var logger: Logger
    /// Bytes of this request's body the service holds whole (counted against `--max-bodies-mb`
    /// until the request is answered).
    let held = HeldBytes()

    public init(
        route: ProtocolRoute, parameters: [String: String], query: [(String, String)], headers: [String: String] = [:],
        body: RequestBody = .empty, principal: RequestPrincipal, logger: Logger
    ) {
        self.route = route
        self.parameters = parameters
        self.query = query
        self.headers = headers
        self.body = body
        self.principal = principal
        self.logger = logger
    }

    /// The first value of query parameter `name`.
    public func value(_ name: String) -> String? { query.first { $0.0 == name }?.1 }
    /// Every value of query parameter `name`, in order.
    public func values(_ name: String) -> [String] { query.filter { $0.0 == name }.map(\.1) }

    /// The table named in the path.
    func table() throws -> TableName {
        guard let raw = parameters["table"], let name = raw.removingPercentEncoding, !name.isEmpty else {
            throw ServiceError.badRequest("no table in the path")
        }
        // (See `ServiceHandlers.served`: a NUL ends a name where C reads it.)
        guard !name.contains("\0") else { throw ServiceError.notFound(TableName(parsing: name.replacingOccurrences(of: "\0", with: "\\0"))) }
        return TableName(parsing: name)
    }
}

/// An answer: a status, header fields, and a body given whole or streamed.
public struct ServiceResponse: Sendable {
    public enum Body: Sendable {
        case bytes(Data)
        /// Produces the body piece by piece through `write` (a piece as `Data`: a page's pieces
        /// are handed over in the memory they were encoded in, not copied into an array).
        case stream(@Sendable (_ write: (Data) async throws -> Void) async throws -> Void)
    }
    public var status: Int
    /// Besides `Content-Type: application/xml; charset=utf-8`, which every answer has.
    public var headers: [(String, String)]
    public var body: Body

    public init(status: Int = 200, headers: [(String, String)] = [], body: Body) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    static func xml(_ data: Data, status: Int = 200) -> ServiceResponse { ServiceResponse(status: status, body: .bytes(data)) }

    /// The error document for `error`, with its status (and Retry-After when busy).
    public static func error(_ e: ServiceError) -> ServiceResponse {
        ServiceResponse(status: e.status, headers: e.status == 503 ? [("Retry-After", "5")] : [], body: .bytes(e.document))
    }
}

/// A count of bytes one request holds of the service's body budget.
final class HeldBytes: Sendable {
    private let bytes = Locked(0)
    func add(_ n: Int) { bytes.withLock { $0 += n } }
    /// The bytes held, and none after.
    func takeAll() -> Int { bytes.withLock { b in defer { b = 0 }; return b } }
}
