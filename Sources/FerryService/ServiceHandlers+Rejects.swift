import FerryCore
import FerryXML
import Foundation

/// `reject=N` on a load (`…/rows`, `…/merge`, `…/apply`): the rows the database refuses are set
/// aside instead of failing the request — each batch written in a savepoint, a refused one
/// rolled back and split until each refused row stands alone (the engine's `RejectingWriter`,
/// on this side, where the transaction is) — and sent back in the answer with their reasons;
/// past N of them the request fails whole (`422 too_many_refused`). How `ferry copy --on-error
/// reject` loads into a service or a plugin built on the plugin kit.
extension ServiceHandlers {
    /// The request's `reject=`: nil when it does not ask.
    static func rejectLimit(_ r: ServiceRequest, table: TableName) throws -> Int? {
        try r.value("reject").map { text in
            guard let n = Int(text), n >= 0, n <= RejectFile.maxSentBack else {
                throw ServiceError.badRequest("reject= is the most refused rows to set aside, 0 to \(RejectFile.maxSentBack), not '\(text.prefix(20))'", table: table.description)
            }
            return n
        }
    }

    /// A writer on `c` that sets at most `limit` refused rows aside, each batch written by a
    /// writer `make` gives; `kept` is told of each writer whose batch stayed.
    static func rejecting(
        _ c: any Connection, table: TableName, limit: Int, kept: ((any BatchWriter) -> Void)? = nil, make: @escaping () throws -> any BatchWriter
    ) throws -> CopyEngine.RejectingWriter {
        guard c.supportsSavepoints else {
            throw ServiceError(
                status: 501, code: "unsupported", table: table.description,
                message: "this service's database cannot roll back part of a transaction, so refused rows cannot be set aside: load without reject=")
        }
        return CopyEngine.RejectingWriter(target: c, table: table, limit: limit, describeRow: { _, _ in "" }, kept: kept, explain: { refusal($0, table: table) }, make: make)
    }

    /// Why the database refused a row, as an answer may say it: its own words, never the
    /// statement or where the database is (as every error the service answers).
    static func refusal(_ error: any Error, table: TableName) -> String {
        if let e = error as? any DatabaseRefusal { return e.refusal }
        return ServiceError.from(error, table: table).message
    }

    /// The answer of a load that set rows aside: its counts, and the refused rows in `columns`
    /// (as the request wrote them: stored forms where it sent them so).
    func refusedAnswer(_ counts: [(String, Int)], refused: [RejectFile.Row], columns: [Column]) -> ServiceResponse {
        let stored = columns.map { configuration.storedForm != nil && $0.readHints.contains(.nativeForm) }
        return .xml(XMLDocuments.applied(counts, refused: refused.map { ($0.batch, $0.reason) }, types: columns.map(\.logicalType), stored: stored))
    }
}

extension ServiceHandlers {
    /// Where one connection both reads and writes (SQLite in a rollback journal), the staged
    /// rows are read into a temporary file before the transaction: no read stays open across a
    /// rollback to a savepoint.
    static func spool(_ staging: TableSchema, columns: [Column], on c: any Connection) throws -> RowsSpool {
        let spool = try RowsSpool(table: staging.name, columns: columns)
        do {
            let reader = try c.reader(table: staging, columns: columns, keyRange: nil, batchSize: 10_000)
            defer { reader.close() }
            while let batch = try reader.next() { try spool.append(batch) }
            try spool.finish()
        } catch {
            spool.discard()
            throw error
        }
        return spool
    }

    /// Every batch of a staging table: from its spool, else read on `reading`.
    static func each(_ staging: TableSchema, columns: [Column], spool: RowsSpool?, on reading: any Connection, _ body: (RowBatch) throws -> Void) throws {
        if let spool { return try spool.forEachBatch(batchSize: 10_000, body) }
        let reader = try reading.reader(table: staging, columns: columns, keyRange: nil, batchSize: 10_000)
        defer { reader.close() }
        while let batch = try reader.next() { try body(batch) }
    }
}

/// Writes each batch by a keyed merge, counting what it did (`apply?reject=N`: counted only
/// where its savepoint stayed).
final class MergeBatchWriter: BatchWriter {
    let connection: any Connection
    let table: TableSchema
    let columns: [Column]
    let key: [String]
    private(set) var counts = MergeCounts()

    init(_ connection: any Connection, into table: TableSchema, columns: [Column], key: [String]) {
        self.connection = connection
        self.table = table
        self.columns = columns
        self.key = key
    }

    func write(_ batch: RowBatch) throws {
        counts = counts + (try connection.mergeRows(into: table, columns: columns, key: key, rows: batch))
    }
    func finish() throws {}
    func abort() {}
}

/// `apply?reject=N`: the staged upserts read as the load wrote them (in stored forms where it
/// sent them so), laid out as the target's columns, and merged a batch at a time, each in a
/// savepoint; the refused ones are kept for the answer.
final class UpsertsSettingAside {
    let staging: TableSchema
    /// As the staging table is read (what refused rows go back in).
    let columns: [Column]
    /// The same values as the target's columns of those names.
    let layout: [Column]
    let limit: Int
    /// The rows, read before the transaction where one connection reads and writes.
    let spool: RowsSpool?
    private(set) var refused: [RejectFile.Row] = []

    init(_ staging: TableSchema, into target: TableSchema, limit: Int, native: [String], service: ServiceHandlers, spoolOn c: (any Connection)?) throws {
        self.staging = staging
        self.limit = limit
        let columns = try staging.columns.map { try service.requested($0, native: native, table: staging.name) }
        self.columns = columns
        layout = try columns.map { s -> Column in
            guard let col = target.column(named: s.name) else { throw FerryError.columnNotFound(table: target.name, column: s.name) }
            let base = Column(name: col.name, nativeType: col.nativeType, logicalType: s.logicalType, isNullable: true)
            return s.readHints.contains(.nativeForm) ? base.storedForm : base
        }
        spool = try c.map { try ServiceHandlers.spool(staging, columns: columns, on: $0) }
    }

    func discard() { spool?.discard() }

    /// Merges the rows into `target` by `key` on `c` (read on `reading` where not spooled);
    /// returns the counts of the batches kept.
    func merge(into target: TableSchema, key: [String], on c: any Connection, reading: any Connection) throws -> MergeCounts {
        var counts = MergeCounts()
        let layout = self.layout
        let writer = try ServiceHandlers.rejecting(c, table: target.name, limit: limit, kept: { w in
            if let m = w as? MergeBatchWriter { counts = counts + m.counts }
        }) { MergeBatchWriter(c, into: target, columns: layout, key: key) }
        try ServiceHandlers.each(staging, columns: columns, spool: spool, on: reading) { try writer.write($0) }
        refused = writer.rejected
        return counts
    }
}
