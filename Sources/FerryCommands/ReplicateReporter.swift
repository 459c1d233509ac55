import FerryCore
import FerryServer
import Foundation
import Metrics

/// What `ferry replicate` tells besides its progress: Prometheus metrics (`--metrics`) and
/// JSON events, one object per line (`--json`). Fed by `Replicator.Options.observe` on the
/// replicator's thread.
final class ReplicateReporter: @unchecked Sendable {  // unchecked: used from the replicator's thread only (`lock` guards the rest)
    private let json: Bool
    private let replica: String
    private let lock = NSLock()
    /// Metrics, when `--metrics` is on.
    private let metrics: Handles?
    private var tableRows: [String: Counter] = [:]
    /// `--json`: applied transactions summed until the next line (at most one a second).
    private var pending: Replicator.Applied?
    private var lastLine = Date.distantPast

    struct Handles {
        let transactions: Counter
        let rows: Counter
        let commits: Counter
        let errors: Counter
        let columnsAdded: Counter
        let lag: Gauge
        let copiedRows: Gauge
        let caughtUp: Gauge
    }

    init(replica: String, json: Bool, metrics: Bool) {
        self.replica = replica
        self.json = json
        let d = [("replica", replica)]
        self.metrics = metrics
            ? Handles(
                transactions: Counter(label: "ferry_replicate_source_transactions_total", dimensions: d),
                rows: Counter(label: "ferry_replicate_rows_applied_total", dimensions: d),
                commits: Counter(label: "ferry_replicate_target_commits_total", dimensions: d),
                errors: Counter(label: "ferry_replicate_errors_total", dimensions: d),
                columnsAdded: Counter(label: "ferry_replicate_columns_added_total", dimensions: d),
                lag: Gauge(label: "ferry_replicate_lag_seconds", dimensions: d),
                copiedRows: Gauge(label: "ferry_replicate_initial_copy_rows", dimensions: d),
                caughtUp: Gauge(label: "ferry_replicate_caught_up", dimensions: d))
            : nil
    }

    func observe(_ event: Replicator.Event) {
        lock.lock()
        defer { lock.unlock() }
        switch event {
        case .following(let position, let copied):
            if let copied { metrics?.copiedRows.record(copied) }
            line(["event": "following", "position": position, "copied_rows": copied.map { $0 as Any } ?? NSNull()])
        case .applied(let a):
            if let m = metrics {
                m.transactions.increment(by: Int64(a.transactions))
                m.rows.increment(by: a.rows)
                m.commits.increment()
                if let lag = a.lagSeconds { m.lag.record(lag) }
                for (t, n) in a.rowsByTable {
                    let c = tableRows[t] ?? Counter(label: "ferry_replicate_table_rows_applied_total", dimensions: [("replica", replica), ("table", t)])
                    tableRows[t] = c
                    c.increment(by: n)
                }
            }
            guard json else { return }
            var p = pending ?? Replicator.Applied(transactions: 0, rows: 0, rowsByTable: [:], position: "", lagSeconds: nil)
            p.transactions += a.transactions
            p.rows += a.rows
            for (t, n) in a.rowsByTable { p.rowsByTable[t, default: 0] += n }
            p.position = a.position
            p.lagSeconds = a.lagSeconds
            pending = p
            if Date().timeIntervalSince(lastLine) >= 1 { flushApplied() }
        case .columnAdded(let column):
            metrics?.columnsAdded.increment()
            line(["event": "column-added", "column": column])
        case .caughtUp(let position):
            metrics?.caughtUp.record(1)
            flushApplied()
            line(["event": "caught-up", "position": position])
        }
    }

    /// The run failed.
    func failed(_ error: any Error) {
        lock.withLock {
            metrics?.errors.increment()
            flushApplied()
        }
    }

    /// The last line: what the run did.
    func finish(_ outcome: Replicator.Outcome) throws {
        try lock.withLock {
            flushApplied()
            guard json else { return }
            let encoder = JSONEncoder()
            encoder.keyEncodingStrategy = .convertToSnakeCase
            guard var object = try JSONSerialization.jsonObject(with: try encoder.encode(outcome)) as? [String: Any] else { return }
            object["event"] = outcome.caughtUp ? "done-caught-up" : "done"
            line(object)
        }
    }

    private func flushApplied() {
        guard json, let p = pending else { return }
        pending = nil
        lastLine = Date()
        line(["event": "applied", "transactions": p.transactions, "rows": p.rows, "rows_by_table": p.rowsByTable, "position": p.position,
              "lag_seconds": p.lagSeconds.map { ($0 * 1000).rounded() / 1000 as Any } ?? NSNull()])
    }

    private func line(_ object: [String: Any]) {
        guard json, let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else { return }
        Console.out(String(decoding: data, as: UTF8.self))
    }
}
