import CLibPQ
import FerryCore

/// Loads batches with `COPY … FROM STDIN (FORMAT binary)`, several batches to a COPY: a COPY
/// stays open across `write`s until its batches hold `copyBytes` (or `finish`), so the server
/// loads one batch while the next is encoded and sent — one COPY per batch of 10,000 rows left
/// the server waiting between statements (5,000,000 two-integer rows: 500 COPYs took 2.8 s
/// where one took 1.2 s). The batches of the open COPY are kept, so that a row the server
/// rejects can be named by its key. Each value is encoded for the target column's actual type
/// (read from the catalog), and values that would change are refused before sending.
final class PostgresWriter: BatchWriter {
    private let connection: PostgresConnection
    private let columns: [Column]
    private let encoders: [PostgresValueCodec.Encoder]
    private let table: TableName
    private let copySQL: String
    private var buffer: [UInt8] = []
    /// The batches sent in the open COPY (none: no COPY is open), and their size.
    private var inCopy: [RowBatch] = []
    private var bytesInCopy = 0
    /// Batch bytes (`RowBatch.byteSize`) after which a COPY is ended.
    static let copyBytes = 2 * RowBatch.byteLimit

    init(connection: PostgresConnection, table target: TableSchema, columns: [Column]) throws {
        self.connection = connection
        self.columns = columns
        let table = target.name
        self.table = table
        var encoders: [PostgresValueCodec.Encoder] = []
        for c in columns {
            guard let t = target.column(named: c.name) else { throw FerryError.columnNotFound(table: table, column: c.name) }
            // A built-in type without a logical type, from PostgreSQL: its binary form as read.
            if c.readHints.contains(.nativeForm) {
                guard NativeTypeName(t.nativeType).base == NativeTypeName(c.nativeType).base else {
                    throw FerryError.invalidValue(
                        table: table, column: c.name, key: nil,
                        message: "\(c.nativeType) values in their binary form cannot be written into a \(t.nativeType) column")
                }
                encoders.append(.bytes)
                continue
            }
            guard let e = PostgresValueCodec.encoder(for: c.logicalType, into: t) else {
                throw FerryError.invalidValue(
                    table: table, column: c.name, key: nil,
                    message: "a \(c.logicalType) value cannot be written into a PostgreSQL \(t.nativeType) column exactly")
            }
            encoders.append(e)
        }
        self.encoders = encoders
        let d = connection.dialect
        copySQL = "COPY \(d.quote(table)) (" + columns.map { d.quote($0.name) }.joined(separator: ", ") + ") FROM STDIN (FORMAT binary)"
        buffer.reserveCapacity(1 << 20)
    }

    func finish() throws { try endCopy() }

    /// An open COPY is ended with an error (the server drops its rows), so that the caller's
    /// ROLLBACK can run.
    func abort() {
        inCopy = []
        bytesInCopy = 0
        let conn = connection.conn
        guard PQtransactionStatus(conn) == PQTRANS_ACTIVE else { return }
        _ = PQputCopyEnd(conn, "ferry: the load was aborted")
        connection.drainResults()
    }

    private func fail(_ row: Int, _ column: Int, _ message: String) -> BatchRowError {
        BatchRowError(row: row, error: .invalidValue(table: table, column: columns[column].name, key: nil, message: message))
    }

    func write(_ batch: RowBatch) throws {
        try PinnedBatch.with(batch) { try write(pinned: $0, batch: batch) }
    }

    private func write(pinned: PinnedBatch, batch: RowBatch) throws {
        let cols = pinned.columns
        // Encode into a local array: appending to a class property costs an exclusivity check each time.
        var buffer: [UInt8] = []
        swap(&buffer, &self.buffer)
        defer { swap(&buffer, &self.buffer) }
        buffer.removeAll(keepingCapacity: true)
        // Encode the whole batch first: nothing of it is sent when a value is refused.
        for row in 0..<pinned.count {
            PostgresValueCodec.put16(Int16(cols.count), &buffer)
            for c in 0..<cols.count {
                let col = cols[c]
                if col.isNull(row) {
                    PostgresValueCodec.put32(-1, &buffer)
                    continue
                }
                switch encoders[c] {
                case .bool:
                    PostgresValueCodec.put32(1, &buffer)
                    buffer.append(col.int(row) != 0 ? 1 : 0)
                case .int(let bytes, let range):
                    let v = col.int(row)
                    guard range.contains(v) else { throw fail(row, c, "\(v) does not fit the target's \(bytes * 8)-bit integer column") }
                    PostgresValueCodec.put32(Int32(bytes), &buffer)
                    switch bytes {
                    case 2: PostgresValueCodec.put16(Int16(v), &buffer)
                    case 4: PostgresValueCodec.put32(Int32(v), &buffer)
                    default: PostgresValueCodec.put64(v, &buffer)
                    }
                case .intAsNumeric:
                    var text = String(col.int(row))
                    _ = text.withUTF8 { PostgresValueCodec.appendNumeric(UnsafeRawBufferPointer($0), into: &buffer) }
                case .float8:
                    PostgresValueCodec.put32(8, &buffer)
                    PostgresValueCodec.put64(Int64(bitPattern: col.double(row).bitPattern), &buffer)
                case .float4:
                    let v = col.double(row)
                    let f = Float(v)
                    guard Double(f) == v || v.isNaN else { throw fail(row, c, "\(v) has no exact 32-bit float form") }
                    PostgresValueCodec.put32(4, &buffer)
                    PostgresValueCodec.put32(Int32(bitPattern: f.bitPattern), &buffer)
                case .numeric(let scale):
                    let text = col.bytes(row)
                    guard let digits = PostgresValueCodec.appendNumeric(text, into: &buffer) else {
                        throw fail(row, c, "'\(String(decoding: text, as: UTF8.self))' is not a decimal number")
                    }
                    if let scale, digits > scale, Self.hasNonZeroDigits(text, after: scale) {
                        throw fail(row, c, "\(String(decoding: text, as: UTF8.self)) has more than \(scale) decimal places: the target would round it")
                    }
                case .text, .bytes:
                    let b = col.bytes(row)
                    PostgresValueCodec.put32(Int32(b.count), &buffer)
                    buffer.append(contentsOf: b)
                case .jsonb:
                    let b = col.bytes(row)
                    PostgresValueCodec.put32(Int32(b.count + 1), &buffer)
                    buffer.append(1)
                    buffer.append(contentsOf: b)
                case .uuid:
                    let b = col.bytes(row)
                    guard b.count == 16 else { throw fail(row, c, "a UUID must be 16 bytes, not \(b.count)") }
                    PostgresValueCodec.put32(16, &buffer)
                    buffer.append(contentsOf: b)
                case .date:
                    let d = col.int(row) - PostgresValueCodec.epochDays
                    guard d > Int64(Int32.min), d < Int64(Int32.max) else { throw fail(row, c, "the date is out of PostgreSQL's range") }
                    PostgresValueCodec.put32(4, &buffer)
                    PostgresValueCodec.put32(Int32(d), &buffer)
                case .time:
                    PostgresValueCodec.put32(8, &buffer)
                    PostgresValueCodec.put64(col.int(row), &buffer)
                case .timestamp:
                    let (t, overflow) = col.int(row).subtractingReportingOverflow(PostgresValueCodec.epochMicros)
                    guard !overflow else { throw fail(row, c, "the timestamp is out of PostgreSQL's range") }
                    PostgresValueCodec.put32(8, &buffer)
                    PostgresValueCodec.put64(t, &buffer)
                }
            }
        }
        try send(buffer, batch: batch)
    }

    /// True when `text` (a decimal) has a non-zero digit more than `scale` places after the point.
    static func hasNonZeroDigits(_ text: UnsafeRawBufferPointer, after scale: Int) -> Bool {
        guard let dot = text.firstIndex(of: 46) else { return false }
        var i = dot + 1 + scale
        while i < text.count {
            if text[i] != 48 { return true }
            i += 1
        }
        return false
    }

    /// Sends a batch's rows in the open COPY (opened first when none is), and ends the COPY once
    /// its batches hold `copyBytes`.
    private func send(_ rows: [UInt8], batch: RowBatch) throws {
        if inCopy.isEmpty {
            let start = try connection.exec(copySQL)
            if start.status != PGRES_COPY_IN { throw connection.error(start.handle, sql: copySQL) }
            inCopy.append(batch)
            try put(PostgresValueCodec.header)
        } else {
            inCopy.append(batch)
        }
        bytesInCopy += batch.byteSize
        try put(rows)
        if bytesInCopy >= Self.copyBytes { try endCopy() }
    }

    /// Hands bytes of the open COPY to libpq (which sends them as the socket takes them).
    private func put(_ bytes: [UInt8]) throws {
        let conn = connection.conn
        let sent = bytes.withUnsafeBytes { raw -> Bool in
            var offset = 0
            let chunk = 1 << 20
            while offset < raw.count {
                let n = min(chunk, raw.count - offset)
                if PQputCopyData(conn, raw.baseAddress.unsafelyUnwrapped.advanced(by: offset).assumingMemoryBound(to: CChar.self), Int32(n)) != 1 {
                    return false
                }
                offset += n
            }
            return true
        }
        if !sent {
            // The connection failed: the COPY's result says why.
            _ = PQputCopyEnd(conn, "ferry: sending failed")
            try result()
            throw connection.error(nil, sql: nil)
        }
    }

    /// Ends the open COPY (its trailer, then the server's answer).
    private func endCopy() throws {
        guard !inCopy.isEmpty else { return }
        var trailer: [UInt8] = []
        PostgresValueCodec.put16(-1, &trailer)
        try put(trailer)
        _ = PQputCopyEnd(connection.conn, nil)
        try result()
    }

    /// The open COPY's result; a rejected row is named by its batch and row.
    private func result() throws {
        let batches = inCopy
        inCopy = []
        bytesInCopy = 0
        var failure: PostgresError?
        while let r = connection.nextResult() {
            if r.status != PGRES_COMMAND_OK && failure == nil { failure = connection.error(r.handle, sql: nil) }
        }
        guard let failure else { return }
        // "COPY t, line 3, column x: …": the line counts the COPY's rows, over its batches.
        if let context = failure.context, let line = Self.lineNumber(in: context), line >= 1 {
            var column: String?
            if let range = context.range(of: ", column ") {
                column = context[range.upperBound...].split(separator: ":").first.map(String.init)
            }
            let error = FerryError.invalidValue(table: table, column: column, key: nil, message: failure.messageOnly)
            var first = 0
            for b in batches {
                if line - 1 < first + b.count { throw BatchRowError(row: line - 1 - first, error: error, batch: b) }
                first += b.count
            }
        }
        throw failure
    }

    static func lineNumber(in context: String) -> Int? {
        guard let r = context.range(of: "line ") else { return nil }
        return Int(context[r.upperBound...].prefix { $0.isNumber })
    }
}

extension PostgresError {
    /// The message with SQLSTATE and hint, without the endpoint and SQL (for row-level errors).
    var messageOnly: String {
        var s = message + (sqlState.isEmpty ? "" : " (SQLSTATE \(sqlState))")
        if let advice = advice ?? hint { s += "; " + advice }
        return s
    }
}
