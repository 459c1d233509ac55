import CMariaDB
import FerryCore
import Foundation

/// Streams a table with `mysql_use_result` (rows arrive as the server sends them, memory stays
/// flat) and parses the text protocol straight into batches. FLOAT columns are read as
/// `CAST(… AS DOUBLE)`, since MySQL prints FLOAT with 6 digits only.
final class MySQLReader: BatchReader {
    private let connection: MySQLConnection
    private let columns: [Column]
    private let types: [LogicalType]
    private let kinds: [Kind]
    /// Columns whose zero dates a cast rule (zero-dates-to-null) reads as NULL.
    private let zeroDatesAsNull: [Bool]
    private let table: TableName
    private let batchSize: Int
    private let keyIndexes: [Int]
    private var result: MySQLResult?
    private var done = false

    enum Kind: Equatable {
        case int, boolean, bitBoolean, bits, double, decimal, bytes, uuid, date, time, timestamp
    }

    init(connection: MySQLConnection, table: TableSchema, columns: [Column], keyRange: KeyRange?, batchSize: Int) throws {
        self.connection = connection
        self.columns = columns
        self.types = columns.map(\.logicalType)
        self.table = table.name
        self.batchSize = batchSize
        self.keyIndexes = (table.preferredKey?.columns ?? []).compactMap { k in columns.firstIndex { $0.name == k } }
        let d = connection.dialect
        var select: [String] = []
        var kinds: [Kind] = []
        for c in columns {
            let q = d.quote(c.name)
            let base = MySQLTypeMap.ColumnType(c.nativeType).base
            // A cast asked for MySQL's own text or JSON form of the value.
            if c.readHints.contains(.jsonForm) {
                kinds.append(.bytes)
                select.append(MySQLTypeMap.isSpatial(base) ? "ST_AsGeoJSON(\(q))" : "JSON_EXTRACT(JSON_ARRAY(\(q)), '$[0]')")
                continue
            }
            if c.readHints.contains(.textForm) {
                kinds.append(.bytes)
                select.append(MySQLTypeMap.isSpatial(base) ? "ST_AsText(\(q))" : base == "bit" ? "BIN(\(q))" : "CAST(\(q) AS CHAR)")
                continue
            }
            switch c.logicalType {
            case .boolean: kinds.append(base == "bit" ? .bitBoolean : .boolean); select.append(q)
            case .int16, .int32, .int64: kinds.append(base == "bit" ? .bits : .int); select.append(q)
            case .float32: kinds.append(.double); select.append("CAST(\(q) AS DOUBLE)")
            case .float64: kinds.append(.double); select.append(q)
            case .decimal: kinds.append(.decimal); select.append(q)
            case .text, .json, .enumeration, .binary: kinds.append(.bytes); select.append(q)
            case .uuid: kinds.append(.uuid); select.append(q)
            case .date: kinds.append(.date); select.append(q)
            case .time: kinds.append(.time); select.append(q)
            case .timestamp: kinds.append(.timestamp); select.append(q)
            case .unsupported(let native):
                throw FerryError.invalidValue(table: table.name, column: c.name, key: nil, message: "type \(native) cannot be read")
            }
        }
        self.kinds = kinds
        self.zeroDatesAsNull = columns.map { $0.readHints.contains(.zeroDatesAsNull) }
        var sql = "SELECT " + select.joined(separator: ", ") + " FROM " + d.quote(table.name)
        if let range = keyRange { sql += range.sqlSuffix(dialect: d) { MySQLValueCodec.literals($0, connection) } }
        connection.settle()
        let rc = sql.withCString { mysql_real_query(connection.mysql, $0, UInt(strlen($0))) }
        guard rc == 0 else {
            let e = connection.error(sql: sql)
            if e.code == 1142 || e.code == 1143 {
                throw FerryError.copyFailed(table: table.name, endpoint: connection.endpoint.redacted,
                                            reason: "permission denied: the user may not read \(table.name); GRANT SELECT on it or connect as another user")
            }
            throw e
        }
        guard let r = MySQLResult(streaming: connection.mysql) else { throw connection.error(sql: sql) }
        result = r
    }

    func close() {
        // Releasing the result fetches the rest, so the connection can be used again, then frees it.
        result = nil
    }

    deinit { close() }

    func next() throws -> RowBatch? {
        guard !done, let r = result else { return nil }
        var batch = RowBatch(types: types, capacity: batchSize)
        var n = 0
        while !batch.isFull(rows: n, limit: batchSize) {
            guard let row = r.fetchRow() else {
                done = true
                if mysql_errno(connection.mysql) != 0 { throw connection.error(sql: nil) }
                break
            }
            guard let lengths = r.lengths() else { throw connection.error(sql: nil) }
            for i in 0..<kinds.count {
                guard let p = row[i] else {
                    batch.columns[i].appendNull()
                    continue
                }
                try decode(UnsafeRawBufferPointer(start: p, count: Int(lengths[i])), column: i, into: &batch.columns[i], row: row, lengths: lengths)
            }
            n += 1
        }
        return n == 0 ? nil : batch
    }

    @inline(__always)
    static func parseInt(_ b: UnsafeRawBufferPointer) -> Int64? {
        var i = 0
        var negative = false
        if b.count > 0 && (b[0] == 45 || b[0] == 43) { negative = b[0] == 45; i = 1 }
        guard i < b.count else { return nil }
        var v: Int64 = 0
        while i < b.count {
            let c = b[i]
            guard c >= 48 && c <= 57 else { return nil }
            let (m, o1) = v.multipliedReportingOverflow(by: 10)
            let (a, o2) = negative ? m.subtractingReportingOverflow(Int64(c - 48)) : m.addingReportingOverflow(Int64(c - 48))
            if o1 || o2 { return nil }
            v = a
            i += 1
        }
        return v
    }

    static func isZeroDate(_ b: UnsafeRawBufferPointer) -> Bool {
        b.count >= 10 && b[0] == 48 && b[1] == 48 && b[2] == 48 && b[3] == 48
            || b.count >= 10 && b[5] == 48 && b[6] == 48 || b.count >= 10 && b[8] == 48 && b[9] == 48
    }

    @inline(__always)
    private func decode(_ b: UnsafeRawBufferPointer, column i: Int, into col: inout ColumnBuffer,
                        row: MYSQL_ROW, lengths: UnsafeMutablePointer<UInt>) throws {
        switch kinds[i] {
        case .int:
            guard let v = Self.parseInt(b) else { throw problem(i, row, lengths, "'\(String(decoding: b, as: UTF8.self))' is not an integer") }
            col.append(v)
        case .boolean:
            guard let v = Self.parseInt(b), v == 0 || v == 1 else {
                throw problem(i, row, lengths, "\(String(decoding: b, as: UTF8.self)) in a TINYINT(1) column read as boolean is neither 0 nor 1; cast the column to an integer")
            }
            col.append(v)
        case .bitBoolean:
            col.append(Int64(b.last ?? 0))
        case .bits:
            var v: Int64 = 0
            for byte in b { v = v << 8 | Int64(byte) }
            col.append(v)
        case .double:
            guard let base = b.baseAddress else { throw problem(i, row, lengths, "empty floating-point value") }
            var end: UnsafeMutablePointer<CChar>?
            let v = strtod(base.assumingMemoryBound(to: CChar.self), &end)
            guard let end, UnsafeRawPointer(end) == base + b.count else {
                throw problem(i, row, lengths, "'\(String(decoding: b, as: UTF8.self))' is not a number")
            }
            col.append(v)
        case .decimal, .bytes:
            col.append(bytes: b)
        case .uuid:
            var u: UUIDText.Bytes = (0, 0)
            guard UUIDText.parse(b, into: &u) else { throw problem(i, row, lengths, "'\(String(decoding: b, as: UTF8.self))' is not a UUID") }
            withUnsafeBytes(of: &u) { col.append(bytes: $0) }
        case .date, .timestamp:
            if Self.isZeroDate(b) {
                if connection.zeroDatesAsNull || zeroDatesAsNull[i] {
                    col.appendNull()
                    return
                }
                throw problem(i, row, lengths, "the zero date '\(String(decoding: b, as: UTF8.self))' has no value in other engines; use --zero-dates null to read it as NULL")
            }
            do {
                if kinds[i] == .date { col.append(try Temporal.parseDate(b)) } else { col.append(try Temporal.parseTimestamp(b).micros) }
            } catch let e as Temporal.ParseError {
                throw problem(i, row, lengths, e.description)
            }
        case .time:
            do { col.append(try Temporal.parseTime(b)) } catch {
                throw problem(i, row, lengths, "the TIME '\(String(decoding: b, as: UTF8.self))' is not a time of day (00:00:00 to 23:59:59.999999); MySQL intervals are not carried")
            }
        }
    }

    private func problem(_ column: Int, _ row: MYSQL_ROW, _ lengths: UnsafeMutablePointer<UInt>, _ message: String) -> FerryError {
        var key: String?
        if !keyIndexes.isEmpty {
            key = "(" + keyIndexes.map { k in
                let text = row[k].map { String(decoding: UnsafeRawBufferPointer(start: $0, count: Int(lengths[k])), as: UTF8.self) } ?? "NULL"
                return "\(columns[k].name)=\(text)"
            }.joined(separator: ", ") + ")"
        }
        return .invalidValue(table: table, column: columns[column].name, key: key, message: message)
    }
}
