import FerryCore
import FerryDriverTestKit
import FerryMySQL
import FerryPostgres
import FerrySQLite
import Foundation
import XCTest

/// Makes uniquely named databases on the MariaDB test server (scripts/test starts it).
final class MySQLFixture {
    let adminURL: String
    private var created: [String] = []

    /// Fails (never skips) when no server is configured, saying how to start one.
    init() throws {
        adminURL = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
    }

    var base: String {
        guard let slash = adminURL.range(of: "/", options: .backwards) else { return adminURL }
        return String(adminURL[..<slash.lowerBound])
    }

    func makeDatabase(_ label: String = "t") throws -> String {
        let name = "ferry_\(label)_\(UUID().uuidString.prefix(8).lowercased())"
        let admin = try MySQLConnection(endpoint: Endpoint(parsing: adminURL), role: .target)
        defer { admin.close() }
        try admin.run("CREATE DATABASE `\(name)` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        created.append(name)
        return base + "/" + name
    }

    func connect(_ url: String, role: ConnectionRole = .target) throws -> MySQLConnection {
        try MySQLConnection(endpoint: Endpoint(parsing: url), role: role)
    }

    /// Runs a script with the mariadb client (for dumps with DELIMITER and the like).
    func script(_ url: String, _ sql: String) throws {
        let e = try Endpoint(parsing: url)
        try ExternalTool.run(
            ["mariadb", "--no-defaults", "-h", e.host ?? "127.0.0.1", "-P", String(e.port ?? 3306), "-u", e.user ?? "", e.path],
            input: sql, environment: ["MYSQL_PWD": e.password ?? ""])
    }

    func chinook(_ file: String) throws -> String {
        let text = try String(contentsOf: TestDatabases.dataset("chinook/" + file), encoding: .utf8)
        let body = text.split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !$0.hasPrefix("DROP DATABASE") && !$0.hasPrefix("CREATE DATABASE") && !$0.hasPrefix("USE ") }
            .joined(separator: "\n")
        let url = try makeDatabase("chinook")
        try script(url, body)
        return url
    }

    deinit {
        guard let admin = try? MySQLConnection(endpoint: Endpoint(parsing: adminURL), role: .target) else { return }
        for name in created { try? admin.run("DROP DATABASE IF EXISTS `\(name)`") }
        admin.close()
    }
}

final class MySQLDriverTests: XCTestCase {
    var my: MySQLFixture!
    var folder: TemporaryFolder!

    override func setUpWithError() throws {
        let fixture = try MySQLFixture()
        my = fixture
        folder = try TemporaryFolder()
    }

    func sqlite(_ name: String) throws -> any Connection {
        try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + folder.path(name)), role: .target)
    }

    let harness = CopyHarness([SQLiteDriver(), PostgresDriver(), MySQLDriver()])

    func copy(_ src: any Connection, _ dst: any Connection, mode: WriteMode = .create, tables: [String] = [], jobs: Int = 1) throws -> CopySummary {
        try harness.copy(src, dst, mode: mode, tables: tables, jobs: jobs, batchSize: 600)
    }

    func assertSame(_ a: any Connection, _ b: any Connection, tables: [TableName]? = nil, file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertEqual(try harness.differences(a, b, tables: tables), [], file: file, line: line)
    }

    /// Copies every table of `src` into a new database and checks both sides are equal.
    func assertCopiesEqual(_ src: any Connection, into label: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let dst = try my.connect(try my.makeDatabase(label))
        let summary = try copy(src, dst)
        XCTAssertTrue(summary.ok, "\(summary.tables.compactMap(\.error))", file: file, line: line)
        try assertSame(src, dst, file: file, line: line)
    }

    /// A PostgreSQL database of its own on the test server (a target beside MariaDB), and what
    /// closes it and drops it.
    func postgresDatabase(_ label: String) throws -> (PostgresConnection, () -> Void) {
        let pgURL = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let admin = try PostgresConnection(endpoint: Endpoint(parsing: pgURL), role: .target)
        let name = "ferry_\(label)_\(UUID().uuidString.prefix(8).lowercased())"
        try admin.run("CREATE DATABASE \(name)")
        let base = pgURL.range(of: "/", options: .backwards).map { String(pgURL[..<$0.lowerBound]) } ?? pgURL
        let pg = try PostgresConnection(endpoint: Endpoint(parsing: base + "/" + name), role: .target)
        return (pg, {
            pg.close()
            try? admin.run("DROP DATABASE IF EXISTS \(name)")
            admin.close()
        })
    }

    func testDriverConformance() throws {
        var options = DriverConformance.Options()
        options.keepsNaN = false           // MySQL has no NaN or infinity in DOUBLE
        options.keepsNegativeZero = false  // nor -0.0
        options.keepsInfinity = false
        let kit = DriverConformance(options: options) { [my] in
            guard let my else { throw ConformanceFailure("no server") }
            return try my.connect(try my.makeDatabase("kit"))
        }
        for check in kit.checks {
            do { try check.run() } catch { XCTFail("\(check.name): \(error)") }
        }
    }

    func testChinookRoundTrips() throws {
        let url = try my.chinook("Chinook_MySql.sql")
        let src = try my.connect(url, role: .source)
        let tables = try src.listTables()
        XCTAssertEqual(tables.count, 11)
        let track = try src.describe(TableName("Track"))
        XCTAssertEqual(track.primaryKey, ["TrackId"])
        XCTAssertEqual(track.column(named: "UnitPrice")?.logicalType, .decimal(precision: 10, scale: 2))

        let lite = try sqlite("chinook.db")
        XCTAssertTrue(try copy(src, lite).ok)
        try assertSame(src, lite)
        let back = try my.connect(try my.makeDatabase("back"))
        let s = try copy(lite, back, jobs: 3)
        XCTAssertTrue(s.ok, "\(s.tables.compactMap(\.error))")
        try assertSame(src, back)
        let direct = try my.connect(try my.makeDatabase("direct"))
        XCTAssertTrue(try copy(src, direct, jobs: 2).ok)
        try assertSame(src, direct)
    }

    func testAutoIncrementCounter() throws {
        let url = try my.chinook("Chinook_MySql_AutoIncrementPKs.sql")
        let src = try my.connect(url, role: .source)
        XCTAssertEqual(try src.describe(TableName("Artist")).column(named: "ArtistId")?.serial, .autoincrement)
        let lite = try sqlite("auto.db")
        XCTAssertTrue(try copy(src, lite, tables: ["Artist"]).ok)
        let back = try my.connect(try my.makeDatabase("auto"))
        XCTAssertTrue(try copy(lite, back, tables: ["Artist"]).ok)
        try back.run("INSERT INTO Artist (Name) VALUES ('next')")
        XCTAssertEqual(try back.rows("SELECT max(ArtistId) FROM Artist"), [["276"]])
        XCTAssertEqual(try back.describe(TableName("Artist")).column(named: "ArtistId")?.serial, .autoincrement)
    }

    func testEdgeValuesAcrossEngines() throws {
        let url = try my.makeDatabase("edge")
        let db = try my.connect(url)
        try db.run("""
            CREATE TABLE edge (id INT PRIMARY KEY, d DECIMAL(65,30), dt DATETIME(6), u BIGINT UNSIGNED, t TEXT, b BLOB,
              f FLOAT, g DOUBLE, y YEAR, e ENUM('small','it''s big'), s SET('a','b'), j JSON, flag TINYINT(1), bits BIT(10), tm TIME(6),
              uu UUID, vb VARBINARY(16))
            """)
        try db.run("""
            INSERT INTO edge VALUES
              (1, '12345678901234567890123456789012345.123456789012345678901234567890', '1000-01-01 00:00:00.000001',
               18446744073709551615, 'emoji 😀 & < > \\' " \\\\ tab\\there\\nnewline é 中文', X'00010200FF00', 0.1, 0.30000000000000004,
               2024, 'it''s big', 'a,b', '{"k": [1, 2.50], "é": "😀"}', 1, b'1010101010', '23:59:59.999999',
               'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', X'000000'),
              (2, '-0.000000000000000000000000000001', '9999-12-31 23:59:59.999999', 0, '', X'', -3.4028e38, 5e-324,
               1901, 'small', '', 'null', 0, b'0', '00:00:00', NULL, X''),
              (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)
            """)
        let schema = try db.describe(TableName("edge"))
        XCTAssertEqual(schema.column(named: "u")?.logicalType, .decimal(precision: 20, scale: 0))
        XCTAssertEqual(schema.column(named: "j")?.logicalType, .json)
        XCTAssertEqual(schema.column(named: "flag")?.logicalType, .boolean)
        XCTAssertEqual(schema.column(named: "e")?.logicalType, .enumeration(labels: ["small", "it's big"]))
        XCTAssertEqual(schema.column(named: "y")?.logicalType, .int16)
        XCTAssertEqual(schema.column(named: "uu")?.logicalType, .uuid)

        // MySQL -> SQLite -> MySQL, and MySQL -> MySQL.
        let lite = try sqlite("edge.db")
        let s1 = try copy(db, lite)
        XCTAssertTrue(s1.ok, "\(s1.tables.compactMap(\.error))")
        try assertSame(db, lite)
        let back = try my.connect(try my.makeDatabase("edgeback"))
        let s2 = try copy(lite, back)
        XCTAssertTrue(s2.ok, "\(s2.tables.compactMap(\.error))")
        try assertSame(db, back)
        let same = try my.connect(try my.makeDatabase("edgesame"))
        let sameSummary = try copy(db, same)
        XCTAssertTrue(sameSummary.ok, "\(sameSummary.tables.compactMap(\.error))")
        try assertSame(db, same)
        XCTAssertEqual(try same.rows("SELECT u, HEX(b), f FROM edge WHERE id = 1"), [["18446744073709551615", "00010200FF00", "0.1"]])

        // MySQL <-> PostgreSQL.
        do {
            let pgURL = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
            let pg = try PostgresConnection(endpoint: Endpoint(parsing: pgURL), role: .target)
            defer { try? pg.run("DROP TABLE IF EXISTS edge; DROP TYPE IF EXISTS edge_e") }
            try? pg.run("DROP TABLE IF EXISTS edge; DROP TYPE IF EXISTS edge_e")
            let s3 = try copy(db, pg, tables: ["edge"])
            XCTAssertTrue(s3.ok, "\(s3.tables.compactMap(\.error))")
            try assertSame(db, pg, tables: [TableName("edge")])
            let fromPG = try my.connect(try my.makeDatabase("frompg"))
            let s4 = try copy(pg, fromPG, tables: ["edge"])
            XCTAssertTrue(s4.ok, "\(s4.tables.compactMap(\.error))")
            try assertSame(db, fromPG, tables: [TableName("edge")])
        }
    }

    /// PostgreSQL's row hash (`RowHash.lookup3`), which MariaDB has no SQL for, computed by Ferry
    /// from the rows as MariaDB's reader reads them, agrees with SQLite's (also beside the data)
    /// and PostgreSQL's (in its SQL) for every type MariaDB has — a latin1 column among them,
    /// extremes, NULLs — and changes when any one value of any column changes. Both Ferry-hashed
    /// sides keep their keys and row hashes from the first level (`KeyedHashSpill`), and the keyed
    /// listing taken from those files names the same rows as one read from the tables.
    func testLookup3DigestsBesideMariaDBAgreeAndSeeEveryChange() throws {
        let db = try my.connect(try my.makeDatabase("lookup3"))
        try db.run("""
            CREATE TABLE h (id BIGINT PRIMARY KEY, i2 SMALLINT, i4 INT, b TINYINT(1), n DECIMAL(12,2), f FLOAT, g DOUBLE,
              v VARCHAR(40), lat VARCHAR(20) CHARACTER SET latin1, t TEXT, d DATE, tm TIME(6), ts DATETIME(6), u UUID,
              vb VARBINARY(16), j JSON, e ENUM('sad','ok','happy'), y YEAR)
            """)
        try db.run("""
            INSERT INTO h SELECT n, n % 65535 - 32767, n * 7919 - 20000000, n % 3 = 0, n * 13.37, n / 3.0,
              n * 1e10 / 7.0, CONCAT('v', REPEAT('é', n % 20)), CONCAT('caf', CHAR(233 USING latin1), n % 9), REPEAT('x', n % 40),
              DATE '1950-01-01' + INTERVAL n * 11 DAY, SEC_TO_TIME(n * 17 + n / 1000000),
              TIMESTAMP '1960-01-01 00:00:00' + INTERVAL n DAY + INTERVAL n * 123 MICROSECOND,
              CAST(CONCAT(LEFT(MD5(n), 8), '-', MID(MD5(n), 9, 4), '-4', MID(MD5(n), 14, 3), '-8', MID(MD5(n), 18, 3), '-', RIGHT(MD5(n), 12)) AS UUID),
              UNHEX(REPEAT(LEFT(MD5(n), 8), n % 3)), JSON_OBJECT('g', n, 's', 'Zoë'), ELT(n % 3 + 1, 'sad', 'ok', 'happy'), 1901 + n % 255
            FROM (SELECT CAST(seq AS SIGNED) AS n FROM seq_1_to_3000) g
            """)
        try db.run("""
            INSERT INTO h VALUES (0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
              (-1, -32768, -2147483648, 0, -9999999999.99, -3.4e38, 5e-324, '', '', '', '1000-01-01', '00:00:00',
               '1000-01-01 00:00:00', '00000000-0000-4000-8000-000000000000', X'', '{}', 'sad', 2155),
              (-2, 32767, 2147483647, 1, 9999999999.99, 1e-30, 1.7976931348623157e308, REPEAT('z', 40), 'ÿ', REPEAT('😀', 100),
               '9999-12-31', '23:59:59.999999', '9999-12-31 23:59:59.999999', 'ffffffff-ffff-4fff-bfff-ffffffffffff', X'00FF00',
               '[1, 2.50]', 'happy', 1901)
            """)
        // A server elsewhere (or `digests=sql`) keeps its digests in MariaDB's SQL, in MD5; a
        // choice that is neither is one line.
        let url = try my.makeDatabase("lookup3sql")
        XCTAssertEqual(try my.connect(url + "?digests=sql").rowHashes, [.md5])
        XCTAssertEqual(try my.connect(url + "?digests=read").rowHashes, [.lookup3, .md5])
        XCTAssertEqual(db.rowHashes, [.lookup3, .md5], "the test server is on loopback")
        XCTAssertThrowsError(try my.connect(url + "?digests=fast")) { e in
            XCTAssertTrue("\(e)".contains("digests=fast is not a choice: digests=read"), "\(e)")
        }

        let lite = try sqlite("lookup3.db")
        let s = try copy(db, lite, tables: ["h"])
        XCTAssertTrue(s.ok, "\(s.tables.compactMap(\.error))")
        // PostgreSQL in a database of its own, dropped at the end.
        let (pg, dropDatabase) = try postgresDatabase("mylookup3")
        defer { dropDatabase() }
        let p = try copy(db, pg, tables: ["h"])
        XCTAssertTrue(p.ok, "\(p.tables.compactMap(\.error))")

        func side(_ c: any Connection) throws -> RangeDiff.Side {
            let schema = try c.describe(TableName("h"))
            return RangeDiff.Side(connection: c, schema: schema, key: schema.primaryKey.compactMap { schema.column(named: $0) }, columns: schema.columns)
        }
        for (other, name) in [(lite, "SQLite"), (pg as any Connection, "PostgreSQL")] {
            let equal = try RangeDiff.find(source: try side(db), target: try side(other), estimate: 3003)
            XCTAssertEqual(equal.rowHash, .lookup3, name)
            XCTAssertTrue(equal.isEqual, "\(name): \(equal.buckets.map { "\($0.residues.count) of \($0.modulus) buckets differ" } ?? "everything differs")")
            XCTAssertEqual(equal.sourceRows, 3003)
            XCTAssertEqual(equal.sourceSpill?.rows, 3003, "MariaDB's rows are hashed by reading them, and kept")
            XCTAssertEqual(equal.targetSpill?.rows, 3003, "SQLite's rows hashed beside it, PostgreSQL's (on loopback) listed whole")
        }

        // One value changed in one row, column by column: the digests see it, only there, and the
        // keyed listing (from the kept files, and from the tables) names that row alone.
        let changes = [
            "i2 = i2 + 1", "i4 = -i4", "b = NOT b", "n = n + 0.01", "f = f * 2", "g = g + 1", "v = CONCAT(v, 'a')",
            "lat = CONCAT(lat, 'x')", "t = CONCAT(t, ' ')", "d = d + INTERVAL 1 DAY", "tm = tm + INTERVAL 1 MICROSECOND",
            "ts = ts + INTERVAL 1 MICROSECOND", "u = '00000000-0000-4000-8000-000000000001'", "vb = CONCAT(vb, X'00')",
            "j = JSON_SET(j, '$.x', 1)", "e = 'happy'", "y = 2000", "t = NULL",
        ]
        try db.run("CREATE TABLE h_orig AS SELECT * FROM h WHERE id = 1234")
        for change in changes {
            try db.run("UPDATE h SET \(change) WHERE id = 1234")
            var outcome = try RangeDiff.find(source: try side(db), target: try side(lite), estimate: 3003)
            XCTAssertEqual(outcome.buckets?.residues.count, 1, "\(change): \(outcome.buckets.map { "\($0.residues.count) buckets differ" } ?? "everything differs")")
            let kept = try RangeDiff.keyedDifference(source: try side(db), target: try side(lite), found: outcome)
            XCTAssertEqual(kept?.differ, [1234], change)
            XCTAssertEqual(kept?.missing, [], change)
            outcome.sourceSpill = nil
            outcome.targetSpill = nil
            let read = try RangeDiff.keyedDifference(source: try side(db), target: try side(lite), found: outcome)
            XCTAssertEqual(read?.differ, [1234], change)
            XCTAssertEqual(read?.sourceRows, kept?.sourceRows, change)
            XCTAssertEqual(read?.targetRows, kept?.targetRows, change)
            try db.run("DELETE FROM h WHERE id = 1234")
            try db.run("INSERT INTO h SELECT * FROM h_orig")
        }
        // A row the source lost, listed from the files as one the target must delete.
        try db.run("DELETE FROM h WHERE id = 77")
        let lost = try RangeDiff.find(source: try side(db), target: try side(lite), estimate: 3003)
        XCTAssertEqual(try RangeDiff.keyedDifference(source: try side(db), target: try side(lite), found: lost)?.missing, [77])
    }

    func testRefusalsNameTheKeyAndChangeNothing() throws {
        let url = try my.makeDatabase("bad")
        let db = try my.connect(url)
        try db.run("SET SESSION sql_mode = ''")
        try db.run("CREATE TABLE zero (id INT PRIMARY KEY, d DATE, ts DATETIME)")
        try db.run("INSERT INTO zero VALUES (1, '2020-01-01', '2020-01-01 00:00:00'), (5, '0000-00-00', '0000-00-00 00:00:00')")
        let lite = try sqlite("bad.db")
        let s = try copy(db, lite)
        XCTAssertTrue(s.tables[0].error?.contains("table zero, column d, key (id=5)") == true, s.tables[0].error ?? "")
        XCTAssertTrue(s.tables[0].error?.contains("--zero-dates null") == true)
        XCTAssertFalse(try lite.tableExists(TableName("zero")))
        // With --zero-dates null the zero dates arrive as NULL.
        var e = try Endpoint(parsing: url)
        e.parameters.append(("zero-dates", "null"))
        let lenient = try MySQLConnection(endpoint: e, role: .source)
        XCTAssertTrue(try copy(lenient, lite).ok)
        XCTAssertEqual(try DriverConformance.readAll(lite, TableName("zero")).last, [.int(5), .null, .null])

        // A value too long for the target column is an error naming the row; nothing is changed.
        let target = try my.connect(try my.makeDatabase("bad2"))
        try target.run("CREATE TABLE names (id INT PRIMARY KEY, name VARCHAR(5))")
        try target.run("INSERT INTO names VALUES (100, 'keep')")
        let src = try sqlite("names.db")
        try src.begin()
        try src.createTable(TableSchema(name: TableName("names"), engine: Engine("sqlite"), columns: [
            Column(name: "id", nativeType: "INT", logicalType: .int32, isNullable: false),
            Column(name: "name", nativeType: "TEXT", logicalType: .text)], primaryKey: ["id"]), named: TableName("names"))
        let w = try src.writer(into: try src.describe(TableName("names")), columns: try src.describe(TableName("names")).columns)
        try w.write(RowBatch(rows: [[.int(1), .text("short")], [.int(2), .text("much too long")]], types: [.int32, .text]))
        try src.commit()
        let s2 = try copy(src, target, mode: .append)
        XCTAssertTrue(s2.tables[0].error?.contains("key (id=2)") == true, s2.tables[0].error ?? "")
        XCTAssertEqual(try target.rows("SELECT id, name FROM names"), [["100", "keep"]])
    }

    /// An upsert whose row has a new key and another row's value in a second unique column:
    /// MariaDB's ON DUPLICATE KEY UPDATE fires on that key and rewrote the other row in its
    /// place (the row never arrived, the other row took its values). Both upserts — a copy's
    /// (`mergeRows`) and a replica's (`upsertRows`) — now refuse the row, naming its key, and
    /// the transaction rolls back with the other row as it was.
    func testAnUpsertThatMatchesAnotherUniqueKeyIsRefused() throws {
        let db = try my.connect(try my.makeDatabase("uq"))
        try db.run("CREATE TABLE items (id BIGINT PRIMARY KEY, code VARCHAR(20) UNIQUE, name TEXT)")
        try db.run("INSERT INTO items VALUES (1, 'a', 'one'), (2, 'b', 'two')")
        let schema = try db.describe(TableName("items"))
        let types: [LogicalType] = schema.columns.map(\.logicalType)
        // Key 1 updated, key 3 new: its code is key 2's.
        let rows = try RowBatch(rows: [[.int(1), .text("a"), .text("ONE")], [.int(3), .text("b"), .text("three")]], types: types)
        for upsert in ["merge", "upsert"] {
            try db.begin()
            do {
                if upsert == "merge" {
                    _ = try db.mergeRows(into: schema, columns: schema.columns, key: ["id"], rows: rows)
                } else {
                    _ = try db.upsertRows(into: schema, columns: schema.columns, key: ["id"], rows: rows)
                }
                XCTFail("\(upsert): the row was not refused")
            } catch let e as BatchRowError {
                XCTAssertEqual(e.row, 1, upsert)
                XCTAssertTrue("\(e.error)".contains("id=3") && "\(e.error)".contains("duplicate value for a unique key"), "\(upsert): \(e.error)")
            }
            try db.rollback()
            XCTAssertEqual(try db.rows("SELECT id, code, name FROM items ORDER BY id"), [["1", "a", "one"], ["2", "b", "two"]], upsert)
        }
        // Without the conflict both apply, and a batch holding a key twice is not taken for one.
        let fine = try RowBatch(rows: [[.int(3), .text("c"), .text("three")], [.int(3), .text("c"), .text("THREE")], [.int(2), .text("b"), .text("TWO")]], types: types)
        try db.begin()
        _ = try db.upsertRows(into: schema, columns: schema.columns, key: ["id"], rows: fine)
        try db.commit()
        XCTAssertEqual(try db.rows("SELECT id, code, name FROM items ORDER BY id"), [["1", "a", "one"], ["2", "b", "TWO"], ["3", "c", "THREE"]])
    }

    func testInsertFallbackWhenLocalInfileIsRefused() throws {
        let admin = try my.connect(my.adminURL)
        try admin.run("SET GLOBAL local_infile = 0")
        defer { try? admin.run("SET GLOBAL local_infile = 1") }
        let src = try sqlite("fallback.db")
        let schema = TableSchema(name: TableName("fb"), engine: Engine("test"), columns: [
            Column(name: "id", nativeType: "", logicalType: .int64, isNullable: false),
            Column(name: "t", nativeType: "", logicalType: .text),
            Column(name: "b", nativeType: "", logicalType: .binary(maxLength: nil)),
            Column(name: "d", nativeType: "", logicalType: .decimal(precision: 30, scale: 10))], primaryKey: ["id"])
        try src.begin()
        try src.createTable(schema, named: schema.name)
        var rows: [[Value]] = []
        for i in 0..<2500 {
            let text: Value = i % 7 == 0 ? .null : .text("it's \\ a \"test\" \t\n\r \u{1A} é😀 #\(i)")
            let bytes: [UInt8] = i % 5 == 0 ? [] : [0, 39, 92, UInt8(i % 256)]
            rows.append([.int(Int64(i)), text, .binary(bytes), .decimal("-\(i).0000000001")])
        }
        let w = try src.writer(into: try src.describe(schema.name), columns: schema.columns)
        try w.write(RowBatch(rows: rows, types: schema.columns.map(\.logicalType)))
        try src.commit()
        try assertCopiesEqual(src, into: "fallback")
    }

    /// A table of several loads, each running while the next is encoded: equal after the copy;
    /// a load the server fails in the middle of the table leaves the target as it was; and
    /// when the server refuses LOCAL INFILE, the batches already encoded for the next load are
    /// inserted instead.
    func testOverlappingLoads() throws {
        let src = try sqlite("loads.db")
        let schema = TableSchema(name: TableName("loads"), engine: Engine("test"), columns: [
            Column(name: "id", nativeType: "", logicalType: .int64, isNullable: false),
            Column(name: "v", nativeType: "", logicalType: .int32),
            Column(name: "t", nativeType: "", logicalType: .text)], primaryKey: ["id"])
        try src.begin()
        try src.createTable(schema, named: schema.name)
        let w = try src.writer(into: try src.describe(schema.name), columns: schema.columns)
        for chunk in 0..<20 {
            let rows: [[Value]] = (0..<10_000).map { i in
                let id = chunk * 10_000 + i
                return [.int(Int64(id)), .int(Int64(id % 9973)), .text("row \(id) \t of the loads table, with a tab and a \\")]
            }
            try w.write(RowBatch(rows: rows, types: schema.columns.map(\.logicalType)))
        }
        try src.commit()
        // About 15 MB of batches: seven loads of MySQLWriter.loadBytes (2 MiB).
        try assertCopiesEqual(src, into: "loads")

        // Row 150,000 collides with a row already there: its load fails, after earlier loads
        // succeeded in the same transaction; the table is as it was.
        let clash = try my.connect(try my.makeDatabase("clash"))
        try clash.run("CREATE TABLE loads (id BIGINT PRIMARY KEY, v INT, t TEXT)")
        try clash.run("INSERT INTO loads VALUES (150000, 0, 'already here')")
        let failed = try copy(src, clash, mode: .append)
        XCTAssertFalse(failed.ok)
        XCTAssertTrue(failed.tables[0].error?.contains("Duplicate entry '150000'") == true, failed.tables[0].error ?? "")
        XCTAssertEqual(try clash.rows("SELECT id, t FROM loads"), [["150000", "already here"]])

        let admin = try my.connect(my.adminURL)
        try admin.run("SET GLOBAL local_infile = 0")
        defer { try? admin.run("SET GLOBAL local_infile = 1") }
        try assertCopiesEqual(src, into: "inserted")
    }

    /// A mirror from MariaDB compares each source row with the target's row hash as it is read
    /// (`CopyEngine.mirrorByStreaming`), into SQLite and into PostgreSQL: rows changed, lost and
    /// added on either side, keys before the first and after the last (up to Int64.max), more
    /// batches than the read-ahead holds; equal afterwards, counted exactly, nothing written
    /// the second time.
    func testMirrorFromMariaDBComparesRowsAsTheyAreRead() throws {
        let db = try my.connect(try my.makeDatabase("stream"))
        try db.run("CREATE TABLE s (id BIGINT PRIMARY KEY, v INT, t VARCHAR(40), d DATETIME(6), n DECIMAL(10,3))")
        try db.run("""
            INSERT INTO s SELECT seq, seq % 7919, CONCAT('row ', seq), TIMESTAMP '2000-01-01 00:00:00' + INTERVAL seq * 1001 MICROSECOND,
              IF(seq % 11 = 0, NULL, seq / 8) FROM seq_1_to_150000
            """)
        let lite = try sqlite("stream.db")
        let (pg, dropDatabase) = try postgresDatabase("mystream")
        defer { dropDatabase() }
        for target in [lite, pg as any Connection] {
            XCTAssertTrue(try copy(db, target, tables: ["s"]).ok)
        }
        try db.run("UPDATE s SET v = v + 1 WHERE id % 97 = 5")
        try db.run("DELETE FROM s WHERE id % 1009 = 7 OR id <= 3 OR id > 149990")
        try db.run("INSERT INTO s (id, v, t) VALUES (-5, 1, 'before'), (-1, 2, 'before'), (200000, 3, 'after'), (200001, NULL, NULL)")
        try XCTUnwrap(lite as? SQLiteConnection).run("""
            UPDATE s SET t = 'target' WHERE id % 1500 = 2;
            DELETE FROM s WHERE id % 2003 = 11;
            INSERT INTO s (id, v) VALUES (-9, 0), (75000500, 0), (9223372036854775807, 0);
            """)
        try pg.run("UPDATE s SET t = 'target' WHERE id % 1500 = 2")
        try pg.run("DELETE FROM s WHERE id % 2003 = 11")
        try pg.run("INSERT INTO s (id, v) VALUES (-9, 0), (75000500, 0), (9223372036854775807, 0)")
        let sourceRows = try db.countRows(TableName("s"))
        for (target, name) in [(lite, "SQLite"), (pg as any Connection, "PostgreSQL")] {
            let targetRows = try target.countRows(TableName("s"))
            let mirrored = try harness.copy(db, target, mode: .mirror, tables: ["s"], batchSize: 1_000)
            XCTAssertTrue(mirrored.ok, "\(name): \(mirrored.tables.compactMap(\.error))")
            let counts = try XCTUnwrap(mirrored.tables.first?.counts, name)
            let stats = try XCTUnwrap(mirrored.tables.first?.mirror, name)
            XCTAssertEqual(stats.levels, 0, "\(name): compared as read")
            XCTAssertEqual([stats.sourceRows, stats.targetRows], [sourceRows, targetRows], name)
            XCTAssertEqual(counts.inserted + counts.updated + counts.unchanged, sourceRows, "\(name): \(counts)")
            XCTAssertEqual(counts.deleted, targetRows - (sourceRows - counts.inserted), "\(name): \(counts)")
            XCTAssertGreaterThan(counts.updated, 1_600, name)
            XCTAssertEqual(mirrored.tables.first?.rows, counts.inserted + counts.updated, name)
            try assertSame(db, target, tables: [TableName("s")])
            let again = try harness.copy(db, target, mode: .mirror, tables: ["s"], batchSize: 1_000)
            XCTAssertEqual(again.tables.first?.counts, MergeCounts(unchanged: sourceRows), name)
            XCTAssertEqual(again.tables.first?.rows, 0, name)
        }
    }

    /// A new table is loaded through two connections (`MySQLSplitWriter`), slices of
    /// `MySQLWriter.loadBytes` in turn: equal after the copy; one more connection opened, none
    /// with `load-connections=1` or for a table with an AUTO_INCREMENT column (MariaDB's
    /// AUTO-INC lock makes two loads take turns); a row the server refuses in any slice fails
    /// the copy naming its key, and leaves no table (create) or the old one (replace).
    func testNewTablesLoadThroughTwoConnections() throws {
        let src = try sqlite("split.db")
        let lite = try XCTUnwrap(src as? SQLiteConnection)
        try lite.run("""
            CREATE TABLE split (id BIGINT PRIMARY KEY NOT NULL, v INT, t TEXT);
            WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i < 199999)
            INSERT INTO split SELECT i, i % 9973, 'row ' || i || ' of the split table, with a tab 	 and a \\' FROM g;
            CREATE TABLE counted (id INTEGER PRIMARY KEY, v INT NOT NULL);
            INSERT INTO counted SELECT id, v FROM split;
            """)
        let url = try my.makeDatabase("split")
        let admin = try my.connect(my.adminURL)
        func connections() throws -> Int {
            Int(try admin.rows("SHOW GLOBAL STATUS LIKE 'Connections'").first?[1] ?? "") ?? -1
        }
        func opened(_ dst: MySQLConnection, _ table: String, mode: WriteMode = .create) throws -> Int {
            let before = try connections()
            let summary = try copy(src, dst, mode: mode, tables: [table])
            XCTAssertTrue(summary.ok, "\(summary.tables.compactMap(\.error))")
            return try connections() - before
        }
        let dst = try my.connect(url)
        XCTAssertEqual(try opened(dst, "split"), 1)
        try assertSame(src, dst, tables: [TableName("split")])
        XCTAssertEqual(try opened(dst, "split", mode: .replace), 1)
        try assertSame(src, dst, tables: [TableName("split")])
        // A serial key (SQLite's INTEGER PRIMARY KEY: AUTO_INCREMENT) loads through one.
        XCTAssertEqual(try opened(dst, "counted"), 0)
        try assertSame(src, dst, tables: [TableName("counted")])
        var one = try Endpoint(parsing: try my.makeDatabase("one"))
        one.parameters.append(("load-connections", "1"))
        XCTAssertEqual(try opened(try MySQLConnection(endpoint: one, role: .target), "split"), 0)
        one.parameters = [("load-connections", "9")]
        XCTAssertThrowsError(try MySQLConnection(endpoint: one, role: .target)) { e in
            XCTAssertTrue("\(e)".contains("load-connections=9 is not a number from 1 to 8"), "\(e)")
        }

        // Text that is not UTF-8 is refused by MariaDB (Warning 1366) wherever it falls.
        for bad in [20_000, 70_000, 110_000, 190_000] {
            try lite.run("UPDATE split SET t = CAST(X'C328' AS TEXT) WHERE id = \(bad)")
            let fresh = try my.connect(try my.makeDatabase("refused"))
            let failed = try copy(src, fresh, tables: ["split"])
            XCTAssertTrue(failed.tables[0].error?.contains("key (id=\(bad))") == true, failed.tables[0].error ?? "")
            XCTAssertFalse(try fresh.tableExists(TableName("split")))
            let replaced = try copy(src, dst, mode: .replace, tables: ["split"])
            XCTAssertTrue(replaced.tables[0].error?.contains("key (id=\(bad))") == true, replaced.tables[0].error ?? "")
            XCTAssertEqual(try dst.rows("SELECT count(*), sum(id) FROM split"), [["200000", "19999900000"]])
            // No staging table left behind (Ferry's bookkeeping tables stay, empty).
            XCTAssertEqual(try dst.rows("SHOW TABLES WHERE Tables_in_\(try dst.rows("SELECT DATABASE()")[0][0] ?? "") NOT IN ('_ferry_leases', '_ferry_loads')"), [["counted"], ["split"]])
            XCTAssertEqual(try dst.rows("SELECT count(*) FROM _ferry_leases"), [["0"]])
            try lite.run("UPDATE split SET t = 'fixed' WHERE id = \(bad)")
        }
    }

    func testConnectionErrors() throws {
        let good = try Endpoint(parsing: my.adminURL)
        var wrong = good
        wrong.password = "not-the-password"
        XCTAssertThrowsError(try MySQLConnection(endpoint: wrong, role: .source)) { e in
            XCTAssertTrue("\(e)".contains("access denied for user ferry"), "\(e)")
            XCTAssertFalse("\(e)".contains("not-the-password"))
        }
        var missing = good
        missing.path = "no_such_database"
        XCTAssertThrowsError(try MySQLConnection(endpoint: missing, role: .source)) { e in
            XCTAssertTrue("\(e)".contains("unknown database 'no_such_database'"), "\(e)")
        }
        var unreachable = good
        unreachable.port = 1
        XCTAssertThrowsError(try MySQLConnection(endpoint: unreachable, role: .source)) { e in
            XCTAssertTrue("\(e)".contains("server unreachable"), "\(e)")
        }
        let db = try my.connect(my.adminURL)
        XCTAssertThrowsError(try db.describe(TableName("no_such_table"))) { e in
            XCTAssertTrue("\(e)".contains("table no_such_table not found"), "\(e)")
        }
    }
}

final class MySQLSakilaTests: XCTestCase {
    /// The Sakila MySQL schema (ENUM, SET, YEAR, MEDIUMBLOB, TIMESTAMP ON UPDATE, triggers,
    /// views) filled with the PostgreSQL Sakila's data, then MySQL -> SQLite -> MySQL.
    func testSakilaSchemaFilledFromPostgres() throws {
        let my = try MySQLFixture()
        let pgURL = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let datasets = try TestDatabases.datasetsFolder()
        let folder = try TemporaryFolder()
        let schema = try String(contentsOf: datasets.appendingPathComponent("sakila/mysql-sakila-schema.sql"), encoding: .utf8)
            .split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !$0.hasPrefix("DROP SCHEMA") && !$0.hasPrefix("CREATE SCHEMA") && !$0.hasPrefix("USE ") }
            .joined(separator: "\n").replacingOccurrences(of: "sakila.", with: "")  // views name the schema
        let url = try my.makeDatabase("sakila")
        try my.script(url, schema)

        // PostgreSQL Sakila, loaded with psql.
        let pgAdmin = try PostgresConnection(endpoint: Endpoint(parsing: pgURL), role: .target)
        let pgName = "ferry_sakila_\(UUID().uuidString.prefix(8).lowercased())"
        try pgAdmin.run("CREATE DATABASE \(pgName)")
        defer { try? pgAdmin.run("DROP DATABASE IF EXISTS \(pgName) WITH (FORCE)") }
        let pgDB = String(pgURL[..<(pgURL.range(of: "/", options: .backwards)?.lowerBound ?? pgURL.endIndex)]) + "/" + pgName
        for file in ["sakila/postgres-sakila-schema.sql", "sakila/postgres-sakila-insert-data-using-copy.sql"] {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            p.arguments = ["psql", "-X", "-q", "-f", datasets.appendingPathComponent(file).path, pgDB]
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle.nullDevice
            try p.run()
            p.waitUntilExit()
        }
        let pg = try PostgresConnection(endpoint: Endpoint(parsing: pgDB), role: .source)
        let target = try my.connect(url)
        let film = try target.describe(TableName("film"))
        XCTAssertEqual(film.column(named: "rating")?.logicalType, .enumeration(labels: ["G", "PG", "PG-13", "R", "NC-17"]))
        XCTAssertEqual(film.column(named: "special_features")?.logicalType, .text)
        XCTAssertEqual(film.column(named: "release_year")?.logicalType, .int16)
        XCTAssertEqual(try target.describe(TableName("staff")).column(named: "picture")?.logicalType, .binary(maxLength: nil))
        XCTAssertEqual(film.column(named: "film_id")?.serial, .autoincrement)

        let engine = CopyEngine(registry: DriverRegistry([SQLiteDriver(), PostgresDriver(), MySQLDriver()]))
        var o = CopyOptions()
        o.mode = .append
        o.tables = ["actor", "category", "language", "film", "film_actor", "film_category", "country", "city"].map { TableName($0) }
        let quiet = ProgressReporter(style: .quiet) { _ in }
        let fill = engine.run(try engine.plan(source: pg, target: target, options: o), source: pg, target: target, options: o, progress: quiet)
        XCTAssertTrue(fill.ok, "\(fill.tables.compactMap(\.error))")
        XCTAssertEqual(try target.rows("SELECT count(*) FROM film"), [["1000"]])
        XCTAssertEqual(try target.rows("SELECT count(*) FROM film_text"), [["1000"]], "the schema's trigger ran for every row")
        for t in ["actor", "film", "film_actor", "city"] {
            XCTAssertEqual(try TableComparison.differences(pg, target, table: TableName(t)), [], t)
        }

        // MySQL -> SQLite -> MySQL over the filled tables.
        let lite = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + folder.path("sakila.db")), role: .target)
        var o2 = CopyOptions()
        o2.tables = o.tables
        let toLite = engine.run(try engine.plan(source: target, target: lite, options: o2), source: target, target: lite, options: o2, progress: quiet)
        XCTAssertTrue(toLite.ok, "\(toLite.tables.compactMap(\.error))")
        let back = try my.connect(try my.makeDatabase("sakila_back"))
        let toBack = engine.run(try engine.plan(source: lite, target: back, options: o2), source: lite, target: back, options: o2, progress: quiet)
        XCTAssertTrue(toBack.ok, "\(toBack.tables.compactMap(\.error))")
        for t in o.tables {
            XCTAssertEqual(try TableComparison.differences(target, back, table: t), [], t.name)
        }
    }
}
