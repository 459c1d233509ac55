import FerryCore
import FerryXML
import Foundation
import Subprocess
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
#if canImport(System)
import System
#else
import SystemPackage
#endif

/// A running driver plugin (docs/plugins.md): the child process, started with swift-subprocess,
/// its frames read by one thread and handed to the exchange of their stream, its stderr copied
/// to Ferry's with its name in front. Every connection of a run to one URL shares it.
final class PluginProcess: @unchecked Sendable {  // unchecked: mutable state only under `condition`; fds written under `writeLock`
    let name: String
    let path: String
    let endpoint: Endpoint
    let timeout: Double
    /// What the plugin announced in its handshake.
    private(set) var report: XMLDocuments.CapabilitiesReport?
    /// The plugin keeps each answer within the windows Ferry gives it (`flow-control="windows"`):
    /// every request asks for them, so a stream's unread body holds at most
    /// `PluginFrame.initialWindow` bytes here, and readers may ask for pages of any size.
    private(set) var windows = false

    private let input: Int32  // the child's stdin, our end
    private let output: Int32  // the child's stdout, our end
    private let errors: Int32  // the child's stderr, our end
    private let condition = NSCondition()
    private let writeLock = NSLock()
    private var pid: pid_t = 0
    private var streams: [UInt64: StreamState] = [:]
    private var nextStream: UInt64 = 1
    /// Why the plugin can no longer be used (it died, misbehaved, or was stopped).
    private var failure: String?
    private var exitStatus: String?
    private var exited = false
    private var lastStderr = ""
    /// Its stderr reached its end (everything it said has been copied).
    private var stderrDone = false
    private var hello: PluginFrame?
    /// Our end of its stdin is still open (closed by `stop`, under `writeLock`).
    private var inputOpen = true

    final class StreamState {
        var status: Int?
        var pieces: [Data] = []
        var finished = false
        var cancelled = false
        /// With windows: the body bytes the plugin may still send, and those read since the
        /// last `window` frame.
        var allowed = PluginFrame.initialWindow
        var unacknowledged = 0
        /// Bytes of `pieces`.
        var buffered = 0
    }

    /// The most bytes one stream's unread pieces held at once in this process's life (what
    /// flow control bounds; the tests read it).
    private var peakBuffered = 0
    var peakBufferedBytes: Int { condition.withLock { peakBuffered } }

    /// Starts `path` for `endpoint` and waits for its handshake (at most `timeout` seconds).
    init(name: String, path: String, endpoint: Endpoint, role: ConnectionRole, timeout: Double) throws {
        self.name = name
        self.path = path
        self.endpoint = endpoint
        self.timeout = timeout
        // A plugin that died mid-request is an error to report, not a signal that kills Ferry.
        signal(SIGPIPE, SIG_IGN)
        var stdinPipe: [Int32] = [0, 0], stdoutPipe: [Int32] = [0, 0], stderrPipe: [Int32] = [0, 0]
        // Close-on-exec: another plugin started meanwhile must not hold these pipes open.
        func cloexecPipe(_ fds: inout [Int32]) -> Bool {
            guard pipe(&fds) == 0 else { return false }
            _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
            _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
            return true
        }
        guard cloexecPipe(&stdinPipe), cloexecPipe(&stdoutPipe), cloexecPipe(&stderrPipe) else {
            throw FerryError.connectionFailed(endpoint: endpoint.redacted, reason: "cannot make pipes for plugin \(name): \(String(cString: strerror(errno)))")
        }
        #if os(Linux)
        // 1 MiB pipes where the system allows it (64 KiB by default): a body fills and empties
        // one sixteen times less often, each time a wait and a wake on each side. Best effort:
        // a smaller pipe only costs time.
        let setPipeSize: Int32 = 1031  // F_SETPIPE_SZ
        _ = fcntl(stdinPipe[1], setPipeSize, Int32(1 << 20))
        _ = fcntl(stdoutPipe[1], setPipeSize, Int32(1 << 20))
        #endif
        input = stdinPipe[1]
        _ = fcntl(input, F_SETFL, fcntl(input, F_GETFL) | O_NONBLOCK)
        output = stdoutPipe[0]
        errors = stderrPipe[0]
        let started = DispatchSemaphore(value: 0)
        let pidBox = Locked<pid_t>(0)
        let launchError = Locked<(any Error)?>(nil)
        let url = endpoint.raw ?? endpoint.redacted
        let roleText = role == .source ? "source" : "target"
        let executable = FilePath(path)
        let childIn = FileDescriptor(rawValue: stdinPipe[0]), childOut = FileDescriptor(rawValue: stdoutPipe[1]), childErr = FileDescriptor(rawValue: stderrPipe[1])
        Task.detached { [self] in
            do {
                let result = try await Subprocess.run(
                    .path(executable),
                    environment: .inherit.updating(["FERRY_DRIVER_URL": url, "FERRY_DRIVER_ROLE": roleText, "FERRY_PROTOCOL": String(ProtocolRoute.version)]),
                    input: .fileDescriptor(childIn, closeAfterSpawningProcess: true),
                    output: .fileDescriptor(childOut, closeAfterSpawningProcess: true),
                    error: .fileDescriptor(childErr, closeAfterSpawningProcess: true)
                ) { execution in
                    let pid = execution.processIdentifier.value
                    pidBox.withLock { $0 = pid }
                    // Known from here until `ended` (after the child was reaped), for `killAll`.
                    PluginProcess.live.withLock { $0[pid] = true }
                    started.signal()
                }
                let status: String
                switch result.terminationStatus {
                case .exited(let code): status = "exited with status \(code)"
                case .signaled(let signal): status = "was killed by signal \(signal)"
                }
                PluginProcess.live.withLock { $0[pidBox.withLock { $0 }] = nil }
                self.ended(status: status)
            } catch {
                launchError.withLock { $0 = error }
                started.signal()
                self.ended(status: "not started")
            }
        }
        started.wait()
        if let e = launchError.withLock({ $0 }) {
            // Our ends of the pipes are closed by deinit.
            throw FerryError.connectionFailed(endpoint: endpoint.redacted, reason: "plugin \(name) (\(path)) could not be started: \(e)")
        }
        pid = pidBox.withLock { $0 }
        Thread.detachNewThread { [self] in relayStderr() }
        Thread.detachNewThread { [self] in readFrames() }
        do {
            try handshake()
        } catch {
            // Refused: the child is stopped and reaped before the error reaches the caller.
            kill()
            _ = waitForExit(seconds: 5)
            throw error
        }
    }

    deinit {
        writeLock.withLock { if inputOpen { close(input) } }
        close(output)
        close(errors)
    }

    // MARK: The handshake

    private func handshake() throws {
        condition.lock()
        let deadline = Date(timeIntervalSinceNow: timeout)
        while hello == nil && failure == nil {
            if !condition.wait(until: deadline) && hello == nil && failure == nil {
                condition.unlock()
                fail("sent no handshake within \(Self.seconds(timeout)) (--timeout)")
                throw error()
            }
        }
        let frame = hello
        condition.unlock()
        guard let frame else { throw error() }
        let report: XMLDocuments.CapabilitiesReport
        do {
            report = try XMLDocuments.decodeCapabilities(Data(frame.payload))
        } catch {
            fail("sent a handshake that is not a <capabilities> document (\(error))")
            throw self.error()
        }
        guard report.protocolVersion == ProtocolRoute.version else {
            fail("speaks protocol version \(report.protocolVersion); this Ferry speaks \(ProtocolRoute.version) (update the plugin or Ferry)")
            throw error()
        }
        guard !report.capabilities.isEmpty else {
            fail("declares no capability Ferry knows (\(report.unknown.isEmpty ? "none" : report.unknown.joined(separator: ", ")))")
            throw error()
        }
        self.report = report
        // Under the lock the frame reader holds while it counts a body against its window.
        condition.withLock { windows = report.windows }
    }

    // MARK: Frames in

    private func readFrames() {
        let fd = output
        let reader = PluginFrameReader { buffer in
            while true {
                let n = read(fd, buffer.baseAddress, buffer.count)
                if n < 0 && errno == EINTR { continue }
                return max(n, 0)
            }
        }
        var first = true
        while true {
            // A body piece goes on as the Data the reader made (no second copy).
            let frame: (kind: PluginFrame.Kind, stream: UInt64, payload: Data)?
            do {
                frame = try reader.nextData()
            } catch PluginFrameError.truncated {
                // Its stdout ended inside a frame: how the process ended says more (a plugin
                // killed while it streams an answer is almost always in the middle of a frame).
                let status = waitForExit(seconds: 1)
                fail(status.map { $0.hasPrefix("was killed") ? $0 : "\(PluginFrameError.truncated) and \($0)" } ?? "\(PluginFrameError.truncated)")
                return
            } catch {
                fail("\(error)")
                return
            }
            guard let frame else {
                let status = waitForExit(seconds: 1)
                fail(status ?? "closed its stdout")
                return
            }
            if first {
                first = false
                guard frame.kind == .hello else {
                    fail("wrote a \(frame.kind.rawValue) frame before its handshake (the first frame must be hello)")
                    return
                }
                condition.lock()
                hello = PluginFrame(.hello, stream: frame.stream, payload: Array(frame.payload))
                condition.broadcast()
                condition.unlock()
                continue
            }
            condition.lock()
            guard let state = streams[frame.stream] else {
                condition.unlock()
                if frame.kind == .hello || frame.kind == .request || frame.kind == .cancel {
                    fail("sent a \(frame.kind.rawValue) frame, which only Ferry sends")
                    return
                }
                continue  // a stream Ferry gave up on
            }
            switch frame.kind {
            case .response:
                do { state.status = try PluginFrame.parseStatus(Array(frame.payload)) } catch {
                    condition.unlock()
                    fail("\(error)")
                    return
                }
            case .body:
                guard state.status != nil else {
                    condition.unlock()
                    fail("sent a body before the response's status")
                    return
                }
                if !state.cancelled {
                    if windows {
                        state.allowed -= frame.payload.count
                        guard state.allowed >= 0 else {
                            condition.unlock()
                            fail("sent more of an answer than the window Ferry gave it (stream \(frame.stream); flow-control=\"windows\", docs/plugins.md)")
                            return
                        }
                    }
                    state.pieces.append(frame.payload)
                    state.buffered += frame.payload.count
                    peakBuffered = max(peakBuffered, state.buffered)
                }
            case .end:
                guard state.status != nil else {
                    condition.unlock()
                    fail("ended a stream it never answered")
                    return
                }
                state.finished = true
                if state.cancelled { streams[frame.stream] = nil }
            default:
                condition.unlock()
                fail("sent a \(frame.kind.rawValue) frame, which only Ferry sends")
                return
            }
            condition.broadcast()
            condition.unlock()
        }
    }

    private func relayStderr() {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(errors, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            pending += buffer[0..<n]
            while let nl = pending.firstIndex(of: 10) {
                emit(String(decoding: pending[..<nl], as: UTF8.self))
                pending.removeFirst(nl + 1)
            }
        }
        if !pending.isEmpty { emit(String(decoding: pending, as: UTF8.self)) }
        condition.lock()
        stderrDone = true
        condition.broadcast()
        condition.unlock()
    }

    private func emit(_ line: String) {
        condition.lock()
        if !line.trimmingCharacters(in: .whitespaces).isEmpty { lastStderr = String(line.prefix(300)) }
        condition.unlock()
        FileHandle.standardError.write(Data("\(name): \(line)\n".utf8))
    }

    // MARK: Requests out

    /// Sends a request (its body as frames) and returns its stream id.
    func send(method: String, target: String, body: Data?, upload: RowsDocumentSource?) throws -> UInt64 {
        condition.lock()
        if failure != nil {
            condition.unlock()
            throw error()
        }
        let stream = nextStream
        nextStream += 1
        streams[stream] = StreamState()
        condition.unlock()
        writeLock.lock()
        defer { writeLock.unlock() }
        do {
            guard inputOpen else { throw PipeWriteError(reason: "its stdin was closed") }
            let headers = windows ? [(PluginFrame.windowHeader, String(PluginFrame.initialWindow))] : []
            try write(PluginFrame(.request, stream: stream, payload: PluginFrame.requestHead(method: method, target: "/" + target, headers: headers)))
            if let body {
                var offset = 0
                while offset < body.count {
                    let end = min(offset + PluginFrame.maxPayload, body.count)
                    try write(PluginFrame(.body, stream: stream, payload: Array(body[body.startIndex + offset..<body.startIndex + end])))
                    offset = end
                }
            }
            if let upload {
                var piece = [UInt8](repeating: 0, count: 256 * 1024)
                while true {
                    let n = piece.withUnsafeMutableBufferPointer { p in p.baseAddress.map { upload.read(into: $0, count: p.count) } ?? 0 }
                    if n == 0 { break }
                    try write(PluginFrame(.body, stream: stream, payload: Array(piece[0..<n])))
                }
            }
            try write(PluginFrame(.end, stream: stream))
        } catch {
            // A closed pipe almost always means the plugin exited: how it exited (and what it
            // said last) is the better line, so that wins if it comes within a moment.
            if (error as? PipeWriteError)?.closed == true { _ = waitForExit(seconds: 2) }
            fail("stopped reading its stdin (\(error))")
            throw self.error()
        }
        return stream
    }

    /// Writes a whole frame to the child's stdin (the caller holds `writeLock`). The pipe is
    /// non-blocking: a plugin that stops reading for `timeout` seconds fails the write instead
    /// of hanging Ferry.
    private func write(_ frame: PluginFrame) throws {
        let bytes = frame.encoded()
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { p in systemWrite(input, p.baseAddress.map { $0 + offset }, bytes.count - offset) }
            if n >= 0 {
                offset += n
                continue
            }
            let code = errno
            switch code {
            case EINTR: continue
            case EAGAIN:
                var pollfd = pollfd(fd: input, events: Int16(POLLOUT), revents: 0)
                let ready = poll(&pollfd, 1, Int32(min(timeout * 1000, Double(Int32.max))))
                if ready == 0 { throw PipeWriteError(reason: "it read nothing for \(Self.seconds(timeout)), --timeout") }
            default:
                throw PipeWriteError(reason: String(cString: strerror(code)), closed: code == EPIPE)
            }
        }
    }

    /// Waits for stream `id`'s status (at most `timeout`).
    func status(of id: UInt64) throws -> Int {
        try wait(id) { $0.status }
    }

    /// The next piece of stream `id`'s body; nil at its end. With windows, every MiB read is
    /// given back to the plugin as window.
    func next(of id: UInt64) throws -> Data? {
        // `.some(nil)`: the body ended; nil: nothing yet.
        let piece: (data: Data, grant: Int)?? = try wait(id) { s in
            if !s.pieces.isEmpty {
                let data = s.pieces.removeFirst()
                s.buffered -= data.count
                var grant = 0
                if windows && !s.finished {
                    s.unacknowledged += data.count
                    if s.unacknowledged >= PluginFrame.windowStep {
                        grant = s.unacknowledged
                        s.unacknowledged = 0
                        s.allowed += grant
                    }
                }
                return .some((data, grant))
            }
            return s.finished ? .some(nil) : nil
        }
        guard case .some(.some(let taken)) = piece else {
            condition.withLock { streams[id] = nil }
            return nil
        }
        if taken.grant > 0 {
            // A window lost (or half written) would leave the plugin waiting, or reading garbage:
            // a plugin that stopped reading its stdin fails here, in one line.
            let failed = writeLock.withLock { () -> (any Error)? in
                guard inputOpen else { return nil }
                do { try write(PluginFrame.window(stream: id, bytes: taken.grant)) } catch { return error }
                return nil
            }
            if let failed {
                if (failed as? PipeWriteError)?.closed == true { _ = waitForExit(seconds: 2) }
                fail("stopped reading its stdin (\(failed))")
                throw self.error()
            }
        }
        return taken.data
    }

    private func wait<T>(_ id: UInt64, _ ready: (StreamState) -> T?) throws -> T {
        condition.lock()
        let deadline = Date(timeIntervalSinceNow: timeout)
        while true {
            if let s = streams[id], let value = ready(s) {
                condition.unlock()
                return value
            }
            if failure != nil || streams[id] == nil {
                condition.unlock()
                throw error()
            }
            if !condition.wait(until: deadline) {
                if let s = streams[id], let value = ready(s) {
                    condition.unlock()
                    return value
                }
                condition.unlock()
                fail("did not answer within \(Self.seconds(timeout)) (--timeout); stopped it")
                throw error()
            }
        }
    }

    /// Ferry stopped reading stream `id`: the plugin is told, and whatever else comes of it is
    /// dropped.
    func cancel(_ id: UInt64) {
        condition.lock()
        guard let s = streams[id] else {
            condition.unlock()
            return
        }
        if s.finished {
            streams[id] = nil
            condition.unlock()
            return
        }
        s.cancelled = true
        s.pieces = []
        let alive = failure == nil
        condition.unlock()
        guard alive else { return }
        writeLock.withLock { if inputOpen { try? write(PluginFrame(.cancel, stream: id)) } }
    }

    // MARK: The end

    /// Marks the plugin unusable with `reason` (the first reason wins) and stops it.
    private func fail(_ reason: String) {
        condition.lock()
        if failure == nil { failure = reason }
        condition.broadcast()
        condition.unlock()
        kill()
    }

    private func ended(status: String) {
        condition.lock()
        exitStatus = status
        exited = true
        if failure == nil { failure = status }
        condition.broadcast()
        condition.unlock()
    }

    private func waitForExit(seconds: Double) -> String? {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date(timeIntervalSinceNow: seconds)
        while !exited { if !condition.wait(until: deadline) { break } }
        return exitStatus
    }

    /// The error for a plugin that can no longer answer: one line, its name and what it did.
    func error() -> FerryError {
        condition.lock()
        // A plugin that exited: what it said last belongs in the line (and before it on stderr).
        let deadline = Date(timeIntervalSinceNow: 1)
        while exited && !stderrDone { if !condition.wait(until: deadline) { break } }
        let reason = failure ?? "stopped"
        let last = lastStderr
        condition.unlock()
        let detail = last.isEmpty || reason.contains(last) ? "" : " (its last message: \(last))"
        let said = "plugin \(name) \(reason)\(detail)"
        // After the handshake the connection had worked: it was lost, not refused.
        return report == nil ? .connectionFailed(endpoint: endpoint.redacted, reason: said) : .connectionLost(endpoint: endpoint.redacted, reason: said)
    }

    /// Closes its stdin (it should exit), waits up to 3 s, then kills it.
    func stop() {
        condition.lock()
        if failure == nil { failure = "was stopped" }
        condition.broadcast()
        condition.unlock()
        writeLock.withLock {
            if inputOpen { close(input) }
            inputOpen = false
        }
        if waitForExit(seconds: 3) == nil { kill() }
        _ = waitForExit(seconds: 3)
    }

    private func kill() {
        let running = condition.withLock { !exited }
        if pid > 0 && running { _ = systemKill(pid, SIGKILL) }
    }

    static func seconds(_ s: Double) -> String { s == s.rounded() ? "\(Int(s)) s" : "\(s) s" }

    /// Plugins running now, killed should Ferry exit with them still running.
    static let live = Locked<[pid_t: Bool]>([:])

    /// Kills every plugin still running (at exit).
    static func killAll() {
        for pid in live.withLock({ Array($0.keys) }) { _ = systemKill(pid, SIGKILL) }
    }
}

#if canImport(Glibc)
private let systemWrite = Glibc.write
private let systemKill = Glibc.kill
#else
private let systemWrite = Darwin.write
private let systemKill = Darwin.kill
#endif

/// Why a frame could not be written to a plugin's stdin.
struct PipeWriteError: Error, CustomStringConvertible {
    var reason: String
    /// The plugin closed its end (EPIPE).
    var closed = false
    var description: String { reason }
}
