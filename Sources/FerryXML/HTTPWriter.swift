import FerryCore
import Foundation

/// Posts batches as `<rows>` documents (one server-side transaction per request), several
/// batches to a request: batches are kept until they hold about twice `RowBatch.byteLimit` bytes
/// of values (or `finish`), then go in one request, encoded as it is sent (chunked) — a request
/// costs a round trip, a reader of the body and a commit on the service's side, which for
/// batches of 10,000 narrow rows was most of a copy's time. A refused value is reported with
/// the batch it was in.
final class HTTPWriter: BatchWriter {
    let client: ProtocolClient
    let path: String
    let table: TableName
    let types: [LogicalType]
    let stored: [Bool]
    /// Batches written and not sent yet, and their size as `RowBatch.isFull` counts it (2 MiB of
    /// two-integer rows is 131,072 rows a request; a wider batch goes nearly alone).
    private var pending: [RowBatch] = []
    private var pendingBytes = 0

    init(client: ProtocolClient, path: String, table: TableName, columns: [Column]) {
        self.client = client
        self.path = path
        self.table = table
        types = columns.map(\.logicalType)
        stored = columns.map { $0.readHints.contains(.storedForm) }
    }

    func write(_ batch: RowBatch) throws {
        guard !batch.isEmpty else { return }
        pending.append(batch)
        pendingBytes += batch.columns.reduce(0) { $0 + $1.arena.count + 8 * batch.count }
        if pendingBytes >= 2 * RowBatch.byteLimit { try send() }
    }

    func finish() throws { try send() }

    /// Nothing is in flight between calls: what was not sent is dropped.
    func abort() {
        pending = []
        pendingBytes = 0
    }

    private func send() throws {
        guard !pending.isEmpty else { return }
        let (table, types, stored, batches) = (table, types, stored, pending)
        pending = []
        pendingBytes = 0
        do {
            _ = try client.expect("POST", path, upload: { RowsDocumentSource(table: table, types: types, stored: stored, batches: batches) }, table: table)
        } catch let e as BatchRowError {
            // The service counts the request's rows: the batch that held the row names its key.
            var first = 0
            for b in batches {
                if e.row < first + b.count { throw BatchRowError(row: e.row - first, error: e.error, batch: b) }
                first += b.count
            }
            throw e.error
        }
    }
}
