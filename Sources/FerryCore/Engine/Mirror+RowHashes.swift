import Foundation

extension CopyEngine {
    /// The last step of a mirror where both sides list row hashes next to their data
    /// (`Connection.listsKeyedRowHashes`: SQLite, PostgreSQL and MySQL/MariaDB, for a key of one
    /// integer column): inside the buckets whose
    /// digests differ, each side lists every row's key and row hash (both at once), and only
    /// the source rows whose hash differs or that the target lacks are read — by key, a few
    /// index lookups per statement — and upserted; the target keys the source lacks are
    /// deleted. With 1% of 1,000,000 rows changed, a bucket of ~8 rows holds ~1 changed row:
    /// reading the buckets whole read and merged ~78,000 rows and scanned the target's keys once
    /// more; this reads the ~10,000 that differ. Nil where it does not apply (the caller reads
    /// the differing buckets whole).
    func mirrorByRowHashes(
        _ table: TablePlan, source: RangeDiff.Side, target: RangeDiff.Side, into: TableSchema, found: RangeDiff.Outcome,
        options: CopyOptions, progress: ProgressReporter, cancellation: Cancellation?, stats: CopySummary.MirrorStats
    ) throws -> (rows: Int64, counts: MergeCounts, stats: CopySummary.MirrorStats)? {
        guard found.keyHash == .integer, source.key.count == 1, target.key.count == 1, source.connection.dialect.selectsByKeyList,
            source.connection.listsKeyedRowHashes(key: source.key, hash: found.keyHash),
            target.connection.listsKeyedRowHashes(key: target.key, hash: found.keyHash), !target.connection.stagesKeyedWrites,
            let sourceRequest = found.request(source), let targetRequest = found.request(target)
        else { return nil }
        var stats = stats
        let sourceConnection = source.connection, sourceSchema = source.schema
        let (listed, theirs) = try Worker.both(
            {
                var out: [(key: Int64, hash: Int64)] = []
                try sourceConnection.keyedRowHashes(sourceSchema, request: sourceRequest) { out.append(($0, $1)) }
                return out
            },
            {
                var out: [Int64: Int64] = [:]
                try target.connection.keyedRowHashes(into, request: targetRequest) { out[$0] = $1 }
                return out
            })
        if cancellation?.isCancelled == true { throw FerryError.cancelled }
        var remaining = theirs
        var differ: [Int64] = []
        var same: Int64 = 0
        for row in listed {
            if let h = remaining.removeValue(forKey: row.key), h == row.hash {
                same += 1
            } else {
                differ.append(row.key)
            }
        }
        // What is left of the target's keys, the source lacks: deleted (guarded before anything
        // is written).
        let doomed = remaining.keys.sorted()
        stats.targetKeysRead = Int64(theirs.count)
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
                cancellation: cancellation, writer: merge, keys: (source.key.map(\.name), differ.sorted().map { [.int($0)] })).rows
        stats.sourceRowsRead = rows
        // The snapshot the keys were listed in is the one the rows are read in: every key is there.
        guard rows == Int64(differ.count) else {
            throw FerryError.copyFailed(
                table: table.source, endpoint: source.connection.endpoint.redacted,
                reason: "read \(rows) of the \(differ.count) rows whose row hash differs; nothing was changed")
        }
        var counts = merge.counts
        counts.unchanged += found.unchanged + same
        let keyTypes = target.key.map(\.logicalType)
        for start in stride(from: 0, to: doomed.count, by: 10_000) {
            if cancellation?.isCancelled == true { throw FerryError.cancelled }
            let keys = try RowBatch(rows: doomed[start..<min(start + 10_000, doomed.count)].map { [.int($0)] }, types: keyTypes)
            counts.deleted += Int64(try target.connection.deleteRows(from: into, key: target.key, keys: keys))
        }
        // Every source row of these buckets, and nothing else, must now be there.
        let after = Int64(theirs.count) - counts.deleted + counts.inserted
        guard after == Int64(listed.count) else {
            throw FerryError.copyFailed(
                table: table.source, endpoint: target.connection.endpoint.redacted,
                reason: "after the write the buckets of \(into.name) that differed would hold \(after) rows where the source has \(listed.count); nothing was changed")
        }
        return (rows, counts, stats)
    }
}

/// Reads the rows of a key list through readers opened for `chunk` keys at a time.
final class KeyListReader: BatchReader {
    private var chunks: ArraySlice<[[Value]]>
    private let open: ([[Value]]) throws -> any BatchReader
    private var current: (any BatchReader)?

    init(_ keys: [[Value]], chunk: Int, open: @escaping ([[Value]]) throws -> any BatchReader) {
        chunks = stride(from: 0, to: keys.count, by: max(1, chunk)).map { Array(keys[$0..<min($0 + max(1, chunk), keys.count)]) }[...]
        self.open = open
    }

    func next() throws -> RowBatch? {
        while true {
            if let c = current {
                if let batch = try c.next() { return batch }
                c.close()
                current = nil
            }
            guard let keys = chunks.popFirst() else { return nil }
            current = try open(keys)
        }
    }

    func close() {
        current?.close()
        current = nil
    }
}
