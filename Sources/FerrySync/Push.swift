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
    /// Rows written to the origin (in `table.origin.columns` order), parents first, each with
    /// the origin's row as this push read it (nil: no row there; the key must still be free).
    var writes: [(row: [Value], expected: [Value]?)] = []
    /// Rows deleted at the origin: the key, the base (for ordering), and the origin's row as read.
    var deletes: [(key: [Value], base: [Value]?, expected: [Value])] = []
    /// The new base of each key once the origin has committed (nil: no row there), and
    /// whether the local row becomes that image too (the origin's row won, or a merge).
    var pushed: [(key: [Value], image: [Value]?, setLocal: Bool)] = []

    var keyIndexes: [Int] { table.key.compactMap { k in table.origin.columns.firstIndex { $0.name == k } } }
}

extension Sync {
    /// Where the origin records the pushes it committed (one row each, written in the push's
    /// own transaction): a push interrupted after the origin's commit is recognised by its id
    /// and finished, never applied twice.
    public static let pushesTable = PushLedger.table

    /// How many times a push reads the origin again when rows it was writing changed there
    /// between its read and its write.
    static let pushAttempts = 3

    /// Applies the snapshot's pending changes to the origin all together (one origin
    /// transaction, or one guarded push request to the service), each update and delete
    /// guarded by the origin row it was decided against: a change applies where the origin
    /// row still equals its base (otherwise it is a conflict, handled by `policy`). Offline
    /// rows of serial tables get keys above the origin's, and are re-keyed locally with every
    /// row referencing them. Local changes become unchanged only after the origin committed.
    public func push(_ file: SyncFile, origin endpoint: Endpoint, policy: ConflictPolicy) throws -> PushReport {
        let started = Date()
        let origin = try registry.connect(endpoint, role: .target)
        defer { origin.close() }
        try origin.capabilities.require([.keyedReads, .keyedWrites, .atomicPush], for: "push (all tables' changes in one transaction)", endpoint: endpoint.redacted)
        var report = PushReport(
            origin: Self.recordedOrigin(endpoint), pushId: nil, applied: false, recovered: nil, tables: [], rekeyed: [], conflicts: [], seconds: 0)
        report.recovered = try settleInflight(file, origin: origin)

        var changedMeanwhile: [ChangedRow] = []
        for _ in 1...Self.pushAttempts {
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
            report.conflicts = []
            report.rekeyed = []
            let outcome: GuardedPushOutcome
            var rekeys: [String: [Int64: Int64]] = [:]
            let pushID = UUID().uuidString.lowercased()
            var sent = false, settledHere = false
            do {
                // The origin's rows of the pending keys, and what to do with each change.
                for i in work.indices {
                    work[i].originRows = try Self.originRows(origin, work[i])
                    Self.decide(&work[i], policy: policy, conflicts: &report.conflicts)
                }
                if report.unresolved > 0 {
                    report.seconds = Date().timeIntervalSince(started)
                    return report
                }
                // Offline rows of serial tables: keys above the origin's, and every reference to them.
                rekeys = try Self.assignKeys(&work, origin: origin, file: file)
                for i in work.indices { Self.orderRows(&work[i]) }
                // What is being pushed is recorded locally before the origin commits it.
                try file.recordInflight(pushID, work: work, rekeys: rekeys)
                report.pushId = pushID
                let push = Self.guardedPush(pushID, work: work, rekeys: rekeys)
                sent = true
                outcome = try origin.applyGuardedPush(push)
            } catch let error as SyncError {
                throw error
            } catch {
                guard sent else { throw SyncError.pushFailed(origin: endpoint.redacted, reason: "\(error)") }
                // Sent, and the answer is an error: ask the origin whether it committed (a lost
                // connection after the commit). If it cannot say, the next push or pull will.
                let answer = error
                let settled: String?
                do { settled = try settleInflight(file, origin: origin) } catch {
                    throw SyncError.pushUnsettled(origin: endpoint.redacted, reason: "\(answer)")
                }
                guard settled != nil else { throw SyncError.pushFailed(origin: endpoint.redacted, reason: "\(error)") }
                settledHere = true
                outcome = .alreadyApplied
            }
            let counts: [TableName: MergeCounts]
            switch outcome {
            case .applied(let applied):
                counts = applied
            case .alreadyApplied:
                // Committed, though its answer was lost (a new id each attempt: the origin
                // cannot have had it before); settled above, counts unknown.
                counts = [:]
                report.recovered = pushID
            case .changed(let rows):
                // Rows changed at the origin between this push's read and its write: nothing
                // was applied; read them again and decide again.
                try file.abandonInflight()
                report.pushId = nil
                changedMeanwhile = rows
                continue
            }
            if !settledHere { try file.finalizePush(at: started) }
            for (table, map) in rekeys {
                for (old, new) in map { report.rekeyed.append(.init(table: table, old: old, new: new)) }
            }
            report.rekeyed.sort { ($0.table, $0.old) < ($1.table, $1.old) }
            report.applied = true
            report.tables = work.map { w in
                let c = counts[w.originSchema.name] ?? MergeCounts()
                return PushReport.Table(name: w.table.local, inserted: c.inserted, updated: c.updated, deleted: c.deleted)
            }
            report.seconds = Date().timeIntervalSince(started)
            return report
        }
        let shown = changedMeanwhile.prefix(3).map { "\($0.table) \($0.key)" }.joined(separator: "; ")
        throw SyncError.pushFailed(
            origin: endpoint.redacted,
            reason: "rows being pushed kept changing at the origin while the push ran (\(Self.pushAttempts) attempts; \(shown)); nothing was applied, the local changes are kept; run push again")
    }

    /// The guarded push of `work`: each written row guarded by the origin's row as read (an
    /// offline row by its key being free), parents first.
    static func guardedPush(_ id: String, work: [TableWork], rekeys: [String: [Int64: Int64]]) -> GuardedPush {
        GuardedPush(id: id, tables: work.map { w in
            var t = GuardedTableChanges(
                table: w.originSchema.name, columns: w.table.origin.columns, key: w.table.key,
                resetSerial: w.table.serial != nil && rekeys[w.table.local] != nil)
            for write in w.writes {
                if let expected = write.expected { t.updates.append(.init(expected: expected, row: write.row)) } else { t.inserts.append(write.row) }
            }
            t.deletes = w.deletes.map(\.expected)
            return t
        })
    }

    /// A push recorded here as in flight: finished when the origin committed it (its id is in
    /// the origin's ledger), else forgotten (the origin applied none of it). Returns the id of
    /// a push finished here.
    func settleInflight(_ file: SyncFile, origin: any Connection) throws -> String? {
        guard let inflight = try file.meta("push_inflight") else { return nil }
        if try origin.pushCommitted(inflight) {
            try file.finalizePush(at: Date())
            return inflight
        }
        try file.abandonInflight()
        return nil
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

    /// The origin's rows for the keys of `work`'s changes (offline serial keys never exist there).
    static func originRows(_ origin: any Connection, _ work: TableWork) throws -> [[Value]: [Value]] {
        let t = work.table
        let wanted = work.changes.map(\.key).filter { !t.isLocalKey($0) }
        return try RowValues.rows(origin, work.originSchema, columns: t.origin.columns, keyIndexes: work.keyIndexes, keys: wanted, filter: t.filter)
    }

    /// Decides each change of `work`: written as it is when the origin row still equals its
    /// base, else a conflict that `policy` resolves (or not).
    static func decide(_ work: inout TableWork, policy: ConflictPolicy, conflicts: inout [SyncConflict]) {
        let t = work.table
        for c in work.changes {
            let o = work.originRows[c.key]
            func write(_ row: [Value]?) {
                if let row {
                    work.writes.append((row, o))
                } else if let o {
                    work.deletes.append((c.key, c.base, o))
                }
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
                    work.writes.append((merged, o))
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
            let local = work[i].writes.map(\.row).filter { t.isLocalKey([$0[k]]) }
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
            work[i].writes = work[i].writes.map { (mapped($0.row), $0.expected) }
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
        let ups = work.writes
        work.writes = parentsFirst(ups.map(\.row)).map { ups[$0] }
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
