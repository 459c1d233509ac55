import FerryCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A TCP relay on loopback in front of a server, counting the bytes the server sends: how a
/// test measures what a copy reads from each side, whatever the protocol (PostgreSQL, MySQL,
/// HTTP). `url(replacing:)` points a database URL at the relay.
public final class ByteCountingProxy: @unchecked Sendable {  // the counters are Locked; the listener is closed once, in stop()
    public let port: Int
    let upstreamHost: String
    let upstreamPort: Int
    let listener: Int32
    let served = Locked<Int64>(0)
    let sent = Locked<Int64>(0)
    let stopped = Locked(false)

    /// Bytes the server has sent through the relay (what its clients read).
    public var bytesFromServer: Int64 { served.withLock { $0 } }
    /// Bytes the clients have sent to the server.
    public var bytesToServer: Int64 { sent.withLock { $0 } }
    public func reset() {
        served.withLock { $0 = 0 }
        sent.withLock { $0 = 0 }
    }

    public init(host: String, port: Int) throws {
        upstreamHost = host
        upstreamPort = port
        (listener, self.port) = try Self.listenOnLoopback()
        let relay = self
        Thread.detachNewThread { relay.acceptLoop() }
    }

    /// A socket listening on a free port of 127.0.0.1, and that port (relays of the tests).
    public static func listenOnLoopback() throws -> (socket: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ConformanceFailure("a relay could not open a socket") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = loopback(port: 0)
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw ConformanceFailure("a relay could not listen on loopback")
        }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return (fd, Int(UInt16(bigEndian: addr.sin_port)))
    }

    /// 127.0.0.1:`port` as a socket address.
    public static func loopback(port: Int) -> sockaddr_in {
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = UInt16(port).bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        return addr
    }

    /// `url` with its host and port replaced by the relay's.
    public func url(replacing url: String) -> String {
        url.replacingOccurrences(of: "\(upstreamHost):\(upstreamPort)", with: "127.0.0.1:\(port)")
    }

    /// The relay in front of the server of a `scheme://user:pw@host:port/db` URL.
    public static func inFront(of url: String) throws -> ByteCountingProxy {
        guard let c = URLComponents(string: url), let host = c.host, let port = c.port else {
            throw ConformanceFailure("no host and port in the test server's URL")
        }
        return try ByteCountingProxy(host: host, port: port)
    }

    /// Sockets of the connections relayed so far (both ends).
    private let sockets = Locked<[Int32]>([])

    /// Cuts every connection relayed so far, both directions at once, as a broken network
    /// does mid-stream; new connections are still relayed.
    public func cutConnections() {
        for fd in sockets.withLock({ s -> [Int32] in defer { s = [] }; return s }) { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    public func stop() {
        guard !stopped.withLock({ s -> Bool in defer { s = true }; return s }) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 { return }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = UInt16(upstreamPort).bigEndian
            addr.sin_addr.s_addr = inet_addr(upstreamHost == "localhost" ? "127.0.0.1" : upstreamHost)
            let connected = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            if connected != 0 {
                close(client)
                close(server)
                continue
            }
            sockets.withLock { $0 += [client, server] }
            let relay = self
            Thread.detachNewThread { relay.pump(from: server, to: client, counter: relay.served) }
            Thread.detachNewThread { relay.pump(from: client, to: server, counter: relay.sent) }
        }
    }

    func pump(from: Int32, to: Int32, counter: Locked<Int64>) {
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(from, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            counter.withLock { $0 += Int64(n) }
            var off = 0
            while off < n {
                let w = buffer.withUnsafeBytes { write(to, $0.baseAddress! + off, n - off) }
                if w <= 0 { break }
                off += w
            }
            if off < n { break }
        }
        shutdown(to, Int32(SHUT_WR))
        shutdown(from, Int32(SHUT_RD))
    }
}
