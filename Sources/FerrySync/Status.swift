import FerryCore
import Foundation

extension Sync {
    /// The snapshot's origin, last push and pull, and per table the pending local changes.
    public func status(_ file: SyncFile, verbose: Bool = false) throws -> StatusReport {
        var report = StatusReport(
            file: file.path, origin: try file.origin(), created: try file.meta("created"), lastPush: try file.meta("last_push"),
            lastPull: try file.meta("last_pull"), pushInFlight: try file.meta("push_inflight"), pending: 0, tables: [])
        for t in file.tables {
            let changes = try file.pending(t)
            var row = StatusReport.Table(name: t.local, inserts: 0, updates: 0, deletes: 0, keys: verbose ? [] : nil)
            for c in changes {
                switch c.kind {
                case .insert: row.inserts += 1
                case .update: row.updates += 1
                case .delete: row.deletes += 1
                }
                if verbose { row.keys?.append(.init(kind: c.kind, key: Shown.key(t.key, c.key))) }
            }
            report.pending += changes.count
            report.tables.append(row)
        }
        return report
    }

    /// A push, then (when the push left no conflict open) a pull.
    public func sync(_ file: SyncFile, origin: Endpoint, policy: ConflictPolicy) throws -> SyncReport {
        let push = try push(file, origin: origin, policy: policy)
        guard push.unresolved == 0 else { return SyncReport(push: push, pull: nil) }
        return SyncReport(push: push, pull: try pull(file, origin: origin, policy: policy))
    }
}
