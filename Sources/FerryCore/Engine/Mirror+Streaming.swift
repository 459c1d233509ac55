import Foundation

extension CopyEngine {
    /// A mirror from a source whose rows Ferry hashes as it reads them (`streamsMirrorRows`:
    /// MySQL/MariaDB on this machine), into a target that lists its rows' keys and hashes: the
    /// target's keys and row hashes are listed (sorted by key in a temporary file) while the
    /// source's rows are read whole, in key order, on a thread of their own; each source row is
    /// compared with the target's hash as it arrives, and the rows that differ are written at
    /// once, while the source is still being read. Rows read before the target's list was
    /// complete are compared by key and hash afterwards, and those that differ read again by
    /// key. The digests' comparison read the source once to hash it, then again by key for the
    /// rows that differ, and wrote them only after both: with 1% of 1,000,000 bench_orders rows
    /// changed, MariaDB → SQLite took 0.6–0.8 s longer than with nothing changed, nearly all of it
    /// the writes (a SQLite page rewritten and journaled for nearly every changed row).
    ///
    /// Nil where it does not apply (the caller compares digests): a key that is not one integer
    /// column, a side without PostgreSQL's row hash, a target that stages its keyed writes.
    func mirrorByStreaming(
        _ table: TablePlan, source: RangeDiff.Side, target: RangeDiff.Side, into: TableSchema, options: CopyOptions,
        progress: ProgressReporter, cancellation: Cancellation?
    ) throws -> (rows: Int64, counts: MergeCounts, stats: CopySummary.MirrorStats)? {
        guard source.connection.streamsMirrorRows, source.key.count == 1, target.key.count == 1,
            KeyHash.suited(to: source.key) == .integer, KeyHash.suited(to: target.key) == .integer,
            source.columns.count == target.columns.count,
            source.connection.rowHashes.contains(.lookup3), target.connection.rowHashes.contains(.lookup3),
            target.connection.listsKeyedRowHashes(key: target.key, hash: .integer), !target.connection.stagesKeyedWrites,
            (table.sourceSchema.rowEstimate ?? 0) <= KeyedHashSpill.maxRows,
            let keyAt = source.columns.firstIndex(where: { $0.name == source.key[0].name }),
            let targetList = KeyedHashSpill(sortingPieces: true)
        else { return nil }
        // Hashed as a comparison of digests would (`RangeDiff.find`).
        let (delimited, forms) = RangeDiff.agreedHashing(source, target)
        func request(_ side: RangeDiff.Side) -> DigestRequest {
            DigestRequest(
                key: side.key, columns: side.columns, modulus: 1, filter: side.filter, keyHash: .integer, delimited: delimited,
                rowHash: .lookup3, hashForms: forms)
        }
        let queue = BoundedQueue<StreamedChange>(capacity: options.queueDepth, maxCost: options.queueBytes) { $0.byteSize }
        let listing = TargetListing()
        let side = StreamingMirrorSource(
            connection: source.connection, table: table, request: request(source), keyAt: keyAt, batchSize: max(1, options.batchSize),
            allowEmptySource: options.allowEmptySource, target: into.name, queue: queue, listing: listing, cancellation: cancellation,
            progress: progress)
        let producer = Worker(name: "ferry-mirror-source") {
            do {
                try side.run()
                queue.finish()
            } catch {
                queue.finish(error: error)
            }
        }
        let keyTypes = target.key.map(\.logicalType)
        var stats = CopySummary.MirrorStats()
        stats.rowHash = .lookup3
        let merge = MergeWriter(target: target.connection, table: into, columns: table.targetSchema.columns, key: target.key.map(\.name))
        var written: Int64 = 0
        var deleted: Int64 = 0
        do {
            // The target's list first (the source is being read meanwhile), then its writes.
            do {
                try target.connection.keyedRowHashes(target.schema, request: request(target)) { key, hash in
                    targetList.append(key: key, hash: hash)
                }
                targetList.finish()
                guard targetList.isComplete else {
                    throw FerryError.copyFailed(
                        table: table.source, endpoint: target.connection.endpoint.redacted,
                        reason: "the target's row hashes could not be kept in a temporary file (is TMPDIR full?); nothing was changed")
                }
                listing.hand(try targetList.sortedPairs(table: into.name), rows: targetList.rows)
            } catch {
                listing.fail()
                throw error
            }
            stats.targetRows = targetList.rows
            stats.targetKeysRead = targetList.rows
            let allowed = options.maxDelete?.allowed(of: targetList.rows)
            // Past --max-delete nothing more is written, but the deletes are still counted (the
            // error says how many), and the caller rolls back what was written before.
            var doomed: Int64 = 0
            while let change = try queue.take() {
                if cancellation?.isCancelled == true { throw FerryError.cancelled }
                switch change {
                case .rows(let batch):
                    guard allowed.map({ doomed <= $0 }) ?? true else { break }
                    do { try merge.write(batch) } catch let e as BatchRowError {
                        throw e.error.adding(table: table.source, key: keyDescription(table, batch: e.batch ?? batch, row: e.row))
                    }
                    written += Int64(batch.count)
                case .deletes(let keys):
                    doomed += Int64(keys.count)
                    guard allowed.map({ doomed <= $0 }) ?? true else { break }
                    let batch = try RowBatch(rows: keys.map { [.int($0)] }, types: keyTypes)
                    deleted += Int64(try target.connection.deleteRows(from: into, key: target.key, keys: batch))
                }
                queue.release()
            }
            if let allowed, let limit = options.maxDelete, doomed > allowed {
                throw FerryError.copyFailed(
                    table: table.source, endpoint: target.connection.endpoint.redacted,
                    reason: "a mirror would delete \(doomed) of the \(targetList.rows) rows of \(into.name), more than --max-delete \(limit) allows; nothing was changed")
            }
        } catch {
            listing.fail()
            queue.cancel()
            producer.join()
            throw error
        }
        producer.join()
        stats.sourceRows = side.rows
        stats.sourceRowsRead = side.rows + side.reread
        var counts = merge.counts
        counts.deleted = deleted
        counts.unchanged += side.same
        // Every source row, and nothing else, must now be there.
        let after = stats.targetRows - deleted + counts.inserted
        guard after == side.rows else {
            throw FerryError.copyFailed(
                table: table.source, endpoint: target.connection.endpoint.redacted,
                reason: "after the write \(into.name) would hold \(after) rows where the source has \(side.rows); "
                    + "the target's key comparison merges keys the source keeps apart (a case-insensitive collation?); nothing was changed")
        }
        return (written, counts, stats)
    }
}

/// What the source's thread of a streaming mirror hands the target's: rows to upsert, or keys
/// of the target the source lacks.
enum StreamedChange: Sendable {
    case rows(RowBatch)
    case deletes([Int64])

    var byteSize: Int {
        switch self {
        case .rows(let b): return b.byteSize
        case .deletes(let keys): return keys.count * 8
        }
    }
}

/// The target's sorted list of a streaming mirror, handed from the target's thread to the
/// source's once complete (or the news that it never will be).
final class TargetListing: @unchecked Sendable {  // unchecked: state touched only under `condition`; the pairs belong to the source's thread once taken
    private let condition = NSCondition()
    private var pairs: SortedPairs?
    private var rows: Int64 = 0
    private var failed = false

    func hand(_ pairs: SortedPairs, rows: Int64) {
        condition.lock()
        self.pairs = pairs
        self.rows = rows
        condition.broadcast()
        condition.unlock()
    }

    func fail() {
        condition.lock()
        failed = true
        condition.broadcast()
        condition.unlock()
    }

    /// The list and its row count once handed (taken once); nil while it is being made.
    func poll() throws -> (SortedPairs, Int64)? {
        condition.lock()
        defer { condition.unlock() }
        if failed { throw FerryError.cancelled }
        guard let p = pairs else { return nil }
        pairs = nil
        return (p, rows)
    }

    func wait() throws -> (SortedPairs, Int64) {
        condition.lock()
        defer { condition.unlock() }
        while pairs == nil && !failed { condition.wait() }
        guard let p = pairs, !failed else { throw FerryError.cancelled }
        pairs = nil
        return (p, rows)
    }
}

/// The source's half of a streaming mirror, run on a thread of its own: reads every source row
/// in key order, compares its row hash with the target's, and queues the rows that differ and
/// the target keys the source lacks. Its counts are read after its thread was joined.
final class StreamingMirrorSource: @unchecked Sendable {  // unchecked: used by its own thread alone until joined; `queue` and `listing` synchronize themselves
    let connection: any Connection
    let table: TablePlan
    let request: DigestRequest
    let keyAt: Int
    let batchSize: Int
    let allowEmptySource: Bool
    let target: TableName
    let queue: BoundedQueue<StreamedChange>
    let listing: TargetListing
    let cancellation: Cancellation?
    let progress: ProgressReporter
    /// Source rows read, rows equal to the target's, and rows read again by key.
    private(set) var rows: Int64 = 0
    private(set) var same: Int64 = 0
    private(set) var reread: Int64 = 0

    /// The target's rows not matched yet, in key order (once listed), and the target keys the
    /// source lacks, queued 10,000 at a time.
    private var pairs: SortedPairs?
    private var targetRows: Int64 = 0
    private var deletes: [Int64] = []

    init(
        connection: any Connection, table: TablePlan, request: DigestRequest, keyAt: Int, batchSize: Int, allowEmptySource: Bool,
        target: TableName, queue: BoundedQueue<StreamedChange>, listing: TargetListing, cancellation: Cancellation?, progress: ProgressReporter
    ) {
        self.progress = progress
        self.connection = connection
        self.table = table
        self.request = request
        self.keyAt = keyAt
        self.batchSize = batchSize
        self.allowEmptySource = allowEmptySource
        self.target = target
        self.queue = queue
        self.listing = listing
        self.cancellation = cancellation
    }

    private func send(_ change: StreamedChange) throws {
        guard queue.put(change) else { throw FerryError.cancelled }
    }

    /// The target's hash of `key` (nil when it lacks the key); its keys before `key`, which
    /// the source lacks, are deleted.
    private func match(_ key: Int64, in pairs: SortedPairs) throws -> Int64? {
        while let c = pairs.current, c.key < key {
            deletes.append(c.key)
            if deletes.count >= 10_000 {
                try send(.deletes(deletes))
                deletes = []
            }
            try pairs.advance()
        }
        guard let c = pairs.current, c.key == key else { return nil }
        try pairs.advance()
        return c.hash
    }

    func run() throws {
        let keyName = request.key[0].name
        let direct = try connection.reader(
            table: table.sourceSchema, columns: table.columns, keyRange: KeyRange(key: [keyName], filter: table.filter), batchSize: batchSize)
        // The next batch is read while this one is hashed and compared (a server would wait meanwhile).
        let reader = ReadAhead(direct, name: "ferry-mirror-read")
        defer { reader.close() }
        let hasher = DigestComputer.RowHasher(request)
        var scratch: [UInt8] = []
        // Keys and hashes of the rows read before the target's list was complete (in key
        // order), and the keys among them whose rows differ.
        var early: KeyedHashSpill?
        var again: [Int64] = []
        var last = Int64.min
        var first = true
        func takeList(_ list: (SortedPairs, Int64)) throws {
            pairs = list.0
            targetRows = list.1
            guard let kept = early, let pairs else { return }
            kept.finish()
            guard kept.isComplete else {
                throw FerryError.copyFailed(
                    table: table.source, endpoint: connection.endpoint.redacted,
                    reason: "the source's row hashes could not be kept in a temporary file (is TMPDIR full?); nothing was changed")
            }
            try kept.forEach(table: table.source) { key, hash in
                if try match(key, in: pairs) == hash { same += 1 } else { again.append(key) }
            }
            early = nil
        }
        while let batch = try reader.next() {
            if cancellation?.isCancelled == true { throw FerryError.cancelled }
            if pairs == nil, let list = try listing.poll() { try takeList(list) }
            let keys = batch.columns[keyAt].ints
            var differ: [Int] = []
            if pairs == nil && early == nil {
                guard let spill = KeyedHashSpill() else {
                    throw FerryError.copyFailed(
                        table: table.source, endpoint: connection.endpoint.redacted, reason: "no temporary file could be made for the source's row hashes (TMPDIR); nothing was changed")
                }
                early = spill
            }
            try hasher.hashRows(batch, scratch: &scratch) { row, hash in
                let key = keys[row]
                guard first || key > last else {
                    throw FerryError.copyFailed(
                        table: table.source, endpoint: connection.endpoint.redacted,
                        reason: "the source's rows did not arrive in ascending key order (\(key) after \(last)); nothing was changed")
                }
                first = false
                last = key
                if let pairs {
                    if try match(key, in: pairs) == hash { same += 1 } else { differ.append(row) }
                } else {
                    early?.append(key: key, hash: hash)
                }
            }
            rows += Int64(batch.count)
            // Progress counts the rows compared.
            progress.advanced(table.source.description, by: batch.count)
            if !differ.isEmpty {
                let rowsThatDiffer = differ.count == batch.count ? batch : batch.selecting(differ)
                try send(.rows(try CopyEngine.convert(rowsThatDiffer, table.conversions, columns: table.columns)))
            }
        }
        // Done with the source's scan before any other statement runs on its connection.
        reader.close()
        if pairs == nil { try takeList(try listing.wait()) }
        if rows == 0 && targetRows > 0 && !allowEmptySource {
            throw FerryError.copyFailed(
                table: table.source, endpoint: connection.endpoint.redacted,
                reason: "the source table is empty, and a mirror would delete all \(targetRows) rows of \(target); nothing was changed (pass --allow-empty-source if that is what you want)")
        }
        // The target's keys after the source's last: deleted.
        while let c = pairs?.current {
            deletes.append(c.key)
            if deletes.count >= 10_000 {
                try send(.deletes(deletes))
                deletes = []
            }
            try pairs?.advance()
        }
        if !deletes.isEmpty { try send(.deletes(deletes)) }
        deletes = []
        // The rows that differ among those read before the list was complete: read again by key,
        // in the snapshot they were first read in (every key is there), 50,000 keys at a time.
        for start in stride(from: 0, to: again.count, by: 50_000) {
            let slice = again[start..<min(start + 50_000, again.count)].map { [Value.int($0)] }
            let keys = KeyListReader(slice, chunk: RowValues.keysPerRead, rows: batchSize) { [table, connection, batchSize] chunk in
                var r = KeyRange(key: [], filter: table.filter)
                r.keys = chunk
                r.keyColumns = [keyName]
                return try connection.reader(table: table.sourceSchema, columns: table.columns, keyRange: r, batchSize: batchSize)
            }
            defer { keys.close() }
            while let batch = try keys.next() {
                if cancellation?.isCancelled == true { throw FerryError.cancelled }
                reread += Int64(batch.count)
                try send(.rows(try CopyEngine.convert(batch, table.conversions, columns: table.columns)))
            }
        }
        guard reread == Int64(again.count) else {
            throw FerryError.copyFailed(
                table: table.source, endpoint: connection.endpoint.redacted,
                reason: "read \(reread) of the \(again.count) rows whose row hash differs; nothing was changed")
        }
    }
}
