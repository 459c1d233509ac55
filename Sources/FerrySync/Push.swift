import FerryCore
import FerrySQLite
import Foundation

/// One table's part of a push: its pending changes, the origin's rows for their keys, and
/// what is written.
struct TableWork {
    var table: SyncedTable
    var changes: [PendingChange]
    var originSchema: TableSchema
    var originRows: [[Value]: [Value]] = [:]
    /// Rows written to the origin (in `table.origin.columns` order), parents first.
    var upserts: [[Value]] = []
    /// Keys deleted at the origin.
    var deletes: [(key: [Value], base: [Value]?)] = []
    /// The new base of each key once the origin has committed (nil: no row there), and
    /// whether the local row becomes that image too (the origin's row won, or a merge).
    var pushed: [(key: [Value], image: [Value]?, setLocal: Bool)] = []
    var counts = PushReport.Table(name: "", inserted: 0, updated: 0, deleted: 0)

    var keyIndexes: [Int] { table.key.compactMap { k in table.origin.columns.firstIndex { $0.name == k } } }
}

extension Sync {
    /// Where the origin records the pushes it committed (one row each, written in the push's
    /// own transaction): a push interrupted after the origin's commit is recognised by its id
    /// and finished, never applied twice.
    public static let pushesTable = TableName("_ferry_sync_pushes")

    /// Applies the snapshot's pending changes to the origin in one origin transaction, each
    /// update and delete guarded by its base (it applies only where the origin row still
    /// equals the base; otherwise it is a conflict, handled by `policy`). Offline rows of
    /// serial tables get the origin's next keys, and are re-keyed locally with every row
    /// referencing them. Local changes become unchanged only after the origin committed.
    public func push(_ file: SyncFile, origin endpoint: Endpoint, policy: ConflictPolicy) throws -> PushReport {
        let started = Date()
        let origin = try registry.connect(endpoint, role: .target)
        defer { origin.close() }
        var report = PushReport(
            origin: Self.recordedOrigin(endpoint), pushId: nil, applied: false, recovered: nil, tables: [], rekeyed: [], conflicts: [], seconds: 0)
        guard origin.dialect.commitsTablesTogether else {
            throw SyncError.originCannotPush(
                origin: endpoint.redacted, reason: "it applies each table in a transaction of its own, and a push must commit all tables at once")
        }
        guard let pushes = try Self.pushesSchema(origin, create: true) else {
            throw SyncError.originCannotPush(origin: endpoint.redacted, reason: "its push record table \(Self.pushesTable) could not be created")
        }
        report.recovered = try settleInflight(file, origin: origin, pushes: pushes)

        var work: [TableWork] = []
        for t in file.tables {
            let changes = try file.pending(t)
            if changes.isEmpty { continue }
            let now = try Self.checkedSchema(origin, t, forPush: true)
            work.append(TableWork(table: t, changes: changes, originSchema: now))
        }
        if work.isEmpty {
            report.applied = true
            try file.quietly { try file.setMeta("last_push", Self.timestamp(started)) }
            report.seconds = Date().timeIntervalSince(started)
            return report
        }

        try origin.begin()
        var serialResets: [(TableName, TableSchema)] = []
        do {
            // Read the origin's rows of the pending keys, inside the push's transaction, and decide.
            for i in work.indices {
                work[i].originRows = try Self.originRows(origin, work[i])
                Self.decide(&work[i], policy: policy, conflicts: &report.conflicts)
            }
            if report.unresolved > 0 {
                try origin.rollback()
                report.seconds = Date().timeIntervalSince(started)
                return report
            }
            // Offline rows of serial tables: the origin's next keys, and every reference to them.
            let rekeys = try Self.assignKeys(&work, origin: origin, file: file)
            for (table, map) in rekeys {
                for (old, new) in map.sorted(by: { $0.key < $1.key }) { report.rekeyed.append(.init(table: table, old: old, new: new)) }
            }
            for i in work.indices { Self.orderRows(&work[i]) }

            // What is being pushed is recorded locally before the origin commits it.
            let pushID = UUID().uuidString.lowercased()
            try file.recordInflight(pushID, work: work, rekeys: rekeys)
            report.pushId = pushID

            // Rows: parents first; deletes: children first.
            for i in work.indices where !work[i].upserts.isEmpty {
                let t = work[i].table
                let types = t.origin.columns.map(\.logicalType)
                for chunk in stride(from: 0, to: work[i].upserts.count, by: 1_000) {
                    let rows = Array(work[i].upserts[chunk..<min(chunk + 1_000, work[i].upserts.count)])
                    let batch = try RowBatch(rows: rows, types: types)
                    let c = try origin.mergeRows(into: work[i].originSchema, columns: t.origin.columns, key: t.key, rows: batch)
                    work[i].counts.inserted += c.inserted
                    work[i].counts.updated += c.updated
                }
                if t.serial != nil, rekeys[t.local] != nil { serialResets.append((work[i].originSchema.name, work[i].originSchema)) }
            }
            for i in work.indices.reversed() where !work[i].deletes.isEmpty {
                let t = work[i].table
                let keyCols = work[i].keyIndexes.map { t.origin.columns[$0] }
                let batch = try RowBatch(rows: work[i].deletes.map(\.key), types: keyCols.map(\.logicalType))
                work[i].counts.deleted += Int64(try origin.deleteRows(from: work[i].originSchema, key: keyCols, keys: batch))
            }
            let record = try RowBatch(rows: [[.text(pushID), .text(Self.timestamp(Date()))]], types: pushes.columns.map(\.logicalType))
            let w = try origin.writer(into: pushes, columns: pushes.columns)
            do {
                try w.write(record)
                try w.finish()
            } catch {
                w.abort()
                throw error
            }
            if origin.dialect.supportsTransactionalDDL {
                for (name, schema) in serialResets { try origin.resetSerial(name, schema: schema) }
            }
            try origin.commit()
        } catch let error as SyncError {
            try? origin.rollback()
            throw error
        } catch {
            try? origin.rollback()
            throw SyncError.pushFailed(origin: endpoint.redacted, reason: "\(error)")
        }
        // Committed at the origin: a counter move that is DDL (MySQL) comes after the commit.
        if !origin.dialect.supportsTransactionalDDL {
            for (name, schema) in serialResets { try? origin.resetSerial(name, schema: schema) }
        }
        try file.finalizePush(at: started)
        report.applied = true
        report.tables = work.map { w in
            var c = w.counts
            c.name = w.table.local
            return c
        }
        report.seconds = Date().timeIntervalSince(started)
        return report
    }

    /// A push recorded here as in flight: finished when the origin committed it (its id is in
    /// the origin's `_ferry_sync_pushes`), else forgotten (the origin applied none of it).
    /// Returns the id of a push finished here.
    func settleInflight(_ file: SyncFile, origin: any Connection, pushes: TableSchema?) throws -> String? {
        guard let inflight = try file.meta("push_inflight") else { return nil }
        if let pushes, try Self.origin(origin, hasPush: inflight, pushes: pushes) {
            try file.finalizePush(at: Date())
            return inflight
        }
        try file.abandonInflight()
        return nil
    }

    /// The origin's push record table (created when `create` and missing; nil when missing).
    static func pushesSchema(_ origin: any Connection, create: Bool) throws -> TableSchema? {
        if try origin.tableExists(pushesTable) { return try origin.describe(pushesTable) }
        guard create else { return nil }
        let schema = TableSchema(
            name: pushesTable, engine: origin.dialect.engine,
            columns: [
                Column(name: "push_id", nativeType: "", logicalType: .text(maxLength: 64, fixed: false), isNullable: false),
                Column(name: "pushed_at", nativeType: "", logicalType: .text(maxLength: 40, fixed: false), isNullable: false),
            ],
            primaryKey: ["push_id"])
        do {
            try origin.createTable(schema, named: pushesTable)
        } catch {
            // Another push created it meanwhile.
            guard try origin.tableExists(pushesTable) else { throw error }
        }
        return try origin.describe(pushesTable)
    }

    static func origin(_ origin: any Connection, hasPush id: String, pushes: TableSchema) throws -> Bool {
        guard let col = pushes.column(named: "push_id") else { return false }
        let rows = try SyncFile.readAll(
            origin, pushes, columns: [col], range: KeyRange(key: ["push_id"], upTo: [.text(id)], limit: 1, descending: true))
        return rows.first?.first == .text(id)
    }

    /// The origin's table now, checked against the snapshot's record of it.
    static func checkedSchema(_ origin: any Connection, _ table: SyncedTable, forPush: Bool) throws -> TableSchema {
        let now: TableSchema
        do { now = try origin.describe(table.origin.name) } catch FerryError.tableNotFound {
            throw SyncError.schemaDrift(table: table.origin.name, reason: "the table no longer exists at the origin")
        }
        let drift = SchemaDrift(recorded: table.origin, now: now, key: table.key)
        if let problem = drift.problems.first { throw SyncError.schemaDrift(table: table.origin.name, reason: problem) }
        return now
    }

    /// The origin's rows for the keys of `work`'s changes (offline serial keys never exist
    /// there): read by key-hash bucket, as finely as the 32-bit hash goes, then matched by key.
    static func originRows(_ origin: any Connection, _ work: TableWork) throws -> [[Value]: [Value]] {
        let t = work.table
        let idx = work.keyIndexes
        let keyCols = idx.map { t.origin.columns[$0] }
        let keyTypes = keyCols.map(\.logicalType)
        let wanted = work.changes.map(\.key).filter { !t.isLocalKey($0) }
        guard !wanted.isEmpty else { return [:] }
        let modulus: Int64 = 1 << 31
        let residues = Set(try DigestComputer.keyHashes(wanted, types: keyTypes).map { $0 % modulus })
        let want = Set(wanted)
        var out: [[Value]: [Value]] = [:]
        let all = Array(residues).sorted()
        for chunk in stride(from: 0, to: all.count, by: RangeDiff.maxBuckets) {
            let part = Array(all[chunk..<min(chunk + RangeDiff.maxBuckets, all.count)])
            let range = KeyRange(key: [], filter: t.filter, buckets: BucketFilter(key: keyCols, modulus: modulus, residues: part))
            for row in try SyncFile.readAll(origin, work.originSchema, columns: t.origin.columns, range: range) {
                let k = idx.map { row[$0] }
                if want.contains(k) { out[k] = row }
            }
        }
        return out
    }

    /// Decides each change of `work`: written as it is when the origin row still equals its
    /// base, else a conflict that `policy` resolves (or not).
    static func decide(_ work: inout TableWork, policy: ConflictPolicy, conflicts: inout [SyncConflict]) {
        let t = work.table
        for c in work.changes {
            let o = work.originRows[c.key]
            func write(_ row: [Value]?) {
                if let row { work.upserts.append(row) } else { work.deletes.append((c.key, c.base)) }
            }
            if Row.same(o, c.base) || Row.same(o, c.local) {
                // Unchanged at the origin since the base (or changed there the same way).
                if !Row.same(o, c.local) { write(c.local) }
                work.pushed.append((c.key, c.local, false))
                continue
            }
            var conflict = Shown.conflict(t, columns: t.origin.columns, key: c.key, local: c.local, base: c.base, origin: o)
            switch policy {
            case .fail:
                break
            case .local:
                write(c.local)
                work.pushed.append((c.key, c.local, false))
                conflict.resolution = "local row written to the origin"
            case .origin:
                work.pushed.append((c.key, o, true))
                conflict.resolution = "origin row kept, local row replaced"
            case .merge:
                if let merged = merge(local: c.local, base: c.base, origin: o) {
                    work.upserts.append(merged)
                    work.pushed.append((c.key, merged, true))
                    conflict.resolution = "merged column by column"
                }
            }
            conflicts.append(conflict)
        }
    }

    /// Column by column: a column changed on one side takes that side's value; changed on both
    /// sides to different values, or a row missing on one side: nil (not mergeable).
    static func merge(local l: [Value]?, base b: [Value]?, origin o: [Value]?) -> [Value]? {
        guard let l, let b, let o else { return nil }
        var out = l
        for i in l.indices {
            if Row.same(l[i], b[i]) { out[i] = o[i] } else if Row.same(o[i], b[i]) || Row.same(o[i], l[i]) { out[i] = l[i] } else { return nil }
        }
        return out
    }

    /// Offline rows of serial tables (keys above the table's local base) take the origin's
    /// next keys — read inside the push's transaction — and every row of the push that
    /// references them by a foreign key is rewritten. Returns old → new per table.
    static func assignKeys(_ work: inout [TableWork], origin: any Connection, file: SyncFile) throws -> [String: [Int64: Int64]] {
        var rekeys: [String: [Int64: Int64]] = [:]
        for i in work.indices {
            let t = work[i].table
            guard let serial = t.serial, let col = t.origin.column(named: serial),
                  let k = t.origin.columns.firstIndex(where: { $0.name == serial }) else { continue }
            let local = work[i].upserts.filter { t.isLocalKey([$0[k]]) }
            guard !local.isEmpty else { continue }
            let top = try SyncFile.readAll(origin, work[i].originSchema, columns: [col], range: KeyRange(key: [serial], limit: 1, descending: true))
            // Above the origin's largest key, and above every origin key the snapshot still
            // holds (a row the origin deleted since the last pull keeps its key here).
            var next = try file.largestOriginKey(t) + 1
            if case .int(let m)? = top.first?.first { next = max(next, m + 1) }
            var map: [Int64: Int64] = [:]
            for row in local {
                if case .int(let old) = row[k] {
                    map[old] = next
                    next += 1
                }
            }
            if let max = col.logicalType.integerRange?.upperBound, next - 1 > max {
                throw SyncError.originCannotPush(origin: origin.endpoint.redacted, reason: "table \(t.local) has no keys left in its \(col.logicalType) range")
            }
            rekeys[t.local] = map
        }
        guard !rekeys.isEmpty else { return rekeys }
        for i in work.indices {
            let t = work[i].table
            // The table's own key, and each single-column foreign key to a re-keyed table.
            var columnsToMap: [(Int, [Int64: Int64])] = []
            if let serial = t.serial, let map = rekeys[t.local], let k = t.origin.columns.firstIndex(where: { $0.name == serial }) {
                columnsToMap.append((k, map))
            }
            for fk in t.origin.foreignKeys where fk.columns.count == 1 {
                guard let parent = work.first(where: { $0.table.origin.name.name == fk.referencedTable.name })?.table,
                      fk.referencedColumns == [parent.serial ?? ""], let map = rekeys[parent.local],
                      let c = t.origin.columns.firstIndex(where: { $0.name == fk.columns[0] }) else { continue }
                columnsToMap.append((c, map))
            }
            guard !columnsToMap.isEmpty else { continue }
            func mapped(_ row: [Value]) -> [Value] {
                var row = row
                for (c, map) in columnsToMap { if case .int(let v) = row[c], let n = map[v] { row[c] = .int(n) } }
                return row
            }
            let idx = work[i].keyIndexes
            work[i].upserts = work[i].upserts.map(mapped)
            work[i].pushed = work[i].pushed.map { p in
                let image = p.image.map(mapped)
                return (image.map { im in idx.map { im[$0] } } ?? p.key, image, p.setLocal)
            }
        }
        return rekeys
    }

    /// Within a table that references itself, rows are written after the rows they reference
    /// and deleted before them.
    static func orderRows(_ work: inout TableWork) {
        let t = work.table
        let idx = work.keyIndexes
        let selfRefs = t.origin.foreignKeys.filter { $0.referencedTable.name == t.origin.name.name && $0.referencedColumns == t.key }
        guard !selfRefs.isEmpty else { return }
        let refCols = selfRefs.map { fk in fk.columns.compactMap { c in t.origin.columns.firstIndex { $0.name == c } } }
        func parentsFirst(_ rows: [[Value]]) -> [Int] {
            var at: [[Value]: Int] = [:]
            for (i, r) in rows.enumerated() { at[idx.map { r[$0] }] = i }
            var done = Set<Int>()
            var order: [Int] = []
            func visit(_ i: Int, depth: Int) {
                guard !done.contains(i) else { return }
                done.insert(i)
                if depth < 10_000 {
                    for cols in refCols {
                        let ref = cols.map { rows[i][$0] }
                        if let p = at[ref], p != i { visit(p, depth: depth + 1) }
                    }
                }
                order.append(i)
            }
            for i in rows.indices { visit(i, depth: 0) }
            return order
        }
        let ups = work.upserts
        work.upserts = parentsFirst(ups).map { ups[$0] }
        let dels = work.deletes
        let withBase = dels.map { $0.base ?? [] }
        if withBase.allSatisfy({ !$0.isEmpty }) {
            work.deletes = parentsFirst(withBase).reversed().map { dels[$0] }
        }
    }
}

/// How the origin's table differs from the snapshot's record of it.
struct SchemaDrift {
    var added: [Column] = []
    var problems: [String] = []

    init(recorded: TableSchema, now: TableSchema, key: [String]) {
        for c in recorded.columns {
            guard let n = now.column(named: c.name) else {
                problems.append("column \(c.name) was dropped or renamed")
                continue
            }
            if n.logicalType != c.logicalType {
                problems.append("column \(c.name) changed type from \(c.logicalType) to \(n.logicalType)")
            }
        }
        // A key the origin declared must still be one there (a key named with --key is the user's).
        let declared = recorded.primaryKey == key || recorded.uniqueKeys.contains(key)
        if declared && !(now.primaryKey == key || now.uniqueKeys.contains(key)) {
            problems.append("its key (\(key.joined(separator: ", "))) is no longer a primary or unique key there")
        }
        for n in now.columns where recorded.column(named: n.name) == nil {
            if n.isNullable || n.defaultExpression != nil || n.defaultValue != nil || n.isSerial || n.generated {
                added.append(n)
            } else {
                problems.append("column \(n.name) was added NOT NULL without a default")
            }
        }
    }
}
