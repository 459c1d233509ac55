import FerryCore
import Foundation

/// Posts each batch as one `<rows>` document (one server-side transaction per request). The
/// body is encoded as it is sent (chunked): the batch is held, its document never is.
final class HTTPWriter: BatchWriter {
    let client: ProtocolClient
    let path: String
    let table: TableName
    let types: [LogicalType]
    let stored: [Bool]

    init(client: ProtocolClient, path: String, table: TableName, columns: [Column]) {
        self.client = client
        self.path = path
        self.table = table
        types = columns.map(\.logicalType)
        stored = columns.map { $0.readHints.contains(.storedForm) }
    }

    func write(_ batch: RowBatch) throws {
        let (table, types, stored) = (table, types, stored)
        _ = try client.expect("POST", path, upload: { RowsDocumentSource(table: table, types: types, stored: stored, batch: batch) }, table: table)
    }

    func finish() throws {}

    /// Each request has been answered before `write` returns: nothing is in flight.
    func abort() {}
}
