import FerryCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A TCP relay on loopback in front of a server (PostgreSQL, MariaDB, `ferry serve`) that passes
/// bytes through until armed, then cuts every connection it carries once a chosen number of
/// bytes has gone one way: a connection broken at a random byte offset, in either direction.
public final class FaultRelay: @unchecked Sendable {  // its state is Locked; the listener is closed once, in stop()
    public enum Direction: String, CaseIterable, Sendable { case toServer = "to the server", fromServer = "from the server" }

    public let port: Int
    public let upstreamPort: Int
    private let listener: Int32
    private struct State {
        var counted: [Direction: Int64] = [.toServer: 0, .fromServer: 0]
        var cut: (Direction, Int64)?
        /// The armed fault stalls (passes nothing more either way, sockets open) instead of cutting.
        var stalls = false
        /// The armed cut closes only the connection that carried its byte, not every one.
        var carrierOnly = false
        /// A stall fired: every pump holds what it read until `disarm`.
        var frozen = false
        var fired = false
        var sockets: Set<Int32> = []
        var stopped = false
    }
    private let state = Locked(State())

    public init(upstreamPort: Int) throws {
        self.upstreamPort = upstreamPort
        (listener, port) = try ByteCountingProxy.listenOnLoopback()
        let relay = self
        Thread.detachNewThread { relay.acceptLoop() }
    }

    /// Counts from zero again and cuts every connection once `offset` bytes have gone `direction`
    /// (`carrierOnly`: only the connection that carried that byte, as a network path or a
    /// middlebox that drops one connection would).
    public func arm(_ direction: Direction, at offset: Int64, stall: Bool = false, carrierOnly: Bool = false) {
        state.withLock {
            $0.counted = [.toServer: 0, .fromServer: 0]
            $0.cut = (direction, offset)
            $0.stalls = stall
            $0.carrierOnly = carrierOnly
            $0.frozen = false
            $0.fired = false
        }
    }

    /// Counts from zero again, passing everything.
    /// Also ends a stall: the connections it held are closed.
    public func disarm() {
        let held = state.withLock { s -> Set<Int32> in
            let wasFrozen = s.frozen
            s.counted = [.toServer: 0, .fromServer: 0]
            s.cut = nil
            s.stalls = false
            s.carrierOnly = false
            s.frozen = false
            s.fired = false
            return wasFrozen ? s.sockets : []
        }
        for fd in held { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    /// Whether the armed cut happened, and the bytes counted each way since `arm`/`disarm`.
    public var fired: Bool { state.withLock { $0.fired } }
    public func counted(_ d: Direction) -> Int64 { state.withLock { $0.counted[d] ?? 0 } }

    public func stop() {
        let sockets = state.withLock { s -> Set<Int32> in
            s.stopped = true
            return s.sockets
        }
        for fd in sockets { shutdown(fd, Int32(SHUT_RDWR)) }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return
            }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var addr = ByteCountingProxy.loopback(port: upstreamPort)
            let connected = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard server >= 0, connected == 0 else {
                close(client)
                if server >= 0 { close(server) }
                continue
            }
            let stopped = state.withLock { s -> Bool in
                s.sockets.insert(client)
                s.sockets.insert(server)
                return s.stopped
            }
            if stopped {
                close(client)
                close(server)
                return
            }
            let relay = self
            let done = Locked(0)
            for (from, to, d) in [(client, server, Direction.toServer), (server, client, Direction.fromServer)] {
                Thread.detachNewThread {
                    relay.pump(from: from, to: to, direction: d)
                    // Both pumps ended: the sockets are closed once.
                    if done.withLock({ $0 += 1; return $0 }) == 2 {
                        relay.state.withLock { $0.sockets.remove(client); $0.sockets.remove(server) }
                        close(client)
                        close(server)
                    }
                }
            }
        }
    }

    private func pump(from: Int32, to: Int32, direction: Direction) {
        var buffer = [UInt8](repeating: 0, count: 16384)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(from, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            // How much of this chunk may pass before an armed cut or stall.
            let (pass, cutNow, frozen, carrierOnly) = state.withLock { s -> (Int, Bool, Bool, Bool) in
                if s.frozen { return (0, false, true, false) }
                let before = s.counted[direction] ?? 0
                if let (d, offset) = s.cut, d == direction, !s.fired, before + Int64(n) >= offset {
                    s.fired = true
                    s.counted[direction] = offset
                    if s.stalls { s.frozen = true }
                    return (Int(max(0, offset - before)), !s.stalls, s.stalls, s.carrierOnly)
                }
                s.counted[direction] = before + Int64(n)
                return (n, false, false, false)
            }
            var sent = 0
            while sent < pass {
                let w = buffer.withUnsafeBytes { raw -> Int in
                    guard let base = raw.baseAddress else { return -1 }
                    return write(to, base + sent, pass - sent)
                }
                if w < 0 && errno == EINTR { continue }
                guard w > 0 else { break }
                sent += w
            }
            if frozen {
                // Stalled: nothing more passes; the sockets stay open (the peer's kernel still
                // acknowledges) until the suite disarms the relay, which closes them.
                while state.withLock({ $0.frozen && !$0.stopped }) { usleep(20_000) }
                break
            }
            if cutNow {
                // Every connection the relay carries goes down at once, both ways (or this one).
                let all = carrierOnly ? [from, to] : Array(state.withLock { $0.sockets })
                for fd in all { shutdown(fd, Int32(SHUT_RDWR)) }
                break
            }
            if sent < pass { break }
        }
        shutdown(to, Int32(SHUT_WR))
        shutdown(from, Int32(SHUT_RD))
    }
}
