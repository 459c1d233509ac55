import Foundation

/// Copies tables from one database to another: plan → run → summary.
///
/// Each table is loaded inside one target transaction (create or stage, insert, move serial
/// counters, swap), so a failure leaves the target as it was. Within a table a reader thread
/// and the writer are joined by a queue bounded in batches and bytes (see `pump`); `jobs`
/// tables run at once when the target allows concurrent writers.
public struct CopyEngine: Sendable {
    public let registry: DriverRegistry

    /// Prefix of tables Ferry creates for its own use (staging tables, bookkeeping).
    public static let internalPrefix = "_ferry_"

    /// The table a replace loads before it is swapped in as `target`.
    public static func stagingName(for target: TableName) -> TableName {
        TableName(schema: target.schema, internalPrefix + "staging_" + target.name)
    }

    public init(registry: DriverRegistry) {
        self.registry = registry
    }

    // MARK: Planning

    /// Describes the source tables and decides, for each, what the target gets. Touches nothing.
    public func plan(source: any Connection, target: any Connection, options: CopyOptions) throws -> CopyPlan {
        var warnings: [String] = []
        let (chosen, available) = try Self.selectTables(in: source, tables: options.tables, exclude: options.exclude, schemas: options.schemas)
        for ex in options.exclude where !available.contains(where: { $0.matches(ex) }) {
            warnings.append("--exclude \(ex) matches no table in \(source.endpoint.redacted)")
        }
        for (t, _) in options.keys where !chosen.contains(where: { $0.matches(t) }) {
            warnings.append("--key \(t)=… names a table that is not being copied")
        }

        if options.mode.isKeyed {
            // Refused before anything is written: these modes walk both sides by key and write by key.
            let mode = "--mode \(options.mode.rawValue)"
            try source.capabilities.require(.keyedReads, for: mode, endpoint: source.endpoint.redacted)
            try target.capabilities.require([.keyedReads, .keyedWrites], for: mode, endpoint: target.endpoint.redacted)
            if options.mode == .mirror {
                for side in [source, target] where !side.capabilities.contains(.digests) {
                    warnings.append("\(side.endpoint.redacted) does not declare digests: Ferry reads its rows and computes the range digests itself")
                }
            }
        }
        var tables: [TablePlan] = []
        var usedRules = Set<Int>()
        // Names planned so far (indexes, foreign keys) and the tables the copy creates: engines
        // with schema-wide names (PostgreSQL's and SQLite's indexes, MySQL's foreign keys) need each once.
        var plannedIndexNames = Set(chosen.map(\.name))
        let filters = try Self.resolveFilters(options.filters, chosen: chosen, named: options.tables)
        var described: [TableName: TableSchema] = [:]
        for name in chosen { described[name] = try source.describe(name) }
        let keyWidths = options.foreignKeys && target.dialect.foreignKeysNeedEqualTypes
            ? Self.foreignKeyIntegerWidths(described, chosen: chosen) : [:]
        for name in chosen {
            guard let schema = described[name] else { continue }
            var resolved = try options.casts.resolve(schema, target: target.dialect)
            usedRules.formUnion(resolved.usedRules)
            // Both ends of a foreign key get one integer type where the target needs it (MySQL).
            for i in resolved.write.indices {
                guard let wide = keyWidths[ColumnRef(table: name, column: resolved.write[i].name)],
                      let have = resolved.write[i].logicalType.integerRange, let want = wide.integerRange,
                      resolved.write[i].logicalType != .boolean, want.upperBound > have.upperBound
                else { continue }
                resolved.write[i].logicalType = wide
                resolved.write[i].nativeType = ""
                resolved.write[i].declaredType = nil
                if let d = resolved.decisions.firstIndex(where: { $0.column == resolved.write[i].name }) {
                    resolved.decisions[d].targetType = wide.description
                    resolved.decisions[d].decidedBy += ", widened to match its foreign key"
                }
            }
            // Values read as NULL (zero dates) need a nullable target column, as pgloader does.
            for i in resolved.read.indices where resolved.read[i].readHints.contains(.zeroDatesAsNull) && !resolved.write[i].isNullable {
                resolved.write[i].isNullable = true
                if let d = resolved.decisions.firstIndex(where: { $0.column == resolved.read[i].name }) {
                    resolved.decisions[d].madeNullable = "zero dates are read as NULL"
                }
            }
            let carried = resolved.read
            if carried.isEmpty {
                warnings.append("table \(name): every column is skipped; the table is not copied")
                continue
            }

            var key = schema.preferredKey
            if let user = options.keys.first(where: { name.matches($0.key) })?.value {
                for c in user where schema.column(named: c) == nil {
                    throw FerryError.columnNotFound(table: name, column: c)
                }
                key = TableKey(columns: user, origin: .user)
                try checkUnique(user, of: schema, in: source)
            }

            let carriedNames = Set(carried.map(\.name))
            let targetName = name.unqualified
            var targetSchema = schema
            targetSchema.name = targetName
            targetSchema.columns = resolved.write
            targetSchema.primaryKey = schema.primaryKey.allSatisfy(carriedNames.contains) ? schema.primaryKey : []
            targetSchema.uniqueKeys = schema.uniqueKeys.filter { $0.allSatisfy(carriedNames.contains) }
            if schema.primaryKey != targetSchema.primaryKey {
                warnings.append("table \(name): the primary key uses a skipped column; the target gets none")
            }

            // The target is described once, here: writers are handed this (or the planned table).
            let exists = try target.tableExists(targetName)
            if exists && options.mode == .create {
                throw FerryError.targetTableExists(table: targetName, endpoint: target.endpoint.redacted)
            }
            let writesExisting = options.mode == .append || options.mode.isKeyed
            let existing = exists && writesExisting ? try target.describe(targetName) : nil
            if let existing, writesExisting {
                for c in targetSchema.columns where existing.column(named: c.name) == nil {
                    throw FerryError.columnNotFound(table: targetName, column: c.name)
                }
            }
            var skippedObjects = schema.withheld
            if target.dialect.engine != schema.engine {
                for c in resolved.write where c.updateExpression != nil {
                    skippedObjects.append(SkippedObject(
                        kind: "on update", name: c.name, table: name.description,
                        reason: "ON UPDATE \(c.updateExpression ?? "") is \(schema.engine.rawValue)'s; the target sets no value when a row is updated (a trigger would)"))
                }
            }
            let castColumns = Set(resolved.decisions.filter { $0.decidedBy.hasPrefix("cast rule") }.map(\.column))
            let carriedObjects = Self.carriedObjects(
                of: schema, columns: carriedNames, castColumns: castColumns, chosen: chosen, options: options)
            targetSchema.indexes = carriedObjects.indexes
            targetSchema.foreignKeys = carriedObjects.foreignKeys
            skippedObjects += carriedObjects.skipped
            // A CHECK that may name a column left out or cast to another type would not hold.
            let changed = Set(schema.columns.map(\.name)).subtracting(carriedNames).union(castColumns)
            targetSchema.checks = schema.checks.filter { check in
                guard let column = changed.first(where: { check.expression.localizedCaseInsensitiveContains($0) }) else { return true }
                skippedObjects.append(SkippedObject(
                    kind: "check", name: check.name ?? "(unnamed)", table: name.description,
                    reason: "it may use column \(column), which is not copied as it is"))
                return false
            }

            let creates: PlannedTable? = switch options.mode {
            case .create: try target.planTable(targetSchema, named: targetName)
            case .replace: try target.planTable(targetSchema, named: Self.stagingName(for: targetName))
            case .append, .upsert, .mirror: existing == nil ? try target.planTable(targetSchema, named: targetName) : nil
            }
            if options.mode.isKeyed {
                guard let key, key.columns.allSatisfy(carriedNames.contains) else { throw FerryError.noKey(table: name) }
                if let existing, let missing = key.columns.first(where: { existing.column(named: $0) == nil }) {
                    throw FerryError.columnNotFound(table: targetName, column: missing)
                }
            }
            var plan = TablePlan(
                sourceSchema: schema, targetSchema: targetSchema, columns: carried, skipped: resolved.skipped,
                decisions: resolved.decisions, conversions: resolved.conversions, key: key)
            if let creates {
                skippedObjects += creates.skipped
                // Indexes go on the loaded table, or after a replace's swap where index names
                // are schema-wide (the old table's indexes hold the names until then).
                let afterSwap = options.mode == .replace && !target.dialect.indexNamesArePerTable
                let indexesOn = options.mode == .replace && !afterSwap ? creates.schema.name : targetName
                let objects = try target.planObjects(
                    targetSchema, on: targetName, indexesOn: indexesOn, replacing: options.mode == .replace && exists ? targetName : nil,
                    avoiding: plannedIndexNames)
                plannedIndexNames.formUnion(objects.indexes.map(\.name))
                plannedIndexNames.formUnion(objects.foreignKeys.compactMap(\.name))
                skippedObjects += objects.skipped
                plan.objects = objects
                plan.indexesAfterSwap = afterSwap
            } else if exists && options.mode == .append && (!schema.indexes.isEmpty || !schema.foreignKeys.isEmpty) {
                warnings.append("table \(targetName): rows are appended to the existing table; its indexes and foreign keys are left as they are")
            }
            plan.skippedObjects = skippedObjects
            plan.filter = filters[name]
            plan.creates = creates
            plan.existingTarget = existing
            plan.targetExists = exists
            tables.append(plan)
        }
        warnings += options.casts.unused(usedRules)
        var plan = CopyPlan(
            source: source.endpoint.redacted, target: target.endpoint.redacted, mode: options.mode,
            tables: tables, warnings: warnings)
        plan.otherObjects = try source.listOtherObjects()
        return plan
    }

    /// `--where` values by table: `TABLE=CONDITION` when TABLE names a copied table, else the whole value is a condition for every table named with
    /// `--tables` (needed then). Two conditions for one table are joined with AND.
    static func resolveFilters(_ values: [String], chosen: [TableName], named: [TableName]) throws -> [TableName: String] {
        var out: [TableName: String] = [:]
        func add(_ t: TableName, _ sql: String) {
            let trimmed = sql.trimmingCharacters(in: .whitespaces)
            out[t] = out[t].map { "(\($0)) AND (\(trimmed))" } ?? trimmed
        }
        for value in values {
            if let eq = value.firstIndex(of: "="), let table = chosen.first(where: { $0.matches(TableName(parsing: String(value[..<eq]))) }) {
                let sql = String(value[value.index(after: eq)...]).trimmingCharacters(in: .whitespaces)
                guard !sql.isEmpty else { throw FerryError.invalidOption("--where \(value): the condition for \(table) is empty") }
                add(table, sql)
            } else {
                guard !named.isEmpty else {
                    throw FerryError.invalidOption(
                        "--where '\(value)' applies to the tables named with --tables: name them, or write --where TABLE='CONDITION'")
                }
                for t in chosen { add(t, value) }
            }
        }
        return out
    }

    struct ColumnRef: Hashable {
        var table: TableName
        var column: String
    }

    /// For the integer columns at either end of a foreign key between copied tables (followed
    /// through chains), the widest integer type among them.
    static func foreignKeyIntegerWidths(_ schemas: [TableName: TableSchema], chosen: [TableName]) -> [ColumnRef: LogicalType] {
        var parent: [ColumnRef: ColumnRef] = [:]
        func root(_ c: ColumnRef) -> ColumnRef {
            var c = c
            while let p = parent[c], p != c { c = p }
            return c
        }
        func type(_ c: ColumnRef) -> LogicalType? {
            guard let t = schemas[c.table]?.column(named: c.column)?.logicalType, t.integerRange != nil, t != .boolean else { return nil }
            return t
        }
        for (name, schema) in schemas {
            for fk in schema.foreignKeys {
                guard let ref = chosen.first(where: { $0 == fk.referencedTable || $0.matches(fk.referencedTable) }) else { continue }
                for (a, b) in zip(fk.columns, fk.referencedColumns) {
                    let x = ColumnRef(table: name, column: a), y = ColumnRef(table: ref, column: b)
                    guard type(x) != nil, type(y) != nil else { continue }
                    parent[x] = parent[x] ?? x
                    parent[y] = parent[y] ?? y
                    parent[root(x)] = root(y)
                }
            }
        }
        var widest: [ColumnRef: LogicalType] = [:]
        for c in parent.keys {
            guard let t = type(c), let range = t.integerRange else { continue }
            let r = root(c)
            if let w = widest[r], let wr = w.integerRange, wr.upperBound >= range.upperBound { continue }
            widest[r] = t
        }
        var out: [ColumnRef: LogicalType] = [:]
        for c in parent.keys { out[c] = widest[root(c)] }
        return out
    }

    /// The indexes and foreign keys of `schema` a copy carries: those on carried columns (and,
    /// for a foreign key, whose referenced table is copied too, renamed as the target names
    /// it), less what the options leave out; the rest with the reason each is left out.
    static func carriedObjects(
        of schema: TableSchema, columns carried: Set<String>, castColumns: Set<String> = [], chosen: [TableName], options: CopyOptions
    ) -> (indexes: [IndexInfo], foreignKeys: [ForeignKey], skipped: [SkippedObject]) {
        var skipped: [SkippedObject] = []
        let table = schema.name.description
        var indexes: [IndexInfo] = []
        if options.indexes {
            for index in schema.indexes {
                if let missing = index.columns.first(where: { !carried.contains($0.name) }) {
                    skipped.append(SkippedObject(kind: "index", name: index.name, table: table, reason: "column \(missing.name) is not copied"))
                } else if !index.isStructured, let cast = index.columns.first(where: { castColumns.contains($0.name) }) {
                    // The engine's own definition (an operator class, a method) fits the source's type only.
                    skipped.append(SkippedObject(kind: "index", name: index.name, table: table, reason: "column \(cast.name) is cast to another type"))
                } else {
                    indexes.append(index)
                }
            }
        }
        var foreignKeys: [ForeignKey] = []
        if options.foreignKeys {
            for var fk in schema.foreignKeys {
                let name = fk.name ?? fk.summary
                if let missing = fk.columns.first(where: { !carried.contains($0) }) {
                    skipped.append(SkippedObject(kind: "foreign key", name: name, table: table, reason: "column \(missing) is not copied"))
                } else if let referenced = chosen.first(where: { $0 == fk.referencedTable || $0.matches(fk.referencedTable) }) {
                    fk.referencedTable = referenced.unqualified
                    foreignKeys.append(fk)
                } else {
                    skipped.append(SkippedObject(
                        kind: "foreign key", name: name, table: table,
                        reason: "it references \(fk.referencedTable), which is not part of this copy"))
                }
            }
        }
        return (indexes, foreignKeys, skipped)
    }

    /// Fails when two rows share the values of `key` (a key the user named, which no constraint
    /// guarantees): one streamed pass in key order, comparing neighbours — before anything is written.
    func checkUnique(_ key: [String], of schema: TableSchema, in source: any Connection) throws {
        let columns = key.compactMap { schema.column(named: $0) }
        let types = columns.map(\.logicalType)
        let reader = try source.reader(table: schema, columns: columns, keyRange: KeyRange(key: key), batchSize: 10_000)
        defer { reader.close() }
        var previous: [Value]?
        while let batch = try reader.next() {
            for r in 0..<batch.count {
                let row = batch.row(r, types: types)
                if row == previous {
                    let shown = zip(key, row).map { "\($0)=\($1)" }.joined(separator: ", ")
                    throw FerryError.keyNotUnique(table: schema.name, key: key, value: "(" + shown + ")")
                }
                previous = row
            }
        }
    }

    /// The tables a copy or a verify works on: every listed table (in `schemas` when given), or
    /// those named (a named relation that is not listed, such as a view, is taken as named),
    /// less the excluded ones. A name that matches nothing is an error. Also returns every table
    /// listed, for warnings.
    public static func selectTables(
        in source: any Connection, tables: [TableName], exclude: [TableName], schemas: [String] = []
    ) throws -> (chosen: [TableName], listed: [TableName]) {
        let available = try source.listTables().map(\.name).filter { t in
            schemas.isEmpty || schemas.contains(t.schema ?? source.defaultSchema)
        }
        var chosen: [TableName] = []
        if tables.isEmpty {
            chosen = available
        } else {
            for wanted in tables {
                var hits = available.filter { $0.matches(wanted) }
                if hits.isEmpty, try source.tableExists(wanted) { hits = [wanted] }
                guard !hits.isEmpty else { throw FerryError.tableNotFound(table: wanted, endpoint: source.endpoint.redacted) }
                for h in hits where !chosen.contains(h) { chosen.append(h) }
            }
        }
        chosen.removeAll { t in exclude.contains { t.matches($0) } }
        return (chosen, available)
    }

    // MARK: Running

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
        do {
            try source.beginSnapshot()
            snapshot = try source.exportSnapshot()
        } catch {
            try? source.rollback()
            snapshot = nil
            progress.note("warning: the source could not start a read snapshot (\(error)); each table is read as of its own moment")
        }
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
        let first = Handoff((source, target))
        let swaps = Locked(())
        var workers: [Worker] = []
        for j in 0..<jobs {
            let engine = self
            workers.append(
                Worker(name: "ferry-job-\(j)") {
                    var connections: (any Connection, any Connection)?
                    var openError: String?
                    if j == 0 {
                        connections = first.value
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
                        let r = engine.copyTable(
                            table, source: s, target: t, options: options, mode: plan.mode, progress: progress, cancellation: cancellation,
                            swaps: swaps)
                        results.withLock { $0[i] = r }
                    }
                    if j != 0, let (s, t) = connections {
                        try? s.rollback()
                        s.close()
                        t.close()
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

    private func failed(_ table: TablePlan, error: String, rows: Int64, seconds: Double) -> CopySummary.Table {
        CopySummary.Table(
            source: table.source.description, target: table.target.description, rows: rows, seconds: seconds,
            rowsPerSecond: 0, skippedColumns: table.skipped, status: .failed, error: error)
    }

    /// Loads one table in one target transaction.
    func copyTable(
        _ table: TablePlan, source: any Connection, target: any Connection, options: CopyOptions, mode: WriteMode,
        progress: ProgressReporter, cancellation: Cancellation? = nil, swaps: Locked<Void> = Locked(())
    ) -> CopySummary.Table {
        let label = table.source.description
        let started = Date()
        var rows: Int64 = 0
        var created: TableName?
        progress.started(label, estimate: table.sourceSchema.rowEstimate)
        do {
            try target.begin()
            // The load runs the planned DDL as planned, and writes into the planned (or described) table.
            var into = table.writesInto
            switch mode {
            case .create:
                if try target.tableExists(table.target) {
                    throw FerryError.targetTableExists(table: table.target, endpoint: target.endpoint.redacted)
                }
                if let planned = table.creates { try target.createTable(planned) }
                created = table.target
            case .replace:
                if try target.tableExists(into.name) { try target.dropTable(into.name) }
                if let planned = table.creates { try target.createTable(planned) }
                created = into.name
            case .append, .upsert, .mirror:
                if let planned = table.creates {
                    if try target.tableExists(planned.schema.name) {
                        // Created by someone else since the plan: write into it as it is.
                        into = try target.describe(planned.schema.name)
                    } else {
                        try target.createTable(planned)
                        created = planned.schema.name
                    }
                }
            }
            let loadName = into.name

            var merge = mode.isKeyed ? MergeWriter(target: target, table: into, columns: table.targetSchema.columns, key: table.key?.columns ?? []) : nil
            var mirrored: (counts: MergeCounts, stats: CopySummary.MirrorStats)?
            if mode == .mirror && created == nil {
                let m = try mirrorTable(table, source: source, target: target, into: into, options: options, progress: progress, cancellation: cancellation)
                rows = m.rows
                mirrored = (m.counts, m.stats)
                merge = nil
            } else {
                rows = try pump(table, source: source, target: target, into: into, options: options, progress: progress,
                                cancellation: cancellation, writer: merge)
            }
            if cancellation?.isCancelled == true { throw FerryError.cancelled }

            if mode == .create || mode == .replace {
                let landed = try target.countRows(loadName)
                guard landed == rows else {
                    throw FerryError.copyFailed(
                        table: table.source, endpoint: target.endpoint.redacted,
                        reason: "\(rows) rows were read but the target table holds \(landed)")
                }
            }
            if table.targetSchema.columns.contains(where: \.isSerial) {
                try target.resetSerial(loadName, schema: table.targetSchema)
            }
            var declined: [SkippedObject] = []
            if let objects = table.objects, !table.indexesAfterSwap { declined += try target.createIndexes(objects) }
            if mode == .replace {
                // One swap at a time: a swap moves other tables' foreign keys, and two at once
                // would move each other's (or deadlock).
                try swaps.withLock { _ in
                    try target.swapTable(loadName, into: table.target)
                    if let objects = table.objects, table.indexesAfterSwap { declined += try target.createIndexes(objects) }
                    try target.commit()
                }
            } else {
                try target.commit()
            }
            let seconds = Date().timeIntervalSince(started)
            progress.finished(label, rows: rows, seconds: seconds, error: nil)
            var result = CopySummary.Table(
                source: label, target: table.target.description, rows: rows, seconds: seconds,
                rowsPerSecond: seconds > 0 ? Double(rows) / seconds : 0, skippedColumns: table.skipped,
                status: .ok, error: nil)
            result.counts = mirrored?.counts ?? merge?.counts
            // Staged keyed writes (the XML service) count when the commit applied them.
            if let applied = target.committedCounts, mode.isKeyed { result.counts = (result.counts ?? MergeCounts()) + applied }
            result.mirror = mirrored?.stats
            result.indexes = (table.objects?.indexes.count ?? 0) - declined.count
            result.skippedObjects = table.skippedObjects + declined
            for o in declined { progress.note("warning: \(o)") }
            // SQLite declares its foreign keys in CREATE TABLE: they exist with the table.
            if let objects = table.objects, objects.foreignKeyStatements.isEmpty { result.foreignKeys = table.creates?.schema.foreignKeys.count ?? 0 }
            return result
        } catch {
            try? target.rollback()
            if !target.dialect.supportsTransactionalDDL, let created {
                try? target.dropTable(created)
            }
            let seconds = Date().timeIntervalSince(started)
            let message = Self.describe(error, table: table.source)
            progress.finished(label, rows: rows, seconds: seconds, error: message)
            var result = failed(table, error: message, rows: rows, seconds: seconds)
            if case .cancelled? = error as? FerryError { result.status = .cancelled }
            return result
        }
    }

    /// The copy's pipeline: a reader thread reads batch N+1 (and converts it) while this thread
    /// writes batch N; the queue between them is bounded in batches and in bytes. Drivers stay
    /// sequential: each connection is used by one thread at a time. On any failure the reader
    /// is stopped and joined and the writer aborted (in-flight work finished or cancelled)
    /// before the caller touches the target connection again (to roll back).
    func pump(
        _ table: TablePlan, source: any Connection, target: any Connection, into: TableSchema,
        options: CopyOptions, progress: ProgressReporter, cancellation: Cancellation?, writer custom: (any BatchWriter)? = nil,
        buckets: BucketFilter? = nil
    ) throws -> Int64 {
        let range = table.filter == nil && buckets == nil ? nil : KeyRange(key: [], filter: table.filter, buckets: buckets)
        let reader = Handoff(try source.reader(
            table: table.sourceSchema, columns: table.columns, keyRange: range, batchSize: max(1, options.batchSize)))
        let writer: any BatchWriter
        do {
            writer = try custom ?? target.writer(into: into, columns: table.targetSchema.columns)
        } catch {
            reader.value.close()
            throw error
        }
        let queue = BoundedQueue<RowBatch>(capacity: options.queueDepth, maxCost: options.queueBytes) { $0.byteSize }
        let producer = Worker(name: "ferry-read-\(table.source.name)") {
            do {
                // Read only when there is room: a batch waiting to be queued is one more in memory.
                while queue.waitForRoom(), let batch = try reader.value.next() {
                    let converted = try Self.convert(batch, table.conversions, columns: table.columns)
                    if !queue.put(converted) { break }
                }
                queue.finish()
            } catch {
                queue.finish(error: error)
            }
        }
        var rows: Int64 = 0
        do {
            var last: RowBatch?
            do {
                while let batch = try queue.take() {
                    if cancellation?.isCancelled == true { throw FerryError.cancelled }
                    last = batch
                    try writer.write(batch)
                    rows += Int64(batch.count)
                    progress.advanced(table.source.description, by: batch.count)
                    // Written: nothing holds the batch any more, and the reader may fill its room.
                    last = nil
                    queue.release()
                }
                try writer.finish()
            } catch let e as BatchRowError {
                guard let batch = e.batch ?? last else { throw e.error.adding(table: table.source) }
                throw e.error.adding(table: table.source, key: keyDescription(table, batch: batch, row: e.row))
            }
        } catch {
            queue.cancel()
            producer.join()
            reader.value.close()
            writer.abort()
            throw error
        }
        producer.join()
        reader.value.close()
        return rows
    }

    /// The writer of keyed modes: each batch upserted by key in the table's transaction, counted.
    final class MergeWriter: BatchWriter {
        let target: any Connection
        let table: TableSchema
        let columns: [Column]
        let key: [String]
        private(set) var counts = MergeCounts()
        /// Positions of the key among `columns`, when the canonical text of every key written
        /// is kept in `seen` (a mirror's deletes).
        let collectKeysAt: [Int]?
        private(set) var seen = Set<[UInt8]>()
        init(target: any Connection, table: TableSchema, columns: [Column], key: [String], collectKeysAt: [Int]? = nil) {
            self.target = target
            self.table = table
            self.columns = columns
            self.key = key
            self.collectKeysAt = collectKeysAt
        }
        func write(_ batch: RowBatch) throws {
            counts = counts + (try target.mergeRows(into: table, columns: columns, key: key, rows: batch))
            if let at = collectKeysAt {
                let types = columns.map(\.logicalType)
                for row in 0..<batch.count { seen.insert(Self.keyText(batch, row: row, at: at, types: types)) }
            }
        }
        /// The canonical text of a row's key: equal for equal keys whatever engine read them.
        static func keyText(_ batch: RowBatch, row: Int, at: [Int], types: [LogicalType]) -> [UInt8] {
            var out: [UInt8] = []
            CanonicalText.appendFields(batch, row: row, at: at, types: types, into: &out)
            return out
        }
        func finish() throws {}
        func abort() {}
    }

    /// Applies a plan's cast conversions to a batch as read. A value that does not convert is
    /// reported with the batch as read, so the key can be named.
    static func convert(_ batch: RowBatch, _ conversions: [ColumnConversion], columns: [Column]) throws -> RowBatch {
        guard !conversions.isEmpty else { return batch }
        var out = batch
        for c in conversions {
            do {
                out.columns[c.index] = try ValueConversion.convert(batch.columns[c.index], from: c.from, to: c.to, transforms: c.transforms)
            } catch let e as BatchRowError {
                throw BatchRowError(row: e.row, error: e.error.adding(column: columns[c.index].name), batch: batch)
            }
        }
        return out
    }

    /// `(id=5)` for row `row` of a batch, using the plan's key (or every column when none).
    func keyDescription(_ table: TablePlan, batch: RowBatch, row: Int) -> String {
        let keyColumns = table.key?.columns ?? []
        var parts: [String] = []
        for name in keyColumns {
            guard let i = table.columns.firstIndex(where: { $0.name == name }) else { continue }
            parts.append("\(name)=\(table.columns[i].display(batch.columns[i], row: row))")
        }
        return parts.isEmpty ? "row \(row + 1) of its batch (the table has no key)" : "(" + parts.joined(separator: ", ") + ")"
    }

    static func describe(_ error: any Error, table: TableName) -> String {
        if let e = error as? FerryError {
            switch e {
            case .invalidValue: return e.adding(table: table).description
            default: return e.description
            }
        }
        return "\(error)"
    }
}
