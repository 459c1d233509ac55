import CSV
import FerryCore
import Foundation

/// A new file of CSV records, written by CSV.swift's writer (RFC 4180: a field holding `"`,
/// `,`, CR or LF is quoted, `"` doubled), each record ended by LF: a table file, a sorted run,
/// or a spill of a descending read. It is created under a temporary name and becomes a table's
/// file only when a commit renames it.
final class CSVRowSink {
    let path: String
    /// Data rows written (the header not counted).
    private(set) var rows: Int64 = 0
    private let fd: Int32
    private let output: CSVFileOutput
    private var open = true

    /// Creates `path`, which must not exist.
    init(path: String) throws {
        self.path = path
        fd = try CSVFileSystem.createExclusive(path)
        output = CSVFileOutput(fd: fd, path: path, start: 0)
    }

    deinit {
        if open { discard() }
    }

    /// The offset at which the next record starts.
    var offset: Int64 { output.position }

    /// Starts the file as a byte-for-byte copy of `existing` (its header and rows), so that an
    /// append writes only the new rows; a line end is added when the copy lacks one. Call
    /// before writing anything else.
    func copy(from existing: String) throws {
        let n = try CSVFileSystem.copyFile(existing, to: fd, path: path)
        output.skip(to: n)
        if n > 0, let last = CSVFileSystem.lastByte(existing), last != 0x0A, last != 0x0D {
            try output.append([0x0A])
        }
    }

    /// Writes the header row. A name CSV.swift cannot write literally is refused (see
    /// `CSVValueCodec.isWritable`), as a header cannot be escaped.
    func writeHeader(_ names: [String]) throws {
        for n in names where !CSVValueCodec.isWritable(n) {
            throw FerryError.invalidOption("column name '\(n)' cannot be written into a CSV header (a double quote joined to a combining mark); rename the column")
        }
        if names.first?.unicodeScalars.first == "\u{FEFF}" {
            // The reader takes a byte order mark off the header: one more keeps the name's own.
            try output.append([0xEF, 0xBB, 0xBF])
        }
        try record(names)
    }

    /// Writes one data row of field texts (already encoded by `CSVValueCodec`).
    func write(_ fields: [String]) throws {
        try record(fields.map(CSVValueCodec.writable))
        rows += 1
    }

    private func record(_ fields: [String]) throws {
        // A writer per record: CSV.swift puts a line end before every record but its first, and
        // this file ends each record instead (so a file can be appended to, and a record's
        // offsets are exact).
        let writer = try CSVWriter(stream: output)
        do {
            try writer.write(row: fields, quotedAtIndex: { CSVValueCodec.needsQuotes(fields[$0]) })
        } catch {
            throw output.streamError ?? CSVFileError("cannot write \(path): \(error)")
        }
        try output.append([0x0A])
    }

    /// Flushes the file to disk and closes it; returns its identity.
    @discardableResult
    func finish() throws -> CSVFileSystem.Identity {
        guard open else { throw CSVFileError("\(path) was already closed") }
        do {
            try output.flush()
            try CSVFileSystem.sync(fd, path: path)
        } catch {
            discard()
            throw error
        }
        let identity = CSVFileSystem.identity(fd: fd)
        CSVFileSystem.closeFile(fd)
        open = false
        guard let identity else { throw CSVFileError("cannot read \(path) back: \(CSVFileSystem.lastError())") }
        return identity
    }

    /// Closes and removes the file.
    func discard() {
        if open {
            CSVFileSystem.closeFile(fd)
            open = false
        }
        CSVFileSystem.remove(path)
    }
}
