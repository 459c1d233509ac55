import Foundation

/// Staging tables: a load fills a table of its own (named per load unit), made visible whole
/// at the end (create: renamed; replace: swapped in). Leases keep one run from removing
/// another's live staging table; with `--resume` the load commits chunk by chunk into its
/// staging table, recording after which key it stands, and a rerun continues from there.
extension CopyEngine {
    /// The staging table of one load unit: `_ferry_load_<hash>_<table>`, the hash naming the
    /// unit (source, source table, target table, mode), so that a rerun of the same unit finds
    /// it (to resume it, or to clean it up) and two units never share one. Shortened, with the
    /// hash kept, to the engine's longest name.
    public static func stagingName(for target: TableName, unit: String, maxLength: Int) -> TableName {
        var h = StableHash()
        h.bytes(unit.utf8)
        let tag = String(h.value, radix: 16)
        let prefix = internalPrefix + "load_" + String(tag.prefix(8)) + "_"
        var name = target.name
        while (prefix + name).utf8.count > maxLength && !name.isEmpty { name.removeLast() }
        return TableName(schema: target.schema, prefix + name)
    }

    /// What the rows of a load are (source table, columns as read and written, key, filter): a
    /// resume continues only a load of the same rows.
    static func fingerprint(_ table: TablePlan, mode: WriteMode) -> String {
        var h = StableHash()
        h.bytes(table.source.description.utf8)
        h.bytes(mode.rawValue.utf8)
        for c in table.columns { h.bytes(c.name.utf8); h.bytes(c.logicalType.description.utf8) }
        for c in table.targetSchema.columns { h.bytes(c.name.utf8); h.bytes(c.logicalType.description.utf8) }
        for k in table.key?.columns ?? [] { h.bytes(k.utf8) }
        h.bytes((table.filter ?? "").utf8)
        return String(h.value, radix: 16)
    }

    /// A staging table claimed for this run: new, or (with `--resume`) an earlier run's to continue.
    final class StagedLoad {
        let staging: TableName
        /// Where Ferry's tables keep the lease and the progress (nil where the target keeps no
        /// state of loads: the XML service owns its staging tables itself).
        let leases: TableSchema?
        let progress: TableSchema?
        /// Chunked commits, with the key to continue after (nil: from the first row).
        var resumable = false
        var resumeAfter: [Value]?
        var rowsBefore: Int64 = 0
        var record: LoadProgress.Row?
        var keeper: LeaseKeeper?
        /// Chunks written outside a transaction, each record after its rows (see `copyTable`).
        var direct = false
        /// The record of an earlier run whose staging table was merged (see `claimStaging`).
        var merged: LoadProgress.Row?

        init(staging: TableName, leases: TableSchema?, progress: TableSchema?) {
            self.staging = staging
            self.leases = leases
            self.progress = progress
        }
    }

    /// The key a resumable load orders and continues by: the table's, each column read as it is
    /// (no cast converts it). Nil when the table has none.
    static func resumeKey(_ table: TablePlan) -> [Int]? {
        guard let key = table.key?.columns, !key.isEmpty else { return nil }
        let at = key.compactMap { k in table.columns.firstIndex { $0.name == k } }
        guard at.count == key.count, !table.conversions.contains(where: { at.contains($0.index) }) else { return nil }
        return at
    }

    /// Before a table's transaction: claims its staging table, removes an expired earlier
    /// run's (reported), or takes it over to resume. Each step commits on its own.
    func claimStaging(
        _ table: TablePlan, staging: TableName, source: String, target: any Connection, options: CopyOptions, mode: WriteMode,
        progress: ProgressReporter
    ) throws -> StagedLoad {
        // Leases and records only where a staging table outlives the load's transaction: with
        // --resume, or where DDL commits as it goes (MySQL). A PostgreSQL or SQLite load without
        // --resume creates its staging table inside its transaction: no other run sees it, and a
        // crash takes it away (Ferry's tables are not made in such a target for nothing).
        let outlives = options.resume || !target.dialect.supportsTransactionalDDL
        if target.keepsLoadState && !outlives, try !target.tableExists(staging) {
            return StagedLoad(staging: staging, leases: nil, progress: nil)
        }
        // (A staging table there already is another run's, live or left: its lease decides.)
        guard target.keepsLoadState || options.resume else {
            // The service checks who owns a staging table; one left by an earlier run is dropped.
            if try target.tableExists(staging) {
                try target.dropTable(staging)
                progress.note("note: \(table.target): removed the staging table \(staging.name) an earlier load left behind")
            }
            return StagedLoad(staging: staging, leases: nil, progress: nil)
        }
        // Where the target keeps no leases (the service owns its staging tables by token), the
        // progress of a resumable load is still recorded.
        let leases = target.keepsLoadState ? try LoadLeases.schema(target) : nil
        let progressSchema = try LoadProgress.schema(target)
        let load = StagedLoad(staging: staging, leases: leases, progress: progressSchema)
        var expired: LoadLeases.Row?
        if let leases {
            do {
                expired = try LoadLeases.claim(target, leases, staging: staging, target: table.target, owner: .current)
            } catch let held as LoadLeases.LeaseHeld {
                throw FerryError.copyFailed(
                    table: table.source, endpoint: target.endpoint.redacted,
                    reason: "another Ferry is loading \(table.target) into \(staging.name) (\(held.lease.describeOwner())): wait for it to finish, or stop it and run again")
            }
        }
        if let leases { sweepAbandoned(table, except: staging, leases: leases, progressSchema: { progressSchema }, target: target, progress: progress) }
        var resume = options.resume
        if resume, Self.resumeKey(table) == nil {
            resume = false
            progress.note("note: \(table.target): loaded in one transaction (--resume needs a key read as it is stored: \(table.key == nil ? "the table has none" : "a cast converts it"))")
        }
        let record = try LoadProgress.read(target, progressSchema, staging: staging)
        let exists = try target.tableExists(staging)
        let fingerprint = Self.fingerprint(table, mode: mode)
        if resume, let record, exists {
            guard record.fingerprint == fingerprint else {
                if let leases { try? LoadLeases.release(target, leases, staging: staging) }
                throw FerryError.copyFailed(
                    table: table.source, endpoint: target.endpoint.redacted,
                    reason: "the unfinished load in \(staging.name) holds other rows (other columns, key or filter than this copy's): run without --resume to start it over")
            }
            load.resumable = true
            load.record = record
            load.rowsBefore = record.rows
            if !record.afterKey.isEmpty {
                guard let key = KeyText.decode(record.afterKey) else {
                    throw FerryError.copyFailed(
                        table: table.source, endpoint: target.endpoint.redacted,
                        reason: "the unfinished load in \(staging.name) records a key Ferry cannot read back: run without --resume to start it over")
                }
                load.resumeAfter = key
            }
            // Where rows and records commit in two steps, rows past the last record (or, with no
            // chunk recorded yet, the first chunk's rows) are there without it: removed, read again.
            if target.stagesKeyedWrites { try trim(staging, after: load.resumeAfter, table: table, target: target, progress: progress) }
            progress.note("note: \(table.target): resuming the load of \(record.startedAt) after \(record.rows) rows"
                + (load.resumeAfter.map { " (after key " + RowValues.keyText(table.key?.columns ?? [], $0) + ")" } ?? ""))
        } else if resume, let record, !exists, table.mergesStaging, record.fingerprint == fingerprint {
            // A merge removes the staging table and the record in one transaction, except
            // through the service, which applies the record's removal after the merge: a kill
            // between the two leaves this. The rows are in; loading them again would double an append.
            load.merged = record
            return load
        } else {
            if exists {
                try target.dropTable(staging)
                let who = expired.map { " by " + (LoadOwner(stored: $0.owner)?.description ?? $0.owner) } ?? ""
                let rows = record.map { ", \($0.rows) rows committed" } ?? ""
                progress.note("note: \(table.target): removed an unfinished load left\(who) in \(staging.name)\(rows)"
                    + (record != nil && !resume ? "; --resume continues such a load instead" : ""))
            }
            if record != nil { try LoadProgress.remove(target, progressSchema, staging: staging) }
            load.resumable = resume
        }
        if load.resumable && load.record == nil {
            load.record = LoadProgress.Row(
                staging: staging.description, target: table.target.description, fingerprint: fingerprint, afterKey: "", rows: 0,
                source: source, startedAt: ISO8601DateFormatter().string(from: Date()))
        }
        if let leases, target.dialect.supportsConcurrentWriters {
            load.keeper = LeaseKeeper(registry: registry, endpoint: target.endpoint, schema: leases,
                                      lease: LoadLeases.Row(staging: staging.description, target: table.target.description,
                                                            owner: LoadOwner.current.stored, heartbeat: 0, seconds: LoadLeases.defaultSeconds))
        }
        return load
    }

    /// Drops the staging tables other loads of the same target table left when they died (an
    /// expired lease, its owner gone): another source or mode names its staging table
    /// differently, so a rerun of this unit alone would never find them. A load with a progress
    /// record is kept for its own `--resume` (and named); a live one is not touched.
    func sweepAbandoned(
        _ table: TablePlan, except staging: TableName, leases: TableSchema, progressSchema: () throws -> TableSchema, target: any Connection,
        progress: ProgressReporter
    ) {
        guard let rows = try? LoadLeases.all(target, leases) else { return }
        for lease in rows where lease.target == table.target.description && lease.staging != staging.description && !lease.isLive() {
            let other = TableName(parsing: lease.staging)
            do {
                if try target.tableExists(LoadProgress.table), let record = try LoadProgress.read(target, try progressSchema(), staging: other) {
                    progress.note("note: \(table.target): \(other.name) holds an unfinished resumable load (\(record.rows) rows, started \(record.startedAt)); its own copy with --resume continues it")
                    continue
                }
                if try target.tableExists(other) { try target.dropTable(other) }
                try LoadLeases.release(target, leases, staging: other)
                progress.note("note: \(table.target): removed the staging table \(other.name) a load left when it stopped (\(lease.describeOwner()))")
            } catch {
                progress.note("warning: \(table.target): could not remove the staging table \(other.name) an earlier load left: \(error)")
            }
        }
    }

    /// Removes the rows of `staging` past `key` (nil: every row — no chunk was recorded): where a
    /// chunk's rows and its record commit in two steps (the service merges the rows, then
    /// applies the record), the rows of a chunk whose record never arrived are there, and the
    /// chunk is read again. Its keys are read by the staging table's own key (at most a chunk of
    /// them) and deleted in one transaction.
    func trim(_ staging: TableName, after key: [Value]?, table: TablePlan, target: any Connection, progress: ProgressReporter) throws {
        guard let keyNames = table.key?.columns else { return }
        let schema = try target.describe(staging, rowEstimate: false)
        let columns = try keyNames.map { k in
            guard let c = schema.column(named: k) else { throw FerryError.columnNotFound(table: staging, column: k) }
            return c
        }
        try target.begin()
        let n: Int
        do {
            n = try target.deleteRows(from: schema, key: columns, in: key.map { KeyRange(key: keyNames, after: $0) })
            try target.commit()
        } catch {
            try? target.rollback()
            throw error
        }
        guard n > 0 else { return }
        progress.note("note: \(table.target): removed \(n) rows of the chunk whose record did not arrive; they are read again")
    }

    /// In the table's transaction, as the load ends: the lease and the progress go with it.
    func finishStaging(_ load: StagedLoad, target: any Connection) throws {
        if let p = load.progress { try LoadProgress.remove(target, p, staging: load.staging) }
        if let l = load.leases { try LoadLeases.release(target, l, staging: load.staging) }
    }

    /// After a failed load: a resumable load keeps its staging table and progress and gives up
    /// its lease (a rerun with `--resume` takes it at once); another drops its staging table.
    func abandonStaging(_ load: StagedLoad, target: any Connection) {
        load.keeper?.stop()
        if !load.resumable { try? target.dropTable(load.staging) }
        if !load.resumable, let p = load.progress { try? LoadProgress.remove(target, p, staging: load.staging) }
        if let l = load.leases { try? LoadLeases.release(target, l, staging: load.staging) }
    }

    /// Records one committed chunk: the last key written and the rows so far, with the lease's
    /// heartbeat, in the chunk's transaction; then commits it and begins the next.
    func commitChunk(_ load: StagedLoad, lastKey: [Value], rows: Int64, target: any Connection) throws {
        guard var record = load.record, let p = load.progress else { return }
        record.afterKey = KeyText.encode(lastKey)
        record.rows = load.rowsBefore + rows
        try LoadProgress.write(target, p, record)
        if let l = load.leases {
            try LoadLeases.write(target, l, LoadLeases.Row(staging: load.staging.description, target: record.target, owner: LoadOwner.current.stored,
                                                          heartbeat: LoadLeases.now(), seconds: LoadLeases.defaultSeconds), insert: false)
        }
        load.record = record
        guard !load.direct else { return }
        try target.commit()
        try target.begin()
    }
}

/// Renews one load's lease on a connection of its own every `LoadLeases.heartbeatSeconds`
/// while the load runs (a load in one long transaction writes nothing another run could see).
/// The connection is opened at the first heartbeat: a load shorter than that opens none.
final class LeaseKeeper: @unchecked Sendable {
    private let stopped = DispatchSemaphore(value: 0)
    private var worker: Worker?

    init(registry: DriverRegistry, endpoint: Endpoint, schema: TableSchema, lease: LoadLeases.Row) {
        let stopped = self.stopped
        worker = Worker(name: "ferry-lease") {
            var connection: (any Connection)?
            defer { connection?.close() }
            while stopped.wait(timeout: .now() + LoadLeases.heartbeatSeconds) == .timedOut {
                do {
                    if connection == nil { connection = try registry.connect(endpoint, role: .target) }
                    if let c = connection { try LoadLeases.renew(c, schema, [lease]) }
                } catch {
                    // Tried again at the next beat; a lease that runs out is only reported by the run that finds it.
                    connection?.close()
                    connection = nil
                }
            }
        }
    }

    func stop() {
        guard let w = worker else { return }
        worker = nil
        stopped.signal()
        w.join()
    }
}
