import FerryCore
import FerryDriverTestKit
import FerrySQLite
import FerryServer
import FerryHTTPClient
import FerryXML
import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// Bodies stream both ways through a real `ferry serve`: requests of many batches, pages of
/// many network pieces, and answers that break off.
final class StreamingServiceTests: XCTestCase {
    var folder: TemporaryFolder!
    let drivers: [any Driver] = [SQLiteDriver(), HTTPDriver.standard]

    override func setUpWithError() throws {
        folder = try TemporaryFolder()
    }

    func col(_ name: String, _ t: LogicalType, nullable: Bool = true) -> Column {
        Column(name: name, nativeType: "", logicalType: t, isNullable: nullable)
    }

    /// Rows of large values that exercise every form a value takes on the wire: escaped text
    /// (with CR, quotes, markup), text with control characters (base64), empty and NULL values,
    /// binary of every byte.
    func largeRows(_ count: Int) -> [[Value]] {
        var rng = SplitMix64(seed: 0x5EED)
        return (0..<count).map { i in
            let unit = "row \(i): fish & chips <b>\"bold\"</b> 'quoted' CR\r CRLF\r\n tab\t 中文 😀\n"
            var text: Value = .text(String(repeating: unit, count: 2000 + Int(rng.next() % 6000)))
            if i == 3 { text = .text(String(repeating: "bell \u{7} and NUL \u{0} ", count: 20_000)) }
            if i == 4 { text = .null }
            if i == 5 { text = .text("") }
            let n = i == 7 ? 0 : 100_000 + Int(rng.next() % 300_000)
            let blob = (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            return [.int(Int64(i + 1)), text, .binary(blob), .double(Double(i) / 3)]
        }
    }

    /// Field by field, without printing megabytes when a value differs.
    func assertSameRows(_ got: [[Value]], _ expected: [[Value]], names: [String], file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(got.count, expected.count, "rows", file: file, line: line)
        for (r, (g, e)) in zip(got, expected).enumerated() {
            for (c, (gv, ev)) in zip(g, e).enumerated() where gv != ev {
                XCTFail("row \(r + 1), column \(names[c]): got \(gv.description.prefix(80))… expected \(ev.description.prefix(80))…", file: file, line: line)
            }
        }
    }

    /// One request of about 25 MB (several of the service's batches, decoded as it arrives) and
    /// pages of 3 MiB (each many network pieces) carry every value exactly; a value refused in
    /// a later batch of a request is named by its row in the request, and nothing of that
    /// request stays.
    func testLargeRequestsAndPagesStreamExactly() async throws {
        let service = try await RunningService(database: "sqlite:" + folder.path("big.db"), drivers: drivers, maxBodyBytes: 256 << 20, pageBytes: 3 << 20)
        defer { service.stop() }
        let http = try HTTPDriver.standard.connect(Endpoint(parsing: service.url()), role: .target)
        let columns = [col("id", .int64, nullable: false), col("body", .text), col("image", .binary(maxLength: nil), nullable: false), col("f", .float64)]
        let types = columns.map(\.logicalType)
        let names = columns.map(\.name)
        let table = TableName("docs")
        try http.createTable(TableSchema(name: table, engine: Engine("test"), columns: columns, primaryKey: ["id"]), named: table)
        let rows = largeRows(40)
        let batch = try RowBatch(rows: rows, types: types)
        XCTAssertGreaterThan(batch.byteSize, 4 * RowBatch.byteLimit, "the request is several of the service's batches")
        let w = try http.writer(into: try http.describe(table), columns: columns)
        try w.write(batch)
        try w.finish()

        // Read back through the service: several pages, batches of a few rows.
        let schema = try http.describe(table)
        let reader = try http.reader(table: schema, columns: columns, keyRange: nil, batchSize: 3)
        var got: [[Value]] = []
        var batches = 0
        while let b = try reader.next() {
            batches += 1
            XCTAssertLessThanOrEqual(b.count, 3)
            for r in 0..<b.count { got.append(b.row(r, types: types)) }
        }
        reader.close()
        assertSameRows(got, rows, names: names)
        XCTAssertGreaterThanOrEqual(batches, 14)
        // And in the served file itself.
        let direct = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + folder.path("big.db")), role: .source)
        assertSameRows(try DriverConformance.readAll(direct, table, keyRange: KeyRange(key: ["id"])), rows, names: names)

        // A NULL into a NOT NULL column at row 33 of a 40-row request: the service decodes the
        // request in several batches; the answer counts the row in the request.
        let strict = TableName("strict_docs")
        var strictColumns = columns
        strictColumns[1].isNullable = false
        try http.createTable(TableSchema(name: strict, engine: Engine("test"), columns: strictColumns, primaryKey: ["id"]), named: strict)
        var bad = largeRows(40)
        bad[4][1] = .text("not null here")
        bad[32][1] = .null
        let sw = try http.writer(into: try http.describe(strict), columns: strictColumns)
        // The request is streamed: the refusal comes with the service's answer, at `finish`.
        XCTAssertThrowsError(try { try sw.write(try RowBatch(rows: bad, types: types)); try sw.finish() }()) { e in
            guard let rowError = e as? BatchRowError else { return XCTFail("\(e)") }
            XCTAssertEqual((rowError.rowsBefore ?? 0) + rowError.row, 32, "the 33rd row of the request")
            XCTAssertEqual(rowError.batch.map { Value(column: $0.columns[0], row: rowError.row, type: .int64) }, bad[32][0], "its key is named")
            XCTAssertTrue("\(rowError.error)".contains("body"), "\(rowError.error)")
        }
        XCTAssertEqual(try direct.countRows(strict), 0, "nothing of the request stays")
    }

    /// A page ends at the size in bytes its request asks for (`bytes=`, from 64 KiB up to the
    /// service's maximum), else at the service's page size; a client whose transport pauses
    /// reading asks for pages far larger than that and reads every row exactly; a bad size is
    /// refused in one line.
    func testAPageEndsAtTheBytesItsRequestAsksFor() async throws {
        let service = try await RunningService(database: "sqlite:" + folder.path("paged.db"), drivers: drivers, maxBodyBytes: 64 << 20, pageBytes: 1 << 20)
        defer { service.stop() }
        let http = try HTTPDriver.standard.connect(Endpoint(parsing: service.url()), role: .target)
        let columns = [col("id", .int64, nullable: false), col("body", .text, nullable: false)]
        let types = columns.map(\.logicalType)
        let table = TableName("paged")
        try http.createTable(TableSchema(name: table, engine: Engine("test"), columns: columns, primaryKey: ["id"]), named: table)
        // A page ends between the service's batches of 10,000 rows (here ~300 kB of document).
        let rows: [[Value]] = (0..<200_000).map { i in [.int(Int64(i + 1)), .text(i % 1000 == 7 ? "中文 & <b>\(i)</b>" : "r\(i)")] }
        let w = try http.writer(into: try http.describe(table), columns: columns)
        try w.write(try RowBatch(rows: rows, types: types))
        try w.finish()

        func page(_ query: String) throws -> (status: Int, rows: Int, next: Bool, body: String) {
            let (status, body) = try service.request("GET", "v1/tables/paged/rows?limit=1000000" + query, token: service.readOnly)
            return (status, body.components(separatedBy: "<r>").count - 1, body.contains("<next>"), body)
        }
        // The service's own page size (1 MiB), a page asked at 64 KiB and one at 4 MiB.
        let standard = try page("")
        let small = try page("&bytes=65536")
        let large = try page("&bytes=4194304")
        XCTAssertEqual([standard.status, small.status, large.status], [200, 200, 200])
        XCTAssertTrue(standard.next && small.next && large.next, "each page is cut by its bytes, not its rows")
        XCTAssertLessThan(small.rows, standard.rows)
        XCTAssertLessThan(standard.rows, large.rows)
        XCTAssertGreaterThan(large.body.utf8.count, 4 << 20)
        XCTAssertLessThan(large.body.utf8.count, (4 << 20) + (512 << 10), "the page ends at the first batch past its size")
        // Below 64 KiB counts as 64 KiB; beyond the maximum as the maximum (the whole table here).
        XCTAssertEqual(try page("&bytes=1").rows, small.rows)
        let whole = try page("&bytes=99999999999")
        XCTAssertEqual(whole.rows, rows.count)
        XCTAssertFalse(whole.next)
        for bad in ["abc", "0", "-5"] {
            let refused = try page("&bytes=" + bad)
            XCTAssertEqual(refused.status, 400, bad)
            XCTAssertTrue(refused.body.contains("bytes must be a positive number of bytes"), refused.body)
        }

        // Ferry's client over async-http-client pauses reading, so it asks for large pages: the
        // whole table in one page here, every row exact.
        XCTAssertNotNil((http as? HTTPConnection).map { $0.pageBytes }.flatMap { $0 })
        let reader = try http.reader(table: try http.describe(table), columns: columns, keyRange: KeyRange(key: ["id"]), batchSize: 1_000)
        var got: [[Value]] = []
        while let b = try reader.next() { for r in 0..<b.count { got.append(b.row(r, types: types)) } }
        reader.close()
        assertSameRows(got, rows, names: ["id", "body"])
    }

    /// A load of more than the service's `max-load` goes in several streamed requests, each
    /// ending before half of it, and arrives exactly; a row refused in a later request is named
    /// by its place among all the rows written and by its key.
    func testLoadsLargerThanTheLoadLimitGoInSeveralRequests() async throws {
        let service = try await RunningService(
            database: "sqlite:" + folder.path("limited.db"), drivers: drivers, maxBodyBytes: 1 << 20, maxLoadBytes: 2 << 20)
        defer { service.stop() }
        let (http, columns, rows) = try loadTables(service, ["loaded", "refused"])
        let types = columns.map(\.logicalType)
        let w = try http.writer(into: try http.describe(TableName("loaded")), columns: columns)
        for start in stride(from: 0, to: rows.count, by: 1_000) { try w.write(try RowBatch(rows: Array(rows[start..<start + 1_000]), types: types)) }
        try w.finish()
        let direct = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + folder.path("limited.db")), role: .source)
        defer { direct.close() }
        assertSameRows(try DriverConformance.readAll(direct, TableName("loaded"), keyRange: KeyRange(key: ["id"])), rows, names: ["id", "body"])

        // One batch larger than the whole body limit (3 MB of values) goes in several requests.
        let wide: [[Value]] = (0..<1_500).map { i in [.int(Int64(i + 1)), .text(String(repeating: "wide <row> & \(i) ", count: 120))] }
        try http.createTable(TableSchema(name: TableName("one_batch"), engine: Engine("test"), columns: columns, primaryKey: ["id"]), named: TableName("one_batch"))
        let ww = try http.writer(into: try http.describe(TableName("one_batch")), columns: columns)
        try ww.write(try RowBatch(rows: wide, types: types))
        try ww.finish()
        assertSameRows(try DriverConformance.readAll(direct, TableName("one_batch"), keyRange: KeyRange(key: ["id"])), wide, names: ["id", "body"])

        try loadRefused(rows, at: 45_000, into: http, columns: columns)
        let kept = try direct.countRows(TableName("refused"))
        XCTAssertGreaterThan(kept, 0, "the requests before the refused one were committed: the load went in several")
        XCTAssertLessThanOrEqual(kept, 45_000, "nothing of the refused row's request stays")
        XCTAssertEqual(try DriverConformance.readAll(direct, TableName("refused"), keyRange: KeyRange(key: ["id"])), Array(rows[0..<Int(kept)]),
                       "the requests before it, whole")
    }

    /// A streamed load is bounded by `max-load`, not by `max-body` (the documents the service
    /// holds whole): the capabilities say both, and a load of several times `max-body` goes in
    /// one request, all or nothing.
    func testALoadIsBoundedByTheLoadLimitNotTheBodyLimit() async throws {
        let service = try await RunningService(
            database: "sqlite:" + folder.path("one.db"), drivers: drivers, maxBodyBytes: 1 << 20, maxLoadBytes: 64 << 20)
        defer { service.stop() }
        let (status, body) = try service.request("GET", "v1/capabilities", token: service.readOnly)
        XCTAssertEqual(status, 200, body)
        XCTAssertTrue(body.contains("max-body=\"1048576\"") && body.contains("max-load=\"67108864\""), body)
        // About 4.5 MB of document: four times max-body.
        let (http, columns, rows) = try loadTables(service, ["whole", "refused"])
        let types = columns.map(\.logicalType)
        try loadRefused(rows, at: 59_000, into: http, columns: columns)
        let direct = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + folder.path("one.db")), role: .source)
        defer { direct.close() }
        XCTAssertEqual(try direct.countRows(TableName("refused")), 0, "one request, rolled back whole")
        let w = try http.writer(into: try http.describe(TableName("whole")), columns: columns)
        for start in stride(from: 0, to: rows.count, by: 1_000) { try w.write(try RowBatch(rows: Array(rows[start..<start + 1_000]), types: types)) }
        try w.finish()
        assertSameRows(try DriverConformance.readAll(direct, TableName("whole"), keyRange: KeyRange(key: ["id"])), rows, names: ["id", "body"])
    }

    /// A connection to `service` and empty tables `names` of (id, body) in it, with 60,000 rows
    /// (about 4.5 MB of document) to load into them.
    func loadTables(_ service: RunningService, _ names: [String]) throws -> (any Connection, [Column], [[Value]]) {
        let http = try HTTPDriver.standard.connect(Endpoint(parsing: service.url()), role: .target)
        let columns = [col("id", .int64, nullable: false), col("body", .text, nullable: false)]
        let rows: [[Value]] = (0..<60_000).map { i in [.int(Int64(i + 1)), .text("row \(i) & <more> text to make the document long: \(i * 7919)")] }
        for name in names {
            try http.createTable(TableSchema(name: TableName(name), engine: Engine("test"), columns: columns, primaryKey: ["id"]), named: TableName(name))
        }
        return (http, columns, rows)
    }

    /// Loads `rows` into the service's table "refused" in batches of 1,000, with row `bad`'s body
    /// NULL, which the table refuses: the load fails naming that row by its place and its key.
    func loadRefused(_ rows: [[Value]], at bad: Int, into http: any Connection, columns: [Column]) throws {
        var refused = rows
        refused[bad][1] = .null
        let types = columns.map(\.logicalType)
        let sw = try http.writer(into: try http.describe(TableName("refused")), columns: columns)
        XCTAssertThrowsError(try {
            for start in stride(from: 0, to: refused.count, by: 1_000) {
                try sw.write(try RowBatch(rows: Array(refused[start..<start + 1_000]), types: types))
            }
            try sw.finish()
        }()) { e in
            guard let rowError = e as? BatchRowError else { return XCTFail("\(e)") }
            XCTAssertEqual((rowError.rowsBefore ?? 0) + rowError.row, bad, "the row written after \(bad) others")
            XCTAssertEqual(rowError.batch.map { Value(column: $0.columns[0], row: rowError.row, type: .int64) }, .int(Int64(bad + 1)), "its key")
        }
        sw.abort()
    }

    /// A SQLite file at `path` holding `rows` (id, body) in `table`.
    func bodies(_ path: String, _ table: TableName, _ rows: [[Value]]) throws -> [Column] {
        let src = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + path), role: .target)
        defer { src.close() }
        let columns = [col("id", .int64, nullable: false), col("body", .text)]
        try src.begin()
        try src.createTable(TableSchema(name: table, engine: Engine("test"), columns: columns, primaryKey: ["id"]), named: table)
        let w = try src.writer(into: try src.describe(table), columns: columns)
        try w.write(try RowBatch(rows: rows, types: columns.map(\.logicalType)))
        try w.finish()
        try src.commit()
        return columns
    }

    /// A page whose answer breaks off (the connection closes in the middle of the body) fails
    /// the read with a clear error; it is never taken as a shorter page. While none of the
    /// page reached the caller, the GET is asked again first.
    func testAPageCutShortFailsTheRead() async throws {
        let path = folder.path("cut.db")
        let table = TableName("pages")
        // Random hex (it hardly compresses).
        var rng = SplitMix64(seed: 42)
        let rows: [[Value]] = (1...60).map { i in
            [.int(Int64(i)), .text("page \(i) & " + (0..<4000).map { _ in String(format: "%016llx", rng.next()) }.joined())]
        }
        let columns = try bodies(path, table, rows)
        let service = try await RunningService(database: "sqlite:" + path, drivers: drivers)
        defer { service.stop() }
        // Every connection through the relay is cut after 400 KB of answers (the page is 3.8 MB).
        let relay = try CuttingRelay(upstreamPort: service.port, cutAfter: 400_000)
        defer { relay.stop() }
        let http = try HTTPDriver.standard.connect(Endpoint(parsing: "http://:\(service.readOnly)@127.0.0.1:\(relay.port)/"), role: .source)
        let schema = try http.describe(table)

        // Batches of 2 rows: some reach the caller before the cut, so the page cannot be asked again.
        let reader = try http.reader(table: schema, columns: columns, keyRange: nil, batchSize: 2)
        var read = 0
        XCTAssertThrowsError(try { while let b = try reader.next() { read += b.count } }()) { e in
            XCTAssertTrue("\(e)".contains("broke off"), "\(e)")
            XCTAssertFalse("\(e)".contains("\n"), "one line: \(e)")
        }
        XCTAssertGreaterThan(read, 0)
        XCTAssertLessThan(read, rows.count)

        // One batch for the whole page: nothing reached the caller, so the GET is asked again
        // (the relay cuts every attempt), then the read fails.
        let again = try http.reader(table: schema, columns: columns, keyRange: nil, batchSize: 1000)
        let before = relay.connections
        XCTAssertThrowsError(try again.next()) { e in
            XCTAssertTrue("\(e)".contains("broke off"), "\(e)")
        }
        XCTAssertGreaterThanOrEqual(relay.connections - before, 3, "the page was asked for again")

        // Through the engine: the copy fails, the target keeps nothing.
        let lite = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + folder.path("copy.db")), role: .target)
        let s = try CopyHarness(drivers).copy(http, lite, tables: ["pages"])
        XCTAssertFalse(s.ok)
        XCTAssertTrue(s.tables.compactMap(\.error).joined().contains("broke off"), "\(s.tables.compactMap(\.error))")
        XCTAssertFalse(try lite.tableExists(table))
    }

    /// Answers are gzip-compressed when the URL asks for it (`compress=gzip`, the default for a
    /// service on another host) and not from a service on this machine (`compress=auto`,
    /// `compress=none`), where compressing costs the service more time than the bytes it saves;
    /// the rows are the same either way. Another value is refused naming the choices.
    func testAnswersAreCompressedWhenTheURLAsks() async throws {
        let path = folder.path("gz.db")
        let table = TableName("words")
        let rows: [[Value]] = (1...3000).map { [.int(Int64($0)), .text("the same words again and again, row \($0)")] }
        let columns = try bodies(path, table, rows)
        let service = try await RunningService(database: "sqlite:" + path, drivers: drivers)
        defer { service.stop() }
        let relay = try CuttingRelay(upstreamPort: service.port, cutAfter: Int.max)
        defer { relay.stop() }
        func read(_ query: String) throws -> (rows: [[Value]], bytes: Int) {
            let before = relay.answered
            let http = try HTTPDriver.standard.connect(Endpoint(parsing: "http://:\(service.readOnly)@127.0.0.1:\(relay.port)/\(query)"), role: .source)
            defer { http.close() }
            let reader = try http.reader(table: try http.describe(table), columns: columns, keyRange: nil, batchSize: 1000)
            var got: [[Value]] = []
            while let b = try reader.next() { for r in 0..<b.count { got.append(b.row(r, types: columns.map(\.logicalType))) } }
            return (got, relay.answered - before)
        }
        let plain = try read("")
        let none = try read("?compress=none")
        let gzip = try read("?compress=gzip")
        XCTAssertEqual(plain.rows, rows)
        XCTAssertEqual(none.rows, rows)
        XCTAssertEqual(gzip.rows, rows)
        XCTAssertGreaterThan(plain.bytes, 100_000, "a page of 3,000 rows, as it is")
        XCTAssertLessThan(gzip.bytes * 4, plain.bytes, "compressed: \(gzip.bytes) bytes against \(plain.bytes)")
        XCTAssertLessThan(abs(none.bytes - plain.bytes), 2_000)
        XCTAssertThrowsError(try read("?compress=zip")) { e in
            XCTAssertTrue("\(e)".contains("compress=gzip, compress=none or compress=auto"), "\(e)")
        }
    }

    /// The service fails while reading, after the page's status was sent: it ends the page with
    /// `<error>`, and the client fails the read with the service's message.
    func testAnErrorInsideAPageFailsTheRead() async throws {
        let path = folder.path("bad.db")
        let db = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + path), role: .target)
        guard let lite = db as? SQLiteConnection else { return XCTFail("not a SQLite connection") }
        try lite.run("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER)")
        try lite.run("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 3000) INSERT INTO t SELECT i, i * 7 FROM s")
        // A text the INTEGER column cannot carry, well into the page.
        try lite.run("UPDATE t SET n = 'abc' WHERE id = 2500")
        let service = try await RunningService(database: "sqlite:" + path, drivers: drivers)
        defer { service.stop() }
        let (status, body) = try service.request("GET", "v1/tables/t/rows?limit=5000", token: service.readOnly)
        XCTAssertEqual(status, 200, "the status went out before the error")
        XCTAssertTrue(body.contains("<error code="), String(body.suffix(300)))
        XCTAssertTrue(body.hasSuffix("</rows>\n"), String(body.suffix(300)))
        let http = try HTTPDriver.standard.connect(Endpoint(parsing: service.url(token: service.readOnly)), role: .source)
        let schema = try http.describe(TableName("t"))
        let reader = try http.reader(table: schema, columns: schema.columns, keyRange: nil, batchSize: 1000)
        XCTAssertThrowsError(try { while try reader.next() != nil {} }()) { e in
            XCTAssertTrue("\(e)".contains("the server stopped"), "\(e)")
            XCTAssertTrue("\(e)".contains("abc"), "\(e)")
        }
    }
}

/// A TCP relay in front of a real service that closes each connection after `cutAfter` bytes
/// of answers on it: the network failing in the middle of a page.
final class CuttingRelay: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let upstreamPort: Int
    private let cutAfter: Int
    private let lock = NSLock()
    private var accepted = 0
    private var answeredBytes = 0
    private var stopped = false

    /// Bytes relayed from the service to its clients.
    var answered: Int {
        lock.lock()
        defer { lock.unlock() }
        return answeredBytes
    }

    func count(answered n: Int) {
        lock.lock()
        answeredBytes += n
        lock.unlock()
    }

    var connections: Int {
        lock.lock()
        defer { lock.unlock() }
        return accepted
    }

    init(upstreamPort: Int, cutAfter: Int) throws {
        self.upstreamPort = upstreamPort
        self.cutAfter = cutAfter
        let fd = socket(AF_INET, Self.streamType, 0)
        guard fd >= 0 else { throw ConformanceFailure("socket failed") }
        var addr = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, 16) == 0 else { throw ConformanceFailure("bind/listen failed") }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        listener = fd
        port = Int(UInt16(bigEndian: addr.sin_port))
        let t = Thread { [self] in acceptLoop() }
        t.start()
    }

    #if canImport(Glibc)
    static let streamType = Int32(SOCK_STREAM.rawValue)
    #else
    static let streamType = SOCK_STREAM
    #endif

    static func loopback(port: UInt16) -> sockaddr_in {
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        return addr
    }

    func stop() {
        lock.lock()
        stopped = true
        lock.unlock()
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            lock.lock()
            let done = stopped
            if client >= 0 { accepted += 1 }
            lock.unlock()
            if client < 0 || done { return }
            let upstream = socket(AF_INET, Self.streamType, 0)
            var addr = Self.loopback(port: UInt16(upstreamPort))
            let ok = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            guard ok == 0 else {
                close(client)
                close(upstream)
                continue
            }
            let pair = Pair(client: client, upstream: upstream)
            Thread { Self.relay(from: client, to: upstream, limit: nil, pair: pair) }.start()
            Thread { [cutAfter, self] in Self.relay(from: upstream, to: client, limit: cutAfter, pair: pair, tally: self) }.start()
        }
    }

    /// Both ends of one relayed connection, closed once.
    final class Pair: @unchecked Sendable {
        let client: Int32
        let upstream: Int32
        private let lock = NSLock()
        private var closed = false
        init(client: Int32, upstream: Int32) {
            self.client = client
            self.upstream = upstream
        }
        func close() {
            lock.lock()
            defer { lock.unlock() }
            guard !closed else { return }
            closed = true
            shutdown(client, Int32(SHUT_RDWR))
            shutdown(upstream, Int32(SHUT_RDWR))
            #if canImport(Glibc)
            Glibc.close(client)
            Glibc.close(upstream)
            #else
            Darwin.close(client)
            Darwin.close(upstream)
            #endif
        }
    }

    private static func relay(from: Int32, to: Int32, limit: Int?, pair: Pair, tally: CuttingRelay? = nil) {
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        var total = 0
        defer { pair.close() }
        while true {
            let n = buffer.withUnsafeMutableBytes { read(from, $0.baseAddress, $0.count) }
            if n <= 0 { return }
            let allowed = limit.map { min(n, $0 - total) } ?? n
            var sent = 0
            while sent < allowed {
                let w = buffer.withUnsafeBytes { p in p.baseAddress.map { write(to, $0 + sent, allowed - sent) } ?? -1 }
                if w <= 0 { return }
                sent += w
            }
            total += allowed
            tally?.count(answered: allowed)
            if let limit, total >= limit { return }
        }
    }
}
