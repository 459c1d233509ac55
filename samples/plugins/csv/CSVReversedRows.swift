import FerryCore
import Foundation

/// A descending read's rows: the range's last `limit` rows, returned last first. Up to
/// `memoryRows` rows are kept in memory (a ring of the last ones read); a read that keeps more
/// (no limit, or a large one) writes them in chunks to a temporary file and reads the chunks
/// back last first, so memory holds one chunk.
final class CSVReversedRows {
    private let limit: Int?
    private let table: TableName
    private static let memoryRows = 10_000
    /// Kept rows, oldest first: (data row number, fields).
    private var ring: [(Int64, [String])] = []
    private var ringStart = 0
    private var spill: CSVRowSink?
    private var spillPath: String?
    /// Start offset of each chunk in the spill file.
    private var chunkStarts: [Int64] = []
    private var chunkEnd: Int64 = 0
    private var pending: [(Int64, [String])] = []
    private var returned = 0

    init(limit: Int?, table: TableName) {
        self.limit = limit
        self.table = table
    }

    deinit { discard() }

    func add(_ fields: [String], row: Int64) throws {
        if let limit, limit <= Self.memoryRows {
            guard limit > 0 else { return }
            if ring.count < limit {
                ring.append((row, fields))
            } else {
                ring[ringStart] = (row, fields)
                ringStart = (ringStart + 1) % limit
            }
            return
        }
        pending.append((row, fields))
        if pending.count >= Self.memoryRows { try flushChunk() }
    }

    private func flushChunk() throws {
        guard !pending.isEmpty else { return }
        if spill == nil {
            let path = FileManager.default.temporaryDirectory.path + "/ferry-csv-descending-" + CSVFileSystem.randomSuffix() + ".csv"
            spill = try CSVRowSink(path: path)
            spillPath = path
        }
        guard let spill else { return }
        chunkStarts.append(spill.offset)
        // The row number travels as the first field, for messages about the row.
        for (row, fields) in pending { try spill.write([String(row)] + fields) }
        pending.removeAll(keepingCapacity: true)
    }

    /// Ends gathering: the rows are complete.
    func seal() throws {
        if spill != nil {
            try flushChunk()
            chunkEnd = spill?.offset ?? 0
            try spill?.finish()
        } else {
            // In memory: oldest first.
            ring = Array(ring[ringStart...] + ring[..<ringStart]) + pending
            pending = []
            ringStart = 0
        }
    }

    /// The next batch, largest key first.
    func next(into reader: CSVBatchReader) throws -> RowBatch? {
        var batch = reader.makeBatch()
        var n = 0
        while !batch.isFull(rows: n, limit: reader.rowLimit) {
            if let limit, returned >= limit { break }
            guard let (row, fields) = try take() else { break }
            try reader.append(fields, row: row, to: &batch)
            n += 1
            returned += 1
        }
        return n == 0 ? nil : batch
    }

    /// The next row to return (the last one of what is left).
    private func take() throws -> (Int64, [String])? {
        if let last = ring.popLast() { return last }
        guard let path = spillPath, let start = chunkStarts.popLast() else { return nil }
        // The last chunk not read yet, read whole (one chunk), then returned from its end.
        let chunk = try CSVRowSource(path: path, table: table, resume: CSVResumePoint(offset: start, rowsBefore: 0), readsHeader: false, end: chunkEnd)
        chunk.skipsBlankLines = false
        defer { chunk.close() }
        var rows: [(Int64, [String])] = []
        while var fields = try chunk.next() {
            let row = Int64(fields.removeFirst()) ?? 0
            rows.append((row, fields))
        }
        chunkEnd = start
        ring = rows
        return ring.popLast()
    }

    func discard() {
        spill?.discard()
        spill = nil
        if let spillPath { CSVFileSystem.remove(spillPath) }
        spillPath = nil
    }
}
