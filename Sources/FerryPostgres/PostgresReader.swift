import CLibPQ
import FerryCore
import Foundation

/// Reads a table with `COPY (SELECT …) TO STDOUT (FORMAT binary)`, decoding each field
/// straight into the batch's buffers.
final class PostgresReader: BatchReader {
    private let connection: PostgresConnection
    private let columns: [Column]
    private let types: [LogicalType]
    private let kinds: [Kind]
    private let table: TableName
    private let batchSize: Int
    private let keyIndexes: [Int]
    private var headerSeen = false
    /// The stream's end marker (a tuple count of -1) arrived.
    private var trailerSeen = false
    /// Rows decoded so far, checked against the server's `COPY n` command tag at the end.
    private var rowsDecoded = 0
    private var done = false
    private var active = false
    /// A savepoint taken inside a read snapshot (released after a whole read, else rolled back to).
    private var savepoint = false
    private var whole = false

    typealias Kind = PostgresBinaryField.Kind

    init(connection: PostgresConnection, table: TableSchema, columns: [Column], keyRange: KeyRange?, batchSize: Int) throws {
        self.connection = connection
        self.columns = columns
        self.types = columns.map(\.logicalType)
        self.table = table.name
        self.batchSize = batchSize
        let key = table.preferredKey?.columns ?? []
        self.keyIndexes = key.compactMap { k in columns.firstIndex { $0.name == k } }
        var kinds: [Kind] = []
        let d = connection.dialect
        var select: [String] = []
        for c in columns {
            let q = d.quote(c.name)
            // A cast asked for PostgreSQL's own text or JSON form of the value.
            if c.readHints.contains(.jsonForm) {
                kinds.append(.bytes)
                select.append("to_json(\(q))::text")
                continue
            }
            if c.readHints.contains(.textForm) {
                kinds.append(.bytes)
                select.append(q + "::text")
                continue
            }
            switch c.logicalType {
            case .boolean: kinds.append(.bool); select.append(q)
            case .int16, .int32, .int64: kinds.append(.int); select.append(q)
            case .float32, .float64: kinds.append(.float); select.append(q)
            case .decimal: kinds.append(.numeric); select.append(q)
            // jsonb's binary form has a version byte: read both json types as their text.
            case .json: kinds.append(.bytes); select.append(q + "::text")
            // CHAR(n) padding is not part of the value: read it as PostgreSQL's own char → text
            // cast does (trailing spaces dropped), as MySQL does by default.
            case .text(_, true): kinds.append(.bytes); select.append(q + "::text")
            // Enum labels and character values arrive as their text.
            case .enumeration, .text: kinds.append(.bytes); select.append(q)
            case .binary: kinds.append(.bytes); select.append(q)
            case .uuid: kinds.append(.uuid); select.append(q)
            case .date: kinds.append(.date); select.append(q)
            case .time: kinds.append(.time); select.append(q)
            case .timestamp: kinds.append(.timestamp); select.append(q)
            case .unsupported(let native):
                throw FerryError.invalidValue(table: table.name, column: c.name, key: nil, message: "type \(native) cannot be read")
            }
        }
        self.kinds = kinds
        let only = try connection.readsWithOnly(table.name) ? "ONLY " : ""
        var sql = "SELECT " + select.joined(separator: ", ") + " FROM " + only + d.quote(table.name)
        if let sample = keyRange?.sample, let clause = d.tableSample(sample) { sql += " " + clause }
        if let range = keyRange { sql += try range.sqlSuffix(dialect: d) { try PostgresValueCodec.literals($0, connection) } }
        let copy = "COPY (\(sql)) TO STDOUT (FORMAT binary)"
        // Inside a copy's read snapshot, a failed read must not abort the snapshot for the next table.
        if connection.inReadSnapshot {
            try connection.execute("SAVEPOINT ferry_read")
            savepoint = true
        }
        let res = try connection.exec(copy)
        guard res.status == PGRES_COPY_OUT else {
            let e = connection.error(res.handle, sql: copy)
            if savepoint { try? connection.execute("ROLLBACK TO SAVEPOINT ferry_read") }
            savepoint = false
            if e.sqlState == "42501" {
                throw FerryError.copyFailed(table: table.name, endpoint: connection.endpoint.redacted,
                                            reason: "permission denied: the role may not read \(table.name); GRANT SELECT on it or connect as another role")
            }
            throw e
        }
        active = true
    }

    func close() {
        defer {
            if savepoint {
                savepoint = false
                try? connection.execute(whole ? "RELEASE SAVEPOINT ferry_read" : "ROLLBACK TO SAVEPOINT ferry_read")
            }
        }
        // An unfinished COPY (the copy failed elsewhere).
        guard active else { return }
        active = false
        connection.abandonCopyOut()
    }

    func next() throws -> RowBatch? {
        guard !done else { return nil }
        var batch = RowBatch(types: types, capacity: batchSize)
        var n = 0
        while !batch.isFull(rows: n, limit: batchSize) {
            var buf: UnsafeMutablePointer<CChar>?
            let len = try connection.nextCopyData(&buf)
            if len == -1 {
                done = true
                active = false
                try finishCopy()
                whole = true
                break
            }
            guard len > 0, let buf else {
                done = true
                active = false
                throw connection.error(nil, sql: nil)
            }
            defer { PQfreemem(buf) }
            let rows = try decode(UnsafeRawPointer(buf), Int(len), into: &batch)
            n += rows
            rowsDecoded += rows
        }
        return n == 0 ? nil : batch
    }

    /// Ends the COPY and proves the read is whole: the stream's end marker arrived, and the row
    /// count the server reports for free (`COPY n`) is the number of rows decoded.
    private func finishCopy() throws {
        var reported: Int?
        while let r = try connection.awaitResult() {
            if r.status != PGRES_COMMAND_OK { throw connection.error(r.handle, sql: nil) }
            if let count = r.commandRows { reported = count }
        }
        guard trailerSeen else { throw malformed() }
        if let reported, reported != rowsDecoded {
            throw FerryError.copyFailed(
                table: table, endpoint: connection.endpoint.redacted,
                reason: "the server reports \(reported) rows sent (COPY \(reported)) but \(rowsDecoded) were read; nothing is reported as copied")
        }
    }

    private func malformed() -> FerryError {
        .copyFailed(table: table, endpoint: connection.endpoint.redacted, reason: "malformed binary COPY data from the server")
    }

    /// Decodes the tuples in one CopyData message; returns how many rows it added.
    private func decode(_ p: UnsafeRawPointer, _ len: Int, into batch: inout RowBatch) throws -> Int {
        var o = 0
        if !headerSeen {
            guard let header = PostgresValueCodec.headerLength(p, len) else { throw malformed() }
            o = header
            headerSeen = true
        }
        var rows = 0
        while o + 2 <= len {
            let fields = Int(PostgresValueCodec.int16(p + o))
            o += 2
            if fields == -1 {
                trailerSeen = true
                return rows
            }
            guard fields == kinds.count else { throw malformed() }
            let rowStart = o
            for i in 0..<fields {
                guard o + 4 <= len else { throw malformed() }
                let n = Int(PostgresValueCodec.int32(p + o))
                o += 4
                if n < 0 {
                    batch.columns[i].appendNull()
                    continue
                }
                guard o + n <= len else { throw malformed() }
                try decodeField(p + o, n, column: i, into: &batch.columns[i], row: (p, rowStart, len))
                o += n
            }
            rows += 1
        }
        return rows
    }

    /// Decodes one field of `n` bytes (already checked to lie inside the message).
    @inline(__always)
    private func decodeField(_ f: UnsafeRawPointer, _ n: Int, column i: Int, into col: inout ColumnBuffer, row: (UnsafeRawPointer, Int, Int)) throws {
        do {
            try PostgresBinaryField.decode(kinds[i], f, n, into: &col)
        } catch .width(let allowed, let got) {
            // Not problem(): it decodes the key again, which may be this very field.
            throw FerryError.copyFailed(
                table: table, endpoint: connection.endpoint.redacted,
                reason: "malformed binary COPY data from the server: column \(columns[i].name) has a \(got)-byte field where its type has \(allowed.map(String.init).joined(separator: " or ")) bytes")
        } catch .malformed {
            throw malformed()
        } catch .value(let message) {
            throw problem(i, row, message)
        }
    }

    /// An error naming table, column and the row's key (decoded again from the tuple).
    private func problem(_ column: Int, _ row: (UnsafeRawPointer, Int, Int), _ message: String) -> FerryError {
        var key: String?
        if !keyIndexes.isEmpty {
            var values: [Int: String] = [:]
            var o = row.1
            for i in 0..<kinds.count where o + 4 <= row.2 {
                let n = Int(PostgresValueCodec.int32(row.0 + o))
                o += 4
                if keyIndexes.contains(i) {
                    if n < 0 {
                        values[i] = "NULL"
                    } else {
                        var tmp = ColumnBuffer(storage: types[i].storage)
                        if (try? decodeField(row.0 + o, n, column: i, into: &tmp, row: row)) != nil {
                            values[i] = Value(column: tmp, row: 0, type: types[i]).description
                        }
                    }
                }
                o += max(n, 0)
            }
            key = "(" + keyIndexes.map { "\(columns[$0].name)=\(values[$0] ?? "?")" }.joined(separator: ", ") + ")"
        }
        return .invalidValue(table: table, column: columns[column].name, key: key, message: message)
    }
}
