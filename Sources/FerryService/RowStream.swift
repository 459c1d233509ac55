import FerryCore
import FerryXML
import Foundation

/// One streamed page of rows: the connection and reader live across the blocking steps.
final class RowStream {
    let lease: SnapshotStore.Lease
    let reader: any BatchReader
    let writer: XMLDocuments.RowsWriter
    let table: TableName
    let keyIndexes: [Int]
    let limit: Int?
    /// Bytes of `<r>` elements after which the page ends early (with `<next>`), whatever its row
    /// limit: a page of 20 MB documents is a few rows, a page of integers `limit` rows.
    let pageBytes: Int
    var sent = 0
    var sentBytes = 0
    /// The page ended on `pageBytes` before the reader ran out.
    var cut = false
    /// No more batches: the reader ran out or the page is full.
    var exhausted = false
    var encoder: RowsEncoder
    /// The end of the page should it end after the batch being encoded: its last row's key
    /// in `<next>`, then `</rows>` (kept instead of the batch).
    var closing: [UInt8]?
    /// Largest key first: never followed by another page.
    var descending = false

    /// `hints`: columns a client's cast rule reads in the engine's own text or JSON form, or with
    /// zero dates as NULL (named columns only: the driver builds the expression, never the request).
    init(service: ServiceHandlers, table name: TableName, after: [String], upTo: [String] = [], columns wanted: [String], hints: [String: ReadHints] = [:],
         limit: Int, pageBytes: Int? = nil, descending: Bool = false, buckets: (key: [String], modulus: Int64, residues: [Int64], hash: KeyHash)? = nil, since: (column: String, value: String)? = nil,
         snapshot: String? = nil) throws {
        self.pageBytes = pageBytes ?? service.configuration.pageBytes
        let lease = try service.read(snapshot: snapshot)
        let c = lease.connection
        do {
            let table = try service.served(name, in: c)
            let schema = try c.describe(table, rowEstimate: false)
            var columns = try wanted.isEmpty ? schema.columns : wanted.map { w in
                guard let col = schema.column(named: w) else { throw FerryError.columnNotFound(table: table, column: w) }
                return col
            }
            for (name, hint) in hints {
                guard let i = columns.firstIndex(where: { $0.name == name }) else {
                    throw FerryError.columnNotFound(table: table, column: name)
                }
                columns[i].readHints.formUnion(hint)
                if hint.contains(.nativeForm) {
                    columns[i].logicalType = .binary(maxLength: nil)
                } else if hint.contains(.jsonForm) {
                    columns[i].logicalType = .json
                } else if hint.contains(.textForm) {
                    columns[i].logicalType = .text
                }
            }
            columns.removeAll { !$0.logicalType.isSupported }
            var range: KeyRange?
            var keyIndexes: [Int] = []
            if let key = schema.preferredKey?.columns {
                // Keyset paging needs the key in the page, to say where the next one starts.
                for k in key where !columns.contains(where: { $0.name == k }) {
                    guard let col = schema.column(named: k) else { continue }
                    columns.append(col)
                }
                keyIndexes = key.compactMap { k in columns.firstIndex { $0.name == k } }
                // `after=` (exclusive) and `upto=` (inclusive) bounds, one value per key column.
                func bound(_ texts: [String], _ parameter: String) throws -> [Value]? {
                    guard !texts.isEmpty else { return nil }
                    guard texts.count == key.count else {
                        throw ServiceError.badRequest("\(parameter) needs \(key.count) values, one per key column (\(key.joined(separator: ", ")))", table: table.description)
                    }
                    return try zip(texts, keyIndexes).map { text, index in
                        var buf = ColumnBuffer(storage: columns[index].logicalType.storage)
                        do { try WireValue.appendKey(text, as: columns[index].logicalType, to: &buf) } catch {
                            throw ServiceError.badRequest("\(parameter): \(error)", table: table.description)
                        }
                        return Value(column: buf, row: 0, type: columns[index].logicalType)
                    }
                }
                range = KeyRange(key: key, after: try bound(after, "after"), upTo: try bound(upTo, "upto"), limit: limit, descending: descending)
                if let buckets {
                    // As read: a key column read in its stored form is hashed as stored.
                    let bucketKey = try (buckets.key.isEmpty ? key : buckets.key).map { n in
                        guard let col = columns.first(where: { $0.name == n }) ?? schema.column(named: n) else { throw FerryError.columnNotFound(table: table, column: n) }
                        return col
                    }
                    if buckets.hash == .integer && KeyHash.suited(to: bucketKey) != .integer {
                        throw ServiceError.badRequest("keyhash=integer needs a key of one integer column", table: table.description)
                    }
                    range?.buckets = BucketFilter(key: bucketKey, modulus: buckets.modulus, residues: buckets.residues, hash: buckets.hash)
                }
            } else if !after.isEmpty || !upTo.isEmpty || descending || buckets != nil {
                throw ServiceError.badRequest("table \(table) has no key: after, upto, order=desc and buckets need one", table: table.description)
            }
            if let since {
                // Only rows above a value of one column (an incremental copy), typed by the table's
                // own column: a structured bound the driver renders, never SQL from the request.
                guard let col = schema.column(named: since.column), Self.followable(col.logicalType) else {
                    throw ServiceError.badRequest("sincecolumn=\(since.column.prefix(64)) is not an integer, date or timestamp column of \(table)", table: table.description)
                }
                var buf = ColumnBuffer(storage: col.logicalType.storage)
                do { try WireValue.appendKey(since.value, as: col.logicalType, to: &buf) } catch {
                    throw ServiceError.badRequest("since: \(error)", table: table.description)
                }
                if range == nil { range = KeyRange(key: []) }
                range?.since = ColumnBound(column: col.name, value: Value(column: buf, row: 0, type: col.logicalType))
            }
            self.reader = try c.reader(table: schema, columns: columns, keyRange: range, batchSize: min(limit, 10_000))
            self.lease = lease
            // Columns read natively from an engine that keeps a stored form hold stored values,
            // written in their own form (`s="t"`…).
            let stored = columns.map { service.configuration.storedForm != nil && $0.readHints.contains(.nativeForm) }
            self.writer = XMLDocuments.RowsWriter(types: columns.map(\.logicalType), stored: stored)
            self.encoder = RowsEncoder(types: columns.map(\.logicalType), stored: stored)
            self.table = table
            self.keyIndexes = keyIndexes
            self.limit = range == nil ? nil : limit
            self.descending = descending
        } catch {
            lease.release()
            throw error
        }
    }

    func begin() -> [UInt8] { writer.begin(table: table) }

    /// Bytes of the page per piece handed to the response: rows are encoded a piece at a time
    /// (a large value in slices), so the page is never held, only the batch being encoded.
    static let pieceBytes = 128 * 1024
    /// Where each piece is encoded (reused from piece to piece).
    private let piece = ByteOutput(capacity: RowStream.pieceBytes + 64 * 1024)

    /// The next piece of `<r>` elements; nil when the page is done (the reader ran out, the row
    /// limit or the page's bytes were reached). A piece that ends a batch is handed over before
    /// the next batch is read, so a reading error comes between rows.
    func nextChunk() throws -> Data? {
        let out = piece
        out.removeAll()
        while out.count < Self.pieceBytes {
            if encoder.isIdle {
                if out.count > 0 || exhausted { break }
                if limit != nil && sent > 0 && sentBytes >= pageBytes {
                    cut = true
                    exhausted = true
                    break
                }
                guard let batch = try reader.next() else {
                    exhausted = true
                    break
                }
                sent += batch.count
                if !keyIndexes.isEmpty && !descending {
                    // `<next>` and `</rows>`, should the page end after this batch (pages go
                    // forward only: a descending read is one look at a range's last keys).
                    closing = writer.end(next: (batch, batch.count - 1, keyIndexes))
                }
                encoder.start(batch)
            }
            let before = out.count
            _ = encoder.fill(out, limit: Self.pieceBytes)
            sentBytes += out.count - before
        }
        // Handed over in the memory it was encoded in (a copy here was one more pass over every
        // byte of the page: 100 M instructions of the service's 2,570 M for 200,000 rows).
        return out.count == 0 ? nil : out.take()
    }

    /// `</rows>`, with `<next>` when the page is full by rows or bytes (more rows may follow).
    func end() -> [UInt8] {
        if let limit, sent >= limit || cut, let closing { return closing }
        return writer.end()
    }

    func close() {
        reader.close()
        lease.release()
    }
}

// unchecked: a page's stream (and its connection) is used by one request's steps, one at a time.
extension RowStream: @unchecked Sendable {}

extension RowStream {
    /// Column types a `since=` bound may be on.
    static func followable(_ type: LogicalType) -> Bool {
        switch type {
        case .int16, .int32, .int64, .date, .timestamp: return true
        default: return false
        }
    }
}
