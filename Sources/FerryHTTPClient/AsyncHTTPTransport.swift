#if canImport(AsyncHTTPClient)
import AsyncHTTPClient
import FerryCore
import FerryXML
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import NIOHTTPCompression
import NIOPosix
import NIOSSL

/// The protocol over HTTP(S) on async-http-client (SwiftNIO), Linux's transport. Bodies stream
/// both ways with back-pressure: an answer's pieces wait in its `HTTPExchange` until the
/// caller takes them (past a MiB the connection is not read), and a request's rows are
/// encoded by the caller's thread as the connection takes them.
///
/// Measured against URLSession (libcurl under Foundation) on the 2-core machine: URLSession
/// handed every 16 KiB of an upload across dispatch queues and threads (126,000 futex calls
/// and 15,000 sends for 1,000,000 rows, a quarter of the client's time in the scheduler).
public final class AsyncHTTPTransport: ProtocolTransport, @unchecked Sendable {  // unchecked: immutable after init; HTTPClient is thread-safe
    let address: ServiceAddress
    private let client: HTTPClient
    public var endpoint: Endpoint { address.endpoint }
    public var peer: String { "the service" }
    public var unauthorizedAdvice: String { address.unauthorizedAdvice }
    public func unanswered(_ failure: HTTPTransportError?) -> FerryError { address.unanswered(failure) }
    /// `HTTPExchange` stops reading the connection while a MiB of the answer waits.
    public var pausesReading: Bool { true }

    /// Seconds without a byte from the service before a request fails (a page or a load the
    /// service is still working on sends nothing for a while; the same limit as URLSession's).
    static let idleSeconds: Int64 = 300
    /// This transport's: `--timeout` when given. Also bounds how long one piece of an upload may
    /// wait to be taken (the client's read timeout starts only once the request is sent).
    let idleLimit: Int64

    public init(endpoint: Endpoint) throws {
        address = try ServiceAddress(endpoint: endpoint)
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        // `--timeout` (the `timeout` option) when given: a service that stalls fails sooner.
        let idle = endpoint.options["timeout"].flatMap(Double.init).map { max(1, Int64($0.rounded(.up))) } ?? Self.idleSeconds
        configuration.timeout = .init(connect: .seconds(min(30, idle)), read: .seconds(idle))
        idleLimit = idle
        configuration.decompression = address.compress ? .enabled(limit: .none) : .disabled
        configuration.httpVersion = .http1Only
        // A refused or failed connection fails the request at once (the client retried until the
        // connect timeout, 30 s, before saying "connection refused"); Ferry's own retries of
        // GETs, with backoff, stay the only ones, as with URLSession.
        configuration.connectionPool.retryConnectionEstablishment = false
        if let caFile = address.caFile {
            // The system's CAs, and this one: the certificate is still verified, host name included.
            var tls = TLSConfiguration.makeClientConfiguration()
            let certificates = (try? NIOSSLCertificate.fromPEMFile(caFile)) ?? []
            guard !certificates.isEmpty else {
                throw FerryError.invalidOption("the CA file \(caFile) holds no PEM certificate Ferry can read (--ca-file)")
            }
            tls.additionalTrustRoots = [.certificates(certificates)]
            configuration.tlsConfiguration = tls
        }
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    deinit {
        // Closes the pooled connections in the background (a deinit cannot wait for it).
        client.shutdown { _ in }
    }

    /// Starts a request and waits for the status line; the body then comes piece by piece from
    /// the exchange. An `upload` is encoded and written by this thread, piece by piece, before
    /// the status is waited for (the service answers a load when it has written it).
    public func start(_ method: String, _ path: String, body: Data?, upload: RowsDocumentSource?) throws -> any ProtocolExchange {
        var request: HTTPClient.Request
        do {
            request = try HTTPClient.Request(url: address.base + path, method: HTTPMethod(rawValue: method))
        } catch {
            throw FerryError.invalidEndpoint(text: endpoint.redacted, reason: "cannot build a request URL for \(path) (\(error))")
        }
        for (name, value) in address.headers(hasBody: body != nil || upload != nil) { request.headers.add(name: name, value: value) }
        let delegate = AsyncHTTPDelegate(stallSeconds: Double(idleLimit))
        if upload != nil {
            request.body = .stream(contentLength: nil) { writer in delegate.uploadStarts(writer) }
        } else if let body {
            request.body = .bytes(body)
        }
        let task = client.execute(request: request, delegate: delegate)
        delegate.exchange.attach(cancel: { task.cancel() })
        delegate.task = task
        if let upload { delegate.send(upload) }
        try delegate.exchange.waitForStatus()
        return delegate.exchange
    }
}

/// One request's events from the connection (on its event loop, never blocking it) into an
/// `HTTPExchange`, which holds the answer's pieces for the caller and pauses the connection
/// past `HTTPExchange`'s limit; and the request body, written by the caller's thread.
final class AsyncHTTPDelegate: HTTPClientResponseDelegate, @unchecked Sendable {  // unchecked: the upload's state only under `bodyAsked`
    typealias Response = Void

    /// Bytes of a request body encoded per write.
    static let uploadPiece = 256 * 1024

    /// Up to 2 MiB of the answer held before the connection pauses (1 MiB by default): the
    /// service's writes and this reader's decoding then wait less for each other — 1,000,000
    /// bench_orders rows from `ferry serve` into SQLite left 0.13-0.28 CPU-s of the two cores
    /// idle against 0.27-0.30, for 1.4 MB more peak memory.
    let exchange = HTTPExchange(pauseAbove: 2 << 20)
    /// Seconds one piece of the request body may wait to be written (a service that stalls).
    let stallSeconds: Double
    init(stallSeconds: Double) { self.stallSeconds = stallSeconds }
    /// The request, to drop its connection when the upload stalls (set once it started).
    var task: HTTPClient.Task<Void>? {
        get { bodyAsked.withLock { startedTask } }
        set { bodyAsked.withLock { startedTask = newValue } }
    }
    private var startedTask: HTTPClient.Task<Void>?
    /// The request body's writer, once the connection asks for the body, and the promise
    /// that ends the body.
    private var writer: HTTPClient.Body.StreamWriter?
    private var bodyDone: EventLoopPromise<Void>?
    private var ended = false
    private let bodyAsked = NSCondition()

    // The connection's side (its event loop).

    /// The connection is ready for the request body: the caller's thread writes it (`send`).
    func uploadStarts(_ writer: HTTPClient.Body.StreamWriter) -> EventLoopFuture<Void> {
        let promise = MultiThreadedEventLoopGroup.singleton.any().makePromise(of: Void.self)
        bodyAsked.lock()
        if ended {
            bodyAsked.unlock()
            promise.succeed(())
            return promise.futureResult
        }
        self.writer = writer
        bodyDone = promise
        bodyAsked.broadcast()
        bodyAsked.unlock()
        return promise.futureResult
    }

    func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        exchange.received(status: Int(head.status.code))
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        let promise = task.eventLoop.makePromise(of: Void.self)
        // The piece as Data over the buffer's own memory (kept alive by the Data): a copy here was
        // one more pass over every byte of a page, on the event loop's thread.
        let piece = buffer.getData(at: buffer.readerIndex, length: buffer.readableBytes, byteTransferStrategy: .noCopy) ?? Data(buffer.readableBytesView)
        if !exchange.received(piece, resumeLater: { promise.succeed(()) }) {
            promise.succeed(())
        }
        return promise.futureResult
    }

    func didReceiveError(task: HTTPClient.Task<Void>, _ error: any Error) {
        end()
        exchange.completed(Self.described(error))
    }

    func didFinishRequest(task: HTTPClient.Task<Void>) throws {
        end()
        exchange.completed(nil)
    }

    /// No body is written after the end: a body promise not taken yet is fulfilled.
    private func end() {
        bodyAsked.lock()
        ended = true
        let done = writer == nil ? bodyDone : nil
        if done != nil { bodyDone = nil }
        bodyAsked.broadcast()
        bodyAsked.unlock()
        done?.succeed(())
    }

    // The caller's side.

    /// Writes the request body from `source` once the connection asks for it, keeping one
    /// write in flight while the next piece is encoded. Stops early when the exchange ended
    /// (the service answered before the end of the body, or the connection failed: the
    /// request then reports why).
    func send(_ source: RowsDocumentSource) {
        bodyAsked.lock()
        while writer == nil && !ended { bodyAsked.wait() }
        let writer = self.writer
        bodyAsked.unlock()
        guard let writer else { return }
        var inFlight: EventLoopFuture<Void>?
        var ok = true
        while ok {
            var piece = ByteBufferAllocator().buffer(capacity: Self.uploadPiece)
            var atEnd = false
            piece.writeWithUnsafeMutableBytes(minimumWritableBytes: Self.uploadPiece) { space in
                guard let base = space.baseAddress else { return 0 }
                var n = 0
                while n < space.count {
                    let k = source.read(into: base.assumingMemoryBound(to: UInt8.self) + n, count: space.count - n)
                    if k == 0 {
                        atEnd = true
                        break
                    }
                    n += k
                }
                return n
            }
            if piece.readableBytes > 0 {
                let written = writer.write(.byteBuffer(piece))
                if let previous = inFlight, !self.written(previous) { ok = false }
                inFlight = written
            }
            if atEnd || exchange.isFinished { break }
        }
        if ok, let last = inFlight { _ = self.written(last) }
        bodyAsked.lock()
        let done = bodyDone
        bodyDone = nil
        self.writer = nil
        bodyAsked.unlock()
        done?.succeed(())
    }

    /// Waits until `write` is done — true when it was written — or the exchange ended: a write
    /// into a connection that failed (the service killed mid-upload) may never complete, and
    /// waiting on it alone hung the upload, and the copy with it, for ever.
    private func written(_ write: EventLoopFuture<Void>) -> Bool {
        final class Outcome: @unchecked Sendable {  // unchecked: `value` only under `done`
            let done = NSCondition()
            var value: Bool?
        }
        let outcome = Outcome()
        write.whenComplete { r in
            outcome.done.lock()
            if case .success = r { outcome.value = true } else { outcome.value = false }
            outcome.done.broadcast()
            outcome.done.unlock()
        }
        let deadline = Date().addingTimeInterval(stallSeconds)
        outcome.done.lock()
        while outcome.value == nil {
            if exchange.isFinished || bodyAsked.withLock({ ended }) {
                outcome.done.unlock()
                return false
            }
            if Date() > deadline {
                // The service (or the network) takes nothing more: the request fails, its
                // connection is dropped.
                outcome.done.unlock()
                exchange.completed(TransportFailure("the service took no byte of the request for \(Int(stallSeconds)) s (--timeout): the connection stalled"))
                task?.cancel()
                return false
            }
            _ = outcome.done.wait(until: Date().addingTimeInterval(0.05))
        }
        let ok = outcome.value == true
        outcome.done.unlock()
        return ok
    }

    /// A failure as one line: NIO's and the client's errors print their case names.
    static func described(_ error: any Error) -> any Error {
        if let e = error as? HTTPClientError {
            switch e {
            case .connectTimeout: return TransportFailure("the connection timed out")
            case .readTimeout: return TransportFailure("no byte from the service within the read timeout (--timeout; \(AsyncHTTPTransport.idleSeconds) s unless given)")
            case .remoteConnectionClosed: return TransportFailure("the service closed the connection")
            case .cancelled: return TransportFailure("cancelled")
            default: return TransportFailure("\(e)")
            }
        }
        if let e = error as? NIOConnectionError {
            let why = e.connectionErrors.first.map { Self.described($0.error) } ?? e.dnsAError ?? e.dnsAAAAError
            return TransportFailure("cannot connect to \(e.host):\(e.port)" + (why.map { ": \($0)" } ?? ""))
        }
        if let e = error as? NIOSSLError, case .handshakeFailed(let why) = e {
            // BoringSSL's reason, without its source file and line.
            if "\(why)".contains("CERTIFICATE_VERIFY_FAILED") {
                return TransportFailure(
                    "the TLS handshake failed: the service's certificate is not signed by a CA this machine trusts",
                    advice: "give the CA that signed it with --ca-file CA.pem (or add it to this machine's trust store)")
            }
            return TransportFailure("the TLS handshake failed")
        }
        if let e = error as? NIOSSLExtraError, e == .failedToValidateHostname {
            return TransportFailure(
                "the TLS handshake failed: the service's certificate is not for this host name", advice: "connect by a host name the certificate names")
        }
        if let e = error as? IOError {
            // "connection reset (error set): Connection refused (errno: 111)" as NIO prints it.
            return TransportFailure(String(cString: strerror(e.errnoCode)).lowercased())
        }
        return error
    }
}

/// A transport failure's text as it is shown.
struct TransportFailure: AdvisedTransportFailure, CustomStringConvertible {
    var description: String
    var advice: String?
    init(_ description: String, advice: String? = nil) {
        self.description = description
        self.advice = advice
    }
}
#endif
