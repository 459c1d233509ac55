import FerryCore
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The client of Ferry's XML service (schemes `http` and `https`): a service URL works as a
/// source or a target like any database. The token comes from the file given as the
/// `token-file` driver option (`--token-file`), else the URL's password
/// (`http://:TOKEN@host:8080/`), else FERRY_TOKEN.
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

/// The service's answer to a request, its body collected (short documents only).
struct HTTPReply {
    var status: Int
    var body: Data
}

/// A request that got no answer, or whose answer broke off: the connection failed or the
/// transfer was cut. Safe to retry only for a GET none of whose body reached the caller.
struct HTTPTransportError: Error, CustomStringConvertible {
    var reason: String
    /// True when the failure came before the status line (nothing of the answer arrived).
    var beforeResponse: Bool
    var description: String { reason }

    init(_ error: (any Error)?, beforeResponse: Bool) {
        self.beforeResponse = beforeResponse
        if let e = error as? URLError {
            reason = "\(e.localizedDescription) (URLError \(e.errorCode))"
        } else {
            reason = error.map { "\($0)" } ?? "no response"
        }
    }
}

/// A synchronous HTTP client on URLSession, with retries for idempotent requests. Bodies
/// stream both ways: an answer is handed over piece by piece as it arrives (`HTTPExchange`),
/// and a request's rows are encoded as the transport sends them (`RowsDocumentSource`).
/// Immutable after init, and URLSession is thread-safe.
final class HTTPClient: @unchecked Sendable {  // unchecked: immutable after init; URLSession is thread-safe
    let base: String
    let token: String?
    let endpoint: Endpoint
    private let session: URLSession
    private let exchanges: ExchangeRouter
    /// The most of a short document (schema, table list, error) collected in memory.
    static let maxCollectedBytes = 64 << 20

    init(endpoint: Endpoint) throws {
        self.endpoint = endpoint
        guard let host = endpoint.host else {
            throw FerryError.invalidEndpoint(text: endpoint.redacted, reason: "no host: write http://host:8080/")
        }
        let hostPart = host.contains(":") ? "[\(host)]" : host
        var prefix = endpoint.path
        if !prefix.isEmpty && !prefix.hasSuffix("/") { prefix += "/" }
        base = "\(endpoint.scheme)://\(hostPart)" + (endpoint.port.map { ":\($0)" } ?? "") + "/" + prefix
        // An explicit token file wins, then the URL's password, then FERRY_TOKEN.
        var token: String?
        if let file = endpoint.options["token-file"] ?? endpoint.parameter("token-file") {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                throw FerryError.invalidOption("cannot read the token file \(file)")
            }
            token = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
                .first { !$0.isEmpty && !$0.hasPrefix("#") }
            guard token != nil else { throw FerryError.invalidOption("the token file \(file) holds no token") }
        }
        token = token ?? endpoint.password.flatMap { $0.isEmpty ? nil : $0 } ?? ProcessInfo.processInfo.environment["FERRY_TOKEN"]
        self.token = token
        let config = URLSessionConfiguration.ephemeral
        config.timeoutIntervalForRequest = 300
        config.httpAdditionalHeaders = ["Accept": "application/xml"]
        exchanges = ExchangeRouter()
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        session = URLSession(configuration: config, delegate: exchanges, delegateQueue: queue)
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

    /// Starts a request and waits for the status line: the body then comes piece by piece from
    /// the exchange. `upload` streams a rows document as the request body (chunked), encoded
    /// as the transport asks for it. Throws `HTTPTransportError` when no answer came.
    func start(_ method: String, _ path: String, body: Data? = nil, upload: RowsDocumentSource? = nil) throws -> HTTPExchange {
        guard let url = URL(string: base + path) else {
            throw FerryError.invalidEndpoint(text: endpoint.redacted, reason: "cannot build a request URL for \(path)")
        }
        var request = URLRequest(url: url)
        request.httpMethod = method
        if body != nil || upload != nil { request.setValue("application/xml; charset=utf-8", forHTTPHeaderField: "Content-Type") }
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        let exchange = HTTPExchange()
        #if canImport(FoundationNetworking)
        if let upload {
            request.httpBodyStream = RowsBodyStream(source: upload)
        } else {
            request.httpBody = body
        }
        let task = session.dataTask(with: request)
        exchanges.register(exchange, for: task)
        task.resume()
        #else
        var pump: BoundStreamPump?
        if let upload {
            let p = BoundStreamPump(source: upload)
            request.httpBodyStream = p.input
            pump = p
        } else {
            request.httpBody = body
        }
        let task = session.dataTask(with: request)
        exchanges.register(exchange, for: task)
        task.resume()
        // The caller's thread fills the stream URLSession reads (no thread of its own).
        pump?.run(until: exchange)
        #endif
        try exchange.waitForStatus()
        return exchange
    }

    /// Sends a request and collects its (short) answer. GETs are retried with backoff when the
    /// connection fails before anything of the answer was used.
    func send(_ method: String, _ path: String, body: Data? = nil, upload: (() -> RowsDocumentSource)? = nil) throws -> HTTPReply {
        let attempts = method == "GET" ? 4 : 1
        var lastError: HTTPTransportError?
        for attempt in 0..<attempts {
            if attempt > 0 { Thread.sleep(forTimeInterval: 0.25 * Double(1 << (attempt - 1))) }
            do {
                let exchange = try start(method, path, body: body, upload: upload?())
                defer { exchange.cancel() }
                let status = exchange.status ?? 0
                return HTTPReply(status: status, body: try exchange.collect(upTo: Self.maxCollectedBytes))
            } catch let e as HTTPTransportError {
                lastError = e
            }
        }
        throw FerryError.connectionFailed(
            endpoint: endpoint.redacted,
            reason: "the service did not answer: \(lastError?.reason ?? "no response"); check the URL and that `ferry serve` runs")
    }

    /// Sends and checks the status, turning the service's `<error>` into Ferry's errors.
    func expect(_ method: String, _ path: String, body: Data? = nil, upload: (() -> RowsDocumentSource)? = nil, table: TableName? = nil) throws -> Data {
        let reply = try send(method, path, body: body, upload: upload)
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
        case 409 where decoded == nil || decoded?.code == "exists":
            return FerryError.targetTableExists(table: table ?? TableName(""), endpoint: endpoint.redacted)
        case 409:
            // A conflict the service explains (keys a target would merge, an apply's row count).
            return FerryError.copyFailed(table: table ?? TableName(""), endpoint: endpoint.redacted, reason: message)
        case 422:
            let e = FerryError.invalidValue(table: table, column: decoded?.column, key: nil, message: message)
            // A value the database refused: the engine names its key from the row.
            if let row = decoded?.row, row >= 1 { return BatchRowError(row: row - 1, error: e) }
            return e
        default:
            guard let table else { return FerryError.connectionFailed(endpoint: endpoint.redacted, reason: "the service answered \(reply.status): \(message)") }
            return FerryError.copyFailed(table: table, endpoint: endpoint.redacted, reason: "\(message) (HTTP \(reply.status))")
        }
    }
}

/// One request in flight, as URLSession reports it: the status, then the body's pieces as
/// they arrive, then the end (or the failure). The caller takes the pieces in order.
///
/// Linux's URLSession (libcurl) cannot pause a transfer (suspending a task restarts it), so
/// the pieces of an answer the caller has not taken yet wait here: a page of rows ends at
/// the service's page size (8 MiB plus one row), and the next page is asked for only when the
/// caller wants more rows, which bounds them.
final class HTTPExchange: @unchecked Sendable {  // unchecked: all state is touched only under `condition`
    private let condition = NSCondition()
    private(set) var status: Int?
    private var pieces: [Data] = []
    private var head = 0
    private var finished = false
    private var failure: (any Error)?
    private var task: URLSessionTask?

    func attach(_ task: URLSessionTask) {
        condition.lock()
        self.task = task
        condition.unlock()
    }

    // URLSession's side (its delegate queue).

    func received(_ response: URLResponse) {
        condition.lock()
        status = (response as? HTTPURLResponse)?.statusCode ?? 0
        condition.broadcast()
        condition.unlock()
    }

    func received(_ data: Data) {
        condition.lock()
        pieces.append(data)
        condition.broadcast()
        condition.unlock()
    }

    func completed(_ error: (any Error)?) {
        condition.lock()
        if let error, failure == nil { failure = HTTPTransportError(error, beforeResponse: status == nil) }
        if error == nil && status == nil { failure = HTTPTransportError(nil, beforeResponse: true) }
        finished = true
        task = nil
        condition.broadcast()
        condition.unlock()
    }

    // The caller's side.

    /// Waits for the status line (or the failure that came instead).
    func waitForStatus() throws {
        condition.lock()
        defer { condition.unlock() }
        while status == nil && !finished { condition.wait() }
        if status == nil { throw failure ?? HTTPTransportError(nil, beforeResponse: true) }
    }

    var isFinished: Bool {
        condition.lock()
        defer { condition.unlock() }
        return finished
    }

    /// The next piece of the body; nil at its end. Throws `HTTPTransportError` when the
    /// transfer broke off.
    func next() throws -> Data? {
        condition.lock()
        defer { condition.unlock() }
        while head == pieces.count && !finished { condition.wait() }
        if head < pieces.count {
            let piece = pieces[head]
            head += 1
            if head == pieces.count || head > 64 {
                pieces.removeFirst(head)
                head = 0
            }
            return piece
        }
        if let failure { throw failure }
        return nil
    }

    /// The whole body (a short document), refused beyond `limit` bytes.
    func collect(upTo limit: Int) throws -> Data {
        var body = Data()
        while let piece = try next() {
            guard body.count + piece.count <= limit else {
                throw HTTPTransportError(FerryError.invalidOption("an answer of more than \(limit) bytes where a short document was expected"), beforeResponse: false)
            }
            body.append(piece)
        }
        return body
    }

    /// Stops the transfer (the caller does not want the rest) and drops what was not taken.
    func cancel() {
        condition.lock()
        let t = finished ? nil : task
        pieces = []
        head = 0
        condition.unlock()
        t?.cancel()
    }
}

/// The session's delegate: hands each task's events to its exchange.
final class ExchangeRouter: NSObject, URLSessionDataDelegate, @unchecked Sendable {  // unchecked: `exchanges` only under `lock`
    private let lock = NSLock()
    private var exchanges: [Int: HTTPExchange] = [:]

    func register(_ exchange: HTTPExchange, for task: URLSessionTask) {
        exchange.attach(task)
        lock.lock()
        exchanges[task.taskIdentifier] = exchange
        lock.unlock()
    }

    private func exchange(_ task: URLSessionTask, remove: Bool = false) -> HTTPExchange? {
        lock.lock()
        defer { lock.unlock() }
        return remove ? exchanges.removeValue(forKey: task.taskIdentifier) : exchanges[task.taskIdentifier]
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        exchange(dataTask)?.received(response)
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        exchange(dataTask)?.received(data)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        exchange(task, remove: true)?.completed(error)
    }
}

#if canImport(FoundationNetworking)
/// A request body read by URLSession (libcurl, on its own queue) straight from the rows
/// encoder: each read encodes the next piece, so the body is sent (chunked) as it is made
/// and never held whole.
final class RowsBodyStream: InputStream {
    private let source: RowsDocumentSource
    private var status: Stream.Status = .notOpen

    init(source: RowsDocumentSource) {
        self.source = source
        super.init(data: Data())
    }

    override func open() { status = .open }
    override func close() { status = .closed }
    override var streamStatus: Stream.Status { status }
    override var streamError: (any Error)? { nil }
    override var hasBytesAvailable: Bool { status == .open || status == .notOpen }

    override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength len: Int) -> Int {
        let n = source.read(into: buffer, count: len)
        if n == 0 { status = .atEnd }
        return n
    }

    override func getBuffer(_ buffer: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>, length len: UnsafeMutablePointer<Int>) -> Bool { false }
    override func property(forKey key: Stream.PropertyKey) -> AnyObject? { nil }
    override func setProperty(_ property: AnyObject?, forKey key: Stream.PropertyKey) -> Bool { false }
    override func schedule(in aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {}
    override func remove(from aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {}
}
#else
/// Darwin's URLSession reads a body stream through CFReadStream calls that a Swift subclass
/// of InputStream cannot answer; a bound pair is the documented way. The caller's thread
/// encodes the rows into its output side as URLSession drains the input side.
final class BoundStreamPump {
    let input: InputStream
    private let output: OutputStream
    private let source: RowsDocumentSource

    init(source: RowsDocumentSource) {
        var i: InputStream?
        var o: OutputStream?
        Stream.getBoundStreams(withBufferSize: 1 << 16, inputStream: &i, outputStream: &o)
        // getBoundStreams always returns both streams.
        input = i ?? InputStream(data: Data())
        output = o ?? OutputStream(toMemory: ())
        self.source = source
    }

    /// Writes the whole document, or stops when the exchange ended (the service answered
    /// early, with an error).
    func run(until exchange: HTTPExchange) {
        output.open()
        defer { output.close() }
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = buffer.withUnsafeMutableBufferPointer { p in p.baseAddress.map { source.read(into: $0, count: p.count) } ?? 0 }
            if n == 0 { return }
            var written = 0
            while written < n {
                if exchange.isFinished { return }
                guard output.hasSpaceAvailable else {
                    Thread.sleep(forTimeInterval: 0.001)
                    continue
                }
                let w = buffer.withUnsafeBufferPointer { p in p.baseAddress.map { output.write($0 + written, maxLength: n - written) } ?? -1 }
                if w <= 0 { return }
                written += w
            }
        }
    }
}
#endif

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
    /// The engine behind the service may be MySQL, which needs them: widening an integer end of
    /// a foreign key loses nothing anywhere.
    public var foreignKeysNeedEqualTypes: Bool { true }
    /// Reads page by key range or key-hash bucket; a key list is not a service parameter.
    public var selectsByKeyList: Bool { false }
}

extension Engine {
    /// Ferry's XML service, seen from the client (a schema it describes names the engine behind it).
    public static let http = Engine("http")
}
