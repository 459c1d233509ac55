import Foundation

/// One table's copy: its target transaction, and the pump from reader to writer (the hot path).
extension CopyEngine {
    /// Loads one table in one target transaction.
    func copyTable(
        _ table: TablePlan, source: any Connection, target: any Connection, options: CopyOptions, mode: WriteMode,
        progress: ProgressReporter, cancellation: Cancellation? = nil, swaps: Locked<Void> = Locked(())
    ) -> CopySummary.Table {
        let label = table.source.description
        let started = Date()
        var rows: Int64 = 0
        var rowsRead: Int64?
        var created: TableName?
        var staged: StagedLoad?
        var merging = false
        progress.started(label, estimate: table.sourceSchema.rowEstimate)
        do {
            if table.staging == nil, target.keepsLoadState, (try? target.tableExists(LoadLeases.table)) == true {
                // A write without a staging table of its own (upsert, mirror, an append) still
                // drops what killed loads of this table left (never making Ferry's tables for it).
                if let leases = try? LoadLeases.schema(target) {
                    sweepAbandoned(table, except: TableName(""), leases: leases, progressSchema: { try LoadProgress.schema(target) }, target: target, progress: progress)
                }
            }
            if let staging = table.staging {
                // Claimed (or resumed, or an expired one cleaned up) before the table's transaction.
                staged = try claimStaging(
                    table, staging: staging, source: source.endpoint.redacted, target: target, options: options, mode: mode, progress: progress)
                if let staged, let done = staged.merged {
                    // An earlier run merged its staging table; only its record was left.
                    try target.begin()
                    try finishStaging(staged, target: target)
                    try target.commit()
                    progress.note("note: \(table.target): the load of \(done.startedAt) was merged whole by its run (\(done.rows) rows); nothing is left to resume")
                    let seconds = Date().timeIntervalSince(started)
                    progress.finished(label, rows: done.rows, seconds: seconds, error: nil)
                    var result = CopySummary.Table(
                        source: label, target: table.target.description, rows: done.rows, seconds: seconds, rowsPerSecond: 0,
                        skippedColumns: table.skipped, status: .ok, error: nil)
                    result.rowsRead = 0
                    return result
                }
            }
            // An incremental copy's watermark, as the last successful run left it.
            var mark: (schema: TableSchema, name: String, old: (text: String, value: Value)?)?
            if let inc = table.incremental {
                let schema = try Watermarks.schema(target)
                let name = Watermarks.name(source: source.endpoint.redacted, table: table, column: inc.column)
                mark = (schema, name, try Watermarks.read(target, schema, name: name))
            }
            try target.begin()
            // The load runs the planned DDL as planned, and writes into the planned (or described)
            // table. A new table loaded by plain inserts gets its keys after its rows where the
            // engine builds them faster so (`PlannedTable.deferredKeys`).
            var into = table.writesInto
            var keysAfterLoad: PlannedTable?
            /// Creates the planned staging table, or takes up the one an earlier run's chunks are in.
            func stage(_ make: () throws -> TableSchema?) throws {
                if let staged, staged.resumable, try target.tableExists(staged.staging) {
                    // An earlier run's chunks are in it.
                    into = try target.describe(staged.staging, rowEstimate: false)
                    return
                }
                if let made = try make() { into = made }
                if let staged, staged.resumable {
                    // Committed before the first chunk, with the record chunks update.
                    if let record = staged.record, let p = staged.progress { try LoadProgress.write(target, p, record) }
                    try target.commit()
                    try target.begin()
                }
            }
            /// A new table, its keys after its rows where that is faster — but with them where
            /// refused rows are set aside: a duplicate key must be refused with its batch.
            func createPlanned(_ planned: PlannedTable) throws {
                if options.rejects == nil { try target.createTableDeferringKeys(planned) } else { try target.createTable(planned) }
            }
            // Rows the target refused (`--on-error reject`), set aside when the table commits:
            // found here with savepoints, or by the target on its side (a service), which hands
            // them back as it takes the rows and as its commit merges what was staged.
            let rejected = RejectedRows()
            let refusedThere = options.rejects != nil && !target.supportsSavepoints
            if let file = options.rejects, refusedThere { try target.setRefusedRowsAside(limit: file.limit) }
            var rejectedInto: (into: TableName, count: Int)?
            func commitTarget() throws {
                guard let file = options.rejects, refusedThere || !rejected.rows.isEmpty else { return try target.commit() }
                let before = target.refusedRows.count
                // Reasons name the table, not the staging table it was loaded into.
                let staging = into.name
                func named(_ reason: String) -> String {
                    staging == table.target ? reason : reason.replacingOccurrences(of: staging.name, with: table.target.name)
                }
                let here = rejected.rows.map { RejectFile.Row(batch: $0.batch, key: $0.key, reason: named($0.reason)) }
                rejectedInto = try file.keep(here, of: table.target, columns: table.targetSchema.columns, target: target.endpoint.redacted) {
                    try target.commit()
                    return refusedThere ? target.refusedRows.map { [self] r in
                        RejectFile.Row(batch: r.row, key: keyDescription(table, batch: r.row, row: 0), reason: named(r.reason))
                    } : []
                }
                // Rows refused by the commit's merge or apply did not arrive either.
                rows -= Int64(target.refusedRows.count - before)
            }
            // An append or upsert whose staging table is merged into the existing table at the end.
            var mergeInto: TableSchema?
            switch mode {
            case .create, .replace:
                if mode == .create, try target.tableExists(table.target) {
                    throw FerryError.targetTableExists(table: table.target, endpoint: target.endpoint.redacted)
                }
                if let planned = table.creates {
                    try stage { try createPlanned(planned); return nil }
                    keysAfterLoad = planned
                }
                created = staged == nil ? table.target : nil
            case .append, .upsert, .mirror:
                if let planned = table.creates, staged != nil {
                    // A resumable load of a table the target lacks: staged and renamed in, as a create's.
                    try stage { try createPlanned(planned); return nil }
                    keysAfterLoad = planned
                } else if let planned = table.creates {
                    if try target.tableExists(planned.schema.name) {
                        // Created by someone else since the plan: write into it as it is.
                        into = try target.describe(planned.schema.name, rowEstimate: false)
                    } else {
                        try target.createTable(planned)
                        created = planned.schema.name
                    }
                } else if let staged, let existing = table.existingTarget {
                    try stage { try target.createStaging(staged.staging, shapedLike: existing, columns: table.targetSchema.columns,
                                                           key: staged.resumable ? table.key?.columns : nil) }
                    mergeInto = existing
                }
            }
            let loadName = into.name
            // Into a target whose keyed writes are staged for its commit (the service), a
            // resumable load writes its chunks outside any transaction: each request commits on
            // the service's side, each chunk's record after its rows, and a resume removes the
            // rows past the last record (`trim`). No staging of its own is left behind by a kill.
            let direct = staged?.resumable == true && target.stagesKeyedWrites
            if direct { try target.commit() }
            staged?.direct = direct

            // (Rows into a staging table are plain inserts: its merge does the keyed work.)
            var merge = mode.isKeyed && staged == nil ? MergeWriter(target: target, table: into, columns: table.targetSchema.columns, key: table.key?.columns ?? []) : nil
            var mirrored: (counts: MergeCounts, stats: CopySummary.MirrorStats)?
            var stored: Int64?
            if mode == .mirror && created == nil {
                let m = try mirrorTable(table, source: source, target: target, into: into, options: options, progress: progress, cancellation: cancellation)
                rows = m.rows
                mirrored = (m.counts, m.stats)
                merge = nil
            } else {
                var chunks: ChunkCommits?
                if let staged, staged.resumable, let key = table.key?.columns, let at = Self.resumeKey(table) {
                    chunks = ChunkCommits(rows: max(1, options.chunkRows), key: key, keyIndexes: at, after: staged.resumeAfter) { [self] last, n in
                        try commitChunk(staged, lastKey: last, rows: n, target: target)
                    }
                }
                var since: ColumnBound?
                if let inc = table.incremental, let old = mark?.old {
                    since = ColumnBound(column: inc.column, value: Watermarks.lowered(old.value, by: inc.lookback))
                    merge?.tracking = (inc.index, inc.type)
                } else if let inc = table.incremental {
                    merge?.tracking = (inc.index, inc.type)
                }
                (rows, stored) = try pump(table, source: source, target: target, into: into, options: options, progress: progress,
                                          cancellation: cancellation, writer: merge, chunks: chunks, since: since, rejected: rejected)
                // Rows the target set aside as it took them are not in it.
                if refusedThere { rows -= Int64(target.refusedRows.count) }
                if table.incremental != nil { rowsRead = rows }
                if direct { try target.begin() }
                if let staged, staged.resumable {
                    rowsRead = rows
                    rows += staged.rowsBefore
                    stored = nil
                }
            }
            if cancellation?.isCancelled == true { throw FerryError.cancelled }
            if let planned = keysAfterLoad {
                // A resumed load whose earlier run added the keys already (MySQL's ALTER TABLE
                // commits: a kill after it and before the rename) leaves them as they are.
                var added = false
                if staged?.record != nil, planned.deferredKeys != nil {
                    added = try !target.describe(loadName, rowEstimate: false).primaryKey.isEmpty
                }
                if !added && options.rejects == nil { try target.addDeferredKeys(planned) }
            }

            if mode == .create || mode == .replace || keysAfterLoad != nil {
                // What the target said it stored, else a count of the new table.
                let landed = try stored ?? target.countRows(loadName)
                guard landed == rows else {
                    throw FerryError.copyFailed(
                        table: table.source, endpoint: target.endpoint.redacted,
                        reason: "\(rows) rows were read but the target table holds \(landed)")
                }
            }
            if table.targetSchema.columns.contains(where: \.isSerial) && mergeInto == nil {
                try target.resetSerial(loadName, schema: table.targetSchema)
            }
            var declined: [SkippedObject] = []
            if let objects = table.objects, !table.indexesAfterSwap { declined += try target.createIndexes(objects) }
            var watermark: Value? = mark?.old?.value
            if let mark, let largest = merge?.largest, largest != mark.old?.value {
                // Moved in the rows' transaction, only if no other run moved it meanwhile.
                try Watermarks.advance(target, mark.schema, name: mark.name, from: mark.old?.text, to: largest, rows: rows,
                                       rowsOf: into, key: table.key?.columns ?? [])
                watermark = largest
            }
            var moved: MergeCounts?
            if let staged, let mergeInto {
                // Merged whole, in one transaction with the end of its record and lease.
                try finishStaging(staged, target: target)
                merging = true
                moved = try target.moveRows(from: loadName, into: mergeInto, columns: table.targetSchema.columns,
                                            key: mode == .upsert ? table.key?.columns : nil)
                if table.targetSchema.columns.contains(where: \.isSerial) {
                    try target.resetSerial(mergeInto.name, schema: table.targetSchema)
                }
                try commitTarget()
                staged.keeper?.stop()
            } else if let staged {
                // Made visible whole. One swap at a time: a swap moves other tables' foreign keys,
                // and two at once would move each other's (or deadlock).
                try finishStaging(staged, target: target)
                try swaps.withLock { _ in
                    if mode != .replace, try target.tableExists(table.target) {
                        throw FerryError.targetTableExists(table: table.target, endpoint: target.endpoint.redacted)
                    }
                    try target.swapTable(loadName, into: table.target)
                    if let objects = table.objects, table.indexesAfterSwap { declined += try target.createIndexes(objects) }
                    try commitTarget()
                }
                staged.keeper?.stop()
            } else {
                try commitTarget()
            }
            let seconds = Date().timeIntervalSince(started)
            progress.finished(label, rows: rows, seconds: seconds, error: nil)
            var result = CopySummary.Table(
                source: label, target: table.target.description, rows: rows, seconds: seconds,
                rowsPerSecond: seconds > 0 ? Double(rows) / seconds : 0, skippedColumns: table.skipped,
                status: .ok, error: nil)
            result.rowsRead = rowsRead
            result.watermark = watermark.flatMap { table.incremental == nil ? nil : $0.description }
            result.counts = mirrored?.counts ?? merge?.counts ?? (mode.isKeyed ? moved : nil)
            // A keyed load into a new staging table, renamed in: every row was new.
            if mode.isKeyed, result.counts == nil, keysAfterLoad != nil { result.counts = MergeCounts(inserted: rows) }
            // Staged keyed writes (the XML service) count when the commit applied them.
            if let applied = target.committedCounts, mode.isKeyed { result.counts = (result.counts ?? MergeCounts()) + applied }
            result.mirror = mirrored?.stats
            if let rejectedInto {
                result.rejected = Int64(rejectedInto.count)
                result.rejectedInto = rejectedInto.into.name
            }
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
            if let staged { abandonStaging(staged, target: target) }
            let seconds = Date().timeIntervalSince(started)
            var message = Self.describe(error, table: table.source)
            if let staged, staged.resumable, merging {
                message += " (the loaded rows are kept in \(staged.staging.name): fix what \(table.target) refused and run the same copy with --resume to merge them, or run it without --resume to start over)"
            } else if let staged, staged.resumable, let done = staged.record?.rows, done > 0 {
                message += " (\(done) rows are kept in \(staged.staging.name): run the same copy with --resume to continue after them)"
            }
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
        buckets: BucketFilter? = nil, keys: (columns: [String], values: [[Value]])? = nil, chunks: ChunkCommits? = nil,
        bounds: (after: [Value]?, upTo: [Value]?)? = nil, since: ColumnBound? = nil, rejected: RejectedRows? = nil
    ) throws -> (rows: Int64, stored: Int64?) {
        var range = table.filter == nil && buckets == nil ? nil : KeyRange(key: [], filter: table.filter, buckets: buckets)
        if let bounds, let key = table.key?.columns {
            // One unit's key range of the table.
            range = KeyRange(key: key, after: bounds.after, upTo: bounds.upTo, filter: table.filter)
        }
        if let since {
            if range == nil { range = KeyRange(key: [], filter: table.filter) }
            range?.since = since
        }
        if let chunks {
            // In key order, after the last key an earlier run committed.
            range = KeyRange(key: chunks.key, after: chunks.after, filter: table.filter)
        }
        let batchSize = max(1, options.batchSize)
        let reader = Handoff(try keys.map { keys in
            // Only these keys, a bounded list per statement (index lookups).
            KeyListReader(keys.values, chunk: RowValues.keysPerRead, rows: batchSize) { chunk in
                var r = KeyRange(key: [], filter: table.filter)
                r.keys = chunk
                r.keyColumns = keys.columns
                return try source.reader(table: table.sourceSchema, columns: table.columns, keyRange: r, batchSize: batchSize)
            }
        } ?? source.reader(table: table.sourceSchema, columns: table.columns, keyRange: range, batchSize: batchSize))
        var writer: any BatchWriter
        var rejecting: RejectingWriter?
        do {
            if let rejected, let file = options.rejects, target.supportsSavepoints {
                // Each batch in a savepoint, refused rows set aside (`--on-error reject`).
                let columns = table.targetSchema.columns
                let w = RejectingWriter(target: target, table: table.source, limit: file.limit, describeRow: { [self] b, r in keyDescription(table, batch: b, row: r) }) {
                    try custom ?? target.writer(into: into, columns: columns)
                }
                rejecting = w
                rejected.writer = w
                writer = w
            } else {
                writer = try custom ?? target.writer(into: into, columns: table.targetSchema.columns)
            }
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
        var inChunk = 0
        var storedBefore: Int64? = 0
        do {
            var last: RowBatch?
            do {
                while let batch = try queue.take() {
                    if cancellation?.isCancelled == true { throw FerryError.cancelled }
                    last = batch
                    try writer.write(batch)
                    rows += Int64(batch.count)
                    progress.advanced(table.source.description, by: batch.count)
                    inChunk += batch.count
                    if let chunks, inChunk >= chunks.rows, batch.count > 0 {
                        // The chunk's rows and its record commit together; the next chunk gets a writer of its own.
                        try writer.finish()
                        storedBefore = writer.rowsStored.flatMap { n in storedBefore.map { $0 + n } }
                        let row = batch.row(batch.count - 1, types: table.columns.map(\.logicalType))
                        try chunks.commit(chunks.keyIndexes.map { row[$0] }, rows)
                        inChunk = 0
                        writer = try target.writer(into: into, columns: table.targetSchema.columns)
                    }
                    // Written: nothing holds the batch any more, and the reader may fill its room.
                    last = nil
                    queue.release()
                }
                try writer.finish()
            } catch let e as BatchRowError {
                // A row of an earlier batch (a writer that sends several batches in one
                // statement): named by the writer, or by its place among the rows.
                if e.batch == nil, let before = e.rowsBefore {
                    let at = Int64(before + e.row)
                    if let last, at >= rows, at - rows < Int64(last.count) {
                        throw e.error.adding(table: table.source, key: keyDescription(table, batch: last, row: Int(at - rows)))
                    }
                    throw e.error.adding(table: table.source, key: "row \(at + 1) (the table has no key)")
                }
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
        if let rejecting { rows -= Int64(rejecting.rejected.count) }
        return (rows, writer.rowsStored.flatMap { n in storedBefore.map { $0 + n } })
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
        // A row a writer placed wrongly is never read out of its batch.
        guard row >= 0 && row < batch.count else { return "row \(row + 1) of a batch of \(batch.count)" }
        let key = (table.key?.columns ?? []).compactMap { name in
            table.columns.firstIndex { $0.name == name }.map { (column: table.columns[$0], values: batch.columns[$0]) }
        }
        return key.isEmpty ? "row \(row + 1) of its batch (the table has no key)" : Column.keyText(key, row: row)
    }

    static func describe(_ error: any Error, table: TableName) -> String {
        if var e = error as? RefusedRowsPastLimit {
            // Named by the copy's table (a service knows only its own).
            e.table = table
            return e.description
        }
        if let e = error as? FerryError {
            switch e {
            case .invalidValue: return e.adding(table: table).description
            default: return e.description
            }
        }
        return "\(error)"
    }
}

/// The rows a table's `RejectingWriter` set aside (empty without `--on-error reject`).
final class RejectedRows {
    fileprivate(set) var writer: CopyEngine.RejectingWriter?
    var rows: [RejectFile.Row] { writer?.rejected ?? [] }
}

/// A resumable load's chunks: every `rows` rows (at a batch's end) the writer finishes and
/// `commit` records the last key written (in the source's values) and commits.
struct ChunkCommits {
    var rows: Int
    var key: [String]
    /// Where the key's columns are among the columns read.
    var keyIndexes: [Int]
    /// The key to read after (an earlier run's last committed one).
    var after: [Value]?
    var commit: (_ lastKey: [Value], _ rows: Int64) throws -> Void
}
