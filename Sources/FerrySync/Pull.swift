import FerryCore
import FerrySQLite
import Foundation

extension Sync {
    /// Brings the origin's inserts, updates and deletes into the snapshot without rewriting
    /// unchanged rows. What changed is found by range digests — each side digests its rows
    /// next to its data (the origin in its SQL, or the service on its side), only buckets that
    /// differ are read — comparing the origin with the snapshot's **base view** (every row as
    /// the origin last had it: unchanged rows, and the bases of rows changed locally). So a
    /// row deleted locally and still pending is never brought back, and a row changed on both
    /// sides is a conflict for `policy`. All tables change in one local transaction, or none.
    public func pull(_ file: SyncFile, origin endpoint: Endpoint, policy: ConflictPolicy) throws -> PullReport {
        let started = Date()
        let origin = try registry.connect(endpoint, role: .source)
        defer { origin.close() }
        try origin.capabilities.require(.keyedReads, for: "pull (it compares key ranges)", endpoint: endpoint.redacted)
        var report = PullReport(origin: Self.recordedOrigin(endpoint), applied: false, tables: [], conflicts: [], seconds: 0)
        if try file.meta("push_inflight") != nil {
            _ = try settleInflight(file, origin: origin)
        }
        // Every table from one snapshot of the origin.
        do { try origin.beginSnapshot() } catch { try? origin.rollback() }
        defer { try? origin.rollback() }

        // Schema first: columns added at the origin are added here; any other drift stops the pull.
        var current: [String: TableSchema] = [:]
        var added: [String: [Column]] = [:]
        for t in file.tables {
            let now: TableSchema
            do { now = try origin.describe(t.origin.name) } catch FerryError.tableNotFound {
                throw SyncError.schemaDrift(table: t.origin.name, reason: "the table no longer exists at the origin")
            }
            let drift = SchemaDrift(recorded: t.origin, now: now, key: t.key)
            if let problem = drift.problems.first { throw SyncError.schemaDrift(table: t.origin.name, reason: problem) }
            current[t.local] = now
            if !drift.added.isEmpty { added[t.local] = drift.added }
        }
        if !added.isEmpty { try file.addColumns(added) }

        // Compared, decided and written inside one local write transaction: an app editing the
        // file meanwhile waits, so no local edit lands between the comparison and the write.
        struct Open: Error {}
        do {
            try file.quietly {
                var plans: [PullPlan] = []
                for t in file.tables {
                    guard let now = current[t.local] else { continue }
                    var plan = try Self.diff(file, t, origin: origin, now: now)
                    plan.stats.columnsAdded = (added[t.local] ?? []).map(\.name)
                    Self.resolve(&plan, policy: policy, conflicts: &report.conflicts)
                    plans.append(plan)
                }
                report.tables = plans.map(\.stats)
                if report.unresolved > 0 { throw Open() }
                for p in plans { try file.apply(p) }
                try file.setMeta("last_pull", Self.timestamp(started))
            }
        } catch is Open {
            report.seconds = Date().timeIntervalSince(started)
            return report
        }
        report.applied = true
        report.seconds = Date().timeIntervalSince(started)
        return report
    }

    /// The origin's changes to one table since the snapshot last saw it.
    static func diff(_ file: SyncFile, _ t: SyncedTable, origin: any Connection, now: TableSchema) throws -> PullPlan {
        let cols = SyncFile.readColumns(t)
        let list = cols.map { SyncFile.quote($0.name) }.joined(separator: ", ")
        let tq = SyncFile.quote(t.local)
        let bq = SyncFile.quote(SyncFile.base(t.local))
        let join = t.key.map { "b.\(SyncFile.quote($0)) = t.\(SyncFile.quote($0))" }.joined(separator: " AND ")
        let view = try file.view(
            "pull",
            "SELECT \(cols.map { "t." + SyncFile.quote($0.name) }.joined(separator: ", ")) FROM main.\(tq) t WHERE NOT EXISTS (SELECT 1 FROM main.\(bq) b WHERE \(join)) "
                + "UNION ALL SELECT \(list) FROM main.\(bq) WHERE \(SyncFile.quote(SyncFile.existed)) = 1",
            table: t, columns: cols)
        let idx = t.key.compactMap { k in cols.firstIndex { $0.name == k } }
        let originKey = idx.map { t.origin.columns[$0] }
        let localKey = idx.map { cols[$0] }
        var plan = PullPlan(table: t, stats: PullReport.Table(name: t.local))
        let originSide = RangeDiff.Side(connection: origin, schema: now, key: originKey, columns: t.origin.columns, filter: t.filter)
        let localSide = RangeDiff.Side(connection: file.db, schema: view, key: localKey, columns: cols)
        let found = try RangeDiff.find(source: originSide, target: localSide, estimate: now.rowEstimate ?? 0)
        plan.stats.levels = found.levels
        if found.isEqual { return plan }
        var theirs: [[Value]: [Value]] = [:]
        var ours: [[Value]: [Value]] = [:]
        if origin.dialect.selectsByKeyList,
            let d = try RangeDiff.keyedDifference(source: originSide, target: localSide, found: found)
        {
            // Key by key inside the differing buckets (one integer key): only the rows whose
            // hashes differ are read, on both sides (at 0.1% changed ~1,000 rows, not ~7,800).
            let differ = d.differ.map { [Value.int($0)] }
            theirs = try RowValues.rows(origin, now, columns: t.origin.columns, keyIndexes: idx, keys: differ, filter: t.filter)
            ours = try RowValues.rows(file.db, view, columns: cols, keyIndexes: idx, keys: differ + d.missing.map { [Value.int($0)] })
        } else {
            let originRange = t.filter == nil && found.buckets == nil ? nil : KeyRange(key: [], filter: t.filter, buckets: found.filter(key: originKey))
            for row in try SyncFile.readAll(origin, now, columns: t.origin.columns, range: originRange) { theirs[idx.map { row[$0] }] = row }
            let localRange = found.buckets == nil ? nil : KeyRange(key: [], buckets: found.filter(key: localKey))
            for row in try SyncFile.readAll(file.db, view, columns: cols, range: localRange) { ours[idx.map { row[$0] }] = row }
        }
        plan.stats.rowsRead = Int64(theirs.count)
        let pending = Dictionary(try file.pending(t).map { ($0.key, $0) }, uniquingKeysWith: { a, _ in a })
        for key in Set(theirs.keys).union(ours.keys) {
            let o = theirs[key], v = ours[key]
            if Row.same(o, v) { continue }
            plan.changes.append(PullChange(key: key, origin: o, was: v, pending: pending[key]))
        }
        return plan
    }

    /// Decides each origin change: taken where the row is not changed locally; else a
    /// conflict for `policy` (or no conflict where both sides made the same change).
    static func resolve(_ plan: inout PullPlan, policy: ConflictPolicy, conflicts: inout [SyncConflict]) {
        let t = plan.table
        let cols = SyncFile.readColumns(t)
        for c in plan.changes {
            guard let p = c.pending else {
                plan.local.append((c.key, c.origin))
                plan.dropBase.append(c.key)
                if c.origin == nil { plan.stats.deleted += 1 } else if c.was == nil { plan.stats.inserted += 1 } else { plan.stats.updated += 1 }
                continue
            }
            if Row.same(p.local, c.origin) {
                // The same change on both sides: nothing pending any more.
                plan.dropBase.append(c.key)
                continue
            }
            var conflict = Shown.conflict(t, columns: cols, key: c.key, local: p.local, base: p.base, origin: c.origin)
            switch policy {
            case .fail:
                break
            case .local:
                plan.newBase.append((c.key, c.origin))
                conflict.resolution = "local row kept (pushed over the origin's next)"
            case .origin:
                plan.local.append((c.key, c.origin))
                plan.dropBase.append(c.key)
                conflict.resolution = "origin row taken, local change dropped"
                plan.stats.updated += 1
            case .merge:
                if let merged = merge(local: p.local, base: p.base, origin: c.origin) {
                    plan.local.append((c.key, merged))
                    plan.newBase.append((c.key, c.origin))
                    conflict.resolution = "merged column by column"
                    plan.stats.updated += 1
                }
            }
            conflicts.append(conflict)
        }
    }
}

/// One origin change found by a pull: the origin's row now and as the snapshot last saw it
/// (nil: no row), and the local change pending for the same key, if any.
struct PullChange {
    var key: [Value]
    var origin: [Value]?
    var was: [Value]?
    var pending: PendingChange?
}

/// What a pull writes into one table of the snapshot.
struct PullPlan {
    var table: SyncedTable
    var stats: PullReport.Table
    var changes: [PullChange] = []
    /// Local rows to write (nil image: delete).
    var local: [(key: [Value], image: [Value]?)] = []
    /// Keys whose base entry goes (the row is as the origin has it).
    var dropBase: [[Value]] = []
    /// Keys whose base becomes the origin's row (still pending, now against it).
    var newBase: [(key: [Value], image: [Value]?)] = []
}

extension SyncFile {
    /// Writes a pull's plan for one table (inside `quietly`).
    func apply(_ p: PullPlan) throws {
        let t = p.table
        let cols = Self.readColumns(t)
        let types = cols.map(\.logicalType)
        let idx = t.key.compactMap { k in cols.firstIndex { $0.name == k } }
        let keyCols = idx.map { cols[$0] }
        let upserts = p.local.compactMap(\.image)
        for chunk in stride(from: 0, to: upserts.count, by: 1_000) {
            let batch = try RowBatch(rows: Array(upserts[chunk..<min(chunk + 1_000, upserts.count)]), types: types)
            _ = try db.upsertRows(into: t.localSchema, columns: cols, key: t.key, rows: batch)
        }
        let deletes = p.local.filter { $0.image == nil }.map(\.key)
        if !deletes.isEmpty {
            _ = try db.deleteRows(from: t.localSchema, key: keyCols, keys: try RowBatch(rows: deletes, types: keyCols.map(\.logicalType)))
        }
        let (baseSchema, baseCols) = bookkeepingSchema(t, pushed: false)
        if !p.dropBase.isEmpty {
            _ = try db.deleteRows(from: baseSchema, key: keyCols, keys: try RowBatch(rows: p.dropBase, types: keyCols.map(\.logicalType)))
        }
        if !p.newBase.isEmpty {
            let rows = p.newBase.map { [.int($0.image == nil ? 0 : 1)] + ($0.image ?? Self.keyOnly(t, key: $0.key)) }
            _ = try db.upsertRows(into: baseSchema, columns: baseCols, key: t.key, rows: try RowBatch(rows: rows, types: baseCols.map(\.logicalType)))
        }
        try prune(t)
    }

    /// Adds columns the origin added (nullable, or with a default there) to the snapshot's
    /// tables, their base tables and capture triggers, and to the recorded schemas.
    func addColumns(_ added: [String: [Column]]) throws {
        try quietly {
            for (name, columns) in added {
                guard var t = tables.first(where: { $0.local == name }) else { continue }
                for c in columns {
                    var plain = c.addable
                    let declared = try db.declaredType(for: plain)
                    for table in [t.local, Self.base(t.local), Self.pushed(t.local)] {
                        try db.run("ALTER TABLE \(q(table)) ADD COLUMN \(q(c.name)) \(declared)")
                    }
                    t.origin.columns.append(c)
                    plain.nativeType = declared
                    t.localSchema.columns.append(plain)
                }
                replace(t)
                try installCapture(t)
            }
            try saveTables()
        }
    }
}
