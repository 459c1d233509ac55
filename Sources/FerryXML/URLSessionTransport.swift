import FerryCore
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The protocol over HTTP(S), on URLSession. Bodies stream both ways: an answer is handed
/// over piece by piece as it arrives (`HTTPExchange`), and a request's rows are encoded as
/// the transport sends them (`RowsDocumentSource`). Immutable after init, and URLSession is
/// thread-safe. The token comes from the `token-file` driver option, else the URL's password,
/// else FERRY_TOKEN.
public final class URLSessionTransport: ProtocolTransport, @unchecked Sendable {  // unchecked: immutable after init; URLSession is thread-safe
    let base: String
    let token: String?
    /// Whether answers may come gzip-compressed (`compress=`; by default not from a loopback
    /// host, where compressing costs the service more time than the bytes it saves).
    let compress: Bool
    public let endpoint: Endpoint
    private let session: URLSession
    private let exchanges: ExchangeRouter
    public var peer: String { "the service" }
    public var unauthorizedAdvice: String { "the service refused the token (401): give it as http://:TOKEN@host/, FERRY_TOKEN or --token-file" }

    public func unanswered(_ reason: String) -> FerryError {
        FerryError.connectionFailed(
            endpoint: endpoint.redacted, reason: "the service did not answer: \(reason); check the URL and that `ferry serve` runs")
    }

    public init(endpoint: Endpoint) throws {
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
        switch endpoint.parameter("compress")?.lowercased() {
        case nil, "auto": compress = !Self.isLoopback(host)
        case "gzip": compress = true
        case "none": compress = false
        case let other?:
            throw FerryError.invalidOption("compress=\(other.prefix(20)) in \(endpoint.redacted): write compress=gzip, compress=none or compress=auto")
        }
        let config = URLSessionConfiguration.ephemeral
        config.timeoutIntervalForRequest = 300
        config.httpAdditionalHeaders = ["Accept": "application/xml"]
        exchanges = ExchangeRouter()
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        session = URLSession(configuration: config, delegate: exchanges, delegateQueue: queue)
    }

    deinit { session.invalidateAndCancel() }

    /// `localhost`, 127.0.0.0/8 and ::1: a service on this machine.
    static func isLoopback(_ host: String) -> Bool {
        let h = host.lowercased()
        if h == "localhost" || h == "::1" || h == "[::1]" || h.hasSuffix(".localhost") { return true }
        let parts = h.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    /// Starts a request and waits for the status line: the body then comes piece by piece from
    /// the exchange. `upload` streams a rows document as the request body (chunked), encoded
    /// as the transport asks for it. Throws `HTTPTransportError` when no answer came.
    public func start(_ method: String, _ path: String, body: Data?, upload: RowsDocumentSource?) throws -> any ProtocolExchange {
        guard let url = URL(string: base + path) else {
            throw FerryError.invalidEndpoint(text: endpoint.redacted, reason: "cannot build a request URL for \(path)")
        }
        var request = URLRequest(url: url)
        request.httpMethod = method
        if body != nil || upload != nil { request.setValue("application/xml; charset=utf-8", forHTTPHeaderField: "Content-Type") }
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if !compress { request.setValue("identity", forHTTPHeaderField: "Accept-Encoding") }
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

}

/// One request in flight, as URLSession reports it: the status, then the body's pieces as
/// they arrive, then the end (or the failure). The caller takes the pieces in order.
///
/// Linux's URLSession (libcurl) cannot pause a transfer (suspending a task restarts it), so
/// the pieces of an answer the caller has not taken yet wait here: a page of rows ends at
/// the service's page size (8 MiB plus one row), and the next page is asked for only when the
/// caller wants more rows, which bounds them.
final class HTTPExchange: ProtocolExchange, @unchecked Sendable {  // unchecked: all state is touched only under `condition`
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

