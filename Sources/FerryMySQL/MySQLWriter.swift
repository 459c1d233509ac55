import CMariaDB
import FerryCore
import Foundation

/// Feeds batches to `LOAD DATA LOCAL INFILE` from memory, through the client's local-infile
/// callbacks (no temporary file), several batches to a statement: batches are encoded as they
/// come and loaded once they hold `loadBytes` (or at `finish`) — a statement per batch of 10,000
/// two-integer rows cost a fifth of the copy (500,000 rows SQLite → MariaDB 1.22–1.31 s, 0.95–1.01
/// s in statements ten times larger). A load runs on a thread of its own while the next rows
/// are encoded (one load in flight): the server's work and Ferry's overlap instead of adding
/// up. Every value is escaped exactly; a load that raises any warning (truncation, conversion,
/// a skipped duplicate) is an error naming the row, because MySQL must never silently change a
/// value. When the server refuses LOCAL INFILE the writer
/// falls back to multi-row INSERTs.
final class MySQLWriter: BatchWriter {
    private let connection: MySQLConnection
    private let columns: [Column]
    private let encoders: [MySQLValueCodec.Encoder]
    private let table: TableName
    private let loadSQL: String
    private var insertPrefix: String
    private var insertSuffix = ""
    private var useInsert = false
    /// Rows the statements reported as affected (mysql_affected_rows).
    private(set) var affected = 0
    /// Rows the LOAD DATA statements reported stored (their affected rows).
    private var loaded = 0
    var rowsStored: Int64? { Int64(affected + loaded) }
    private var buffer: [UInt8] = []
    /// This writer's load running on another thread (also `connection.loadInFlight`, which
    /// other users of the connection wait for; only this writer takes its outcome).
    private var inFlight: MySQLBackgroundLoad?
    /// The buffer of the last load, kept for the next one (its capacity grown already).
    private var spare: [UInt8] = []
    /// Batches encoded into `buffer` and not loaded yet, and their size.
    private var pending: [RowBatch] = []
    private var pendingBytes = 0
    /// Rows given to `write` so far, and before the first batch waiting.
    private var given = 0
    private var pendingFirst = 0
    /// Batch bytes (`RowBatch.byteSize`) after which a LOAD DATA runs.
    static let loadBytes = 2 * RowBatch.byteLimit

    /// `target` is the table as described or planned: each value is encoded for its column's
    /// type there, with no second look at the catalog.
    init(connection: MySQLConnection, table target: TableSchema, columns: [Column]) throws {
        self.connection = connection
        self.columns = columns
        let table = target.name
        self.table = table
        var encoders: [MySQLValueCodec.Encoder] = []
        for c in columns {
            guard let t = target.column(named: c.name) else { throw FerryError.columnNotFound(table: table, column: c.name) }
            // A spatial value from MySQL, in MySQL's own form (SRID + WKB), into the same type.
            if c.readHints.contains(.nativeForm) {
                guard MySQLTypeMap.ColumnType(t.nativeType).base == MySQLTypeMap.ColumnType(c.nativeType).base else {
                    throw FerryError.invalidValue(
                        table: table, column: c.name, key: nil,
                        message: "\(c.nativeType) values in MySQL's own form cannot be written into a \(t.nativeType) column")
                }
                encoders.append(.binary)
                continue
            }
            guard let e = MySQLValueCodec.encoder(from: c.logicalType, to: t) else {
                throw FerryError.invalidValue(
                    table: table, column: c.name, key: nil,
                    message: "a \(c.logicalType) value cannot be written into a MySQL \(t.nativeType) column exactly")
            }
            encoders.append(e)
        }
        self.encoders = encoders
        let d = connection.dialect
        let cols = columns.map { d.quote($0.name) }.joined(separator: ", ")
        // LOAD DATA would store a BIT column's text as raw bytes: go through a variable (binary
        // values, e.g. BIT(64) carried as 8 bytes, are those raw bytes and load as they are).
        var loadColumns: [String] = []
        var sets: [String] = []
        for (i, c) in columns.enumerated() {
            if case .binary = c.logicalType {
                loadColumns.append(d.quote(c.name))
            } else if MySQLTypeMap.ColumnType(target.column(named: c.name)?.nativeType ?? "").base == "bit" {
                loadColumns.append("@ferry_\(i)")
                sets.append("\(d.quote(c.name)) = CAST(@ferry_\(i) AS UNSIGNED)")
            } else {
                loadColumns.append(d.quote(c.name))
            }
        }
        loadSQL = "LOAD DATA LOCAL INFILE 'ferry-batch' INTO TABLE \(d.quote(table)) CHARACTER SET utf8mb4 "
            + "FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' (\(loadColumns.joined(separator: ", ")))"
            + (sets.isEmpty ? "" : " SET " + sets.joined(separator: ", "))
        insertPrefix = "INSERT INTO \(d.quote(table)) (\(cols)) VALUES "
        buffer.reserveCapacity(1 << 20)
    }

    /// A writer that runs `prefix (row), (row), … suffix` with the rows as literals: keyed
    /// statements (upsert, delete by key) built on the same exact encoding.
    convenience init(connection: MySQLConnection, table: TableSchema, columns: [Column], prefix: String, suffix: String) throws {
        try self.init(connection: connection, table: table, columns: columns)
        useInsert = true
        insertPrefix = prefix
        insertSuffix = suffix
    }

    private func fail(_ row: Int, _ column: Int, _ message: String) -> BatchRowError {
        BatchRowError(row: row, error: .invalidValue(table: table, column: columns[column].name, key: nil, message: message))
    }

    // MARK: Encoding

    /// Encodes a batch into `buffer` (a local copy while encoding: appending to a class property
    /// costs an exclusivity check per byte).
    private func encode(_ pinned: PinnedBatch) throws {
        var out: [UInt8] = []
        swap(&out, &buffer)
        defer { swap(&out, &buffer) }
        let useInsert = self.useInsert
        // No local function or closure touches `out`: one that captured it made every append
        // to it a dynamic exclusivity check (swift_beginAccess/endAccess and their thread-local
        // lookups: 19% of Ferry's CPU in a SQLite -> MariaDB copy of two-integer rows, perf).
        let cols = pinned.columns
        var scratch: [UInt8] = []
        scratch.reserveCapacity(40)
        for row in 0..<pinned.count {
            if useInsert { out.append(contentsOf: row == 0 ? [40] : [44, 40]) }
            for c in 0..<cols.count {
                if c > 0 { out.append(useInsert ? 44 : 9) }
                let col = cols[c]
                if col.isNull(row) {
                    if useInsert { out.append(contentsOf: "NULL".utf8) } else { out.append(92); out.append(78) }
                    continue
                }
                switch encoders[c] {
                case .int(let range):
                    let v = col.int(row)
                    if let range, !range.contains(v) { throw fail(row, c, "\(v) does not fit the target's integer column") }
                    IntegerText.append(v, into: &out)
                case .bool:
                    out.append(col.int(row) != 0 ? 49 : 48)
                case .double(let float):
                    let v = col.double(row)
                    guard v.isFinite else { throw fail(row, c, "\(v) cannot be stored in MySQL (no NaN or infinity)") }
                    if v == 0 && v.sign == .minus { throw fail(row, c, "-0.0 would lose its sign in MySQL (stored as 0)") }
                    if float {
                        guard Double(Float(v)) == v else { throw fail(row, c, "\(v) has no exact 32-bit float form") }
                        out.append(contentsOf: String(v).utf8)  // the exact value: Float's own shortest form can round past FLT_MAX
                    } else {
                        out.append(contentsOf: String(v).utf8)
                    }
                case .decimal(let scale):
                    let b = col.bytes(row)
                    guard DecimalText.isValid(b), b.first != 78, b.last != 121 else {
                        throw fail(row, c, "'\(String(decoding: b, as: UTF8.self))' cannot be stored in a MySQL DECIMAL (no NaN or infinity)")
                    }
                    if let scale, MySQLValueCodec.fractionDigits(b, beyond: scale) {
                        throw fail(row, c, "\(String(decoding: b, as: UTF8.self)) has more than \(scale) decimal places: the target would round it")
                    }
                    MySQLValueCodec.appendEscaped(b, insert: useInsert, into: &out)
                case .text:
                    MySQLValueCodec.appendEscaped(col.bytes(row), insert: useInsert, into: &out)
                case .binary:
                    let b = col.bytes(row)
                    if useInsert {
                        out.append(88); out.append(39)
                        for x in b { out.append(MySQLValueCodec.hexDigits[Int(x >> 4)]); out.append(MySQLValueCodec.hexDigits[Int(x & 15)]) }
                        out.append(39)
                        if b.isEmpty { out.removeLast(3); out.append(contentsOf: "''".utf8) }
                    } else {
                        MySQLValueCodec.appendEscaped(b, insert: useInsert, into: &out)
                    }
                case .uuidText:
                    scratch.removeAll(keepingCapacity: true)
                    UUIDText.append(col.bytes(row), into: &scratch)
                    MySQLValueCodec.appendEscaped(scratch, insert: useInsert, into: &out)
                case .uuidBinary:
                    MySQLValueCodec.appendEscaped(col.bytes(row), insert: useInsert, into: &out)
                case .date:
                    scratch.removeAll(keepingCapacity: true)
                    Temporal.appendDate(col.int(row), into: &scratch)
                    MySQLValueCodec.appendEscaped(scratch, insert: useInsert, into: &out)
                case .time:
                    scratch.removeAll(keepingCapacity: true)
                    Temporal.appendTime(col.int(row), fractionDigits: nil, into: &scratch)
                    MySQLValueCodec.appendEscaped(scratch, insert: useInsert, into: &out)
                case .timestamp:
                    scratch.removeAll(keepingCapacity: true)
                    Temporal.appendTimestamp(col.int(row), into: &scratch)
                    MySQLValueCodec.appendEscaped(scratch, insert: useInsert, into: &out)
                }
            }
            if useInsert { out.append(41) } else { out.append(10) }
        }
    }

    // MARK: Sending

    /// Encodes the batch and sends it: as one INSERT, waiting for the server; or into the next
    /// LOAD DATA, which runs once the batches waiting for it hold `loadBytes`.
    func write(_ batch: RowBatch) throws {
        guard !useInsert else {
            try insert(batch, rowsBefore: given)
            given += batch.count
            return
        }
        if pending.isEmpty {
            buffer.removeAll(keepingCapacity: true)
            pendingFirst = given
        }
        let before = buffer.count
        do { try PinnedBatch.with(batch) { try encode($0) } } catch {
            buffer.removeSubrange(before...)
            throw error
        }
        pending.append(batch)
        given += batch.count
        pendingBytes += batch.byteSize
        if pendingBytes >= Self.loadBytes { try load() }
    }

    func finish() throws {
        try load()
        try settle()
    }

    /// One INSERT of `batch`; a refused row is named by its batch and its place among the
    /// writer's rows (`rowsBefore` were given before the batch).
    private func insert(_ batch: RowBatch, rowsBefore: Int) throws {
        buffer.removeAll(keepingCapacity: true)
        buffer.append(contentsOf: insertPrefix.utf8)
        do {
            try PinnedBatch.with(batch) { try encode($0) }
            buffer.append(contentsOf: insertSuffix.utf8)
            try runInsert(buffer, rows: batch.count)
        } catch var e as BatchRowError {
            e.batch = e.batch ?? batch
            e.rowsBefore = rowsBefore
            throw e
        }
    }

    /// `batches` (the first after `rowsBefore` rows) as INSERTs, one each.
    private func insert(_ batches: [RowBatch], rowsBefore: Int) throws {
        var first = rowsBefore
        for b in batches {
            try insert(b, rowsBefore: first)
            first += b.count
        }
    }

    /// Starts loading the batches waiting (one LOAD DATA, on a thread of its own) once the load
    /// before it ended; a row the server warns about is named by its batch and row.
    private func load() throws {
        try settle()
        guard !pending.isEmpty else { return }
        let batches = pending
        pending = []
        pendingBytes = 0
        if useInsert { return try insert(batches, rowsBefore: pendingFirst) }
        var bytes: [UInt8] = []
        swap(&bytes, &buffer)
        buffer = spare
        spare = []
        let load = MySQLBackgroundLoad(bytes: bytes, batches: batches, firstRow: pendingFirst) { [self] load in
            try runLoad(load.bytes, batches: load.batches, firstRow: load.firstRow)
        }
        // Set before the thread starts: the load's own warning query reads it.
        connection.loadInFlight = load
        inFlight = load
        load.start()
    }

    /// Waits for the load in flight and takes its outcome: its error, or (when the server
    /// refuses LOCAL INFILE) its batches again as INSERTs, and INSERTs from then on.
    private func settle() throws {
        guard let load = inFlight else { return }
        load.waitUnlessCalledFromIt()
        inFlight = nil
        if connection.loadInFlight === load { connection.loadInFlight = nil }
        spare = load.bytes
        load.bytes = []
        spare.removeAll(keepingCapacity: true)
        switch load.outcome {
        case .success, nil:
            return
        case .failure(let e as MySQLError) where [1148, 2068, 3948, 4166].contains(e.code):
            useInsert = true
            try insert(load.batches, rowsBefore: load.firstRow)
        case .failure(let e):
            throw e
        }
    }

    /// Nothing of a statement is in flight once this returns: a load running is waited for,
    /// batches not loaded yet are dropped, and the local-infile handler is back to the client's
    /// default.
    func abort() {
        if let load = inFlight {
            load.waitUnlessCalledFromIt()
            if connection.loadInFlight === load { connection.loadInFlight = nil }
            inFlight = nil
        }
        pending = []
        pendingBytes = 0
        mysql_set_local_infile_default(connection.mysql)
    }

    /// Runs one LOAD DATA over `bytes` (the rows of `batches`), fed to the client library from memory.
    private func runLoad(_ bytes: [UInt8], batches: [RowBatch], firstRow: Int) throws {
        let source = InfileSource(bytes: bytes)
        let unmanaged = Unmanaged.passRetained(source)
        defer { unmanaged.release() }
        mysql_set_local_infile_handler(
            connection.mysql,
            { ptr, _, userdata in
                ptr?.pointee = userdata
                return 0
            },
            { ptr, buf, len in
                guard let ptr, let buf else { return -1 }
                return Unmanaged<InfileSource>.fromOpaque(ptr).takeUnretainedValue().read(into: buf, max: Int(len))
            },
            { _ in },
            { ptr, msg, len in
                if let msg, len > 0 { strncpy(msg, "ferry: no data", Int(len) - 1) }
                return 2000
            },
            unmanaged.toOpaque())
        defer { mysql_set_local_infile_default(connection.mysql) }
        let rc = loadSQL.withCString { mysql_real_query(connection.mysql, $0, UInt(strlen($0))) }
        guard rc == 0 else { throw connection.error(sql: loadSQL) }
        // Read on this thread, summed on the writer's after the wait (`settle`).
        loaded += Int(mysql_affected_rows(connection.mysql))
        try checkWarnings(batches: batches, firstRow: firstRow)
    }

    private func runInsert(_ buffer: [UInt8], rows: Int) throws {
        connection.settle()
        let rc = buffer.withUnsafeBytes { raw in
            mysql_real_query(connection.mysql, raw.baseAddress?.assumingMemoryBound(to: CChar.self), UInt(raw.count))
        }
        guard rc == 0 else {
            let e = connection.error(sql: nil)
            if let row = Self.rowNumber(in: e.message), row >= 1, row <= rows {
                throw BatchRowError(row: row - 1, error: .invalidValue(table: table, column: nil, key: nil, message: e.message))
            }
            throw e
        }
        affected += Int(mysql_affected_rows(connection.mysql))
        try checkWarnings(batches: nil, rows: rows)
    }

    /// Any warning from a statement means MySQL changed or skipped a value: turn it into an
    /// error. Its row counts the statement's rows: those of `batches` (a load), or of the batch
    /// just written (`rows` of them).
    private func checkWarnings(batches: [RowBatch]?, rows: Int = 0, firstRow: Int = 0) throws {
        guard mysql_warning_count(connection.mysql) > 0 else { return }
        let warnings = try connection.query("SHOW WARNINGS LIMIT 1")
        guard let w = warnings.first else { return }
        let message = "\(w[2] ?? "MySQL changed a value") (\(w[0] ?? "Warning") \(w[1] ?? ""))"
        let column = Self.columnName(in: w[2] ?? "")
        let error = FerryError.invalidValue(table: table, column: column, key: nil, message: message)
        if let row = Self.rowNumber(in: w[2] ?? ""), row >= 1 {
            guard let batches else {
                if row <= rows { throw BatchRowError(row: row - 1, error: error) }
                throw error
            }
            var first = 0
            for b in batches {
                if row - 1 < first + b.count { throw BatchRowError(row: row - 1 - first, error: error, batch: b, rowsBefore: firstRow + first) }
                first += b.count
            }
        }
        throw error
    }

    /// The column a warning names: `… for column 'c' at row 1` or `… for column `db`.`t`.`c` at row 1`.
    static func columnName(in message: String) -> String? {
        guard let r = message.range(of: "for column ", options: .backwards) else { return nil }
        var rest = message[r.upperBound...]
        if rest.hasPrefix("'") {
            rest = rest.dropFirst()
            return rest.firstIndex(of: "'").map { String(rest[..<$0]) }
        }
        guard rest.hasPrefix("`") else { return nil }
        let end = rest.range(of: " at row ")?.lowerBound ?? rest.endIndex
        let quoted = rest[..<end]
        guard quoted.hasSuffix("`"), let open = quoted.dropLast().lastIndex(of: "`") else { return nil }
        return String(quoted[quoted.index(after: open)..<quoted.index(before: quoted.endIndex)]).replacingOccurrences(of: "``", with: "`")
    }

    static func rowNumber(in message: String) -> Int? {
        guard let r = message.range(of: "at row ", options: .backwards) else { return nil }
        return Int(message[r.upperBound...].prefix { $0.isNumber })
    }
}

/// The bytes of one LOAD DATA, handed to the client library as it asks for them.
final class InfileSource {
    let bytes: [UInt8]
    var offset = 0
    init(bytes: [UInt8]) { self.bytes = bytes }

    func read(into buf: UnsafeMutablePointer<CChar>, max: Int) -> Int32 {
        let n = min(max, bytes.count - offset)
        guard n > 0 else { return 0 }
        bytes.withUnsafeBytes { raw in
            UnsafeMutableRawPointer(buf).copyMemory(from: raw.baseAddress.unsafelyUnwrapped + offset, byteCount: n)
        }
        offset += n
        return Int32(n)
    }
}

/// One LOAD DATA running on a thread of its own; the connection's other users wait for it.
final class MySQLBackgroundLoad: @unchecked Sendable {  // unchecked: `outcome` is written before `done` is signalled and read after waiting for it
    var bytes: [UInt8]
    let batches: [RowBatch]
    /// Rows the writer was given before the first of `batches`.
    let firstRow: Int
    private(set) var outcome: Result<Void, any Error>?
    private let done = DispatchGroup()
    private let work: UncheckedJob
    /// Weak: the thread holds the load while it runs, and nothing holds either afterwards.
    private weak var thread: Thread?

    init(bytes: [UInt8], batches: [RowBatch], firstRow: Int, _ work: @escaping (MySQLBackgroundLoad) throws -> Void) {
        self.bytes = bytes
        self.batches = batches
        self.firstRow = firstRow
        self.work = UncheckedJob(work)
    }

    /// Runs the load on a thread of its own.
    func start() {
        done.enter()
        let thread = Thread { [self] in
            outcome = Result { try work.work(self) }
            done.leave()
        }
        thread.name = "ferry-mysql-load"
        thread.stackSize = 4 << 20
        self.thread = thread
        thread.start()
    }

    /// Blocks until the load has ended; returns at once on the load's own thread (its warning
    /// query runs on the same connection).
    func waitUnlessCalledFromIt() {
        if let thread, Thread.current === thread { return }
        done.wait()
    }
}

/// A closure handed to the load's thread, which alone calls it.
private struct UncheckedJob: @unchecked Sendable {
    let work: (MySQLBackgroundLoad) throws -> Void
    init(_ work: @escaping (MySQLBackgroundLoad) throws -> Void) { self.work = work }
}
