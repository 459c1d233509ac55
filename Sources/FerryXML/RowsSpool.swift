import FerryCore
import Foundation

/// Rows parked in a temporary file, as a rows document, and read back a batch at a time: rows
/// that must be taken out of one place before a transaction writes them elsewhere (a staging
/// table no reader may stay open on while the transaction writes: on a SQLite file in a
/// rollback journal its shared lock would keep the commit out) are held one batch at a time,
/// not whole. The document is the protocol's, so every value comes back exactly as it went in.
///
/// The file is in the temporary folder (`TMPDIR`) and unlinked as soon as it is made: a crash
/// leaves nothing behind, and closing the spool frees the disk.
public final class RowsSpool {
    public let table: TableName
    public let columns: [Column]
    /// Rows appended.
    public private(set) var rows = 0
    /// Bytes of the file.
    public private(set) var bytes = 0
    private let file: TemporaryFile
    private var encoder: RowsEncoder
    private let pending = ByteOutput(capacity: 96 * 1024)
    private var finished = false
    static let piece = 64 * 1024
    static let readPiece = 256 * 1024

    /// A new empty spool for rows of `columns` (of `table`, for messages).
    public init(table: TableName, columns: [Column]) throws {
        self.table = table
        self.columns = columns
        guard let file = TemporaryFile(prefix: "ferry-rows") else {
            throw FerryError.copyFailed(table: table, endpoint: "", reason: "no temporary file for its rows (\(String(cString: strerror(errno)))); set TMPDIR to a folder with room")
        }
        self.file = file
        let types = columns.map(\.logicalType)
        encoder = RowsEncoder(types: types)
        XMLDocuments.RowsWriter(types: types).begin(table: table).withUnsafeBytes { pending.append(bytes: $0) }
    }

    /// Frees the file (the spool reads nothing after; closed when it goes, too).
    public func discard() { file.close() }

    /// Adds `batch`'s rows (laid out as `columns`).
    public func append(_ batch: RowBatch) throws {
        guard !finished else { throw failure("was added to after its end") }
        guard !batch.isEmpty else { return }
        rows += batch.count
        encoder.start(batch)
        while true {
            let done = encoder.fill(pending, limit: Self.piece)
            if pending.count >= Self.piece { try flush() }
            if done { break }
        }
    }

    /// Ends the document: every row is in the file.
    public func finish() throws {
        guard !finished else { return }
        XMLDocuments.RowsWriter(types: []).end().withUnsafeBytes { pending.append(bytes: $0) }
        try flush()
        finished = true
    }

    /// Hands the rows to `body` in batches of at most `batchSize`, in the order they were
    /// appended. Throws rather than hand on fewer rows than were appended.
    public func forEachBatch(batchSize: Int, _ body: (RowBatch) throws -> Void) throws {
        guard finished else { throw failure("was read before its end") }
        let decoder = XMLRowsStreamDecoder(columns: columns, batchSize: batchSize)
        var piece = [UInt8](repeating: 0, count: Self.readPiece)
        var offset = 0
        while true {
            guard let n = piece.withUnsafeMutableBytes({ p in p.baseAddress.flatMap { file.read(at: offset, count: p.count, into: $0) } }) else {
                throw failure("could not be read (\(String(cString: strerror(errno))))")
            }
            if n == 0 { break }
            offset += n
            piece.withUnsafeBytes { p in decoder.append(UnsafeRawBufferPointer(rebasing: p[0..<n])) }
            while let batch = try decoder.next() { try body(batch) }
        }
        while let batch = try decoder.next(final: true) { try body(batch) }
        guard decoder.rows == rows else { throw failure("gave back \(decoder.rows) of its \(rows) rows") }
    }

    private func flush() throws {
        defer { pending.removeAll() }
        if let why = file.write(pending.bytes) {
            throw failure("could not be written (\(why)): is the temporary folder full? Set TMPDIR to a folder with room")
        }
        bytes += pending.count
    }

    private func failure(_ why: String) -> FerryError {
        FerryError.copyFailed(table: table, endpoint: "", reason: "the temporary file of its rows \(why); nothing was changed")
    }
}
