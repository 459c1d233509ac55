import FerryCore
import FerryService
import FerryXML
import Foundation
import Hummingbird
import Logging

/// A request's context: who is asking (the token's scope and its position among the
/// service's tokens — never the token itself).
public struct ServiceRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// Who is asking: set by `AuthMiddleware` from the bearer token.
    var principal = RequestPrincipal(scope: .read, token: -1)

    public init(source: Source) {
        coreContext = .init(source: source)
    }
}

/// Every request needs a bearer token; its scope decides what it may do: reads (GET, HEAD,
/// read snapshots) need `read`, anything else at least `write` (endpoints that create, drop
/// or replace tables check for `manage` themselves). Tokens are compared in constant time,
/// and never logged.
struct AuthMiddleware: RouterMiddleware {
    typealias Context = ServiceRequestContext
    let tokens: TokenRing
    /// Requests under way per token holder (`--max-requests-per-token`).
    let underWay: RequestsPerHolder

    let logger: Logger?

    init(tokens: [(String, TokenScope)], labels: [String: String] = [:], files: [(path: String, scope: TokenScope)] = [],
         maxRequestsPerToken: Int = 0, logger: Logger? = nil) {
        self.tokens = TokenRing(tokens, labels: labels, files: files, logger: logger)
        underWay = RequestsPerHolder(limit: maxRequestsPerToken)
        self.logger = logger
    }

    /// Equal length and bytes, in time that depends only on the lengths.
    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var diff = UInt8(truncatingIfNeeded: a.count ^ b.count)
        for i in 0..<max(a.count, b.count) {
            let x = i < a.count ? a[i] : 0
            let y = i < b.count ? b[i] : 0
            diff |= x ^ y
        }
        return diff == 0
    }

    /// Requests a read token may make besides GET and HEAD: those of `ProtocolRoute.isRead`
    /// (holding and releasing a read snapshot; starting and removing a change feed, which
    /// their handler allows to a manage token or with `--allow-feed`).
    static func isRead(_ request: Request) -> Bool {
        if request.method == .get || request.method == .head { return true }
        return ProtocolRoute.match(method: request.method.rawValue, path: request.uri.path)?.route.isRead ?? false
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        // A health check says only whether the service can reach its database: no token.
        if request.uri.path == XMLService.healthPath, request.method == .get || request.method == .head { return try await next(request, context) }
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else { throw ServiceError.unauthorized }
        let token = Array(header.dropFirst(7).utf8)
        // Check every token (no early exit), so timing does not say which one nearly matched.
        let tokens = self.tokens.current()
        var found = -1
        for (i, t) in tokens.enumerated() where Self.constantTimeEqual(token, t.bytes) { found = i }
        guard found >= 0 else { throw ServiceError.unauthorized }
        var context = context
        let entry = tokens[found]
        context.principal = RequestPrincipal(scope: entry.scope, token: found, identity: entry.identity, label: entry.label)
        // One holder's requests under way, until its answer's body is sent (or dropped: the
        // ticket leaves when the last thing holding it, the body's writer, goes).
        guard let ticket = underWay.enter(entry.identity) else {
            throw ServiceError(
                status: 503, code: "busy",
                message: "this token has \(underWay.limit) requests under way already (--max-requests-per-token); nothing was done; wait for one to end, then try again")
        }
        var response = try await answer(request, context, entry, next)
        let body = response.body
        response.body = ResponseBody(contentLength: body.contentLength) { writer in
            try await body.write(writer)
            ticket.done()
        }
        return response
    }

    func answer(_ request: Request, _ context: Context, _ entry: TokenRing.Entry, _ next: (Request, Context) async throws -> Response) async throws -> Response {
        guard !Self.isRead(request) else { return try await next(request, context) }
        // The audit log: every write request, by the label of who made it (never the token).
        do {
            try context.principal.require(.write, "write")
            let response = try await next(request, context)
            logger?.notice("audit: \(entry.label) (\(entry.scope)) \(request.method) \(request.uri.path) \(response.status.code)")
            return response
        } catch {
            logger?.notice("audit: \(entry.label) (\(entry.scope)) \(request.method) \(request.uri.path) \(ServiceError.from(error, table: nil).status)")
            throw error
        }
    }
}

/// The tokens the service accepts, read again from their files when one changes (checked at
/// most once a second, by modification time and size): a token is rotated by rewriting its
/// file, without a restart. A file that cannot be read, or holds no token or a short one,
/// leaves the tokens as they were (logged, never the tokens).
final class TokenRing: @unchecked Sendable {  // unchecked: the state only under `lock`
    typealias Entry = (bytes: [UInt8], scope: TokenScope, identity: String, label: String)
    private let lock = NSLock()
    private var entries: [Entry]
    private let files: [(path: String, scope: TokenScope)]
    private var stamps: [String]
    private var checked = Date()
    private let logger: Logger?

    init(_ tokens: [(String, TokenScope)], labels: [String: String], files: [(path: String, scope: TokenScope)], logger: Logger?) {
        entries = Self.entries(tokens.map { ($0.0, $0.1, labels[$0.0]) })
        self.files = files
        self.logger = logger
        stamps = files.map { Self.stamp($0.path) }
    }

    /// A labelled token's loads belong to its label; a bare token's to the token, and its
    /// label in the audit log is the start of its fingerprint.
    static func entries(_ tokens: [(String, TokenScope, String?)]) -> [Entry] {
        tokens.map { token, scope, label in
            let identity = label.map(RequestPrincipal.identity(ofLabel:)) ?? RequestPrincipal.identity(of: token)
            return (Array(token.utf8), scope, identity, label ?? "token-" + identity.prefix(8))
        }
    }

    /// A file's modification time and size, as text ("" when it cannot be read).
    static func stamp(_ path: String) -> String {
        guard let a = try? FileManager.default.attributesOfItem(atPath: path) else { return "" }
        let time = (a[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0
        return "\(time) \((a[.size] as? NSNumber)?.int64Value ?? -1)"
    }

    func current() -> [Entry] {
        lock.withLock {
            let now = Date()
            if !files.isEmpty, now.timeIntervalSince(checked) >= 1 {
                checked = now
                let fresh = files.map { Self.stamp($0.path) }
                if fresh != stamps {
                    stamps = fresh
                    do {
                        entries = Self.entries(try files.flatMap { f in
                            try ServerConfiguration.labeledTokens(fromFile: f.path).map { ($0.token, f.scope, $0.label) }
                        })
                        logger?.notice("token files read again: \(entries.count) token\(entries.count == 1 ? "" : "s")")
                    } catch {
                        logger?.warning("token files changed but were not taken (the tokens stay as they were): \(error)")
                    }
                }
            }
            return entries
        }
    }
}

/// How many requests each token holder (a label, or a bare token) has under way, held to a
/// limit (0: none).
final class RequestsPerHolder: Sendable {
    let limit: Int
    private let counts = Locked([String: Int]())

    init(limit: Int) { self.limit = limit }

    /// A ticket for one more request of `holder`, unless it has `limit` under way already.
    func enter(_ holder: String) -> RequestTicket? {
        guard limit > 0 else { return RequestTicket(holder, nil) }
        let admitted = counts.withLock { c in
            let n = c[holder, default: 0]
            guard n < limit else { return false }
            c[holder] = n + 1
            return true
        }
        return admitted ? RequestTicket(holder, self) : nil
    }

    fileprivate func leave(_ holder: String) {
        counts.withLock { c in
            let n = c[holder, default: 1] - 1
            c[holder] = n > 0 ? n : nil
        }
    }

    /// Requests under way for `holder` now.
    func count(_ holder: String) -> Int { counts.withLock { $0[holder, default: 0] } }
}

/// One request counted against its holder: it leaves when done, or when dropped.
final class RequestTicket: Sendable {
    private let holder: String
    private let counts: RequestsPerHolder?
    private let left = Locked(false)

    fileprivate init(_ holder: String, _ counts: RequestsPerHolder?) {
        self.holder = holder
        self.counts = counts
    }

    func done() {
        guard !left.withLock({ l in defer { l = true }; return l }) else { return }
        counts?.leave(holder)
    }

    deinit { done() }
}

/// Turns every error into an XML error document with its status (never an HTML page or a
/// stack trace), and logs each request: method, path, status, time — never a token.
/// What `XMLService` reports of its requests.
struct RequestCounts: Sendable {
    var answering = 0
    var started = 0
}

struct ErrorAndLogMiddleware<Context: RequestContext>: RouterMiddleware {
    let inFlight: Locked<RequestCounts>
    let metrics: ServiceMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let started = Date()
        inFlight.withLock {
            $0.answering += 1
            $0.started += 1
        }
        defer { inFlight.withLock { $0.answering -= 1 } }
        let response: Response
        do {
            response = try await next(request, context)
        } catch {
            var e = ServiceError.from(error, table: nil)
            if let http = error as? HTTPError {
                e = ServiceError(status: Int(http.status.code), code: http.status.code == 404 ? "not_found" : "http_error", message: http.body ?? http.status.reasonPhrase)
                if http.status.code == 404 { e.message = "no such endpoint: \(request.method) \(request.uri.path)" }
                if http.status.code == 413 { e.code = "too_large" }
            }
            if let detail = e.detail { context.logger.error("\(request.method) \(request.uri.path): \(detail)") }
            var headers: HTTPFields = [.contentType: "application/xml; charset=utf-8"]
            if e.status == 503 { headers[.retryAfter] = "5" }
            response = Response(status: .init(code: e.status), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: e.document)))
        }
        let seconds = Date().timeIntervalSince(started)
        context.logger.info("\(request.method) \(request.uri.path) \(response.status.code) \(String(format: "%.1f", seconds * 1000)) ms")
        metrics.answered(
            method: request.method.rawValue, endpoint: ProtocolRoute.match(method: request.method.rawValue, path: request.uri.path)?.route.pattern,
            status: Int(response.status.code), requestBytes: request.headers[.contentLength].flatMap { Int($0) }, seconds: seconds,
            answering: inFlight.withLock { $0.answering } - 1)
        return response
    }
}
