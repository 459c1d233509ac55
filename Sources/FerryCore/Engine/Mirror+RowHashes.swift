import Foundation

extension CopyEngine {
    /// The last step of a mirror where both sides list row hashes next to their data
    /// (`RangeDiff.keyedDifference`: SQLite, PostgreSQL and MySQL/MariaDB, a key of one integer
    /// column): only the source rows whose hash differs or that the target lacks are read — by
    /// key, a few index lookups per statement — and upserted; the target keys the source lacks
    /// are deleted. With 1% of 1,000,000 rows changed, a bucket of ~8 rows holds ~1 changed row:
    /// reading the buckets whole read and merged ~78,000 rows and scanned the target's keys once
    /// more; this reads the ~10,000 that differ. Nil where it does not apply (the caller reads
    /// the differing buckets whole).
    func mirrorByRowHashes(
        _ table: TablePlan, source: RangeDiff.Side, target: RangeDiff.Side, into: TableSchema, found outcome: RangeDiff.Outcome,
        options: CopyOptions, progress: ProgressReporter, cancellation: Cancellation?, stats: CopySummary.MirrorStats
    ) throws -> (rows: Int64, counts: MergeCounts, stats: CopySummary.MirrorStats)? {
        guard source.connection.dialect.selectsByKeyList, !target.connection.stagesKeyedWrites,
            let found = try RangeDiff.keyedDifference(source: source, target: target, found: outcome)
        else { return nil }
        let unchanged = outcome.unchanged
        if cancellation?.isCancelled == true { throw FerryError.cancelled }
        var stats = stats
        let differ = found.differ
        // The target's keys the source lacks: deleted (guarded before anything is written).
        let doomed = found.missing
        stats.targetKeysRead = Int64(found.targetRows)
        if let limit = options.maxDelete, Int64(doomed.count) > limit.allowed(of: stats.targetRows) {
            throw FerryError.copyFailed(
                table: table.source, endpoint: target.connection.endpoint.redacted,
                reason: "a mirror would delete \(doomed.count) of the \(stats.targetRows) rows of \(into.name), more than --max-delete \(limit) allows; nothing was changed")
        }
        progress.reestimate(table.source.description, rows: Int64(differ.count))

        let merge = MergeWriter(target: target.connection, table: into, columns: table.targetSchema.columns, key: target.key.map(\.name))
        let rows = differ.isEmpty
            ? 0
            : try pump(
                table, source: source.connection, target: target.connection, into: into, options: options, progress: progress,
                cancellation: cancellation, writer: merge, keys: (source.key.map(\.name), differ.map { [.int($0)] })).rows
        stats.sourceRowsRead = rows
        // The snapshot the keys were listed in is the one the rows are read in: every key is there.
        guard rows == Int64(differ.count) else {
            throw FerryError.copyFailed(
                table: table.source, endpoint: source.connection.endpoint.redacted,
                reason: "read \(rows) of the \(differ.count) rows whose row hash differs; nothing was changed")
        }
        var counts = merge.counts
        counts.unchanged += unchanged + found.same
        let keyTypes = target.key.map(\.logicalType)
        for start in stride(from: 0, to: doomed.count, by: 10_000) {
            if cancellation?.isCancelled == true { throw FerryError.cancelled }
            let keys = try RowBatch(rows: doomed[start..<min(start + 10_000, doomed.count)].map { [.int($0)] }, types: keyTypes)
            counts.deleted += Int64(try target.connection.deleteRows(from: into, key: target.key, keys: keys))
        }
        // Every source row of these buckets, and nothing else, must now be there.
        let after = Int64(found.targetRows) - counts.deleted + counts.inserted
        guard after == Int64(found.sourceRows) else {
            throw FerryError.copyFailed(
                table: table.source, endpoint: target.connection.endpoint.redacted,
                reason: "after the write the buckets of \(into.name) that differed would hold \(after) rows where the source has \(found.sourceRows); nothing was changed")
        }
        return (rows, counts, stats)
    }
}

/// Reads the rows of a key list through readers opened for `chunk` keys at a time, and hands
/// them on in batches as full as a reader's (`rows` rows or `RowBatch.byteLimit`): a batch per
/// chunk of 500 keys made a keyed write per 500 rows (PostgreSQL: a staging table, a COPY and
/// an INSERT … ON CONFLICT each, ~25 ms; 20 of them for 10,000 changed rows).
final class KeyListReader: BatchReader {
    private var chunks: ArraySlice<[[Value]]>
    private let open: ([[Value]]) throws -> any BatchReader
    private let rows: Int
    private var current: (any BatchReader)?

    init(_ keys: [[Value]], chunk: Int, rows: Int = .max, open: @escaping ([[Value]]) throws -> any BatchReader) {
        chunks = stride(from: 0, to: keys.count, by: max(1, chunk)).map { Array(keys[$0..<min($0 + max(1, chunk), keys.count)]) }[...]
        self.rows = max(1, rows)
        self.open = open
    }

    func next() throws -> RowBatch? {
        var out: RowBatch?
        while true {
            if let c = current {
                if let batch = try c.next() {
                    if out == nil { out = batch } else { out?.append(contentsOf: batch) }
                    if let o = out, o.isFull(rows: o.count, limit: rows) { return o }
                    continue
                }
                c.close()
                current = nil
            }
            guard let keys = chunks.popFirst() else { return out }
            current = try open(keys)
        }
    }

    func close() {
        current?.close()
        current = nil
    }
}
