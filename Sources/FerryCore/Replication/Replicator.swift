import Foundation

/// `ferry replicate SOURCE TARGET`: an initial copy from the snapshot where the source's change
/// stream begins, then the stream applied in source commit order, a source transaction never
/// split, each target transaction also recording the source position in `_ferry_replication` —
/// so a rerun after any crash resumes where the target's last commit left it.
public struct Replicator {
    public let registry: DriverRegistry
    public init(registry: DriverRegistry) { self.registry = registry }

    public struct Options: Sendable {
        /// Table choice, keys, casts and jobs of the initial copy (its mode is `replace`).
        public var copy = CopyOptions()
        /// Stop once everything the source had committed when following began is applied, and
        /// move the target's serial counters past the values replicated (the cut-over step).
        public var untilCaughtUp = false
        /// Source transactions are grouped into one target transaction up to this many rows,
        /// and this many writes (a write is a statement or more at the target: many small
        /// source transactions must not make one target transaction hold a lock per write).
        public var groupRows = 20_000
        public var groupWrites = 200
        /// Start following again from a new position, the target brought to the source's
        /// snapshot there by a mirror (moving only what differs) instead of a full copy: after
        /// the source lost the recorded position (binlog purged, slot dropped).
        public var resync = false
        /// A column added to a followed table at the source is added at the target (the
        /// default); false: replication stops there with one line (`--on-schema-change fail`).
        public var addColumns = true
        /// Told what happens as it happens (metrics, `--json` events), on the replicator's thread.
        public var observe: (@Sendable (Event) -> Void)?
        public init() {}
    }

    /// What a run tells `Options.observe`.
    public enum Event: Sendable {
        /// The stream is followed from `position` (after an initial copy of `copiedRows`, or
        /// resumed when nil).
        case following(position: String, copiedRows: Int64?)
        /// A target transaction committed.
        case applied(Applied)
        /// A column the source added was added at the target (`table.column`).
        case columnAdded(String)
        /// Everything the source had committed when following began is applied.
        case caughtUp(position: String)
    }

    /// One target transaction: the source transactions and rows it applied, the position it
    /// recorded, and how long after the last of them committed at the source it committed.
    public struct Applied: Sendable, Codable {
        public var transactions: Int64
        public var rows: Int64
        public var rowsByTable: [String: Int64]
        public var position: String
        public var lagSeconds: Double?
        public init(transactions: Int64 = 0, rows: Int64 = 0, rowsByTable: [String: Int64] = [:], position: String = "", lagSeconds: Double? = nil) {
            self.transactions = transactions
            self.rows = rows
            self.rowsByTable = rowsByTable
            self.position = position
            self.lagSeconds = lagSeconds
        }
    }

    /// What a run did.
    public struct Outcome: Sendable, Codable {
        public var name: String
        /// True when this run made the initial copy (false: resumed from a recorded position).
        public var copied = false
        /// True when the run was stopped during its initial copy (rolled back; the next run
        /// starts it again).
        public var stoppedInCopy = false
        public var copiedRows: Int64 = 0
        /// What was dropped at the source before starting again (an unfinished initial copy's capture).
        public var droppedFirst: [String] = []
        public var transactions: Int64 = 0
        public var rowsApplied: Int64 = 0
        public var rowsByTable: [String: Int64] = [:]
        public var position = ""
        public var caughtUp = false
        /// Columns added at the target as the source added them (`table.column`).
        public var addedColumns: [String] = []
        public var seconds = 0.0
    }

    /// The capture's name for a source and a target: the same for every run of the pair (the
    /// endpoints with passwords masked), a slot name PostgreSQL accepts.
    public static func captureName(source: Endpoint, target: Endpoint) -> String {
        var h = StableHash()
        for b in (source.redacted + "\u{0}" + target.redacted).utf8 { h.byte(b) }
        let hex = String(h.value, radix: 16)
        return "_ferry_r_" + String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// Runs the replica of `source` into `target` until caught up (`untilCaughtUp`) or cancelled.
    public func run(
        source: any Connection, target: any Connection, options: Options, progress: ProgressReporter, cancellation: Cancellation
    ) throws -> Outcome {
        let began = Date()
        guard let capture = try source.changeCapture() else {
            throw FerryError.invalidOption(
                "\(source.endpoint.redacted) cannot be followed: Ferry captures changes from PostgreSQL, MariaDB, SQLite, and services and plugins that declare change-feed (its capabilities: \(source.capabilities))")
        }
        let name = Self.captureName(source: source.endpoint, target: target.endpoint)
        var outcome = Outcome(name: name)
        var copyOptions = options.copy
        copyOptions.mode = options.resync ? .mirror : .replace
        let engine = CopyEngine(registry: registry)
        let states = try target.replicaStates()
        let recorded = try states.read(name)
        let resuming = recorded?.phase == "following" && !options.resync
        /// The plan of the tables followed, checked; on resume only those the target holds.
        func makePlan() throws -> CopyPlan {
            var plan = try engine.plan(source: source, target: target, options: copyOptions)
            if resuming {
                // A table made at the source since the initial copy is not in the stream: it is
                // left out, and said (a new replica of it starts with its own initial copy).
                let added = try plan.tables.filter { !(try target.tableExists($0.target)) }
                for t in added { progress.note("\(t.source) is not replicated: it was not at the source when the initial copy ran (--exclude it, or replicate it on its own)") }
                plan.tables.removeAll { t in added.contains { $0.source == t.source } }
            }
            guard !plan.tables.isEmpty else { throw FerryError.invalidOption("nothing to replicate: no tables matched in \(source.endpoint.redacted)") }
            for t in plan.tables {
                // The stream carries each column as the table has it: what a copy reads through a
                // cast the source computes, or leaves out, cannot be followed yet.
                let castAtSource = t.columns.filter { !$0.readHints.subtracting([.nativeForm, .storedForm]).isEmpty }
                if !t.skipped.isEmpty || t.columns.count != t.sourceSchema.columns.count || !castAtSource.isEmpty {
                    throw FerryError.invalidOption(
                        "\(t.source) has columns a copy skips or casts at the source (\((t.skipped.map(\.column) + castAtSource.map(\.name)).joined(separator: ", "))); replicating those is not supported yet: --exclude the table")
                }
                guard t.key != nil else { throw FerryError.noKey(table: t.source) }
            }
            return plan
        }
        /// Each table as the copy reads it (a column in its stored form between two SQLite files).
        func sources(_ plan: CopyPlan) -> [TableSchema] {
            plan.tables.map { t in
                var s = t.sourceSchema
                s.columns = t.columns
                return s
            }
        }
        var plan = try makePlan()
        func record(_ phase: String, _ position: String, applied: Int64) throws {
            try states.write(
                .init(name: name, phase: phase, position: position, appliedRows: applied, updatedAt: ISOTime.string(Date()), source: source.endpoint.redacted))
        }

        /// Columns the source has and the target's table lacks (added at the source since the
        /// initial copy, or while following): added at the target (`--on-schema-change add`).
        func addColumns(_ plan: CopyPlan) throws {
            for t in plan.tables {
                let into = try target.describe(t.target)
                for (i, c) in t.targetSchema.columns.enumerated() where into.column(named: c.name) == nil {
                    guard options.addColumns else {
                        throw FerryError.notReady(
                            "the column \(c.name) was added to \(t.source) at the source, and --on-schema-change fail stops here: add it to \(t.target) yourself and run again, or run without it (an added column is then added)")
                    }
                    let sourceColumn = i < t.columns.count ? t.columns[i] : c
                    // The target's type for it, as a table of that column alone would get it.
                    var alone = t.sourceSchema
                    alone.columns = [sourceColumn.addable]
                    alone.primaryKey = []
                    alone.uniqueKeys = []
                    alone.indexes = []
                    alone.foreignKeys = []
                    alone.checks = []
                    guard let planned = try target.planTable(alone, named: t.target).schema.columns.first else {
                        throw FerryError.notReady("\(target.endpoint.redacted) has no type for the column \(c.name) that \(t.source) gained: add it to \(t.target) yourself and run again")
                    }
                    try target.addColumn(planned, default: sourceColumn.defaultValue, to: t.target)
                    var note = "\(t.source): the source added the column \(c.name); added it to \(t.target) as \(planned.nativeType)"
                    if sourceColumn.defaultValue == nil, let expr = sourceColumn.defaultExpression {
                        note += " (the source's default \(expr) is not carried: rows the target held before hold NULL in it; --resync brings their values)"
                    }
                    progress.note(note)
                    outcome.addedColumns.append("\(t.target).\(c.name)")
                    options.observe?(.columnAdded("\(t.target).\(c.name)"))
                }
            }
        }

        var feed: any ChangeFeed
        var applied = recorded?.appliedRows ?? 0
        if let recorded, resuming {
            progress.note("\(name): resuming from \(recorded.position) (recorded \(recorded.updatedAt))")
            options.observe?(.following(position: recorded.position, copiedRows: nil))
            try addColumns(plan)
            feed = try capture.follow(name: name, tables: sources(plan), from: ChangePosition(recorded.position))
            outcome.position = recorded.position
        } else {
            // New, or an initial copy that did not finish: started again from a new position.
            outcome.droppedFirst = try capture.drop(name: name)
            let dropped = outcome.droppedFirst.isEmpty ? "" : "dropped \(outcome.droppedFirst.joined(separator: " and ")) and "
            if options.resync {
                progress.note("\(name): resynchronizing: \(dropped)mirroring the target to a new snapshot of the source, then following from there")
            } else if recorded?.phase == "copying" || !dropped.isEmpty {
                progress.note("\(name): an initial copy did not finish: \(dropped)starting it again")
            }
            let start = try capture.start(name: name, tables: sources(plan))
            var started = false
            defer { if !started { start.close() } }
            let (position, shared) = try start.beginSnapshot(on: source)
            // Where other connections cannot share the snapshot, the copy reads with this one.
            copyOptions.sourceSnapshot = shared ?? ""
            if shared == nil { copyOptions.jobs = 1 }
            try record("copying", position.text, applied: 0)
            let summary = engine.run(plan, source: source, target: target, options: copyOptions, progress: progress, cancellation: cancellation)
            try? source.rollback()
            let failures = summary.tables.filter { $0.status != .ok }
            if let f = failures.first {
                if cancellation.isCancelled {
                    // Stopped (SIGINT, SIGTERM) during the initial copy: the copy rolled back,
                    // the capture is dropped by the next run, which starts the copy again. A stop,
                    // as between transactions, not a failure.
                    outcome.stoppedInCopy = true
                    outcome.seconds = Date().timeIntervalSince(began)
                    return outcome
                }
                throw FerryError.copyFailed(
                    table: TableName(parsing: f.source), endpoint: target.endpoint.redacted,
                    reason: "the initial copy failed (\(f.error ?? "\(f.status)")); the next run starts it again")
            }
            outcome.copied = true
            outcome.copiedRows = summary.totalRows
            try record("following", position.text, applied: 0)
            applied = 0
            started = true
            feed = try start.follow()
            outcome.position = position.text
            progress.note("\(name): \(options.resync ? "mirrored: \(summary.totalRows) rows written" : "copied \(summary.totalRows) rows"); following from \(position)")
            options.observe?(.following(position: position.text, copiedRows: summary.totalRows))
        }
        // The target's foreign keys hold at each commit; a MariaDB source's cascades are not
        // in its binlog, so the target's own keys repeat them.
        do {
            try target.prepareToApplyChanges(repeatingCascades: !capture.streamsCascadedChanges)
        } catch {
            feed.close()
            throw error
        }
        let goal: ChangePosition?
        do {
            goal = options.untilCaughtUp ? try capture.currentPosition(name: name) : nil
        } catch {
            feed.close()
            throw error
        }
        var lastRecorded = outcome.position
        // On a terminal, a status line of the rows applied while following.
        let followingSince = Date()
        if progress.style == .terminal { progress.started("following", estimate: nil) }
        defer {
            if progress.style == .terminal {
                progress.finished("following", rows: outcome.rowsApplied, seconds: Date().timeIntervalSince(followingSince), error: nil)
            }
        }
        /// What was counted when the last target transaction committed.
        var committed = (outcome: outcome, applied: applied)
        /// Applies `feed` until caught up, cancelled, or a table changes (`ColumnsAdded`).
        func follow(_ feed: any ChangeFeed) throws {

            // Per source table: its plan, the target table as created, and its key.
            var plans: [TableName: (plan: TablePlan, into: TableSchema, key: [Column], keyConversions: [ColumnConversion])] = [:]
            for t in plan.tables {
                let into = try target.describe(t.target)
                guard let keyNames = t.key?.columns else { throw FerryError.noKey(table: t.source) }
                // As the upserts lay them out: the planned target columns (a stored form kept).
                let key = try keyNames.map { k in
                    guard let c = t.targetSchema.column(named: k) ?? into.column(named: k) else { throw FerryError.columnNotFound(table: t.target, column: k) }
                    return c
                }
                let keyAt = keyNames.compactMap { k in t.columns.firstIndex { $0.name == k } }
                plans[t.source] = (t, into, key, Self.conversions(t, of: keyAt))
            }
            func planned(_ name: TableName) throws -> (plan: TablePlan, into: TableSchema, key: [Column], keyConversions: [ColumnConversion]) {
                guard let p = plans[name] else { throw FerryError.notReady("the source's stream changed \(name), which this replica does not follow") }
                return p
            }

            var open = false, inSource = false
            var pendingRows = 0, pendingWrites = 0
            var lastCommit: ChangePosition?
            /// The group under way: its source transactions, rows by table, and when the last
            /// of them committed at the source.
            var group = Applied(transactions: 0, rows: 0, rowsByTable: [:], position: "", lagSeconds: nil)
            var lastCommitAt: Date?
            /// Upserts or deletes of one table gathered across consecutive source transactions
            /// of the group, written as one: many small transactions cost a write each otherwise.
            var gathered: (deletes: Bool, table: TableName, batch: RowBatch)?
            func writeGathered() throws {
                guard let g = gathered else { return }
                gathered = nil
                let p = try planned(g.table)
                if g.deletes {
                    do {
                        let converted = try CopyEngine.convert(g.batch, p.keyConversions, columns: p.key)
                        _ = try target.deleteRows(from: p.into, key: p.key, keys: converted)
                    } catch { throw refusal(error, g.table, p.key, p.key.map(\.name), g.batch, target) }
                } else {
                    // A key written twice keeps its last row (the order of the source's writes).
                    let batch = Self.lastRowPerKey(
                        g.batch, keyAt: p.key.compactMap { k in p.plan.columns.firstIndex { $0.name == k.name } }, types: p.plan.columns.map(\.logicalType))
                    do {
                        let rows = try CopyEngine.convert(batch, p.plan.conversions, columns: p.plan.columns)
                        _ = try target.upsertRows(into: p.into, columns: p.plan.targetSchema.columns, key: p.key.map(\.name), rows: rows)
                    } catch { throw refusal(error, g.table, p.plan.columns, p.key.map(\.name), batch, target) }
                }
                pendingWrites += 1
            }
            /// Adds rows to what is gathered, written first when it is another table or kind.
            func gather(deletes: Bool, _ t: TableName, _ batch: RowBatch) throws {
                if var g = gathered, g.deletes == deletes, g.table == t, g.batch.count + batch.count <= 8192 {
                    gathered = nil
                    g.batch.append(contentsOf: batch)
                    gathered = g
                } else {
                    try writeGathered()
                    gathered = (deletes, t, batch)
                }
                count(t, batch.count)
            }
            func commitGroup() throws {
                guard open else { return }
                try writeGathered()
                if let p = lastCommit {
                    try record("following", p.text, applied: applied)
                    outcome.position = p.text
                    lastRecorded = p.text
                }
                try target.commit()
                committed = (outcome, applied)
                open = false
                pendingRows = 0
                pendingWrites = 0
                if let p = lastCommit { try feed.confirm(p) }
                if group.transactions > 0 || group.rows > 0 {
                    group.position = lastRecorded
                    group.lagSeconds = lastCommitAt.map { max(0, Date().timeIntervalSince($0)) }
                    if group.rows > 0, progress.style == .terminal { progress.advanced("following", by: Int(group.rows)) }
                    options.observe?(.applied(group))
                    group = Applied(transactions: 0, rows: 0, rowsByTable: [:], position: "", lagSeconds: nil)
                }
            }
            /// A batch laid out otherwise than the table's plan (a feed's bug, a plugin's) stops
            /// replication with one line rather than being written wrong.
            func checkShape(_ t: TableName, _ batch: RowBatch, _ expected: Int, _ what: String) throws {
                guard batch.columns.count == expected else {
                    throw FerryError.notReady(
                        "the source's stream sent changes of \(t) with \(batch.columns.count) \(what) where this replica has \(expected); replication stopped before them (run again; --resync if it repeats)")
                }
            }
            func count(_ t: TableName, _ n: Int) {
                group.rows += Int64(n)
                group.rowsByTable[t.description, default: 0] += Int64(n)
                pendingRows += n
                applied += Int64(n)
                outcome.rowsApplied += Int64(n)
                outcome.rowsByTable[t.description, default: 0] += Int64(n)
            }
            do {
                while true {
                    if cancellation.isCancelled && !inSource { break }
                    // Inside a source transaction, its rest is awaited: a target transaction ends
                    // only between source transactions.
                    guard let event = try feed.next(timeout: inSource ? 1 : open ? 0 : 0.5) else {
                        if inSource { continue }
                        // Idle: what is applied is committed; then, caught up?
                        try commitGroup()
                        if let goal, try feed.reached(goal) {
                            outcome.caughtUp = true
                            break
                        }
                        continue
                    }
                    switch event {
                    case .begin:
                        if !open {
                            try target.begin()
                            open = true
                        }
                        inSource = true
                    case .upserts(let t, let batch):
                        try checkShape(t, batch, try planned(t).plan.columns.count, "columns")
                        try gather(deletes: false, t, batch)
                    case .partialUpserts(let t, let names, let batch):
                        try writeGathered()
                        let p = try planned(t)
                        do {
                            let at = try names.map { n in
                                guard let i = p.plan.columns.firstIndex(where: { $0.name == n }) else { throw FerryError.columnNotFound(table: t, column: n) }
                                return i
                            }
                            let rows = try CopyEngine.convert(batch, Self.conversions(p.plan, of: at), columns: at.map { p.plan.columns[$0] })
                            _ = try target.upsertRows(into: p.into, columns: at.map { p.plan.targetSchema.columns[$0] }, key: p.key.map(\.name), rows: rows)
                        } catch { throw refusal(error, t, names.compactMap { p.plan.sourceSchema.column(named: $0) }, p.key.map(\.name), batch, target) }
                        count(t, batch.count)
                        pendingWrites += 1
                    case .updates(let t, let names, let batch):
                        try writeGathered()
                        let p = try planned(t)
                        do {
                            try applyUpdates(t, names, batch, p.plan, p.into, p.key, target)
                        } catch { throw refusal(error, t, names.compactMap { p.plan.sourceSchema.column(named: $0) }, p.key.map(\.name), batch, target) }
                        count(t, batch.count)
                        pendingWrites += 1
                    case .deletes(let t, let keys):
                        try checkShape(t, keys, try planned(t).key.count, "key columns")
                        try gather(deletes: true, t, keys)
                    case .truncate(let tables):
                        try writeGathered()
                        for t in tables {
                            let p = try planned(t)
                            try deleteAll(p.into, key: p.key, target)
                        }
                    case .commit(let position, let at):
                        inSource = false
                        lastCommit = position
                        lastCommitAt = at
                        group.transactions += 1
                        outcome.transactions += 1
                        if pendingRows >= options.groupRows || pendingWrites >= options.groupWrites { try commitGroup() }
                    }
                }
                try commitGroup()
            } catch {
                if open { try? target.rollback() }
                throw error
            }
            if outcome.caughtUp {
                // The cut-over: the target's next insert gets a value past every replicated one.
                for t in plan.tables { try target.resetSerial(t.target, schema: plans[t.source]?.into ?? t.targetSchema) }
                options.observe?(.caughtUp(position: outcome.position))
            }
        }

        while true {
            do {
                defer { feed.close() }
                try follow(feed)
                break
            } catch let added as ColumnsAdded {
                let addedColumns = outcome.addedColumns
                outcome = committed.outcome
                outcome.addedColumns = addedColumns
                applied = committed.applied
                // Nothing of the group in progress was committed: added at the target, then the
                // stream is read again from the last recorded position with the new columns.
                progress.note("\(name): \(added.table) changed at the source; adding what it gained and reading again from \(lastRecorded)")
                plan = try makePlan()
                try addColumns(plan)
                feed = try capture.follow(name: name, tables: sources(plan), from: ChangePosition(lastRecorded))
            }
        }
        outcome.seconds = Date().timeIntervalSince(began)
        return outcome
    }

    /// `batch` with only the last row of each key (at `keyAt`), in their order: upserts
    /// gathered from several source transactions, where a later row of a key replaces an
    /// earlier one (one statement may not write a key twice on PostgreSQL).
    static func lastRowPerKey(_ batch: RowBatch, keyAt: [Int], types: [LogicalType]) -> RowBatch {
        guard batch.count > 1, !keyAt.isEmpty else { return batch }
        var last: [[Value]: Int] = [:]
        for r in 0..<batch.count {
            last[keyAt.map { Value(column: batch.columns[$0], row: r, type: types[$0]) }] = r
        }
        guard last.count < batch.count else { return batch }
        return batch.selecting(last.values.sorted())
    }

    /// `plan`'s conversions of the read columns at `indexes`, renumbered for a batch of those
    /// columns alone (a key, the columns an update sent).
    static func conversions(_ plan: TablePlan, of indexes: [Int]) -> [ColumnConversion] {
        indexes.enumerated().compactMap { j, i in
            guard var c = plan.conversions.first(where: { $0.index == i }) else { return nil }
            c.index = j
            return c
        }
    }

    /// A change the target refused, as one line naming the table, the row's key and the reason
    /// (nothing after it is applied; the next run resumes before it).
    private func refusal(_ error: any Error, _ t: TableName, _ columns: [Column], _ key: [String], _ batch: RowBatch, _ target: any Connection) -> any Error {
        guard let e = error as? BatchRowError else { return error }
        let b = e.batch ?? batch
        let parts = key.compactMap { n in columns.firstIndex { $0.name == n }.map { (column: columns[$0], values: b.columns[$0]) } }
        let row = e.row >= 0 && e.row < b.count && parts.count == key.count ? " " + Column.keyText(parts, row: e.row) : ""
        return FerryError.copyFailed(
            table: t, endpoint: target.endpoint.redacted,
            reason: "the target refused the change of the row\(row) made at the source (\(e.error)); replication stopped before it, and the next run starts there")
    }

    /// Updates that sent only some columns (the others unchanged at the source): the sent
    /// columns converted as a copy converts them, and set in the target's rows by key.
    private func applyUpdates(
        _ t: TableName, _ names: [String], _ batch: RowBatch, _ plan: TablePlan, _ into: TableSchema, _ key: [Column], _ target: any Connection
    ) throws {
        let sentAt = try names.map { n in
            guard let i = plan.columns.firstIndex(where: { $0.name == n }) else { throw FerryError.columnNotFound(table: t, column: n) }
            return i
        }
        let sent = try CopyEngine.convert(batch, Self.conversions(plan, of: sentAt), columns: sentAt.map { plan.columns[$0] })
        try target.updateColumns(of: into, columns: sentAt.map { plan.targetSchema.columns[$0] }, key: key.map(\.name), rows: sent)
    }

    /// Every row of `table` deleted by key (a TRUNCATE at the source), in the caller's transaction.
    private func deleteAll(_ table: TableSchema, key: [Column], _ target: any Connection) throws {
        try target.deleteRows(from: table, key: key, in: nil)
    }
}
