import FerryCore
import Foundation

/// How the protocol's requests reach a service: HTTP (`URLSessionTransport`) or a driver
/// plugin's pipe (FerryPlugins). One request at a time per exchange; an exchange hands the
/// answer's body over piece by piece as it arrives.
public protocol ProtocolTransport: AnyObject, Sendable {
    /// The endpoint, for messages (printed masked).
    var endpoint: Endpoint { get }
    /// What answers, in messages: "the service", "plugin ferry-driver-csv".
    var peer: String { get }
    /// Starts a request and waits for its status: the body then comes piece by piece from the
    /// exchange. `target` is relative to the service's base (`v1/tables`). `upload` streams a
    /// rows document as the request body. Throws `HTTPTransportError` when no answer came and
    /// asking again is safe; any other error is final.
    func start(_ method: String, _ target: String, body: Data?, upload: RowsDocumentSource?) throws -> any ProtocolExchange
    /// What to tell a user whose request got no answer after the retries (`failure`: the last
    /// try's, if any).
    func unanswered(_ failure: HTTPTransportError?) -> FerryError
    /// What to tell a user whose credentials were refused (401).
    var unauthorizedAdvice: String { get }
    /// The connection using this transport has ended (a plugin process may stop).
    func release()
    /// True when an answer's pieces the caller has not taken stop the transfer (the connection
    /// is not read past a bounded amount), so a page of any size costs no memory: a reader then
    /// asks for pages of `largePageBytes`. False where unread pieces pile up in memory until
    /// the page ends (URLSession on Linux, a plugin's pipe shared by several streams), which the
    /// service's own page size, 8 MiB, bounds.
    var pausesReading: Bool { get }
}

extension ProtocolTransport {
    public func release() {}
    public var pausesReading: Bool { false }
}

/// One request in flight: its status, then its body's pieces in order.
public protocol ProtocolExchange: AnyObject {
    /// The status; set once `start` has returned.
    var status: Int? { get }
    /// The next piece of the body; nil at its end. Throws `HTTPTransportError` when the
    /// transfer broke off.
    func next() throws -> Data?
    /// Stops the transfer (the caller does not want the rest) and drops what was not taken:
    /// nothing of this answer is ever read as another's.
    func cancel()
}

extension ProtocolExchange {
    /// The whole body (a short document), refused beyond `limit` bytes.
    public func collect(upTo limit: Int) throws -> Data {
        var body = Data()
        while let piece = try next() {
            guard body.count + piece.count <= limit else {
                throw HTTPTransportError(FerryError.notReady("an answer of more than \(limit) bytes where a short document was expected"), beforeResponse: false)
            }
            body.append(piece)
        }
        return body
    }
}

/// The service's answer to a request, its body collected (short documents only).
public struct HTTPReply {
    public var status: Int
    public var body: Data
}

/// A request that got no answer, or whose answer broke off: the connection failed or the
/// transfer was cut. Safe to retry only for a GET none of whose body reached the caller.
/// A transport's failure that says what to do about it (`HTTPTransportError.advice`).
public protocol AdvisedTransportFailure: Error {
    var advice: String? { get }
}

public struct HTTPTransportError: Error, CustomStringConvertible {
    public var reason: String
    /// What the user can do about it, when the transport knows better than "check the URL" (a
    /// certificate that did not verify).
    public var advice: String?
    /// True when the failure came before the status line (nothing of the answer arrived).
    public var beforeResponse: Bool
    public var description: String { reason }

    public init(_ error: (any Error)?, beforeResponse: Bool) {
        self.beforeResponse = beforeResponse
        advice = (error as? AdvisedTransportFailure)?.advice
        if let e = error as? URLError {
            reason = "\(e.localizedDescription) (URLError \(e.errorCode))"
        } else {
            reason = error.map { "\($0)" } ?? "no response"
        }
    }
}


/// The protocol's client over any transport: requests with retries for idempotent ones, the
/// service's `<error>` documents turned into Ferry's errors. Immutable after init.
final class ProtocolClient: @unchecked Sendable {  // unchecked: immutable after init; transports are thread-safe
    let transport: any ProtocolTransport
    var endpoint: Endpoint { transport.endpoint }
    /// The most of a short document (schema, table list, error) collected in memory.
    static let maxCollectedBytes = 64 << 20

    /// `--retries`: how many times a request the service answered 503 (busy, unavailable:
    /// nothing was done) is asked again, with backoff, when it can be sent again as it was.
    let retries: Int

    init(transport: any ProtocolTransport) {
        self.transport = transport
        retries = max(0, transport.endpoint.options["retries"].flatMap { Int($0) } ?? 0)
    }

    /// Whether an answer of `status` is asked again as retry `retry` (1-based), after saying so
    /// and waiting: a 503 within `--retries`, its wait doubling from 0.5 s up to 8 s.
    func retrying(status: Int, body: Data, retry: Int, doing: String) -> Bool {
        guard status == 503, retry <= retries else { return false }
        let wait = min(8, 0.5 * Double(1 << min(retry - 1, 4)))
        let why = XMLDocuments.decodeError(body).map { "\($0.code): \($0.message)" } ?? "HTTP 503"
        Notices.say("\(doing): \(transport.peer) answered 503 (\(why.prefix(160))); retry \(retry) of \(retries) in \(wait) s (--retries)")
        Thread.sleep(forTimeInterval: wait)
        return true
    }

    func start(_ method: String, _ path: String, body: Data? = nil, upload: RowsDocumentSource? = nil) throws -> any ProtocolExchange {
        try transport.start(method, path, body: body, upload: upload)
    }

    /// Sends a request and collects its (short) answer. GETs are retried with backoff when the
    /// connection fails before anything of the answer was used.
    /// A 503 answer (nothing done) is asked again within `--retries` unless its body was a
    /// stream of rows, which is gone once sent.
    func send(_ method: String, _ path: String, body: Data? = nil, upload: (() -> RowsDocumentSource)? = nil) throws -> HTTPReply {
        let attempts = method == "GET" ? 4 : 1
        var lastError: HTTPTransportError?
        var attempt = 0
        var retried = 0
        while attempt < attempts {
            if attempt > 0 { Thread.sleep(forTimeInterval: 0.25 * Double(1 << (attempt - 1))) }
            attempt += 1
            do {
                let exchange = try start(method, path, body: body, upload: upload?())
                defer { exchange.cancel() }
                let status = exchange.status ?? 0
                let reply = HTTPReply(status: status, body: try exchange.collect(upTo: Self.maxCollectedBytes))
                if upload == nil, status == 503 {
                    retried += 1
                    if retrying(status: status, body: reply.body, retry: retried, doing: "\(method) \(Self.shown(path))") {
                        attempt -= 1
                        continue
                    }
                }
                return reply
            } catch let e as HTTPTransportError {
                lastError = e
            }
        }
        throw transport.unanswered(lastError)
    }

    /// A request's path as a retry names it: without its query (which may carry key values).
    static func shown(_ path: String) -> String {
        String(path.prefix { $0 != "?" })
    }

    /// Sends a GET and hands its answer's body to `piece` as it arrives (a long answer is never
    /// collected whole). A GET whose connection fails, before or during the body, is asked again
    /// with backoff; `restart` runs before each attempt's body, so the caller drops what it took
    /// of a failed one.
    func receive(_ path: String, table: TableName? = nil, restart: () -> Void, piece: (Data) throws -> Void) throws {
        var lastError: HTTPTransportError?
        var attempt = 0
        var retried = 0
        while attempt < 4 {
            if attempt > 0 { Thread.sleep(forTimeInterval: 0.25 * Double(1 << (attempt - 1))) }
            attempt += 1
            do {
                let exchange = try start("GET", path)
                defer { exchange.cancel() }
                let status = exchange.status ?? 0
                guard (200..<300).contains(status) else {
                    let reply = HTTPReply(status: status, body: try exchange.collect(upTo: Self.maxCollectedBytes))
                    if status == 503 { retried += 1 }
                    if retrying(status: status, body: reply.body, retry: retried, doing: "GET \(Self.shown(path))") {
                        attempt -= 1
                        continue
                    }
                    throw error(reply, table: table)
                }
                restart()
                while let p = try exchange.next() { try piece(p) }
                return
            } catch let e as HTTPTransportError {
                lastError = e
            }
        }
        throw transport.unanswered(lastError)
    }

    /// Sends and checks the status, turning the service's `<error>` into Ferry's errors.
    func expect(_ method: String, _ path: String, body: Data? = nil, upload: (() -> RowsDocumentSource)? = nil, table: TableName? = nil) throws -> Data {
        let reply = try send(method, path, body: body, upload: upload)
        guard (200..<300).contains(reply.status) else { throw error(reply, table: table) }
        return reply.body
    }
}
