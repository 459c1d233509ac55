import CLibPQ
import FerryCore

/// Loads batches with `COPY … FROM STDIN (FORMAT binary)`, many batches to a COPY: a COPY stays
/// open across `write`s (until `finish`, or until the keys it keeps reach `keptKeyBytes`), so
/// the server loads one batch while the next is encoded and sent. Each end of a COPY is a
/// pause: the writer waits for the server to load everything sent, and the reader behind it
/// for room — one COPY per batch of 10,000 rows left the server waiting between statements
/// (5,000,000 two-integer rows: 500 COPYs took 2.8 s where one took 1.2 s), and one per 2 MiB
/// of batches (130 for 1,000,000 bench_orders rows) still left a core idle 1–3 CPU-s of a
/// PostgreSQL → PostgreSQL copy. Of the open COPY's rows only the target's key values are
/// kept, so that a row the server rejects is named by its key. Each value is encoded for the
/// target column's actual type (read from the catalog), and values that would change are
/// refused before sending.
final class PostgresWriter: BatchWriter {
    private let connection: PostgresConnection
    private let columns: [Column]
    private let encoders: [PostgresValueCodec.Encoder]
    private let table: TableName
    private let copySQL: String
    /// A COPY is open.
    private var copyOpen = false
    /// The key values of the open COPY's rows (the key's columns alone, copied: each batch's
    /// arrays kept whole cost 10 MB more).
    private var keysInCopy = RowBatch(columns: [])
    /// The target's key (`TableSchema.preferredKey`), as indexes into `columns`; empty when the
    /// table has none (a rejected row is then named by its place).
    private let keyColumns: [Int]
    /// Rows sent so far, and before the open COPY's first batch.
    private var given = 0
    private var copyFirst = 0
    /// Rows the server reported copied (`COPY n`), over every COPY of this writer.
    private var stored: Int64 = 0
    var rowsStored: Int64? { stored }
    /// Bytes of kept key values (`RowBatch.byteSize`) after which a COPY is ended: 2 MiB, the
    /// keys of 262,144 rows of one 64-bit key.
    static let keptKeyBytes = 2 * RowBatch.byteLimit

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
        let key = target.preferredKey?.columns ?? []
        let keyColumns = key.compactMap { k in columns.firstIndex { $0.name == k } }
        self.keyColumns = keyColumns.count == key.count ? keyColumns : []
        let d = connection.dialect
        copySQL = "COPY \(d.quote(table)) (" + columns.map { d.quote($0.name) }.joined(separator: ", ") + ") FROM STDIN (FORMAT binary)"
    }

    func finish() throws { try endCopy() }

    /// An open COPY is ended with an error (the server drops its rows), so that the caller's
    /// ROLLBACK can run.
    func abort() {
        copyOpen = false
        keysInCopy = RowBatch(columns: [])
        let conn = connection.conn
        guard PQtransactionStatus(conn) == PQTRANS_ACTIVE else { return }
        _ = PQputCopyEnd(conn, "ferry: the load was aborted")
        try? connection.flushOut()
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
        let count = pinned.count
        guard count > 0 else { return }
        // The batch is encoded whole before anything is sent (nothing of it reaches the server
        // when a value is refused), by stores into memory sized once from an upper bound of the
        // encoding: appending field by field to an array cost a uniqueness and capacity check
        // per byte (330 instructions a row of two integers, callgrind).
        var bound = 2 * count
        for c in 0..<cols.count { bound += Self.encodedBound(encoders[c], cols[c], rows: count) }
        let rows = try [UInt8](unsafeUninitializedCapacity: bound) { buffer, initialized in
            initialized = 0
            guard let base = buffer.baseAddress else { return }
            initialized = try encode(cols, count: count, to: UnsafeMutableRawPointer(base), capacity: bound)
        }
        try send(rows, batch: batch)
    }

    /// Most bytes one column of `rows` rows encodes to (NULL: 4, as the smallest encoding).
    private static func encodedBound(_ encoder: PostgresValueCodec.Encoder, _ col: PinnedBatch.Column, rows: Int) -> Int {
        let arena = col.offsets.map { $0[rows] - $0[0] } ?? 0
        switch encoder {
        case .bool: return rows * 5
        case .int(let bytes, _): return rows * (4 + bytes)
        case .intAsNumeric: return rows * PostgresValueCodec.numericBound(20)
        case .float8, .time, .timestamp: return rows * 12
        case .float4, .date: return rows * 8
        case .numeric: return rows * PostgresValueCodec.numericBound(0) + arena / 4 * 2 + rows * 2
        case .text, .bytes: return rows * 4 + arena
        case .jsonb: return rows * 5 + arena
        case .uuid: return rows * 20
        }
    }

    /// Encodes the rows of `cols` at `p` (room for `capacity` bytes); returns the bytes written.
    private func encode(_ cols: [PinnedBatch.Column], count: Int, to p: UnsafeMutableRawPointer, capacity: Int) throws -> Int {
        var i = 0
        @inline(__always) func be16(_ v: Int16) { p.storeBytes(of: v.bigEndian, toByteOffset: i, as: Int16.self); i += 2 }
        @inline(__always) func be32(_ v: Int32) { p.storeBytes(of: v.bigEndian, toByteOffset: i, as: Int32.self); i += 4 }
        @inline(__always) func be64(_ v: Int64) { p.storeBytes(of: v.bigEndian, toByteOffset: i, as: Int64.self); i += 8 }
        @inline(__always) func bytes(_ b: UnsafeRawBufferPointer) {
            if let from = b.baseAddress, b.count > 0 { (p + i).copyMemory(from: from, byteCount: b.count) }
            i += b.count
        }
        let fields = Int16(truncatingIfNeeded: cols.count)
        for row in 0..<count {
            be16(fields)
            for c in 0..<cols.count {
                let col = cols[c]
                if col.isNull(row) {
                    be32(-1)
                    continue
                }
                switch encoders[c] {
                case .bool:
                    be32(1)
                    p.storeBytes(of: UInt8(col.int(row) != 0 ? 1 : 0), toByteOffset: i, as: UInt8.self)
                    i += 1
                case .int(let width, let range):
                    let v = col.int(row)
                    guard range.contains(v) else { throw fail(row, c, "\(v) does not fit the target's \(width * 8)-bit integer column") }
                    be32(Int32(truncatingIfNeeded: width))
                    switch width {
                    case 2: be16(Int16(truncatingIfNeeded: v))
                    case 4: be32(Int32(truncatingIfNeeded: v))
                    default: be64(v)
                    }
                case .intAsNumeric:
                    var text = String(col.int(row))
                    let encoded = text.withUTF8 { PostgresValueCodec.writeNumeric(UnsafeRawBufferPointer($0), to: p + i) }
                    guard case .written(let n, _) = encoded else { throw fail(row, c, "\(text) is not a decimal number") }
                    i += n
                case .float8:
                    be32(8)
                    be64(Int64(bitPattern: col.double(row).bitPattern))
                case .float4:
                    let v = col.double(row)
                    let f = Float(v)
                    guard Double(f) == v || v.isNaN else { throw fail(row, c, "\(v) has no exact 32-bit float form") }
                    be32(4)
                    be32(Int32(bitPattern: f.bitPattern))
                case .numeric(let scale):
                    let text = col.bytes(row)
                    switch PostgresValueCodec.writeNumeric(text, to: p + i) {
                    case .written(let n, let digits):
                        if let scale, digits > scale, Self.hasNonZeroDigits(text, after: scale) {
                            throw fail(row, c, "\(String(decoding: text, as: UTF8.self)) has more than \(scale) decimal places: the target would round it")
                        }
                        i += n
                    case .notDecimal:
                        throw fail(row, c, "'\(String(decoding: text.prefix(60), as: UTF8.self))' is not a decimal number")
                    case .outOfRange:
                        throw fail(row, c, "the decimal has more digits than PostgreSQL's numeric holds (131072 before the point, 16383 after)")
                    }
                case .text, .bytes:
                    let b = col.bytes(row)
                    be32(Int32(truncatingIfNeeded: b.count))
                    bytes(b)
                case .jsonb:
                    let b = col.bytes(row)
                    be32(Int32(truncatingIfNeeded: b.count + 1))
                    p.storeBytes(of: UInt8(1), toByteOffset: i, as: UInt8.self)
                    i += 1
                    bytes(b)
                case .uuid:
                    let b = col.bytes(row)
                    guard b.count == 16 else { throw fail(row, c, "a UUID must be 16 bytes, not \(b.count)") }
                    be32(16)
                    bytes(b)
                case .date:
                    let d = col.int(row) - PostgresValueCodec.epochDays
                    guard d > Int64(Int32.min), d < Int64(Int32.max) else { throw fail(row, c, "the date is out of PostgreSQL's range") }
                    be32(4)
                    be32(Int32(truncatingIfNeeded: d))
                case .time:
                    be32(8)
                    be64(col.int(row))
                case .timestamp:
                    let (t, overflow) = col.int(row).subtractingReportingOverflow(PostgresValueCodec.epochMicros)
                    guard !overflow else { throw fail(row, c, "the timestamp is out of PostgreSQL's range") }
                    be32(8)
                    be64(t)
                }
            }
        }
        precondition(i <= capacity, "PostgreSQL COPY encoding overran its bound")
        return i
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
    /// the keys it keeps reach `keptKeyBytes`.
    private func send(_ rows: [UInt8], batch: RowBatch) throws {
        if !copyOpen {
            copyFirst = given
            let start = try connection.exec(copySQL)
            if start.status != PGRES_COPY_IN { throw connection.error(start.handle, sql: copySQL) }
            copyOpen = true
            // Laid out as the batches are (a column's storage is the reader's).
            keysInCopy = RowBatch(columns: keyColumns.map { ColumnBuffer(storage: batch.columns[$0].storage) })
            try put(PostgresValueCodec.header)
        }
        for (j, c) in keyColumns.enumerated() { keysInCopy.columns[j].append(contentsOf: batch.columns[c]) }
        try put(rows)
        // Counted before the COPY may end here: a row of this batch refused is one of the COPY's.
        given += batch.count
        if keysInCopy.byteSize >= Self.keptKeyBytes { try endCopy() }
    }

    /// Hands bytes of the open COPY to libpq (which sends them as the socket takes them).
    private func put(_ bytes: [UInt8]) throws {
        let conn = connection.conn
        let sent = try bytes.withUnsafeBytes { raw -> Bool in
            var offset = 0
            let chunk = 1 << 20
            while offset < raw.count {
                let n = min(chunk, raw.count - offset)
                let r = PQputCopyData(conn, raw.baseAddress.unsafelyUnwrapped.advanced(by: offset).assumingMemoryBound(to: CChar.self), Int32(n))
                if r == 0 {
                    // A non-blocking connection (--timeout) whose buffer is full: room, within the limit.
                    try connection.flushOut()
                    continue
                }
                if r != 1 { return false }
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
        guard copyOpen else { return }
        var trailer: [UInt8] = []
        PostgresValueCodec.put16(-1, &trailer)
        try put(trailer)
        while PQputCopyEnd(connection.conn, nil) == 0 { try connection.flushOut() }
        try connection.flushOut()
        try result()
    }

    /// The open COPY's result; a rejected row is named by its key (or its place among the rows).
    private func result() throws {
        let keys = keysInCopy
        let rowsInCopy = given - copyFirst
        copyOpen = false
        keysInCopy = RowBatch(columns: [])
        var failure: PostgresError?
        while let r = try connection.awaitResult() {
            if r.status != PGRES_COMMAND_OK && failure == nil { failure = connection.error(r.handle, sql: nil) }
            if r.status == PGRES_COMMAND_OK, let n = r.commandRows { stored += Int64(n) }
        }
        guard let failure else { return }
        // "COPY t, line 3, column x: …": the line counts the COPY's rows, over its batches.
        if let context = failure.context, let line = Self.lineNumber(in: context), line >= 1 {
            var column: String?
            if let range = context.range(of: ", column ") {
                column = context[range.upperBound...].split(separator: ":").first.map(String.init)
            }
            if line <= rowsInCopy {
                // Named by its key where the table has one; else by its place among the writer's
                // rows, which the caller (that has the rows) turns into a key.
                let error = FerryError.invalidValue(table: table, column: column, key: keyDescription(line - 1, of: keys), message: failure.messageOnly)
                throw BatchRowError(row: line - 1, error: error, rowsBefore: copyFirst)
            }
        }
        throw failure
    }

    /// `(id=5)` for row `row` of the open COPY (its `keys`); nil where the table has no key.
    private func keyDescription(_ row: Int, of keys: RowBatch) -> String? {
        guard !keyColumns.isEmpty, row < keys.count else { return nil }
        return Column.keyText(keyColumns.enumerated().map { j, c in (columns[c], keys.columns[j]) }, row: row)
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
