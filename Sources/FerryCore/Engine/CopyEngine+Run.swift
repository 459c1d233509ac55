import Foundation

/// Running a plan: jobs, the shared source snapshot, foreign keys after the tables.
extension CopyEngine {
    /// Runs a plan. `connect` opens fresh connections for extra jobs; the given ones serve the first.
    /// With `cancellation`, a cancel stops the table being written between batches (rolled
    /// back) and leaves the tables not started untouched; both are reported `cancelled`.
    public func run(
        _ plan: CopyPlan, source: any Connection, target: any Connection, options: CopyOptions,
        progress: ProgressReporter, cancellation: Cancellation? = nil
    ) -> CopySummary {
        let started = Date()
        for w in plan.warnings { progress.note("warning: \(w)") }
        for t in plan.tables {
            for s in t.skipped { progress.note("warning: \(t.source): skipping column \(s.column): \(s.reason)") }
            for o in t.skippedObjects { progress.note("warning: \(o)") }
            for w in t.sourceSchema.readWarnings { progress.note("warning: \(w)") }
        }
        for line in OtherObject.summary(plan.otherObjects) { progress.note("warning: not copied (Ferry copies tables): \(line)") }
        var jobs = target.dialect.supportsConcurrentWriters ? max(1, min(options.jobs, plan.tables.count)) : 1
        if jobs > 1 && !source.capabilities.contains(.snapshots) {
            // Connections of their own could not see one state of the source.
            progress.note("note: one job: \(source.endpoint.redacted) does not declare snapshots (one state shared by connections), so its tables are read in turn by one connection")
            jobs = 1
        }
        // Per-table results filled by the jobs, and the next table index to hand out.
        let results = Locked<[CopySummary.Table?]>(Array(repeating: nil, count: plan.tables.count))
        let nextIndex = Locked(0)
        let count = plan.tables.count
        let sourceEndpoint = source.endpoint
        let targetEndpoint = target.endpoint

        // One snapshot of the source for the whole copy, as pg_dump takes: job 0's connection
        // begins it, and the other jobs start theirs from it where the engine can share one.
        var snapshot: String?
        if let given = options.sourceSnapshot {
            snapshot = given
        } else { do {
            try source.beginSnapshot()
            snapshot = try source.exportSnapshot()
        } catch {
            try? source.rollback()
            snapshot = nil
            progress.note("warning: the source could not start a read snapshot (\(error)); each table is read as of its own moment")
        } }
        // Where the engine cannot share a snapshot, the jobs' connections begin theirs while
        // writes are briefly blocked (MySQL: FLUSH TABLES WITH READ LOCK, as mydumper does), so
        // that every snapshot sees the same moment.
        var frozenJobs: [Int: any Connection] = [:]
        if jobs > 1 && snapshot == nil {
            do {
                try? source.rollback()
                if try source.freezeWrites() {
                    defer { try? source.unfreezeWrites() }
                    try source.beginSnapshot()
                    for j in 1..<jobs {
                        let s = try registry.connect(sourceEndpoint, role: .source)
                        frozenJobs[j] = s
                        try s.beginSnapshot()
                    }
                } else {
                    try source.beginSnapshot()
                }
            } catch {
                for s in frozenJobs.values { s.close() }
                frozenJobs = [:]
                try? source.rollback()
                try? source.beginSnapshot()
                progress.note("warning: the jobs could not begin their snapshots together (\(error))")
            }
            if frozenJobs.isEmpty {
                progress.note(
                    "warning: \(jobs) jobs read the source in \(jobs) snapshots (\(source.dialect.engine.rawValue) cannot share one between connections, "
                        + "and blocking writes for a moment was not allowed): rows added while the copy runs may be in one table and not in another; "
                        + "--jobs 1 reads every table from one snapshot")
            }
        }
        let preopened = Locked(frozenJobs)
        let sharedSnapshot = snapshot
        // `--retries`: a table whose reading connection is lost is read again on a new one in
        // the same snapshot, which lives as long as the connection that exported it: that one
        // (`source`) then only holds it, and job 0 reads on a connection of its own.
        let rereads = options.sourceRetries > 0 && sharedSnapshot != nil
        let noSnapshot = "\(source.dialect.engine.rawValue) has no read snapshot a new connection can join, and one would read another state of the source"
        let first = Handoff((source, target))
        let swaps = Locked(())
        var workers: [Worker] = []
        for j in 0..<jobs {
            let engine = self
            workers.append(
                Worker(name: "ferry-job-\(j)") {
                    var connections: (any Connection, any Connection)?
                    var openError: String?
                    // Whether this job's source connection is its own (closed when it ends).
                    var ownsSource = j != 0
                    if j == 0 {
                        connections = first.value
                        if rereads, let sharedSnapshot {
                            do {
                                let s = try engine.joined(sharedSnapshot, sourceEndpoint)
                                connections = (s, first.value.1)
                                ownsSource = true
                            } catch {
                                progress.note("warning: --retries: a second source connection could not join the copy's snapshot (\(error)); tables are read on the one that holds it, and are not read again if it is lost")
                            }
                        }
                    } else {
                        do {
                            // Begun already, at the same moment as job 0's, while writes were blocked.
                            if let s = preopened.withLock({ $0.removeValue(forKey: j) }) {
                                do {
                                    connections = (s, try engine.registry.connect(targetEndpoint, role: .target))
                                } catch {
                                    s.close()
                                    throw error
                                }
                            } else {
                                let s = try engine.registry.connect(sourceEndpoint, role: .source)
                                let t = try engine.registry.connect(targetEndpoint, role: .target)
                                do {
                                    if let sharedSnapshot { try s.beginSnapshot(importing: sharedSnapshot) } else { try s.beginSnapshot() }
                                } catch {
                                    try? s.rollback()
                                    progress.note("warning: job \(j) could not join the source's snapshot (\(error)); its tables are read as of their own moment")
                                }
                                connections = (s, t)
                            }
                        } catch {
                            openError = "\(error)"
                        }
                    }
                    while let i = nextIndex.withLock({ (n: inout Int) -> Int? in
                        guard n < count else { return nil }
                        n += 1
                        return n - 1
                    }) {
                        let table = plan.tables[i]
                        if cancellation?.isCancelled == true {
                            var r = engine.failed(table, error: FerryError.cancelled.description, rows: 0, seconds: 0)
                            r.status = .cancelled
                            results.withLock { $0[i] = r }
                            continue
                        }
                        guard let (s, t) = connections else {
                            results.withLock { $0[i] = engine.failed(table, error: openError ?? "no connection", rows: 0, seconds: 0) }
                            continue
                        }
                        let (r, reading) = engine.copyTable(
                            table, source: s, target: t, options: options, mode: plan.mode, progress: progress, cancellation: cancellation,
                            swaps: swaps, rereading: ownsSource ? sharedSnapshot : nil,
                            whyNot: sharedSnapshot == nil ? noSnapshot : "the lost connection held the copy's snapshot")
                        connections = (reading, t)
                        results.withLock { $0[i] = r }
                    }
                    if let (s, t) = connections {
                        if ownsSource {
                            try? s.rollback()
                            s.close()
                        }
                        if j != 0 { t.close() }
                    }
                })
        }
        for w in workers { w.join() }
        if !options.keepSourceSnapshot { try? source.rollback() }
        var tables = results.withLock { $0 }
        if cancellation?.isCancelled != true {
            addForeignKeys(plan, results: &tables, target: target, progress: progress)
        }
        var summary = CopySummary(
            source: plan.source, target: plan.target, mode: plan.mode, tables: tables.compactMap { $0 },
            seconds: Date().timeIntervalSince(started), warnings: plan.warnings)
        summary.jobs = jobs
        return summary
    }

    /// Once every table is loaded: each table's foreign keys, in one target transaction per
    /// table, when every table it references arrived. A foreign key that fails (rows that do
    /// not match) fails its table's copy, whose rows stay committed.
    func addForeignKeys(_ plan: CopyPlan, results: inout [CopySummary.Table?], target: any Connection, progress: ProgressReporter) {
        let arrived = Set(plan.tables.indices.filter { results[$0]?.status == .ok }.map { plan.tables[$0].target })
        for (i, table) in plan.tables.enumerated() {
            guard var objects = table.objects, results[i]?.status == .ok, !objects.foreignKeys.isEmpty else { continue }
            let missing = objects.foreignKeys.filter { !arrived.contains($0.referencedTable) }
            if !missing.isEmpty {
                for fk in missing {
                    let o = SkippedObject(
                        kind: "foreign key", name: fk.name ?? fk.summary, table: table.source.description,
                        reason: "the copy of \(fk.referencedTable) failed")
                    results[i]?.skippedObjects.append(o)
                    progress.note("warning: \(o)")
                }
                let kept = objects.foreignKeys.indices.filter { arrived.contains(objects.foreignKeys[$0].referencedTable) }
                // Statements pair with keys one to one where the engine adds them afterwards.
                if objects.foreignKeyStatements.count == objects.foreignKeys.count {
                    objects.foreignKeyStatements = kept.map { objects.foreignKeyStatements[$0] }
                }
                objects.foreignKeys = kept.map { objects.foreignKeys[$0] }
            }
            guard !objects.foreignKeys.isEmpty else { continue }
            do {
                try target.begin()
                let declined = try target.createForeignKeys(objects)
                try target.commit()
                results[i]?.foreignKeys = objects.foreignKeys.count - declined.count
                for o in declined { progress.note("warning: \(o)") }
                results[i]?.skippedObjects += declined
            } catch {
                try? target.rollback()
                let message = "table \(table.target): the rows arrived, but its foreign keys could not be added: \(Self.describe(error, table: table.source))"
                progress.note("error: \(message)")
                results[i]?.status = .failed
                results[i]?.error = message
            }
        }
    }

    /// `copyTable`, then with `--retries`, while it failed because its source connection was
    /// lost: the table again on a new connection in the exported snapshot `rereading` (nil:
    /// none this job can join — the table fails, saying why). Returns the result, and the
    /// source connection to go on with.
    func copyTable(
        _ table: TablePlan, source: any Connection, target: any Connection, options: CopyOptions, mode: WriteMode,
        progress: ProgressReporter, cancellation: Cancellation?, swaps: Locked<Void>, rereading snapshot: String?, whyNot: String
    ) -> (CopySummary.Table, any Connection) {
        var reading = source
        var r = copyTable(table, source: reading, target: target, options: options, mode: mode, progress: progress, cancellation: cancellation, swaps: swaps)
        var attempt = 0
        let rerun = "run the copy again (--resume keeps what was committed)"
        while r.status == .failed, cancellation?.isCancelled != true, options.sourceRetries > 0, reading.isLost {
            guard let snapshot else {
                r.error = (r.error ?? "failed") + "; not read again (--retries): \(whyNot); \(rerun)"
                break
            }
            guard attempt < options.sourceRetries else { break }
            attempt += 1
            let wait = min(8, 0.5 * Double(1 << min(attempt - 1, 4)))
            Notices.say("table \(table.source): the source connection was lost; reading the table again on a new connection in the copy's snapshot, retry \(attempt) of \(options.sourceRetries) in \(wait) s (--retries)")
            Thread.sleep(forTimeInterval: wait)
            do {
                let fresh = try joined(snapshot, reading.endpoint)
                reading.close()
                reading = fresh
            } catch {
                r.error = (r.error ?? "failed") + "; not read again (--retries): a new connection could not join the copy's snapshot, so the connection that held it is gone too (a server restart?); \(rerun)"
                break
            }
            r = copyTable(table, source: reading, target: target, options: options, mode: mode, progress: progress, cancellation: cancellation, swaps: swaps)
        }
        if attempt > 0 { r.sourceRetries = attempt }
        return (r, reading)
    }

    /// A new source connection inside the exported snapshot `id`.
    func joined(_ id: String, _ endpoint: Endpoint) throws -> any Connection {
        let s = try registry.connect(endpoint, role: .source)
        do {
            try s.beginSnapshot(importing: id)
        } catch {
            s.close()
            throw error
        }
        return s
    }

    func failed(_ table: TablePlan, error: String, rows: Int64, seconds: Double) -> CopySummary.Table {
        CopySummary.Table(
            source: table.source.description, target: table.target.description, rows: rows, seconds: seconds,
            rowsPerSecond: 0, skippedColumns: table.skipped, status: .failed, error: error)
    }
}
