import CSV
import FerryCore
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where a read can start again in a file: the byte after a row, and how many data rows come
/// before that byte.
struct CSVResumePoint: Hashable, Sendable {
    var offset: Int64
    var rowsBefore: Int64
}

/// The records of one CSV file, parsed by CSV.swift's streaming reader (RFC 4180, quoted
/// fields with line breaks, nothing trimmed), one at a time: memory holds one record and
/// CSV.swift's 64 KB buffer, whatever the size of the file.
///
/// Reading from the start, the first record is the header. Reading from a `CSVResumePoint`,
/// the caller knows the header already. Errors name the table and the data row.
final class CSVRowSource {
    let path: String
    /// The file as messages name it: the table's file in the folder, whichever file (a
    /// snapshot's link, a transaction's new file) holds its rows.
    let shown: String
    let table: TableName
    /// The file as opened: the rows read are this state of it, whatever renames happen meanwhile.
    let identity: CSVFileSystem.Identity
    /// The header's fields (a leading byte order mark taken off); nil when reading from a
    /// resume point, or when the file is empty.
    private(set) var header: [String]?
    /// Data rows returned so far, counted from the start of the file.
    private(set) var rowsRead: Int64
    /// The byte after the last record returned.
    private(set) var offset: Int64
    /// Blank lines are skipped (tables of two columns or more, where a blank line cannot be a
    /// row); in a one-column table a blank line is a row holding an empty field.
    var skipsBlankLines = true

    /// True when the read started at a resume point (the header was not read).
    let resumed: Bool
    private let fd: Int32
    private let input: CSVFileInput
    private let parser: CSVReader
    private var closed = false

    /// Opens `path`: from the start (reading the header), or from `resume`, up to `end` bytes
    /// (default: the whole file).
    /// `resumeAt` is asked, once the file is open, where to start in that state of it.
    init(
        path: String, shown: String? = nil, table: TableName, resume: CSVResumePoint? = nil, readsHeader: Bool = true, end: Int64? = nil,
        resumeAt: ((CSVFileSystem.Identity) -> CSVResumePoint?)? = nil
    ) throws {
        self.path = path
        self.shown = shown ?? path
        self.table = table
        let fd = try CSVFileSystem.openForReading(path)
        guard let identity = CSVFileSystem.identity(fd: fd) else {
            CSVFileSystem.closeFile(fd)
            throw CSVFileError("cannot read \(path): \(CSVFileSystem.lastError())")
        }
        let resume = resume ?? resumeAt?(identity)
        resumed = resume != nil
        let start = resume?.offset ?? 0
        let input = CSVFileInput(fd: fd, path: path, start: start, end: min(end ?? identity.size, identity.size))
        do {
            parser = try CSVReader(stream: input, hasHeaderRow: false, trimFields: false)
        } catch {
            CSVFileSystem.closeFile(fd)
            throw CSVFileError("cannot read \(path): \(error)")
        }
        self.fd = fd
        self.input = input
        self.identity = identity
        self.rowsRead = resume?.rowsBefore ?? 0
        self.offset = start
        if resume == nil && readsHeader {
            if var fields = try record() {
                if let first = fields.first, first.unicodeScalars.first == "\u{FEFF}" {
                    fields[0] = String(first.unicodeScalars.dropFirst())
                }
                header = fields
            }
        }
    }

    deinit { close() }

    func close() {
        guard !closed else { return }
        closed = true
        CSVFileSystem.closeFile(fd)
    }

    /// The next data row's fields; nil at the end of the file.
    func next() throws -> [String]? {
        while true {
            guard let fields = try record() else { return nil }
            if lastWasBlank && skipsBlankLines { continue }
            rowsRead += 1
            return fields
        }
    }

    private var lastWasBlank = false

    /// The next record, header or not.
    private func record() throws -> [String]? {
        // Closed: the descriptor may be another file's by now.
        guard !closed else { return nil }
        let fields = parser.next()
        if let error = parser.error {
            throw failure(error)
        }
        guard let fields else { return nil }
        guard let framed = input.takeRecord() else {
            // CSV.swift and the framer disagree on where records end: never for a file CSV.swift
            // reads to the end, but say so rather than resume at a wrong offset.
            throw CSVFileError("\(shown): cannot tell where row \(rowsRead + 1) ends")
        }
        offset = framed.end
        lastWasBlank = framed.blank
        return fields
    }

    /// Counts the data rows of `path` by framing its bytes, without parsing fields (the
    /// header not counted; blank lines not counted when `skipsBlankLines`).
    static func countRows(path: String, skipsBlankLines: Bool) throws -> (rows: Int64, identity: CSVFileSystem.Identity) {
        let fd = try CSVFileSystem.openForReading(path)
        defer { CSVFileSystem.closeFile(fd) }
        guard let identity = CSVFileSystem.identity(fd: fd) else { throw CSVFileError("cannot read \(path): \(CSVFileSystem.lastError())") }
        var framer = CSVFramer()
        var records: Int64 = 0
        var rows: Int64 = 0
        let count = { (_: Int64, blank: Bool) in
            if records > 0 && !(blank && skipsBlankLines) { rows += 1 }
            records += 1
        }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var offset: Int64 = 0
        while offset < identity.size {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(offset)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw CSVFileError("cannot read \(path): \(CSVFileSystem.lastError())")
            }
            if n == 0 { break }
            buffer.withUnsafeBytes { framer.feed(UnsafeRawBufferPointer(rebasing: $0[0..<n]), base: offset, emit: count) }
            offset += Int64(n)
        }
        framer.finish(at: offset, emit: count)
        return (rows, identity)
    }

    private func failure(_ error: any Error) -> any Error {
        if let e = error as? CSVError {
            switch e {
            case .unicodeDecoding:
                return FerryError.invalidValue(
                    table: table, column: nil, key: nil,
                    message: "row \(rowsRead + 1) of \(shown) is not valid UTF-8 (text that is not UTF-8 is written \\b followed by base64)")
            case .streamErrorHasOccurred(let inner):
                return inner
            default:
                break
            }
        }
        if let e = input.streamError { return e }
        return CSVFileError("cannot read \(shown) (row \(rowsRead + 1)): \(error)")
    }
}
