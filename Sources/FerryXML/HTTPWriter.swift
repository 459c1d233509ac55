import FerryCore
import Foundation

/// Posts batches as `<rows>` documents, one server-side transaction per request, each request
/// streamed while it is written: the first batch opens a request, every batch goes into it as
/// it comes (encoded on a thread of the request's own while the caller reads the next), and the
/// request ends before its document would pass `requestBytes` (`documentBytes` of its batches;
/// a batch that could pass the service's load limit is split), or at `finish`. So the service parses
/// and writes while the client reads and encodes, with a round trip, a commit and the service's
/// setup per `requestBytes` rather than per batch; and the client holds no request's rows — only
/// the batch being encoded, one waiting, and the key columns of the request's rows, which name a
/// row the service refuses.
final class HTTPWriter: BatchWriter {
    let client: ProtocolClient
    let path: String
    let table: TableName
    let columns: [Column]
    let types: [LogicalType]
    let stored: [Bool]
    /// Positions of the target's key columns among the written columns (what names a refused row).
    let keyIndexes: [Int]
    /// A request's document stays within this many bytes, as `documentBytes` estimates them
    /// (a batch larger than that goes in a request of its own).
    let requestBytes: Int
    /// A batch whose document would be larger than this is split: three quarters of the
    /// service's load limit (`max-load`, else `max-body`), what a request may never pass.
    let splitBytes: Int
    private var request: Request?
    /// Rows written before the open request.
    private var rowsBefore = 0
    /// `--on-error reject`: each request asks the service to set refused rows aside (`reject=`,
    /// what is left of the limit) and they are kept here from its answer.
    let refusals: RefusedRowsKept?
    /// The table the rows are for, where `table` is its staging table (what refusals name).
    let target: TableName

    /// A request also ends once the key columns it keeps hold this much (a table whose key is
    /// most of its row; integer keys in order take about a byte a row, `KeptKeys`).
    static let keyBytes = 4 << 20

    /// Requests end at half the service's load limit, at most 256 MiB of document (a request
    /// still holds at least one batch); at 32 MiB where the service does not say. Each request
    /// costs a round trip, the service's setup and commit, and both sides' pipelines emptied:
    /// ~10 ms with the two cores idle, 16 times in 1,000,000 bench_orders rows at 32 MiB.
    static func requestBytes(limit: Int?) -> Int {
        guard let limit else { return 32 << 20 }
        return max(64 << 10, min(256 << 20, limit / 2))
    }

    /// One request being sent: its batches go through `queue` to the thread that sends it.
    private final class Request: @unchecked Sendable {  // unchecked: `outcome` and `abandoned` under their locks; the rest is the writer's thread's
        let queue = BoundedQueue<RowBatch>(capacity: 1)
        let abandoned = Locked(false)
        let outcome = Locked<Result<Data, any Error>?>(nil)
        var source: RowsDocumentSource?
        var worker: Worker?
        /// Each batch's first row in the request, row count and key columns.
        var keys: [(first: Int, count: Int, keys: KeptKeys)] = []
        var keyBytes = 0
        var documentBytes = 0
        var rows = 0
        /// `documentBytes` of the last two batches handed over (the ones that may not be
        /// encoded yet: the queue holds one, the encoder another).
        var recent = (0, 0)

        /// What the document may reach with a batch of `size` more: what the encoder produced,
        /// the piece it is filling, and the estimates of the batches it has not finished. The
        /// encoder's own count rather than the sum of estimates, which are generous (twice a
        /// value's bytes, 36 bytes a cell): by them a request of bench_orders rows ended at about
        /// 15 MiB of its 32, and each request costs a round trip, the service's setup and commit,
        /// and both sides' pipelines emptied.
        func bound(adding size: Int) -> Int {
            let encoded = source?.produced.withLock { $0 } ?? 0
            return min(documentBytes, encoded + RowsDocumentSource.piece * 2 + recent.0 + recent.1) + size
        }
    }

    init(
        client: ProtocolClient, path: String, table: TableName, columns: [Column], key: [String] = [], loadLimit: Int? = nil,
        refusals: RefusedRowsKept? = nil, for target: TableName? = nil
    ) {
        self.client = client
        self.path = path
        self.table = table
        self.target = target ?? table
        self.columns = columns
        self.refusals = refusals
        types = columns.map(\.logicalType)
        stored = columns.map { $0.readHints.contains(.storedForm) }
        keyIndexes = key.compactMap { k in columns.firstIndex { $0.name == k } }
        requestBytes = Self.requestBytes(limit: loadLimit)
        splitBytes = (loadLimit ?? 64 << 20) / 4 * 3
    }

    func write(_ batch: RowBatch) throws {
        guard !batch.isEmpty else { return }
        let size = Self.documentBytes(batch)
        if size > splitBytes && batch.count > 1 {
            // Too large for a request of its own (a service with a small max-body): in halves.
            let half = batch.count / 2
            try write(batch.selecting(Array(0..<half)))
            try write(batch.selecting(Array(half..<batch.count)))
            return
        }
        if let current = request, current.bound(adding: size) > requestBytes { try close() }
        let r = try request ?? open()
        guard r.queue.put(batch) else {
            // The request ended early: the service answered (a refused row) or the connection failed.
            try close()
            throw FerryError.copyFailed(table: table, endpoint: client.transport.endpoint.redacted, reason: "the service ended the load early")
        }
        // Kept apart from the batch, whose columns keep its whole capacity (a request of 500,000
        // bench_orders rows held 9 MB more than its keys).
        let kept = KeptKeys(batch, at: keyIndexes)
        r.keys.append((r.rows, batch.count, kept))
        r.keyBytes += kept.bytes
        r.documentBytes += size
        r.recent = (r.recent.1, size)
        r.rows += batch.count
        if r.keyBytes >= Self.keyBytes { try close() }
    }

    func finish() throws { try close() }

    /// Ends the open request short of its end, so that the service rolls it back, and waits for
    /// its answer.
    func abort() {
        guard let r = request else { return }
        request = nil
        r.abandoned.withLock { $0 = true }
        r.queue.cancel()
        r.queue.finish()
        r.worker?.join()
    }

    private func open() throws -> Request {
        let r = Request()
        let (client, table) = (client, table)
        let path = refusals.map { self.path + $0.query(after: self.path) } ?? self.path
        let queue = r.queue
        let abandoned = r.abandoned
        let source = RowsDocumentSource(table: table, types: types, stored: stored) {
            // Taken on the sending thread: the next batch, as the caller writes it.
            let batch = try? queue.take()
            queue.release()
            if abandoned.withLock({ $0 }) { return .abandon }
            return batch.map { .batch($0) } ?? .end
        }
        r.source = source
        r.worker = Worker(name: "ferry-upload") {
            let result = Result<Data, any Error> {
                guard let source = r.source else { return Data() }
                return try client.expect("POST", path, upload: { source }, table: table)
            }
            r.outcome.withLock { $0 = result }
            // A caller waiting to hand over a batch learns that no more are taken.
            queue.cancel()
        }
        request = r
        return r
    }

    /// Ends the open request and waits for its answer; a refused row is named by its key.
    private func close() throws {
        guard let r = request else { return }
        request = nil
        r.queue.finish()
        r.worker?.join()
        let first = rowsBefore
        rowsBefore += r.rows
        guard let result = r.outcome.withLock({ $0 }) else { return }
        do {
            let answer = try result.get()
            try refusals?.take(answer, columns: columns, naming: table == target ? nil : (table, target))
        } catch let e as RefusedRowsPastLimit {
            throw refusals?.named(e) ?? e
        } catch let e as BatchRowError {
            // The service counts the request's rows: a row of one batch, its key columns kept.
            guard let part = r.keys.first(where: { e.row >= $0.first && e.row < $0.first + $0.count }) else { throw e.error }
            throw BatchRowError(row: 0, error: e.error, batch: keyRow(part.keys, row: e.row - part.first), rowsBefore: first + e.row)
        }
    }

    /// What `batch` takes in a document, generously: a value's bytes twice (base64 is 4/3 of
    /// them; escapes rarely add more) and 36 bytes a cell (its tags, 20 digits or a double).
    static func documentBytes(_ batch: RowBatch) -> Int {
        batch.columns.reduce(8 * batch.count) { $0 + 2 * $1.arena.count + 36 * batch.count }
    }

    /// A one-row batch of the written columns holding row `row`'s key values (the others NULL).
    private func keyRow(_ keys: KeptKeys, row: Int) -> RowBatch {
        var out = RowBatch(types: types, capacity: 1)
        for c in out.columns.indices {
            if let k = keyIndexes.firstIndex(of: c) {
                out.columns[c] = keys.column(k, row: row)
            } else {
                out.columns[c].appendNull()
            }
        }
        return out
    }
}

/// The rows a service set aside for one connection's loads (`--on-error reject`): asked for
/// with `reject=` (what is left of the copy's limit), kept from each answer.
final class RefusedRowsKept {
    let limit: Int
    private(set) var rows: [RefusedRow] = []

    init(limit: Int) { self.limit = limit }

    /// `reject=N` for a request to `path` (joined to its query).
    func query(after path: String) -> String {
        (path.contains("?") ? "&" : "?") + "reject=\(max(0, limit - rows.count))"
    }

    /// Keeps the refused rows of an answer, decoded as the load's `columns`; a staging table
    /// the database's reasons name is named as the table it stages (`naming`).
    func take(_ answer: Data, columns: [Column], naming: (staging: TableName, target: TableName)? = nil) throws {
        var refused = try XMLDocuments.decodeApplied(answer, refusedAs: columns).refused
        if let naming {
            for i in refused.indices {
                refused[i].reason = refused[i].reason.replacingOccurrences(of: naming.staging.name, with: naming.target.name)
            }
        }
        rows += refused
    }

    /// The service's "too many" with the copy's own limit (its table is the engine's to name).
    func named(_ error: RefusedRowsPastLimit) -> RefusedRowsPastLimit {
        var e = error
        e.limit = limit
        return e
    }
}
