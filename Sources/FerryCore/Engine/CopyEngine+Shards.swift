import Foundation

/// Running a `ShardPlan`: `prepare` creates the target tables once, each unit loads its pieces
/// (each piece in one target transaction, recorded in `_ferry_units` of the target in that
/// transaction), and `finish` — once every piece is recorded — builds the indexes and foreign
/// keys and moves the serial counters.
extension CopyEngine {
    /// The records of a plan's finished steps in the target: one row per piece loaded, per
    /// table prepared, and one when the plan is finished.
    enum UnitRecords {
        static let table = TableName("_ferry_units")
        static let columns: [Column] = [
            Column(name: "name", nativeType: "", logicalType: .text(maxLength: 400, fixed: false), isNullable: false),
            Column(name: "rows_loaded", nativeType: "", logicalType: .int64, isNullable: false),
            Column(name: "done_at", nativeType: "", logicalType: .text(maxLength: 40, fixed: false), isNullable: false),
        ]

        static func schema(_ c: any Connection) throws -> TableSchema {
            try StateTable.schema(c, table, columns: columns, key: ["name"])
        }

        static func done(_ c: any Connection, _ schema: TableSchema, _ name: String) throws -> Int64? {
            try StateTable.row(c, schema, columns: columns, key: .text(name)).map { $0[1].intValue }
        }

        static func record(_ c: any Connection, _ schema: TableSchema, _ name: String, rows: Int64) throws {
            try StateTable.write(c, schema, columns: columns, key: ["name"],
                                 values: [.text(name), .int(rows), .text(ISO8601DateFormatter().string(from: Date()))], insert: false)
        }

        static func piece(_ plan: ShardPlan, unit: Int, _ p: ShardPlan.Piece) -> String { "\(plan.id)/unit \(unit)/\(p.table)/\(p.part)" }
        static func prepared(_ plan: ShardPlan, _ table: TableName) -> String { "\(plan.id)/prepared/\(table)" }
        static func finished(_ plan: ShardPlan) -> String { "\(plan.id)/finished" }
    }

    /// The plan's tables as this unit finds them; a table of the shard plan the source no
    /// longer has, or whose target is missing, is an error naming it.
    func table(_ piece: ShardPlan.Piece, in plan: CopyPlan) throws -> TablePlan {
        guard let t = plan.tables.first(where: { $0.source.description == piece.table }) else {
            throw FerryError.invalidOption("the plan's table \(piece.table) is not in \(plan.source) any more: make the plan again")
        }
        return t
    }

    /// Creates every target table of the plan that is missing (keys, no secondary index and —
    /// where the engine adds them afterwards — no foreign key), each in a transaction of its
    /// own, and records it. Run once before any unit. A table this plan prepared before is
    /// left as it is; with `--mode create` another existing table is an error.
    public func prepare(_ shard: ShardPlan, plan: CopyPlan, target: any Connection, progress: ProgressReporter) throws -> [String] {
        let records = try UnitRecords.schema(target)
        var created: [String] = []
        for t in plan.tables {
            let name = UnitRecords.prepared(shard, t.target)
            if try UnitRecords.done(target, records, name) != nil { continue }
            if try target.tableExists(t.target) {
                if shard.mode == .create { throw FerryError.targetTableExists(table: t.target, endpoint: target.endpoint.redacted) }
                continue
            }
            var schema = t.targetSchema
            schema.indexes = []
            let objects = try target.planObjects(t.targetSchema, on: t.target, indexesOn: t.target, replacing: nil, avoiding: [])
            if !objects.foreignKeyStatements.isEmpty { schema.foreignKeys = [] }
            let planned = try target.planTable(schema, named: t.target)
            try target.begin()
            do {
                try target.createTable(planned)
                try UnitRecords.record(target, records, name, rows: 0)
                try target.commit()
            } catch {
                try? target.rollback()
                if !target.dialect.supportsTransactionalDDL { try? target.dropTable(t.target) }
                throw error
            }
            created.append(t.target.description)
            progress.note("created \(t.target)")
        }
        return created
    }

    /// Runs unit `index` of `shard` alone: each piece in one target transaction, recorded with
    /// it. A piece no run of this plan loaded before goes in by the target's bulk path (its
    /// range is empty in a prepared table); one loaded before is written again by upsert, so a
    /// unit run twice leaves the same target. With `--mode upsert` every piece upserts.
    public func runUnit(
        _ shard: ShardPlan, index: Int, plan: CopyPlan, source: any Connection, target: any Connection, options: CopyOptions,
        progress: ProgressReporter, cancellation: Cancellation? = nil
    ) throws -> CopySummary {
        let started = Date()
        guard shard.units.indices.contains(index) else {
            throw FerryError.invalidOption("the plan has units 0 to \(shard.units.count - 1); there is no unit \(index)")
        }
        if let id = shard.snapshot {
            do {
                try source.beginSnapshot(importing: id)
            } catch {
                try? source.rollback()
                throw FerryError.notReady(
                    "the plan's source snapshot \(id) is gone (the `ferry plan --hold-snapshot` process that held it has stopped, or the service let it expire): make the plan again (\(error))")
            }
        } else {
            try source.beginSnapshot()
        }
        defer { try? source.rollback() }
        let records = try UnitRecords.schema(target)
        var tables: [CopySummary.Table] = []
        for piece in shard.units[index].pieces {
            if cancellation?.isCancelled == true { throw FerryError.cancelled }
            let t = try table(piece, in: plan)
            let label = piece.name
            let pieceStarted = Date()
            progress.started(label, estimate: piece.rows)
            do {
                guard let into = t.existingTarget else {
                    throw FerryError.notReady("\(t.target) is not in \(target.endpoint.redacted): run `ferry copy --plan FILE --prepare` once before the units")
                }
                let name = UnitRecords.piece(shard, unit: index, piece)
                let again = try UnitRecords.done(target, records, name) != nil
                let upsert = shard.mode == .upsert || again
                if upsert && piece.key.isEmpty {
                    throw FerryError.notReady(
                        "\(t.source) has no key and was loaded by an earlier run of unit \(index): a table without a key cannot be loaded twice (empty \(t.target) and make the plan again)")
                }
                var bounds: (after: [Value]?, upTo: [Value]?)?
                if piece.after != nil || piece.upTo != nil {
                    bounds = (try piece.after.map(Self.key), try piece.upTo.map(Self.key))
                }
                try target.begin()
                let merge = upsert ? MergeWriter(target: target, table: into, columns: t.targetSchema.columns, key: piece.key) : nil
                let (rows, _) = try pump(t, source: source, target: target, into: into, options: options, progress: progress,
                                         cancellation: cancellation, writer: merge, bounds: bounds)
                if cancellation?.isCancelled == true { throw FerryError.cancelled }
                try UnitRecords.record(target, records, name, rows: rows)
                try target.commit()
                let seconds = Date().timeIntervalSince(pieceStarted)
                progress.finished(label, rows: rows, seconds: seconds, error: nil)
                var r = CopySummary.Table(
                    source: label, target: t.target.description, rows: rows, seconds: seconds, rowsPerSecond: seconds > 0 ? Double(rows) / seconds : 0,
                    skippedColumns: t.skipped, status: .ok, error: nil)
                r.counts = merge?.counts
                if let applied = target.committedCounts, upsert { r.counts = (r.counts ?? MergeCounts()) + applied }
                tables.append(r)
            } catch {
                try? target.rollback()
                let message = Self.describe(error, table: t.source)
                progress.finished(label, rows: 0, seconds: Date().timeIntervalSince(pieceStarted), error: message)
                var r = failed(t, error: message, rows: 0, seconds: Date().timeIntervalSince(pieceStarted))
                r.source = label
                if case .cancelled? = error as? FerryError { r.status = .cancelled }
                tables.append(r)
            }
        }
        var summary = CopySummary(source: plan.source, target: plan.target, mode: shard.mode, tables: tables,
                                  seconds: Date().timeIntervalSince(started), warnings: plan.warnings)
        summary.jobs = 1
        return summary
    }

    static func key(_ items: [[String]]) throws -> [Value] {
        guard let k = KeyText.values(items) else {
            throw FerryError.invalidOption("the plan holds a key Ferry cannot read back (\(items.map { $0.joined(separator: ":") }.joined(separator: ", ").prefix(80))): make the plan again")
        }
        return k
    }

    /// The units of `shard` whose pieces the target has no record of, by unit.
    public func missingUnits(_ shard: ShardPlan, target: any Connection) throws -> [Int] {
        let records = try UnitRecords.schema(target)
        var missing: [Int] = []
        for unit in shard.units {
            for piece in unit.pieces where try UnitRecords.done(target, records, UnitRecords.piece(shard, unit: unit.index, piece)) == nil {
                missing.append(unit.index)
                break
            }
        }
        return missing
    }

    /// Once every unit is in: on each table `prepare` created, the secondary indexes and the
    /// serial counters (a transaction per table), then the foreign keys between them; refused,
    /// naming the units, while any is missing. Returns false when the plan was finished before.
    public func finish(_ shard: ShardPlan, plan: CopyPlan, target: any Connection, progress: ProgressReporter) throws -> (done: Bool, summary: CopySummary) {
        let started = Date()
        let missing = try missingUnits(shard, target: target)
        guard missing.isEmpty else {
            let n = shard.units.count
            throw FerryError.notReady(
                "\(missing.count) of \(n) units have not finished (unit\(missing.count == 1 ? "" : "s") \(missing.map(String.init).joined(separator: ", "))): run "
                    + "`ferry copy --plan FILE --shard I/\(n)` for \(missing.count == 1 ? "it" : "each"), then --finish again")
        }
        let records = try UnitRecords.schema(target)
        if try UnitRecords.done(target, records, UnitRecords.finished(shard)) != nil {
            return (false, CopySummary(source: plan.source, target: plan.target, mode: shard.mode, tables: [], seconds: 0, warnings: []))
        }
        var finishing = plan
        var results: [CopySummary.Table?] = []
        var names = Set<String>()
        for (i, t) in plan.tables.enumerated() {
            let tableStarted = Date()
            guard try UnitRecords.done(target, records, UnitRecords.prepared(shard, t.target)) != nil else {
                // There before the plan: left as it was.
                finishing.tables[i].objects = nil
                results.append(nil)
                continue
            }
            do {
                let objects = try target.planObjects(t.targetSchema, on: t.target, indexesOn: t.target, replacing: nil, avoiding: names)
                names.formUnion(objects.indexes.map(\.name))
                finishing.tables[i].objects = objects
                try target.begin()
                let declined = try target.createIndexes(objects)
                if t.targetSchema.columns.contains(where: \.isSerial) { try target.resetSerial(t.target, schema: t.targetSchema) }
                try target.commit()
                for o in declined { progress.note("warning: \(o)") }
                let rows = try target.countRows(t.target)
                var r = CopySummary.Table(
                    source: t.source.description, target: t.target.description, rows: rows, seconds: Date().timeIntervalSince(tableStarted),
                    rowsPerSecond: 0, skippedColumns: t.skipped, status: .ok, error: nil)
                r.indexes = objects.indexes.count - declined.count
                r.skippedObjects = t.skippedObjects + declined
                // Declared with the table where the engine declares them so.
                if objects.foreignKeyStatements.isEmpty { r.foreignKeys = objects.foreignKeys.count }
                results.append(r)
            } catch {
                try? target.rollback()
                results.append(failed(t, error: Self.describe(error, table: t.source), rows: 0, seconds: Date().timeIntervalSince(tableStarted)))
            }
        }
        addForeignKeys(finishing, results: &results, target: target, progress: progress)
        let tables = results.compactMap { $0 }
        if tables.allSatisfy({ $0.status == .ok }) {
            try target.begin()
            try UnitRecords.record(target, records, UnitRecords.finished(shard), rows: tables.reduce(0) { $0 + $1.rows })
            try target.commit()
        }
        return (true, CopySummary(source: plan.source, target: plan.target, mode: shard.mode, tables: tables, seconds: Date().timeIntervalSince(started), warnings: []))
    }
}
