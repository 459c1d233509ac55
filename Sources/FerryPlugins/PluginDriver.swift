import FerryCore
import FerryXML
import Foundation

/// A driver served by a plugin executable (`ferry-driver-SCHEME`, docs/plugins.md): its
/// connections are the protocol's client over the plugin's pipe.
public struct PluginDriver: Driver {
    public let scheme: String
    /// The executable.
    public let path: String
    /// Seconds to wait for the handshake and for each answer (`--timeout`).
    public let timeout: Double
    let hosts: PluginHosts

    public init(scheme: String, path: String, timeout: Double = PluginDriver.defaultTimeout) {
        self.scheme = scheme
        self.path = path
        self.timeout = timeout
        hosts = PluginHosts.shared
    }

    public static let defaultTimeout = 300.0

    /// Kills every plugin process still running (Ferry is exiting).
    public static func stopAll() { PluginProcess.killAll() }
    public var name: String { "ferry-driver-" + scheme }
    public var schemes: [String] { [scheme] }
    /// Names travel in paths and documents, as through the service: the plugin decides.
    public var dialect: any Dialect { HTTPDialect() }

    public func connect(_ endpoint: Endpoint, role: ConnectionRole) throws -> any Connection {
        let (process, key) = try hosts.acquire(name: name, path: path, endpoint: endpoint, role: role, timeout: timeout)
        let transport = PluginTransport(process: process, host: hosts, key: key)
        let capabilities = process.report?.capabilities ?? []
        do {
            try capabilities.require(role == .source ? .source : .target, for: role == .source ? "reading from it" : "writing into it", endpoint: "plugin \(name)")
            return try HTTPConnection(transport: transport, capabilities: capabilities, storedForm: process.report?.storedForm, maxBody: process.report?.maxBody,
                maxLoad: process.report?.maxLoad)
        } catch {
            transport.release()
            throw error
        }
    }
}

/// The plugin processes of this run, one per URL and role, shared by that URL's connections
/// (so a snapshot one holds is the others' too) and stopped when the last one ends.
final class PluginHosts: @unchecked Sendable {  // unchecked: `hosts` only under `lock`
    struct Key: Hashable {
        var path: String
        var url: String
        var target: Bool
    }
    static let shared = PluginHosts()
    private let lock = NSLock()
    private var hosts: [Key: (process: PluginProcess, users: Int)] = [:]

    func acquire(name: String, path: String, endpoint: Endpoint, role: ConnectionRole, timeout: Double) throws -> (PluginProcess, Key) {
        let key = Key(path: path, url: endpoint.raw ?? endpoint.redacted, target: role == .target)
        lock.lock()
        defer { lock.unlock() }
        if let h = hosts[key] {
            hosts[key] = (h.process, h.users + 1)
            return (h.process, key)
        }
        let p = try PluginProcess(name: name, path: path, endpoint: endpoint, role: role, timeout: timeout)
        hosts[key] = (p, 1)
        return (p, key)
    }

    func release(_ key: Key) {
        let stopping: PluginProcess? = lock.withLock {
            guard let h = hosts[key] else { return nil }
            if h.users > 1 {
                hosts[key] = (h.process, h.users - 1)
                return nil
            }
            hosts[key] = nil
            return h.process
        }
        stopping?.stop()
    }
}
