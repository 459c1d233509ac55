import FerryService
import Foundation
import Metrics

/// What `ferry serve --metrics HOST:PORT` exports (Prometheus text, through `FerryMetrics`):
/// requests by endpoint and status class, errors, request bytes, and the gauges of what the
/// service holds — requests being answered, database connections in use and waiting
/// (`ConnectionSlots`), read snapshots held. Endpoints are the protocol's route patterns
/// (`/v1/tables/{table}/rows`), never a table name or a token: the label set stays small.
struct ServiceMetrics: Sendable {
    let handlers: ServiceHandlers
    private let inFlight = Gauge(label: "ferry_serve_requests_in_flight")
    private let connectionsInUse = Gauge(label: "ferry_serve_db_connections_in_use")
    private let connectionsWaiting = Gauge(label: "ferry_serve_db_connections_waiting")
    private let connectionsLimit = Gauge(label: "ferry_serve_db_connections_limit")
    private let connectionsPeak = Gauge(label: "ferry_serve_db_connections_peak")
    private let connectionWaitsTimedOut = Gauge(label: "ferry_serve_db_connection_waits_timed_out")
    private let snapshots = Gauge(label: "ferry_serve_snapshots_held")

    init(handlers: ServiceHandlers) {
        self.handlers = handlers
        connectionsLimit.record(handlers.slots.limit)
    }

    /// One request answered: `endpoint` its route pattern (nil: no endpoint of the protocol).
    func answered(method: String, endpoint: String?, status: Int, requestBytes: Int?, seconds: Double, answering: Int) {
        let dims = [("method", method), ("endpoint", endpoint ?? "other"), ("status", "\(status / 100)xx")]
        Counter(label: "ferry_serve_requests_total", dimensions: dims).increment()
        if status >= 500 { Counter(label: "ferry_serve_errors_total", dimensions: [("status", "\(status)")]).increment() }
        if let requestBytes, requestBytes > 0 {
            Counter(label: "ferry_serve_request_bytes_total", dimensions: [("endpoint", endpoint ?? "other")]).increment(by: requestBytes)
        }
        Timer(label: "ferry_serve_request_seconds", dimensions: [("endpoint", endpoint ?? "other")], preferredDisplayUnit: .seconds)
            .recordNanoseconds(Int64(seconds * 1e9))
        refresh(answering: answering)
    }

    /// The gauges, as they are now.
    func refresh(answering: Int) {
        inFlight.record(answering)
        let f = handlers.slots.figures
        connectionsInUse.record(f.inUse)
        connectionsWaiting.record(f.waiting)
        connectionsPeak.record(f.peak)
        connectionWaitsTimedOut.record(f.timedOut)
        snapshots.record(handlers.snapshotsHeld)
    }
}
