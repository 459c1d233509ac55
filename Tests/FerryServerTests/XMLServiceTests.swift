import FerryCore
import FerryDriverTestKit
import FerryMySQL
import FerryPostgres
import FerrySQLite
@testable import FerryServer
import FerryHTTPClient
import FerryXML
import Foundation
import Hummingbird
import Logging
import XCTest
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A real service on a loopback port, for one test.
final class RunningService {
    let port: Int
    let task: Task<Void, any Error>
    let service: XMLService
    let readWrite = "rw-" + UUID().uuidString
    let readOnly = "ro-" + UUID().uuidString
    /// Scope `write`: rows, change sets, pushes; not creating, dropping or replacing tables.
    let write = "wr-" + UUID().uuidString

    init(database: String, drivers: [any Driver], maxBodyBytes: Int = 8 << 20, maxLoadBytes: Int = 1 << 30, tables: [TableName] = [], tls: (cert: String, key: String)? = nil,
         pageBytes: Int = 8 << 20) async throws {
        let config = ServerConfiguration(
            database: try Endpoint(parsing: database), registry: DriverRegistry(drivers), readWriteTokens: [readWrite],
            readOnlyTokens: [readOnly], writeTokens: [write], tables: tables, port: 0, tlsCertificate: tls?.cert, tlsKey: tls?.key,
            maxBodyBytes: maxBodyBytes, maxLoadBytes: maxLoadBytes, defaultPageRows: 1000, pageBytes: pageBytes)
        var logger = Logger(label: "ferry.serve.test")
        logger.logLevel = ProcessInfo.processInfo.environment["FERRY_TEST_SERVICE_LOG"] == nil ? .critical : .info
        let (stream, continuation) = AsyncStream<Int>.makeStream()
        service = XMLService(configuration: config)
        let app = try service.application(logger: logger) { port in continuation.yield(port) }
        task = Task { try await app.run() }
        var bound = 0
        for await p in stream {
            bound = p
            break
        }
        port = bound
    }

    func url(token: String? = nil) -> String { "http://:\(token ?? readWrite)@127.0.0.1:\(port)/" }

    /// A raw request: (status, body).
    func request(_ method: String, _ path: String, token: String?, body: Data? = nil) throws -> (Int, String) {
        var r = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/\(path)")!)
        r.httpMethod = method
        r.httpBody = body
        if let token { r.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        let done = DispatchSemaphore(value: 0)
        let box = Box()
        URLSession.shared.dataTask(with: r) { data, response, _ in
            box.status = (response as? HTTPURLResponse)?.statusCode ?? 0
            box.body = String(decoding: data ?? Data(), as: UTF8.self)
            done.signal()
        }.resume()
        done.wait()
        return (box.status, box.body)
    }

    final class Box: @unchecked Sendable {
        var status = 0
        var body = ""
    }

    func stop() { task.cancel() }

    /// Waits until the service has finished every request (even one whose client was killed);
    /// `abandoned`: then ends the read snapshots held, as the service's sweep ends those of a
    /// client that went away (after `snapshotIdleSeconds`; on SQLite a held read snapshot keeps
    /// writers waiting until then).
    ///
    /// A killed client's last request may still be on its way into the service when this is
    /// called (its bytes in the server's socket, not yet a request): idle means no request
    /// answered, none begun and no connection to the port with unread bytes or closed by its
    /// client but not yet by the service, for 100 ms on end. (Counting requests alone let a
    /// killed pull's snapshot begin after the release, and the next push wait on it: CI.)
    func waitIdle(endingAbandonedSnapshots abandoned: Bool = false) {
        let until = Date().addingTimeInterval(30)
        var started = service.requestsStarted, quiet = 0
        while quiet < 5 && Date() < until {
            usleep(20_000)
            let now = service.requestsStarted
            quiet = service.requestsInFlight == 0 && now == started && !Self.hasPendingConnection(port: port) ? quiet + 1 : 0
            started = now
        }
        if abandoned { service.handlers.releaseAll() }
    }

    /// Whether a TCP connection to `port` on this machine holds bytes the service has not read,
    /// or was closed by its client and not yet by the service (/proc/net/tcp and tcp6).
    static func hasPendingConnection(port: Int) -> Bool {
        let suffix = ":" + String(format: "%04X", port)
        for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { continue }
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ")
                guard fields.count > 4, fields[1].hasSuffix(suffix) else { continue }
                let queues = fields[4].split(separator: ":")
                let unread = queues.count == 2 && Int(queues[1], radix: 16).map { $0 > 0 } == true
                if fields[3] == "08" || (fields[3] == "01" && unread) { return true }
            }
        }
        return false
    }
}

final class XMLServiceTests: XCTestCase {
    var folder: TemporaryFolder!
    let drivers: [any Driver] = [SQLiteDriver(), PostgresDriver(), MySQLDriver(), HTTPDriver.standard]
    var harness: CopyHarness { CopyHarness(drivers) }

    override func setUpWithError() throws {
        folder = try TemporaryFolder()
    }

    var chinook: String { TestDatabases.packageRoot().appendingPathComponent("samples/chinook.sqlite").path }

    func sqlite(_ name: String) throws -> any Connection {
        try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + folder.path(name)), role: .target)
    }

    func testSQLiteThroughTheServiceAndBack() async throws {
        let service = try await RunningService(database: "sqlite:" + chinook, drivers: drivers)
        defer { service.stop() }
        let src = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + chinook), role: .source)
        let http = try HTTPDriver.standard.connect(Endpoint(parsing: service.url()), role: .source)
        let listed = try http.listTables()
        XCTAssertEqual(listed.count, 11)
        XCTAssertEqual(listed.first { $0.name.name == "Track" }?.rowEstimate, 3503)
        // Choosing tables asks for the names alone: the service counts nothing for them.
        XCTAssertEqual(try http.listTableNames(), listed.map(\.name))
        XCTAssertEqual(try src.listTableNames(), listed.map(\.name))
        let names = try ExternalTool.run(
            ["curl", "-s", "-H", "Authorization: Bearer \(service.readOnly)", "http://127.0.0.1:\(service.port)/v1/tables?rows=no"], input: "")
        XCTAssertTrue(names.contains("<table name=\"Track\"/>") && !names.contains("rows="), names)
        XCTAssertEqual(try http.describe(TableName("Track")).primaryKey, ["TrackId"])
        let lite = try sqlite("copy.db")
        let s = try harness.copy(http, lite, batchSize: 400)
        XCTAssertTrue(s.ok, "\(s.tables.compactMap(\.error))")
        XCTAssertEqual(try harness.differences(src, lite), [])

        // SQLite -> http -> SQLite: a second service over an empty file, written through HTTP.
        let target = try await RunningService(database: "sqlite:" + folder.path("served.db"), drivers: drivers)
        defer { target.stop() }
        let writer = try HTTPDriver.standard.connect(Endpoint(parsing: target.url()), role: .target)
        let s2 = try harness.copy(src, writer)
        XCTAssertTrue(s2.ok, "\(s2.tables.compactMap(\.error))")
        let served = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + folder.path("served.db")), role: .source)
        XCTAssertEqual(try harness.differences(src, served), [])
        // Append of duplicate keys fails whole and leaves no staging table behind.
        let dup = try harness.copy(src, writer, mode: .append, tables: ["Genre"])
        XCTAssertFalse(dup.ok)
        // It failed at its commit, after its rows were sent: none of them counts as copied.
        XCTAssertEqual(dup.tables.first?.rows, 25)
        XCTAssertEqual(dup.totalRows, 0)
        XCTAssertEqual(try served.countRows(TableName("Genre")), 25)
        XCTAssertFalse(try served.listTables().contains { $0.name.name.hasPrefix("_ferry_") })
        let replaced = try harness.copy(src, writer, mode: .replace, tables: ["Genre"])
        XCTAssertTrue(replaced.ok, "\(replaced.tables.compactMap(\.error))")
    }

    func testEveryTypeThroughTheService() async throws {
        // The conformance kit's type samples, written and read through HTTP.
        let service = try await RunningService(database: "sqlite:" + folder.path("kit.db"), drivers: drivers)
        defer { service.stop() }
        let src = try sqlite("types.db")
        let columns = DriverConformance.typeSamples.map { Column(name: $0.name, nativeType: "", logicalType: $0.type) }
        let schema = TableSchema(name: TableName("types"), engine: Engine("test"),
                                 columns: [Column(name: "id", nativeType: "", logicalType: .int64, isNullable: false)] + columns, primaryKey: ["id"])
        try src.begin()
        try src.createTable(schema, named: schema.name)
        var rows: [[Value]] = []
        for i in 0..<2 { rows.append([.int(Int64(i))] + DriverConformance.typeSamples.map { $0.values[i] }) }
        rows.append([.int(2)] + DriverConformance.typeSamples.map { _ in .null })
        let w = try src.writer(into: try src.describe(schema.name), columns: schema.columns)
        try w.write(RowBatch(rows: rows, types: schema.columns.map(\.logicalType)))
        try src.commit()
        let http = try HTTPDriver.standard.connect(Endpoint(parsing: service.url()), role: .target)
        let s = try harness.copy(src, http)
        XCTAssertTrue(s.ok, "\(s.tables.compactMap(\.error))")
        let back = try sqlite("back.db")
        XCTAssertTrue(try harness.copy(http, back).ok)
        XCTAssertEqual(try harness.differences(src, back), [])
    }

    func testServersThroughTheService() async throws {
        let pgURL = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let myURL = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        let src = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + chinook), role: .source)
        for url in [pgURL, myURL] {
            let db = try harness.registry.connect(url, role: .target)
            // Album first: it references Artist.
            for t in ["Album", "Artist"] {
                try db.begin(); try db.dropTable(TableName(t)); try db.commit()
            }
            db.close()
            let service = try await RunningService(database: url, drivers: drivers)
            defer { service.stop() }
            let http = try HTTPDriver.standard.connect(Endpoint(parsing: service.url()), role: .target)
            let s = try harness.copy(src, http, tables: ["Artist", "Album"])
            XCTAssertTrue(s.ok, "\(url.prefix(8)): \(s.tables.compactMap(\.error))")
            let direct = try harness.registry.connect(url, role: .source)
            XCTAssertEqual(try harness.differences(src, direct, tables: [TableName("Artist"), TableName("Album")]), [])
            // And back out through the service.
            let lite = try sqlite("from-\(url.prefix(5)).db")
            XCTAssertTrue(try harness.copy(http, lite, tables: ["Artist", "Album"]).ok)
            XCTAssertEqual(try harness.differences(src, lite, tables: [TableName("Artist"), TableName("Album")]), [])
            // Appends through the service: staged, then merged in one server-side transaction.
            let more = try sqlite("more-\(url.prefix(5)).db")
            let artistSchema = try src.describe(TableName("Artist"))
            try more.begin()
            try more.createTable(artistSchema, named: TableName("Artist"))
            let w = try more.writer(into: try more.describe(TableName("Artist")), columns: artistSchema.columns)
            try w.write(RowBatch(rows: (1000..<3500).map { [.int(Int64($0)), .text("appended \($0) & <co>")] }, types: [.int64, .text]))
            try w.finish()
            try more.commit()
            let appended = try harness.copy(more, http, mode: .append, tables: ["Artist"], batchSize: 1000)
            XCTAssertTrue(appended.ok, "\(url.prefix(8)): \(appended.tables.compactMap(\.error))")
            XCTAssertEqual(try direct.countRows(TableName("Artist")), 275 + 2500)
            XCTAssertFalse(try direct.listTables().contains { $0.name.name.hasPrefix("_ferry_") })
            let cleanup = try harness.registry.connect(url, role: .target)
            try cleanup.begin(); try cleanup.dropTable(TableName("Album")); try cleanup.dropTable(TableName("Artist")); try cleanup.commit()
        }
    }

    func testTLS() async throws {
        let cert = folder.path("cert.pem"), key = folder.path("key.pem")
        try ExternalTool.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "1",
             "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"], input: "")
        let service = try await RunningService(database: "sqlite:" + chinook, drivers: drivers, tls: (cert, key))
        defer { service.stop() }
        let out = try ExternalTool.run(
            ["curl", "-s", "--cacert", cert, "-H", "Authorization: Bearer \(service.readOnly)", "https://127.0.0.1:\(service.port)/v1/tables/Genre/count"],
            input: "")
        XCTAssertTrue(out.contains("<count rows=\"25\"/>"), out)
        XCTAssertThrowsError(try ExternalTool.run(["curl", "-s", "-f", "http://127.0.0.1:\(service.port)/v1/tables"], input: ""),
                             "plain HTTP to the TLS port must fail")
        // Ferry's client verifies the certificate against the machine's CAs: this one is its own.
        XCTAssertThrowsError(try HTTPDriver.standard.connect(Endpoint(parsing: "https://:\(service.readOnly)@127.0.0.1:\(service.port)/"), role: .source)) { e in
            XCTAssertTrue("\(e)".contains("the TLS handshake failed: the service's certificate is not signed by a CA this machine trusts; give the CA that signed it with --ca-file"), "\(e)")
            XCTAssertFalse("\(e)".contains(service.readOnly), "token leaked: \(e)")
        }
        // With the CA that signed it (`--ca-file`, `ca-file=`): verified, and read.
        var trusted = try Endpoint(parsing: "https://:\(service.readOnly)@127.0.0.1:\(service.port)/")
        trusted.options["ca-file"] = cert
        let c = try HTTPDriver.standard.connect(trusted, role: .source)
        XCTAssertEqual(try c.countRows(TableName("Genre")), 25)
        c.close()
        let viaURL = try HTTPDriver.standard.connect(Endpoint(parsing: "https://:\(service.readOnly)@127.0.0.1:\(service.port)/?ca-file=\(cert)"), role: .source)
        XCTAssertEqual(try viaURL.countRows(TableName("Genre")), 25)
        viaURL.close()
        // A CA that did not sign it is no help; a CA file that is no certificate, or plain http, is an error.
        let other = folder.path("other.pem"), otherKey = folder.path("other-key.pem")
        try ExternalTool.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", otherKey, "-out", other, "-days", "1", "-subj", "/CN=other"], input: "")
        var wrong = trusted
        wrong.options["ca-file"] = other
        XCTAssertThrowsError(try HTTPDriver.standard.connect(wrong, role: .source)) { e in
            XCTAssertTrue("\(e)".contains("not signed by a CA this machine trusts"), "\(e)")
        }
        var bogus = trusted
        bogus.options["ca-file"] = otherKey
        XCTAssertThrowsError(try HTTPDriver.standard.connect(bogus, role: .source)) { e in
            XCTAssertTrue("\(e)".contains("holds no PEM certificate"), "\(e)")
        }
        var plain = try Endpoint(parsing: "http://:\(service.readOnly)@127.0.0.1:\(service.port)/")
        plain.options["ca-file"] = cert
        XCTAssertThrowsError(try HTTPDriver.standard.connect(plain, role: .source)) { e in
            XCTAssertTrue("\(e)".contains("is for https:// services"), "\(e)")
        }
    }

    func testGzipWhenAsked() async throws {
        let service = try await RunningService(database: "sqlite:" + chinook, drivers: drivers)
        defer { service.stop() }
        let plain = try service.request("GET", "v1/tables/Track/rows?limit=5000", token: service.readOnly).1
        // curl is the client here: it shows the raw encoding and decodes it.
        let out = try ExternalTool.run(
            ["curl", "-s", "--compressed", "-D", "-", "-H", "Authorization: Bearer \(service.readOnly)",
             "http://127.0.0.1:\(service.port)/v1/tables/Track/rows?limit=5000"], input: "")
        XCTAssertTrue(out.lowercased().contains("content-encoding: gzip"), String(out.prefix(300)))
        let body = out.components(separatedBy: "\r\n\r\n").dropFirst().joined(separator: "\r\n\r\n")
        XCTAssertEqual(body, plain, "gzip must not change a byte")
    }

    func testChangesAreAllOrNothing() async throws {
        var urls = ["sqlite:" + folder.path("changes.db")]
        urls.append(try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL"))
        urls.append(try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL"))
        for url in urls {
            let db = try harness.registry.connect(url, role: .target)
            let table = TableName("ferry_changes_test")
            try db.begin()
            try db.dropTable(table)
            try db.createTable(TableSchema(name: table, engine: Engine("test"), columns: [
                Column(name: "id", nativeType: "", logicalType: .int64, isNullable: false),
                Column(name: "name", nativeType: "", logicalType: .text(maxLength: 20, fixed: false))], primaryKey: ["id"]), named: table)
            try db.commit()
            let w = try db.writer(into: try db.describe(table), columns: try db.describe(table).columns)
            try db.begin()
            try w.write(RowBatch(rows: [[.int(1), .text("one")], [.int(2), .text("two")], [.int(3), .text("three")]], types: [.int64, .text]))
            try w.finish()
            try db.commit()
            let service = try await RunningService(database: url, drivers: drivers)
            defer { service.stop() }
            let ok = """
                <changes><insert><r><v>4</v><v>four &amp; more</v></r></insert>
                <upsert><r><v>2</v><v>TWO</v></r><r><v>5</v><v>five</v></r></upsert>
                <delete><r><v>1</v></r><r><v>42</v></r></delete></changes>
                """
            var (status, body) = try service.request("POST", "v1/tables/ferry_changes_test/changes", token: service.readWrite, body: Data(ok.utf8))
            XCTAssertEqual(status, 200, "\(url.prefix(8)): \(body)")
            XCTAssertTrue(body.contains("inserted=\"1\" upserted=\"2\" deleted=\"1\""), body)
            func rows() throws -> [[Value]] {
                try DriverConformance.readAll(db, table).sorted { $0[0].description < $1[0].description }
            }
            let expected: [[Value]] = [[.int(2), .text("TWO")], [.int(3), .text("three")], [.int(4), .text("four & more")], [.int(5), .text("five")]]
            XCTAssertEqual(try rows(), expected)
            // A duplicate insert fails the whole change set: the upsert and delete beside it are not applied.
            let bad = "<changes><upsert><r><v>3</v><v>changed</v></r></upsert><delete><r><v>5</v></r></delete><insert><r><v>4</v><v>dup</v></r></insert></changes>"
            (status, body) = try service.request("POST", "v1/tables/ferry_changes_test/changes", token: service.readWrite, body: Data(bad.utf8))
            XCTAssertEqual(status, 422, "\(url.prefix(8)): \(body)")
            XCTAssertEqual(try rows(), expected, "nothing applied")
            // The http driver's keyed calls go through the same endpoint.
            let http = try HTTPDriver.standard.connect(Endpoint(parsing: service.url()), role: .target)
            let cols = try http.describe(table).columns
            XCTAssertEqual(try http.upsertRows(into: try http.describe(table), columns: cols, key: ["id"], rows: RowBatch(rows: [[.int(3), .text("THREE")]], types: [.int64, .text])), 1)
            XCTAssertEqual(try http.deleteRows(from: try http.describe(table), key: [cols[0]], keys: RowBatch(rows: [[.int(5)]], types: [.int64])), 1)
            XCTAssertEqual(try rows(), [[.int(2), .text("TWO")], [.int(3), .text("THREE")], [.int(4), .text("four & more")]])
            try db.begin(); try db.dropTable(table); try db.commit()
        }
    }

    /// A change set of more rows of each kind than three batches, which the service keeps in a
    /// temporary file and applies a batch at a time: applied whole, inserts then upserts then
    /// deletes, every value as sent; a duplicate key in the last batch of its inserts applies
    /// nothing and names the row by its place in the request.
    func testALargeChangeSetIsAppliedABatchAtATime() async throws {
        var urls = ["sqlite:" + folder.path("large-changes.db")]
        urls.append(try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL"))
        urls.append(try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL"))
        for url in urls {
            let db = try harness.registry.connect(url, role: .target)
            defer { db.close() }
            let table = TableName("ferry_large_changes")
            try db.begin()
            try db.dropTable(table)
            try db.createTable(TableSchema(name: table, engine: Engine("test"), columns: [
                Column(name: "id", nativeType: "", logicalType: .int64, isNullable: false),
                Column(name: "name", nativeType: "", logicalType: .text(maxLength: 40, fixed: false))], primaryKey: ["id"]), named: table)
            try db.commit()
            let service = try await RunningService(database: url, drivers: drivers)
            defer { service.stop() }
            func section(_ tag: String, _ ids: [Int], _ name: ((Int) -> String)?) -> String {
                "<\(tag)>\n" + ids.map { id in "<r><v>\(id)</v>" + (name.map { "<v>\($0(id))</v>" } ?? "") + "</r>\n" }.joined() + "</\(tag)>\n"
            }
            // 32,000 inserts; 31,000 upserts, 7,000 of them of rows just inserted; 21,000 deletes.
            let document = "<changes>\n" + section("insert", Array(0..<32_000)) { "n\($0) &amp; &lt;x&gt;" }
                + section("upsert", Array(25_000..<56_000)) { "u\($0)" } + section("delete", Array(0..<21_000), nil) + "</changes>\n"
            var (status, body) = try service.request("POST", "v1/tables/ferry_large_changes/changes", token: service.readWrite, body: Data(document.utf8))
            XCTAssertEqual(status, 200, "\(url.prefix(8)): \(body)")
            XCTAssertTrue(body.contains("inserted=\"32000\" upserted=\"31000\" deleted=\"21000\""), "\(url.prefix(8)): \(body)")
            var expected: [Int64: String] = [:]
            for id in 21_000..<25_000 { expected[Int64(id)] = "n\(id) & <x>" }
            for id in 25_000..<56_000 { expected[Int64(id)] = "u\(id)" }
            func rows() throws -> [Int64: String] {
                var out: [Int64: String] = [:]
                for row in try DriverConformance.readAll(db, table) {
                    guard case .int(let id) = row[0], case .text(let name) = row[1] else {
                        XCTFail("\(url.prefix(8)): an unexpected row \(row)")
                        continue
                    }
                    out[id] = name
                }
                return out
            }
            XCTAssertEqual(try rows().count, expected.count, "\(url.prefix(8))")
            XCTAssertTrue(try rows() == expected, "\(url.prefix(8)): every value as sent")
            // A key taken, in the last batch of 25,000 inserts: nothing of it or of the upserts applied.
            let taken = "<changes>\n" + section("insert", Array(100_000..<124_999) + [30_000]) { "late\($0)" }
                + section("upsert", [21_000]) { _ in "changed" } + "</changes>\n"
            (status, body) = try service.request("POST", "v1/tables/ferry_large_changes/changes", token: service.readWrite, body: Data(taken.utf8))
            XCTAssertEqual(status, 422, "\(url.prefix(8)): \(body)")
            XCTAssertTrue(try rows() == expected, "\(url.prefix(8)): nothing applied")
            try db.begin(); try db.dropTable(table); try db.commit()
        }
    }

    /// Token scopes: read tokens read (and hold read snapshots); write tokens write rows,
    /// change sets and pushes, and create, fill and drop only their own loads' staging tables;
    /// only manage tokens create, drop or replace served tables.
    func testTokenScopes() async throws {
        let folder = try TemporaryFolder()
        let chinook = folder.path("chinook.sqlite")
        try FileManager.default.copyItem(atPath: self.chinook, toPath: chinook)
        let service = try await RunningService(database: "sqlite:" + chinook, drivers: drivers)
        defer { service.stop() }
        func expect(_ method: String, _ path: String, _ token: String, body: Data? = nil, _ status: Int, _ fragment: String = "",
                    line: UInt = #line) throws {
            let (got, text) = try service.request(method, path, token: token, body: body)
            XCTAssertEqual(got, status, "\(method) \(path): \(text)", line: line)
            if !fragment.isEmpty { XCTAssertTrue(text.contains(fragment), "\(method) \(path): \(text)", line: line) }
        }
        let newTable = XMLDocuments.schema(TableSchema(
            name: TableName("Scratch"), engine: .http,
            columns: [Column(name: "id", nativeType: "", logicalType: .int64, isNullable: false)], primaryKey: ["id"]))
        func staging(_ name: String) -> Data {
            XMLDocuments.schema(TableSchema(
                name: TableName(name), engine: .http, columns: [Column(name: "ArtistId", nativeType: "", logicalType: .int64, isNullable: true)]))
        }
        let row = Data("<rows><r><v>7000</v><v>scoped</v></r></rows>".utf8)

        // Read: reads, nothing else — not even a read snapshot of this SQLite file (a rollback
        // journal: holding one would keep every writer waiting); a write token may hold one.
        try expect("GET", "v1/tables/Artist/rows?limit=1", service.readOnly, 200)
        try expect("POST", "v1/snapshots", service.readOnly, 403, "only a token that may write may hold one")
        let (created, snapshot) = try service.request("POST", "v1/snapshots", token: service.write)
        XCTAssertEqual(created, 201, snapshot)
        if let id = snapshot.range(of: "id=\"")
            .map({ String(snapshot[$0.upperBound...].prefix { $0 != "\"" }) }) {
            try expect("DELETE", "v1/snapshots/" + id, service.write, 200)
        }
        try expect("POST", "v1/tables/Artist/rows", service.readOnly, body: row, 403, "may only read")
        try expect("POST", "v1/push", service.readOnly, body: Data("<push id=\"x\"/>".utf8), 403, "may only read")

        // Write: rows into served tables; not creating, dropping or replacing them.
        try expect("POST", "v1/tables/Artist/rows", service.write, body: row, 200)
        try expect("POST", "v1/tables", service.write, body: newTable, 403, "not create tables")
        try expect("DELETE", "v1/tables/Album", service.write, 403, "not drop tables")
        try expect("POST", "v1/tables/Genre/swap?into=Album", service.write, 403, "not replace tables")
        try expect("POST", "v1/tables/Artist/indexes", service.write, body: Data("<objects/>".utf8), 403, "not create indexes")
        // Its own staging table: created, filled, dropped. Another token's: none of that.
        try expect("POST", "v1/tables", service.write, body: staging("_ferry_upsert_Mine"), 201)
        try expect("POST", "v1/tables/_ferry_upsert_Mine/rows", service.write, body: Data("<rows><r><v>1</v></r></rows>".utf8), 200)
        try expect("DELETE", "v1/tables/_ferry_upsert_Mine", service.write, 200)
        try expect("POST", "v1/tables", service.readWrite, body: staging("_ferry_upsert_Theirs"), 201)
        try expect("POST", "v1/tables/_ferry_upsert_Theirs/rows", service.write, body: Data("<rows><r><v>1</v></r></rows>".utf8), 403, "its own loads created")
        try expect("POST", "v1/tables/_ferry_upsert_Theirs/merge?into=Artist", service.write, 403, "its own loads created")
        try expect("DELETE", "v1/tables/_ferry_upsert_Theirs", service.write, 403, "its own loads created")
        // Merging a served table (not a staging one) into another is refused for every token.
        try expect("POST", "v1/tables/Genre/merge?into=Artist", service.readWrite, 400, "not a staging table")
        try expect("DELETE", "v1/tables/_ferry_upsert_Theirs", service.readWrite, 200)

        // A write token's keyed copy (staging + apply) works, even while another token's
        // staging table of the same name is there; a copy that creates tables does not.
        try expect("POST", "v1/tables", service.readWrite, body: staging("_ferry_upsert_Genre"), 201)
        let src = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + self.chinook), role: .source)
        defer { src.close() }
        let writer = try HTTPDriver.standard.connect(Endpoint(parsing: service.url(token: service.write)), role: .target)
        defer { writer.close() }
        let summary = try CopyHarness(drivers).copy(src, writer, mode: .upsert, tables: ["Genre"])
        XCTAssertEqual(summary.tables.first?.rows, 25, "\(summary.tables)")
        XCTAssertNil(summary.tables.first?.error)
        let refused = try CopyHarness(drivers).copy(src, writer, mode: .replace, tables: ["MediaType"])
        XCTAssertTrue(refused.tables.first?.error?.contains("may only write rows, not replace tables") ?? false, "\(refused.tables)")
        try expect("GET", "v1/tables/MediaType/count", service.readOnly, 200, "rows=\"5\"")
        // Manage: everything.
        try expect("POST", "v1/tables", service.readWrite, body: newTable, 201)
        try expect("DELETE", "v1/tables/Scratch", service.readWrite, 200)
        try expect("GET", "v1/tables/Album", service.readOnly, 200, "Album")
    }

    /// Digests and bucket filters speak the digests' second form: the key hash named on every
    /// request (a client of the first form, which hashed every key by MD5, is refused rather than
    /// answered with other buckets), `delimited=` only for columns whose text can be delimited.
    func testDigestsAndBucketsNameTheirKeyHash() async throws {
        let service = try await RunningService(database: "sqlite:" + chinook, drivers: drivers)
        defer { service.stop() }
        var (status, body) = try service.request("GET", "v1/capabilities", token: service.readOnly)
        XCTAssertEqual(status, 200, body)
        XCTAssertTrue(body.contains("<capability name=\"digests-2\"/>"), body)
        for query in ["modulus=4", "modulus=4&keyhash=crc32", "modulus=4&keyhash=integer&delimited=Name", "modulus=4&keyhash=integer&key=Name"] {
            (status, body) = try service.request("GET", "v1/tables/Artist/digests?" + query, token: service.readOnly)
            XCTAssertEqual(status, 400, "\(query): \(body)")
        }
        (status, body) = try service.request("GET", "v1/tables/Artist/digests?modulus=4", token: service.readOnly)
        XCTAssertTrue(body.contains("keyhash"), body)
        (status, body) = try service.request("GET", "v1/tables/Artist/digests?modulus=4&keyhash=integer&delimited=ArtistId", token: service.readOnly)
        XCTAssertEqual(status, 200, body)
        XCTAssertEqual(body.components(separatedBy: "<b ").count - 1, 4, body)
        XCTAssertTrue(body.contains("s1=\"0\""), body)
        (status, body) = try service.request("GET", "v1/tables/Artist/rows?buckets=4:1", token: service.readOnly)
        XCTAssertEqual(status, 400, body)
        // The rows of bucket 1 of 4 under the integer hash: exactly the ids whose hash says so.
        (status, body) = try service.request("GET", "v1/tables/Artist/rows?buckets=4:1&keyhash=integer&columns=ArtistId", token: service.readOnly)
        XCTAssertEqual(status, 200, body)
        let ids = body.components(separatedBy: "<r><v>").dropFirst().compactMap { Int64($0.prefix { $0.isNumber }) }
        XCTAssertEqual(ids, (Int64(1)...275).filter { KeyHash.integer($0) % 4 == 1 }, body)
    }

    func testSecurity() async throws {
        // A copy: this test sends write requests an attacker would (a DELETE among them).
        let folder = try TemporaryFolder()
        let chinook = folder.path("chinook.sqlite")
        try FileManager.default.copyItem(atPath: self.chinook, toPath: chinook)
        let service = try await RunningService(database: "sqlite:" + chinook, drivers: drivers, maxBodyBytes: 4096, maxLoadBytes: 4096)
        defer { service.stop() }
        var (status, body) = try service.request("GET", "v1/tables", token: nil)
        XCTAssertEqual(status, 401)
        XCTAssertTrue(body.contains("<error code=\"unauthorized\""), body)
        (status, _) = try service.request("GET", "v1/tables", token: "wrong-token-but-long-enough")
        XCTAssertEqual(status, 401)
        (status, body) = try service.request("POST", "v1/tables/Artist/rows", token: service.readOnly, body: Data("<rows/>".utf8))
        XCTAssertEqual(status, 403)
        XCTAssertTrue(body.contains("may only read"), body)
        (status, body) = try service.request("GET", "v1/tables/NoSuchTable", token: service.readOnly)
        XCTAssertEqual(status, 404)
        XCTAssertTrue(body.hasPrefix("<?xml") && body.contains("code=\"not_found\""), body)
        (status, body) = try service.request("GET", "v1/tables/Artist%3B%20DROP%20TABLE%20Artist%3B--/rows", token: service.readWrite)
        XCTAssertEqual(status, 404, body)
        // A cast's text-form column is a name checked against the catalog, never SQL.
        (status, body) = try service.request("GET", "v1/tables/Artist/rows?text=Name%29%3B%20DROP%20TABLE%20Artist%3B--", token: service.readOnly)
        XCTAssertEqual(status, 422, body)
        XCTAssertTrue(body.contains("has no column"), body)
        (status, body) = try service.request("GET", "v1/tables/Artist/rows?limit=1&text=ArtistId", token: service.readOnly)
        XCTAssertEqual(status, 200, body)
        XCTAssertTrue(body.contains("<r><v>1</v><v>AC/DC</v></r>"), body)
        (status, _) = try service.request("GET", "v1/tables/Artist", token: service.readOnly)
        XCTAssertEqual(status, 200, "nothing was dropped")
        let laughs = """
            <?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>
            <rows><r><v>1</v><v>&lol2;</v></r></rows>
            """
        (status, body) = try service.request("POST", "v1/tables/Artist/rows", token: service.readWrite, body: Data(laughs.utf8))
        XCTAssertEqual(status, 400, body)
        XCTAssertTrue(body.contains("DOCTYPE"), body)
        let external = "<?xml version=\"1.0\"?><!DOCTYPE r [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><rows><r><v>1</v><v>&x;</v></r></rows>"
        (status, body) = try service.request("POST", "v1/tables/Artist/rows", token: service.readWrite, body: Data(external.utf8))
        XCTAssertEqual(status, 400, body)
        XCTAssertFalse(body.contains("root:"), "the external entity was not read")
        let big = "<rows>" + String(repeating: "<r><v>1</v><v>x</v></r>", count: 1000) + "</rows>"
        (status, body) = try service.request("POST", "v1/tables/Artist/rows", token: service.readWrite, body: Data(big.utf8))
        XCTAssertEqual(status, 413, body)
        (status, body) = try service.request("GET", "v2/nothing", token: service.readWrite)
        XCTAssertEqual(status, 404)
        XCTAssertTrue(body.contains("<error"), body)
        XCTAssertEqual(try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + chinook), role: .source).countRows(TableName("Artist")), 275)

        // Names that are not served tables (a path, a schema that is no database, quotes) are
        // 404 on every endpoint, and no error body carries SQL text, file paths or engine internals.
        for name in ["%2e%2e%2fetc", "..%2F..%2Fetc%2Fpasswd", "x.y.z", "nosuch.Artist", "temp.sqlite_schema", "%00"] {
            for (method, rest) in [("GET", ""), ("GET", "/rows"), ("GET", "/count"), ("GET", "/digests?modulus=1"), ("DELETE", "")] {
                let (status, body) = try service.request(method, "v1/tables/" + name + rest, token: service.readWrite)
                XCTAssertEqual(status, 404, "\(method) \(name)\(rest): \(body)")
                for leak in ["SELECT", "SQLite error", "while executing", "pragma", folder.path("")] {
                    XCTAssertFalse(body.contains(leak), "\(method) \(name)\(rest) leaks \(leak): \(body)")
                }
            }
        }

        // The client reports a wrong token as one clear line, without the token.
        XCTAssertThrowsError(try HTTPDriver.standard.connect(Endpoint(parsing: service.url(token: "not-a-valid-token-123")), role: .source)) { e in
            XCTAssertTrue("\(e)".contains("refused the token"), "\(e)")
            XCTAssertFalse("\(e)".contains("not-a-valid-token-123"))
        }
    }
}
