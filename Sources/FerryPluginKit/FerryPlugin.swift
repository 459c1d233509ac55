import FerryCore
import FerryService
import FerryXML
import Foundation
import Logging
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Turns a `Driver` into a driver plugin (`ferry-driver-SCHEME`, docs/plugins.md): the
/// protocol's handlers — the ones `ferry serve` runs — served over stdin and stdout.
///
/// ```swift
/// import FerryPluginKit
/// FerryPlugin.main(driver: MyDriver(), name: "ferry-driver-my", version: "1.0.0")
/// ```
public enum FerryPlugin {
    /// Serves the database named by `FERRY_DRIVER_URL` through `driver` until Ferry closes
    /// stdin, then exits. `capabilities` are what the driver can do (a driver without keyed
    /// reads, digests, … declares less; Ferry then never asks for them).
    public static func main(
        driver: any Driver, name: String, version: String, capabilities: Capabilities = .all
    ) -> Never {
        // Ferry gone mid-answer is a failed write to handle, not a signal that kills.
        signal(SIGPIPE, SIG_IGN)
        ProcessMemory.useOneArena()
        LoggingSystem.bootstrap { label in
            var h = StreamLogHandler.standardError(label: label)
            h.logLevel = .warning
            return h
        }
        let env = ProcessInfo.processInfo.environment
        guard env["FERRY_PROTOCOL"].map({ $0 == String(ProtocolRoute.version) }) ?? true else {
            fail("Ferry speaks protocol \(env["FERRY_PROTOCOL"] ?? "?"); \(name) speaks \(ProtocolRoute.version)", status: 2)
        }
        guard let url = env["FERRY_DRIVER_URL"], !url.isEmpty else {
            fail("\(name) is a Ferry driver plugin: Ferry starts it for a URL (FERRY_DRIVER_URL); see docs/plugins.md", status: 2)
        }
        let role: ConnectionRole = env["FERRY_DRIVER_ROLE"] == "target" ? .target : .source
        do {
            var endpoint = try Endpoint(parsing: url)
            if !driver.schemes.contains(endpoint.scheme), let own = driver.schemes.first {
                // The plugin's scheme is not the driver's own (sqlitekit: → sqlite:).
                endpoint = try Endpoint(parsing: own + url.dropFirst(endpoint.scheme.count))
            }
            // The driver's capabilities whatever this process's role: a source refuses writes
            // itself (PipeServer), and `ferry drivers` probes as a source.
            var configuration = ServiceConfiguration(
                database: endpoint, registry: DriverRegistry([driver]), writable: role == .target, name: name, version: version,
                capabilities: capabilities)
            // Every answer's body within the windows Ferry gives (PipeServer.StreamWindow).
            configuration.windows = true
            let server = PipeServer(handlers: ServiceHandlers(configuration: configuration), logger: Logger(label: name))
            server.run()
        } catch {
            fail("\(error)", status: 1)
        }
    }

    static func fail(_ message: String, status: Int32) -> Never {
        FileHandle.standardError.write(Data((message + "\n").utf8))
        exit(status)
    }
}

/// The frames of stdin dispatched to the handlers, one task per request; answers written to
/// stdout a frame at a time (frames of different streams may interleave), each within the
/// windows Ferry gives its stream when it asked for them (`Window:`), so that a stream Ferry
/// does not read waits here, in its own task, instead of in Ferry's memory.
final class PipeServer: @unchecked Sendable {  // unchecked: `streams` only under `lock`; stdout only under `writeLock`
    let handlers: ServiceHandlers
    let logger: Logger
    private let lock = NSLock()
    private let writeLock = NSLock()
    private var streams: [UInt64: Incoming] = [:]
    private let running = DispatchGroup()

    /// A request being received, then answered.
    final class Incoming: @unchecked Sendable {  // unchecked: `cancelled` only under the server's lock
        let head: [UInt8]
        let body: AsyncThrowingStream<[UInt8], any Error>
        let feed: AsyncThrowingStream<[UInt8], any Error>.Continuation
        var cancelled = false
        /// The answer's flow control, when the request asked for it.
        let window: StreamWindow?
        /// Body bytes handed to the handler and not taken by it yet. A request's body has no
        /// window: while its stream is the only one open, the frame reader waits while they pass
        /// `bodyLimit`, so that stdin is read no faster than the handler takes the body (a load
        /// Ferry encoded faster than the plugin wrote it piled up here: peak RSS 60–80 MB over a
        /// 256 MiB request). With other streams open it reads on: their frames may wait behind
        /// this body in the pipe, and this handler may wait for theirs (two loads into one
        /// SQLite file: the second waits for the first's lock, the first for the rest of its
        /// body).
        private let pending = NSCondition()
        private var queued = 0
        private var waits = true
        static let bodyLimit = 4 << 20
        init(head: [UInt8]) {
            self.head = head
            (body, feed) = AsyncThrowingStream.makeStream()
            let asked = (try? PluginFrame.parseRequestHead(head))?.headers[PluginFrame.windowHeader.lowercased()]
            window = asked.flatMap { Int($0) }.flatMap { $0 > 0 ? StreamWindow($0) : nil }
        }

        /// The frame reader handed on `bytes` of the body: waits while too many are not taken
        /// and the stream is the only one open (`alone`).
        func received(_ bytes: Int, alone: () -> Bool) {
            pending.lock()
            queued += bytes
            while queued > Self.bodyLimit && waits && alone() { pending.wait() }
            pending.unlock()
        }

        /// The handler took `bytes` of the body.
        func taken(_ bytes: Int) {
            pending.lock()
            queued -= bytes
            pending.broadcast()
            pending.unlock()
        }

        /// The handler is done or the request cancelled: the rest of the body is not waited for.
        func stopWaiting() {
            pending.lock()
            waits = false
            pending.broadcast()
            pending.unlock()
        }
    }

    /// The bytes of an answer's body that may still be sent before Ferry gives more. A task
    /// that finds it empty waits (suspended, not blocking a thread) until a `window` frame or a
    /// `cancel` comes.
    final class StreamWindow: @unchecked Sendable {  // unchecked: every field only under `lock`
        private let lock = NSLock()
        private var available: Int
        private var closed = false
        private var waiter: CheckedContinuation<Void, Never>?

        init(_ bytes: Int) { available = bytes }

        func grant(_ bytes: Int) {
            let w = lock.withLock { () -> CheckedContinuation<Void, Never>? in
                available += bytes
                defer { waiter = nil }
                return waiter
            }
            w?.resume()
        }

        /// The stream was cancelled: nothing more is sent, and a waiting task goes on to see it.
        func close() {
            let w = lock.withLock { () -> CheckedContinuation<Void, Never>? in
                closed = true
                defer { waiter = nil }
                return waiter
            }
            w?.resume()
        }

        /// Takes up to `bytes` of the window, waiting while it is empty; 0 once closed.
        func take(upTo bytes: Int) async -> Int {
            while true {
                if let n = taken(upTo: bytes) { return n }
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                    if !park(c) { c.resume() }
                }
            }
        }

        /// Up to `bytes` of the window (0 once closed), nil while it is empty.
        private func taken(upTo bytes: Int) -> Int? {
            lock.withLock {
                if closed { return 0 }
                guard available > 0 else { return nil }
                let n = min(bytes, available)
                available -= n
                return n
            }
        }

        /// Leaves `c` to be resumed by the next grant or close; false when one came meanwhile.
        private func park(_ c: CheckedContinuation<Void, Never>) -> Bool {
            lock.withLock {
                if closed || available > 0 { return false }
                waiter = c
                return true
            }
        }
    }

    init(handlers: ServiceHandlers, logger: Logger) {
        self.handlers = handlers
        self.logger = logger
    }

    func run() -> Never {
        handlers.startSweeping()
        let hello = XMLDocuments.capabilities(.init(
            name: handlers.configuration.name, version: handlers.configuration.version, capabilities: handlers.configuration.capabilities,
            storedForm: handlers.configuration.storedForm, maxBody: handlers.configuration.maxBodyBytes,
            maxLoad: handlers.configuration.maxLoadBytes, windows: handlers.configuration.windows))
        write(PluginFrame(.hello, stream: 0, payload: Array(hello)))
        let reader = PluginFrameReader { buffer in
            while true {
                let n = read(0, buffer.baseAddress, buffer.count)
                if n < 0 && errno == EINTR { continue }
                return max(n, 0)
            }
        }
        while true {
            let frame: PluginFrame?
            do { frame = try reader.next() } catch {
                FerryPlugin.fail("\(handlers.configuration.name): Ferry sent what is not a frame (\(error)); stopping", status: 1)
            }
            guard let frame else { break }
            switch frame.kind {
            case .request:
                let incoming = Incoming(head: frame.payload)
                lock.withLock { streams[frame.stream] = incoming }
                running.enter()
                Task { [self] in
                    await answer(frame.stream, incoming)
                    running.leave()
                }
            case .body:
                if let incoming = lock.withLock({ streams[frame.stream] }) {
                    incoming.feed.yield(frame.payload)
                    incoming.received(frame.payload.count) { lock.withLock { streams.count == 1 } }
                }
            case .end:
                lock.withLock { streams[frame.stream] }?.feed.finish()
            case .cancel:
                let incoming = lock.withLock { () -> Incoming? in
                    streams[frame.stream]?.cancelled = true
                    streams[frame.stream]?.feed.finish(throwing: CancellationError())
                    return streams[frame.stream]
                }
                // Outside the server's lock, which `received` takes inside the stream's.
                incoming?.stopWaiting()
                incoming?.window?.close()
            case .window:
                let bytes: Int
                do { bytes = try PluginFrame.parseWindow(frame.payload) } catch {
                    FerryPlugin.fail("\(handlers.configuration.name): Ferry sent \(error); stopping", status: 1)
                }
                // A stream already answered in full: nothing waits for it.
                lock.withLock { streams[frame.stream] }?.window?.grant(bytes)
            case .hello, .response:
                FerryPlugin.fail("\(handlers.configuration.name): Ferry sent a \(frame.kind.rawValue) frame, which only a plugin sends; stopping", status: 1)
            }
        }
        // Ferry closed stdin: it is done. Answers under way end (their streams are dropped, and
        // one waiting for its window is woken to see that), snapshots end.
        let waiting = lock.withLock { () -> [StreamWindow] in
            for incoming in streams.values { incoming.cancelled = true }
            return streams.values.compactMap(\.window)
        }
        for window in waiting { window.close() }
        _ = running.wait(timeout: .now() + 5)
        handlers.releaseAll()
        exit(0)
    }

    private func isCancelled(_ id: UInt64) -> Bool { lock.withLock { streams[id]?.cancelled ?? true } }

    /// Runs the request's handler and writes its answer.
    private func answer(_ id: UInt64, _ incoming: Incoming) async {
        defer {
            lock.withLock { _ = streams.removeValue(forKey: id) }
            incoming.stopWaiting()
        }
        let response: ServiceResponse
        do {
            let (method, target, headers) = try PluginFrame.parseRequestHead(incoming.head)
            let pathEnd = target.firstIndex(of: "?") ?? target.endIndex
            let path = String(target[..<pathEnd])
            let query = pathEnd < target.endIndex ? ProtocolRoute.parseQuery(target[target.index(after: pathEnd)...]) : []
            if let (route, _) = ProtocolRoute.match(method: method, path: path), !route.isRead, !handlers.configuration.writable {
                // Started as a source: nothing is created or changed, whatever is asked.
                response = .error(ServiceError(
                    status: 403, code: "read_only", message: "\(handlers.configuration.name) was started as a source (FERRY_DRIVER_ROLE=source): it changes nothing"))
            } else if let (route, parameters) = ProtocolRoute.match(method: method, path: path) {
                let iterator = BodyIterator(incoming.body.makeAsyncIterator(), taken: incoming.taken)
                let request = ServiceRequest(
                    route: route, parameters: parameters, query: query, headers: headers,
                    body: RequestBody { try await iterator.next() }, principal: .owner, logger: logger)
                response = await handlers.respond(request)
            } else {
                response = .error(ServiceError(status: 404, code: "not_found", message: "no such endpoint: \(method) \(path)"))
            }
        } catch {
            response = .error(ServiceError.badRequest("\(error)"))
        }
        write(PluginFrame(.response, stream: id, payload: PluginFrame.responseHead(status: response.status, headers: response.headers)))
        switch response.body {
        case .bytes(let data):
            try? await send(data, stream: id, window: incoming.window)
        case .stream(let produce):
            do {
                try await produce { [self] bytes in
                    if isCancelled(id) { throw CancellationError() }
                    try await send(bytes, stream: id, window: incoming.window)
                }
            } catch {
                // Cancelled, or the body failed after its status: the document stays unfinished,
                // which the client reads as a failure.
            }
        }
        write(PluginFrame(.end, stream: id))
    }

    /// `bytes` as `body` frames of at most a MiB, each within the stream's window when it has
    /// one (throws when the stream was cancelled while it waited).
    private func send(_ bytes: Data, stream: UInt64, window: StreamWindow?) async throws {
        var offset = 0
        while offset < bytes.count {
            var end = min(offset + PluginFrame.maxPayload, bytes.count)
            if let window {
                let n = await window.take(upTo: end - offset)
                if n == 0 || isCancelled(stream) { throw CancellationError() }
                end = offset + n
            }
            bytes.withUnsafeBytes { all in
                let piece = UnsafeRawBufferPointer(rebasing: all[offset..<end])
                write(header: PluginFrame.header(.body, stream: stream, length: piece.count), payload: piece)
            }
            offset = end
        }
    }

    /// Writes one whole frame to stdout; exits when Ferry has gone (stdout closed).
    private func write(_ frame: PluginFrame) {
        frame.payload.withUnsafeBytes { write(header: PluginFrame.header(frame.kind, stream: frame.stream, length: frame.payload.count), payload: $0) }
    }

    /// Writes a frame's header line and its payload, in place (a body piece is not copied into a
    /// frame first), both under the lock so that frames of other streams come before or after.
    private func write(header: [UInt8], payload: UnsafeRawBufferPointer) {
        writeLock.lock()
        defer { writeLock.unlock() }
        header.withUnsafeBytes { writeAll($0) }
        writeAll(payload)
    }

    private func writeAll(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress else { return }
        var offset = 0
        while offset < bytes.count {
            let n = systemWrite(1, base + offset, bytes.count - offset)
            if n < 0 {
                if errno == EINTR { continue }
                exit(0)  // Ferry closed the pipe: nobody is listening any more.
            }
            offset += n
        }
    }
}

/// A request body's iterator, read by one handler step at a time.
final class BodyIterator: @unchecked Sendable {  // unchecked: one request's handler reads it, one piece at a time
    private var iterator: AsyncThrowingStream<[UInt8], any Error>.AsyncIterator
    private let taken: @Sendable (Int) -> Void
    init(_ iterator: AsyncThrowingStream<[UInt8], any Error>.AsyncIterator, taken: @escaping @Sendable (Int) -> Void) {
        self.iterator = iterator
        self.taken = taken
    }
    func next() async throws -> [UInt8]? {
        let piece = try await iterator.next()
        if let piece { taken(piece.count) }
        return piece
    }
}

#if canImport(Glibc)
private let systemWrite = Glibc.write
#else
private let systemWrite = Darwin.write
#endif
