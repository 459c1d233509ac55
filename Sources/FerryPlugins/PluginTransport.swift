import FerryCore
import FerryXML
import Foundation

/// The protocol over a driver plugin's pipe: each request a stream of frames on the shared
/// plugin process. One per connection; `release` lets the process go when its last
/// connection ends.
final class PluginTransport: ProtocolTransport, @unchecked Sendable {  // unchecked: `released` only under `lock`; the process is thread-safe
    let process: PluginProcess
    let host: PluginHosts
    let key: PluginHosts.Key
    private let lock = NSLock()
    private var released = false

    init(process: PluginProcess, host: PluginHosts, key: PluginHosts.Key) {
        self.process = process
        self.host = host
        self.key = key
    }

    var endpoint: Endpoint { process.endpoint }
    var peer: String { "plugin \(process.name)" }
    /// A plugin that keeps its answers within windows stops sending a stream Ferry does not read
    /// (docs/plugins.md): readers may then ask for large pages, as from a service over HTTP.
    var pausesReading: Bool { process.windows }
    var unauthorizedAdvice: String { "plugin \(process.name) refused the request (401)" }

    func unanswered(_ failure: HTTPTransportError?) -> FerryError {
        FerryError.connectionFailed(endpoint: endpoint.redacted, reason: "plugin \(process.name) did not answer: \(failure?.reason ?? "no response")")
    }

    func start(_ method: String, _ target: String, body: Data?, upload: RowsDocumentSource?) throws -> any ProtocolExchange {
        let id = try process.send(method: method, target: target, body: body, upload: upload)
        let exchange = PluginExchange(process: process, id: id)
        do {
            exchange.status = try process.status(of: id)
        } catch {
            process.cancel(id)
            throw error
        }
        return exchange
    }

    func release() {
        let first = lock.withLock { () -> Bool in
            defer { released = true }
            return !released
        }
        if first { host.release(key) }
    }

    deinit { release() }
}

/// One request's answer on a plugin's pipe.
final class PluginExchange: ProtocolExchange {
    let process: PluginProcess
    let id: UInt64
    var status: Int?
    private var done = false

    init(process: PluginProcess, id: UInt64) {
        self.process = process
        self.id = id
    }

    func next() throws -> Data? {
        guard !done else { return nil }
        let piece = try process.next(of: id)
        if piece == nil { done = true }
        return piece
    }

    func cancel() {
        guard !done else { return }
        done = true
        process.cancel(id)
    }

    deinit { cancel() }
}
