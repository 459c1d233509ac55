import FerryCore
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The protocol over HTTP(S), on URLSession. Bodies stream both ways: an answer is handed
/// over piece by piece as it arrives (`HTTPExchange`), and a request's rows are encoded as
/// the transport sends them (`RowsDocumentSource`). Immutable after init, and URLSession is
/// thread-safe. The transport of Apple platforms; Linux uses async-http-client (FerryHTTPClient).
public final class URLSessionTransport: ProtocolTransport, @unchecked Sendable {  // unchecked: immutable after init; URLSession is thread-safe
    let address: ServiceAddress
    public var endpoint: Endpoint { address.endpoint }
    private let session: URLSession
    private let exchanges: ExchangeRouter
    public var peer: String { "the service" }
    public var unauthorizedAdvice: String { address.unauthorizedAdvice }

    public func unanswered(_ failure: HTTPTransportError?) -> FerryError { address.unanswered(failure) }

    public init(endpoint: Endpoint) throws {
        address = try ServiceAddress(endpoint: endpoint)
        if let caFile = address.caFile {
            // (Its trust decisions go through a delegate of the platform's own; not built yet.)
            throw FerryError.invalidOption("--ca-file \(caFile): this platform's HTTP transport verifies against the system's CAs only; add the CA to the system's trust store")
        }
        let config = URLSessionConfiguration.ephemeral
        config.timeoutIntervalForRequest = 300
        exchanges = ExchangeRouter()
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        session = URLSession(configuration: config, delegate: exchanges, delegateQueue: queue)
    }

    deinit { session.invalidateAndCancel() }

    /// Starts a request and waits for the status line: the body then comes piece by piece from
    /// the exchange. `upload` streams a rows document as the request body (chunked), encoded
    /// as the transport asks for it. Throws `HTTPTransportError` when no answer came.
    public func start(_ method: String, _ path: String, body: Data?, upload: RowsDocumentSource?) throws -> any ProtocolExchange {
        guard let url = URL(string: address.base + path) else {
            throw FerryError.invalidEndpoint(text: endpoint.redacted, reason: "cannot build a request URL for \(path)")
        }
        var request = URLRequest(url: url)
        request.httpMethod = method
        for (name, value) in address.headers(hasBody: body != nil || upload != nil) where name != "Accept-Encoding" || !address.compress {
            // URLSession asks for gzip itself and decodes it: only "identity" is set here.
            request.setValue(value, forHTTPHeaderField: name)
        }
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

/// The session's delegate: hands each task's events to its exchange.
final class ExchangeRouter: NSObject, URLSessionDataDelegate, @unchecked Sendable {  // unchecked: `exchanges` only under `lock`
    private let lock = NSLock()
    private var exchanges: [Int: HTTPExchange] = [:]

    func register(_ exchange: HTTPExchange, for task: URLSessionTask) {
        exchange.attach(cancel: { task.cancel() })
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
        exchange(dataTask)?.received(status: (response as? HTTPURLResponse)?.statusCode ?? 0)
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        _ = exchange(dataTask)?.received(data, resumeLater: nil)
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

