import FerryCore
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The client of Ferry's XML service (schemes `http` and `https`): a service URL works as a
/// source or a target like any database. The token comes from the URL's password
/// (`http://:TOKEN@host:8080/`), else FERRY_TOKEN, else the file named by `?token-file=`.
public struct HTTPDriver: Driver {
    public static let name = Engine.http.rawValue
    public init() {}
    public var name: String { Self.name }
    public var options: [DriverOption] {
        [DriverOption(name: "token-file", summary: "read the bearer token from this file (first line)")]
    }
    public var schemes: [String] { ["http", "https"] }
    public var dialect: any Dialect { HTTPDialect() }

    public func connect(_ endpoint: Endpoint, role: ConnectionRole) throws -> any Connection {
        try HTTPConnection(endpoint: endpoint)
    }
}

/// The service's answer to a request, with the XML error decoded when there is one.
struct HTTPReply {
    var status: Int
    var body: Data
}

/// A synchronous HTTP client on URLSession, with retries for idempotent requests.
/// Immutable after init, and URLSession is thread-safe.
final class HTTPClient: @unchecked Sendable {
    let base: String
    let token: String?
    let endpoint: Endpoint
    private let session: URLSession

    init(endpoint: Endpoint) throws {
        self.endpoint = endpoint
        guard let host = endpoint.host else {
            throw FerryError.invalidEndpoint(text: endpoint.redacted, reason: "no host: write http://host:8080/")
        }
        let hostPart = host.contains(":") ? "[\(host)]" : host
        var prefix = endpoint.path
        if !prefix.isEmpty && !prefix.hasSuffix("/") { prefix += "/" }
        base = "\(endpoint.scheme)://\(hostPart)" + (endpoint.port.map { ":\($0)" } ?? "") + "/" + prefix
        var token = endpoint.password.flatMap { $0.isEmpty ? nil : $0 } ?? ProcessInfo.processInfo.environment["FERRY_TOKEN"]
        if token == nil, let file = endpoint.options["token-file"] ?? endpoint.parameter("token-file") {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                throw FerryError.invalidOption("cannot read the token file \(file)")
            }
            token = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
                .first { !$0.isEmpty && !$0.hasPrefix("#") }
        }
        self.token = token
        let config = URLSessionConfiguration.ephemeral
        config.timeoutIntervalForRequest = 300
        config.httpAdditionalHeaders = ["Accept": "application/xml"]
        session = URLSession(configuration: config)
    }

    deinit { session.invalidateAndCancel() }

    static func escape(_ segment: String) -> String {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "/?#%&=+;")
        return segment.addingPercentEncoding(withAllowedCharacters: allowed) ?? segment
    }

    static func query(_ items: [(String, String)]) -> String {
        var allowed = CharacterSet.urlQueryAllowed
        allowed.remove(charactersIn: "&=+?#;/")
        let parts = items.map { "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: allowed) ?? $0.1)" }
        return parts.isEmpty ? "" : "?" + parts.joined(separator: "&")
    }

    /// Sends a request and waits. GETs are retried with backoff when the connection fails.
    func send(_ method: String, _ path: String, body: Data? = nil) throws -> HTTPReply {
        guard let url = URL(string: base + path) else {
            throw FerryError.invalidEndpoint(text: endpoint.redacted, reason: "cannot build a request URL for \(path)")
        }
        var request = URLRequest(url: url)
        request.httpMethod = method
        request.httpBody = body
        if body != nil { request.setValue("application/xml; charset=utf-8", forHTTPHeaderField: "Content-Type") }
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        let attempts = method == "GET" ? 4 : 1
        var lastError: (any Error)?
        for attempt in 0..<attempts {
            if attempt > 0 { Thread.sleep(forTimeInterval: 0.25 * Double(1 << (attempt - 1))) }
            let box = ReplyBox()
            let done = DispatchSemaphore(value: 0)
            let task = session.dataTask(with: request) { data, response, error in
                box.data = data
                box.status = (response as? HTTPURLResponse)?.statusCode
                box.error = error
                done.signal()
            }
            task.resume()
            done.wait()
            if let status = box.status { return HTTPReply(status: status, body: box.data ?? Data()) }
            lastError = box.error
        }
        let reason = (lastError as? URLError).map { "\($0.localizedDescription) (URLError \($0.errorCode))" } ?? "\(lastError.map { "\($0)" } ?? "no response")"
        throw FerryError.connectionFailed(endpoint: endpoint.redacted, reason: "the service did not answer: \(reason); check the URL and that `ferry serve` runs")
    }

    /// Sends and checks the status, turning the service's `<error>` into Ferry's errors.
    func expect(_ method: String, _ path: String, body: Data? = nil, table: TableName? = nil) throws -> Data {
        let reply = try send(method, path, body: body)
        guard (200..<300).contains(reply.status) else { throw error(reply, table: table) }
        return reply.body
    }

    func error(_ reply: HTTPReply, table: TableName?) -> any Error {
        let decoded = XMLDocuments.decodeError(reply.body)
        let message = decoded?.message ?? "HTTP \(reply.status)"
        switch reply.status {
        case 401: return FerryError.connectionFailed(endpoint: endpoint.redacted, reason: "the service refused the token (401): give it as http://:TOKEN@host/, FERRY_TOKEN or --token-file")
        case 403: return FerryError.readOnlyTarget(endpoint: endpoint.redacted, reason: message)
        case 404 where table != nil: return FerryError.tableNotFound(table: table ?? TableName(""), endpoint: endpoint.redacted)
        case 409: return FerryError.targetTableExists(table: table ?? TableName(""), endpoint: endpoint.redacted)
        case 422:
            let e = FerryError.invalidValue(table: table, column: decoded?.column, key: nil, message: message)
            // A value the database refused: the engine names its key from the row.
            if let row = decoded?.row, row >= 1 { return BatchRowError(row: row - 1, error: e) }
            return e
        default: return FerryError.copyFailed(table: table ?? TableName(""), endpoint: endpoint.redacted, reason: "\(message) (HTTP \(reply.status))")
        }
    }
}

private final class ReplyBox: @unchecked Sendable {
    var data: Data?
    var status: Int?
    var error: (any Error)?
}

/// The service's naming rules on the client side: Ferry quotes nothing itself (names travel in
/// URLs and XML); DDL is not transactional across requests, so a failed create is dropped.
public struct HTTPDialect: Dialect {
    public init() {}
    public var engine: Engine { .http }
    public var supportsTransactionalDDL: Bool { false }
    /// Upserts and deletes travel as change sets (`POST …/changes`); the service's own engine
    /// writes them in its syntax, and likewise enumerations and serial columns.
    public var upsertSyntax: UpsertSyntax { .driverDefined }
    public var enumSyntax: EnumSyntax { .driverDefined }
    public var identitySyntax: IdentitySyntax { .driverDefined }
}

extension Engine {
    /// Ferry's XML service, seen from the client (a schema it describes names the engine behind it).
    public static let http = Engine("http")
}
