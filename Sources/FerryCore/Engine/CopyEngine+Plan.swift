import Foundation

/// Planning: what each source table becomes on the target, decided before anything is written.
extension CopyEngine {
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

        if !options.incremental.isEmpty && options.mode != .upsert {
            throw FerryError.invalidOption("--incremental writes the rows it reads by upsert: add --mode upsert (it refuses --mode \(options.mode.rawValue))")
        }
        if options.resume && options.mode == .mirror {
            throw FerryError.invalidOption("--resume is for create, replace, append and upsert copies: a rerun of --mode mirror moves only what differs")
        }
        if options.resume && !options.incremental.isEmpty {
            throw FerryError.invalidOption("--resume and --incremental do not go together: an incremental run reads only the rows past its watermark, and a failed one is simply run again")
        }
        if !options.incremental.isEmpty && target.stagesKeyedWrites {
            // Its keyed writes apply table by table at commit: the watermark goes with them.
            try target.capabilities.require(.applyWatermark, for: "--incremental into it (the watermark moves with the rows)", endpoint: target.endpoint.redacted)
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
        // The same database on both sides: a table must not be copied onto itself (the read's
        // snapshot would hold a lock the write waits for, for ever).
        let sameDatabase = try source.databaseIdentity().map { id in try target.databaseIdentity() == id } ?? false
        for name in chosen {
            guard let schema = described[name] else { continue }
            if sameDatabase && (name.schema ?? source.defaultSchema) == target.defaultSchema {
                throw FerryError.invalidOption(
                    "\(name) would be copied onto itself: \(source.endpoint.redacted) and \(target.endpoint.redacted) are the same database; copy into another database or SQLite file")
            }
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
            // `--columns`: only these columns are carried (in the table's order).
            if let wanted = try Self.chosenColumns(options.columns, table: name, named: options.tables) {
                for c in wanted where schema.column(named: c) == nil { throw FerryError.columnNotFound(table: name, column: c) }
                let keep = resolved.read.indices.filter { wanted.contains(resolved.read[$0].name) }
                var remap: [Int: Int] = [:]
                for (new, old) in keep.enumerated() { remap[old] = new }
                resolved.read = keep.map { resolved.read[$0] }
                resolved.write = keep.map { resolved.write[$0] }
                resolved.conversions = resolved.conversions.compactMap { c in
                    guard let at = remap[c.index] else { return nil }
                    var moved = c
                    moved.index = at
                    return moved
                }
                resolved.decisions = resolved.decisions.filter { wanted.contains($0.column) }
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

            // A name the target would refuse, or keep cut short (PostgreSQL past 63 bytes), stops
            // the copy here, before any SQL: a table or column under another name is a silent change.
            for n in [targetName.name] + targetSchema.columns.map(\.name) {
                if let problem = target.dialect.identifierProblem(n) {
                    throw FerryError.invalidValue(
                        table: name, column: n == targetName.name ? nil : n, key: nil,
                        message: "\(problem): \(target.endpoint.redacted) cannot hold it under this name; rename it at the source, or leave it out (--exclude, --columns)")
                }
            }
            // The target is described once, here: writers are handed this (or the planned table).
            let exists = try target.tableExists(targetName)
            if exists && options.mode == .create {
                throw FerryError.targetTableExists(table: targetName, endpoint: target.endpoint.redacted)
            }
            let writesExisting = options.mode == .append || options.mode.isKeyed
            let existing = exists && writesExisting ? try target.describe(targetName, rowEstimate: false) : nil
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

            // A load is made visible whole: a replace swaps its staging table in; a create loads
            // one and renames it where the engine's DDL commits as it goes (MySQL, the service)
            // or the load commits chunk by chunk (--resume).
            let unit = "\(source.endpoint.redacted) \(name) \(targetName) \(options.mode.rawValue)"
            let staging = Self.stagingName(for: targetName, unit: unit, maxLength: target.dialect.maxIdentifierLength)
            // A resumable append or upsert loads a staging table too: renamed in where the target
            // lacks the table, else merged into it whole at the end. One that creates the table
            // where DDL commits (MySQL, the service) stages as a create does: a kill never leaves
            // a table under the target's name. (Not an incremental one: its first run, killed,
            // leaves the rows it upserted, and the next run reads them again.)
            let fills = options.mode == .append || options.mode == .upsert
            let stages = options.mode == .replace || (options.mode == .create && (options.resume || !target.dialect.supportsTransactionalDDL))
                || (fills && (options.resume || (existing == nil && !target.dialect.supportsTransactionalDDL && options.incremental.isEmpty)))
            let creates: PlannedTable? = switch options.mode {
            case .create, .replace: try target.planTable(targetSchema, named: stages ? staging : targetName)
            case .append, .upsert, .mirror: existing == nil ? try target.planTable(targetSchema, named: stages ? staging : targetName) : nil
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
                let indexesOn = stages && !afterSwap ? creates.schema.name : targetName
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
            plan.incremental = try Self.resolveIncremental(
                options.incremental, lookback: options.incrementalLookback, table: name, columns: carried, conversions: resolved.conversions)
            if !options.incremental.isEmpty && plan.incremental == nil {
                warnings.append("table \(name): no --incremental column named for it; every row is read")
            }
            plan.creates = creates
            plan.staging = stages ? staging : nil
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

    /// `--columns` for `table`: `TABLE=COL,COL` when TABLE names it, else a bare `COL,COL` when
    /// the table was named with `--tables` (the last one given wins); nil: every column.
    static func chosenColumns(_ values: [String], table: TableName, named: [TableName]) throws -> [String]? {
        var out: [String]?
        for value in values {
            var list = value
            if let eq = value.firstIndex(of: "=") {
                guard table.matches(TableName(parsing: String(value[..<eq]))) else { continue }
                list = String(value[value.index(after: eq)...])
            } else {
                guard named.contains(where: { table.matches($0) }) else {
                    if named.isEmpty {
                        throw FerryError.invalidOption("--columns '\(value)' applies to the tables named with --tables: name them, or write --columns TABLE=COL,COL")
                    }
                    continue
                }
            }
            let columns = list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            guard !columns.isEmpty else { throw FerryError.invalidOption("--columns \(value): no column named") }
            out = columns
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
        let available = try source.listTableNames().filter { t in
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
}
