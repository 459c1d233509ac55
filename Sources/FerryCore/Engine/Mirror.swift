import Foundation

extension CopyEngine {
    /// Bucket counts are powers of two; the first level aims at this many rows per bucket and
    /// each further level splits a differing bucket in `fanout`. Every level scans both tables
    /// (the digest SQL hashes every row), so the first level is already fine-grained: its
    /// answer (a short line per bucket) costs far less than another scan.
    static let mirrorRowsPerBucket: Int64 = 16
    static let mirrorFanout: Int64 = 16
    /// At most this many buckets in one filter (an `IN` list of ~140 kB, well under MySQL's
    /// max_allowed_packet; 20 requests through the service).
    static let mirrorMaxBuckets = 20_000

    /// `--mode mirror` into an existing table, in the caller's target transaction: compares
    /// range digests level by level (each side computes its own, next to its data), reads
    /// only the source rows of buckets that differ and upserts them, then deletes the target
    /// rows of those buckets whose key the source lacks. The source is read inside the copy's
    /// snapshot (`run`), so digests and rows agree.
    func mirrorTable(
        _ table: TablePlan, source: any Connection, target: any Connection, into: TableSchema, options: CopyOptions,
        progress: ProgressReporter, cancellation: Cancellation?
    ) throws -> (rows: Int64, counts: MergeCounts, stats: CopySummary.MirrorStats) {
        guard let keyNames = table.key?.columns, !keyNames.isEmpty else { throw FerryError.noKey(table: table.source) }
        let sourceColumns = table.columns
        let targetColumns = table.targetSchema.columns.map { into.column(named: $0.name) ?? $0 }
        let sourceKey = try keyNames.map { name in
            guard let c = sourceColumns.first(where: { $0.name == name }) else { throw FerryError.noKey(table: table.source) }
            return c
        }
        let targetKey = try keyNames.map { name in
            guard let c = into.column(named: name) else { throw FerryError.columnNotFound(table: into.name, column: name) }
            return c
        }
        var stats = CopySummary.MirrorStats()

        // Level by level: digests of every bucket, then finer buckets inside those that differ.
        var modulus: Int64 = 1
        let estimate = max(table.sourceSchema.rowEstimate ?? 0, 1)
        while modulus < 1 << 20 && modulus * Self.mirrorRowsPerBucket < estimate { modulus *= 2 }
        var within: BucketFilter?
        var unchanged: Int64 = 0
        var differing: [Int64] = []
        /// The buckets to read (modulus, residues); nil: the whole table.
        var final: (modulus: Int64, residues: [Int64])?
        while true {
            if cancellation?.isCancelled == true { throw FerryError.cancelled }
            // Both sides at once: each computes next to its own data.
            let sourceRequest = DigestRequest(
                key: sourceKey, columns: sourceColumns, modulus: modulus,
                within: within.map { BucketFilter(key: sourceKey, modulus: $0.modulus, residues: $0.residues) }, filter: table.filter)
            let sourceSchema = table.sourceSchema
            let (s, t) = try Worker.both(
                { try source.bucketDigests(sourceSchema, request: sourceRequest) },
                { try target.bucketDigests(into, request: DigestRequest(key: targetKey, columns: targetColumns, modulus: modulus, within: within, filter: table.filter)) })
            stats.levels += 1
            stats.digests += s.count + t.count
            if stats.levels == 1 {
                stats.sourceRows = s.reduce(0) { $0 + $1.rows }
                stats.targetRows = t.reduce(0) { $0 + $1.rows }
                if stats.sourceRows == 0 && stats.targetRows > 0 && !options.allowEmptySource {
                    throw FerryError.copyFailed(
                        table: table.source, endpoint: target.endpoint.redacted,
                        reason: "the source table is empty, and a mirror would delete all \(stats.targetRows) rows of \(into.name); nothing was changed (pass --allow-empty-source if that is what you want)")
                }
            }
            let theirs = Dictionary(t.map { ($0.bucket, $0) }, uniquingKeysWith: { a, _ in a })
            let ours = Dictionary(s.map { ($0.bucket, $0) }, uniquingKeysWith: { a, _ in a })
            differing = Array(Set(ours.keys).union(theirs.keys).filter { ours[$0] != theirs[$0] }).sorted()
            let levelUnchanged = s.reduce(0) { $0 + (theirs[$1.bucket] == $1 ? $1.rows : 0) }
            if differing.count > Self.mirrorMaxBuckets {
                // Too many buckets to name in one filter: read the previous level's buckets
                // (fewer, larger), or everything at the first level. Rows of this level's equal
                // buckets are read again, and counted by the keyed write.
                final = within.map { ($0.modulus, $0.residues) }
                if final == nil { progress.reestimate(table.source.description, rows: stats.sourceRows) }
                break
            }
            unchanged += levelUnchanged
            if differing.isEmpty {
                final = (modulus, [])
                break
            }
            let rowsInDiffering = max(
                differing.reduce(0) { $0 + (ours[$1]?.rows ?? 0) }, differing.reduce(0) { $0 + (theirs[$1]?.rows ?? 0) })
            // Small enough to read (a few rows per bucket, or a twentieth of the table), or as
            // fine as the 32-bit key hash goes.
            let total = max(stats.sourceRows, stats.targetRows)
            progress.reestimate(table.source.description, rows: differing.reduce(0) { $0 + (ours[$1]?.rows ?? 0) })
            if rowsInDiffering <= 8 * Int64(differing.count) || rowsInDiffering <= total / 20 || modulus * Self.mirrorFanout > 1 << 31
                || stats.levels >= 6
            {
                final = (modulus, differing)
                break
            }
            within = BucketFilter(key: targetKey, modulus: modulus, residues: differing)
            modulus *= Self.mirrorFanout
        }
        if let final, final.residues.isEmpty { return (0, MergeCounts(unchanged: unchanged), stats) }
        let sourceBuckets = final.map { BucketFilter(key: sourceKey, modulus: $0.modulus, residues: $0.residues) }
        let targetBuckets = final.map { BucketFilter(key: targetKey, modulus: $0.modulus, residues: $0.residues) }

        // The source rows of the differing buckets, upserted; their keys kept to find deletes.
        let merge = MergeWriter(
            target: target, table: into, columns: table.targetSchema.columns, key: keyNames,
            collectKeysAt: keyNames.compactMap { n in table.targetSchema.columns.firstIndex { $0.name == n } })
        let rows = try pump(
            table, source: source, target: target, into: into, options: options, progress: progress, cancellation: cancellation,
            writer: merge, buckets: sourceBuckets)
        stats.sourceRowsRead = rows

        // The target keys of the same buckets that the source did not send: deleted.
        var doomed: [RowBatch] = []
        var doomedCount: Int64 = 0
        let keyTypes = targetKey.map(\.logicalType)
        let keys = try target.reader(
            table: into, columns: targetKey,
            keyRange: table.filter == nil && targetBuckets == nil ? nil : KeyRange(key: [], filter: table.filter, buckets: targetBuckets),
            batchSize: max(1, options.batchSize))
        do {
            while let batch = try keys.next() {
                stats.targetKeysRead += Int64(batch.count)
                var gone: [Int] = []
                for row in 0..<batch.count where !merge.seen.contains(MergeWriter.keyText(batch, row: row, at: Array(keyTypes.indices), types: keyTypes)) {
                    gone.append(row)
                }
                if !gone.isEmpty {
                    doomed.append(batch.selecting(gone))
                    doomedCount += Int64(gone.count)
                }
            }
            keys.close()
        } catch {
            keys.close()
            throw error
        }
        if let limit = options.maxDelete, doomedCount > limit.allowed(of: stats.targetRows) {
            throw FerryError.copyFailed(
                table: table.source, endpoint: target.endpoint.redacted,
                reason: "a mirror would delete \(doomedCount) of the \(stats.targetRows) rows of \(into.name), more than --max-delete \(limit) allows; nothing was changed")
        }
        var counts = merge.counts
        for batch in doomed {
            if cancellation?.isCancelled == true { throw FerryError.cancelled }
            counts.deleted += Int64(try target.deleteRows(from: into, key: targetKey, keys: batch))
        }
        counts.unchanged += unchanged

        // Every source row, and nothing else, must now be in the target: a key comparison
        // that merges keys the source keeps apart (a case-insensitive collation) shows here.
        try target.expectRows(into, key: targetKey, rows: stats.sourceRows, filter: table.filter)
        return (rows, counts, stats)
    }
}
