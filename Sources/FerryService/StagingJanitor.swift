import FerryCore
import Foundation
import Logging

/// Transient staging tables left behind. A load through the service stages rows in tables of
/// its own (`_ferry_append_…`, `_ferry_upsert_…`, `_ferry_delete_…`, `_ferry_replica_…`) that
/// its transaction merges or drops; a client killed mid-load leaves them. The service leases
/// each one it creates in `_ferry_leases` of the served database (owner: this service's process,
/// renewed every sweep while the table is in use), and every sweep — at the start, then every
/// minute — drops:
/// - its own tables unused for `stagingIdleSeconds` (their client is gone), and
/// - any service's tables whose lease expired: a process of this machine that no longer exists
///   (a killed or restarted `ferry serve`), or no heartbeat for `leaseSeconds`.
/// A create's or replace's `_ferry_load_…` is swept the same way unless `_ferry_loads` records
/// it: a resumable load's staging table waits for `--resume`.
final class StagingJanitor: @unchecked Sendable {
    /// Seconds a lease lasts without a heartbeat (a service renews every sweep).
    static let leaseSeconds: Int64 = 300
    weak var handlers: ServiceHandlers?
    private let lock = NSLock()
    private var timer: DispatchSourceTimer?
    private let logger = Logger(label: "ferry.serve.staging")

    func start() {
        lock.withLock {
            guard timer == nil, let h = handlers else { return }
            let every = max(1, min(60, h.configuration.stagingIdleSeconds / 2))
            let t = DispatchSource.makeTimerSource(queue: DispatchQueue.global())
            t.schedule(deadline: .now(), repeating: every)
            t.setEventHandler { [weak self] in self?.sweep() }
            t.resume()
            timer = t
        }
    }

    /// Leases a transient staging table for this service before it is created (so that no
    /// such table is ever without a lease); outside any transaction.
    static func lease(_ table: TableName, on c: any Connection) throws {
        let schema = try LoadLeases.schema(c)
        try ServiceHandlers.transaction(c) {
            try LoadLeases.release(c, schema, staging: table)
            try LoadLeases.hold(c, schema, staging: table, target: "ferry serve", seconds: leaseSeconds)
        }
    }

    func sweep() {
        guard let h = handlers, let c = try? h.connect(write: true) else { return }
        defer { c.close() }
        do {
            // No lease table, no transient staging table made through a service: nothing to do
            // (and none is made in a database only read or written row by row).
            guard try c.tableExists(LoadLeases.table) else { return }
            let schema = try LoadLeases.schema(c)
            for t in h.staging.takeIdle(longerThan: h.configuration.stagingIdleSeconds) {
                try drop(t, c, schema, why: "unused for \(Int(h.configuration.stagingIdleSeconds)) s: its client is gone")
            }
            let mine = Set(h.staging.inUse)
            try LoadLeases.renew(c, schema, mine.map {
                LoadLeases.Row(staging: $0.description, target: "ferry serve", owner: LoadOwner.current.stored, heartbeat: 0, seconds: Self.leaseSeconds)
            })
            for lease in try LoadLeases.all(c, schema) {
                let t = TableName(parsing: lease.staging)
                guard StagingOwners.isSwept(t), !mine.contains(t) else { continue }
                // Ours and no longer in use: merged, applied or dropped (or its drop failed).
                let ours = lease.owner == LoadOwner.current.stored
                guard ours || !lease.isLive() else { continue }
                if try c.tableExists(t) {
                    try drop(t, c, schema, why: ours ? "its load ended" : "left by \(lease.describeOwner()), whose lease expired")
                } else {
                    try ServiceHandlers.transaction(c) { try LoadLeases.release(c, schema, staging: t) }
                }
            }
        } catch {
            logger.warning("sweeping staging tables: \(error)")
        }
    }

    private func drop(_ t: TableName, _ c: any Connection, _ schema: TableSchema, why: String) throws {
        // A resumable load's staging table stays for `--resume` (its lease goes: the next run that
        // writes into it holds it again).
        if StagingOwners.outlivesARun(t), try c.tableExists(LoadProgress.table),
           try LoadProgress.read(c, try LoadProgress.schema(c), staging: t) != nil {
            try ServiceHandlers.transaction(c) { try LoadLeases.release(c, schema, staging: t) }
            return
        }
        if try c.tableExists(t) {
            try ServiceHandlers.transaction(c) { try c.dropTable(t) }
            logger.notice("dropped the staging table \(t) (\(why))")
        }
        // Its owner goes with it (for a write token's load, the record in the served database too).
        handlers?.staging.forget(t)
        try ServiceHandlers.transaction(c) { try LoadLeases.release(c, schema, staging: t) }
    }
}
