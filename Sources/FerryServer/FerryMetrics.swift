import FerryCore
import Foundation
import Hummingbird
import Logging
import Metrics
import NIOCore
import Prometheus

/// Ferry's one metrics setup (swift-metrics, exported in Prometheus's text format by
/// swift-prometheus): what a long-running command records (`ferry replicate --metrics`), and
/// `GET /metrics` on an address of its own.
public final class FerryMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry

    private static let shared = Locked<FerryMetrics?>(nil)

    private init(registry: PrometheusCollectorRegistry) { self.registry = registry }

    /// The process's metrics, bootstrapped once (swift-metrics allows one bootstrap).
    public static func bootstrap() -> FerryMetrics {
        shared.withLock { current in
            if let m = current { return m }
            let registry = PrometheusCollectorRegistry()
            MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
            let m = FerryMetrics(registry: registry)
            current = m
            return m
        }
    }

    /// Everything recorded, in Prometheus's text format.
    public func exposition() -> [UInt8] {
        var out: [UInt8] = []
        registry.emit(into: &out)
        return out
    }

    /// Serves `GET /metrics` on `host:port` (port 0: a free one) until the process ends;
    /// `onRunning` receives the bound port. Throws when the address cannot be listened on.
    public func serve(host: String, port: Int, onRunning: @escaping @Sendable (Int) -> Void) throws {
        let router = Router()
        router.get("metrics") { [self] _, _ -> Response in
            let body = exposition()
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(bytes: body)))
        }
        var logger = Logger(label: "ferry.metrics")
        logger.logLevel = .warning
        let started = DispatchSemaphore(value: 0)
        let outcome = Locked<Result<Int, any Error>?>(nil)
        let app = Application(
            router: router, configuration: .init(address: .hostname(host, port: port), serverName: "ferry"),
            onServerRunning: { channel in
                outcome.withLock { $0 = .success(channel.localAddress?.port ?? port) }
                started.signal()
            },
            logger: logger)
        Task {
            do { try await app.runService() } catch {
                outcome.withLock { if $0 == nil { $0 = .failure(error) } }
                started.signal()
            }
        }
        _ = started.wait(timeout: .now() + 10)
        switch outcome.withLock({ $0 }) {
        case .success(let bound): onRunning(bound)
        case .failure(let error): throw error
        case nil: throw MetricsAddressError(address: "\(host):\(port)")
        }
    }
}

struct MetricsAddressError: Error, CustomStringConvertible {
    let address: String
    var description: String { "the metrics endpoint did not start on \(address) within 10 s" }
}
