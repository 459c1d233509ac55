import FerryCore
import FerryDriverTestKit
import FerryPostgres
@testable import FerrySQLite
import XCTest

final class PostgresDriverTests: XCTestCase {
    var pg: PostgresFixture!
    var folder: TemporaryFolder!

    override func setUpWithError() throws {
        let fixture = try PostgresFixture()
        pg = fixture
        folder = try TemporaryFolder()
    }

    func sqlite(_ name: String, role: ConnectionRole = .target) throws -> any Connection {
        try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + folder.path(name)), role: role)
    }

    let harness = CopyHarness([SQLiteDriver(), PostgresDriver()])

    func copy(_ src: any Connection, _ dst: any Connection, mode: WriteMode = .create, tables: [String] = [], jobs: Int = 1) throws -> CopySummary {
        try harness.copy(src, dst, mode: mode, tables: tables, jobs: jobs, batchSize: 700)
    }

    func assertSame(_ a: any Connection, _ b: any Connection, tables: [TableName]? = nil, file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertEqual(try harness.differences(a, b, tables: tables), [], file: file, line: line)
    }

    func testDriverConformance() throws {
        let kit = DriverConformance { [pg] in
            guard let pg else { throw ConformanceFailure("no server") }
            return try pg.connect(try pg.makeDatabase("kit"))
        }
        for check in kit.checks {
            do { try check.run() } catch { XCTFail("\(check.name): \(error)") }
        }
    }

    func testChinookCatalogAndRoundTrip() throws {
        let url = try pg.chinook("Chinook_PostgreSql.sql")
        let src = try pg.connect(url, role: .source)
        let tables = try src.listTables()
        XCTAssertEqual(tables.count, 11)
        XCTAssertEqual(tables.first { $0.name.name == "track" }?.rowEstimate, 3503)
        let track = try src.describe(TableName("track"))
        XCTAssertEqual(track.primaryKey, ["track_id"])
        XCTAssertEqual(track.column(named: "unit_price")?.logicalType, .decimal(precision: 10, scale: 2))
        XCTAssertEqual(track.column(named: "name")?.logicalType, .text(maxLength: 200, fixed: false))
        XCTAssertEqual(try src.describe(TableName("playlist_track")).primaryKey, ["playlist_id", "track_id"])

        // PostgreSQL -> SQLite -> PostgreSQL, and PostgreSQL -> PostgreSQL.
        let lite = try sqlite("chinook.db")
        XCTAssertTrue(try copy(src, lite).ok)
        try assertSame(src, lite)
        let back = try pg.connect(try pg.makeDatabase("back"))
        let summary = try copy(lite, back, jobs: 3)
        XCTAssertTrue(summary.ok, "\(summary.tables.compactMap(\.error))")
        try assertSame(src, back)
        let direct = try pg.connect(try pg.makeDatabase("direct"))
        XCTAssertTrue(try copy(src, direct, jobs: 2).ok)
        try assertSame(src, direct)
        XCTAssertEqual(try direct.describe(TableName("invoice")).column(named: "total")?.nativeType, "numeric(10,2)")
    }

    func testSerialAndIdentityCountersMovePastTheMaximum() throws {
        let url = try pg.chinook("Chinook_PostgreSql_SerialPKs.sql")
        let src = try pg.connect(url, role: .source)
        let artist = try src.describe(TableName("artist"))
        XCTAssertNotNil(artist.column(named: "artist_id")?.serial, "\(artist.columns)")
        for target in [try pg.connect(try pg.makeDatabase("serial")) as any Connection, try sqlite("serial.db")] {
            XCTAssertTrue(try copy(src, target, tables: ["artist", "genre"]).ok)
            let max = try src.countRows(TableName("artist"))
            if let p = target as? PostgresConnection {
                XCTAssertEqual(try p.describe(TableName("artist")).column(named: "artist_id")?.serial, .identityByDefault)
                let next = try p.rows("INSERT INTO artist (name) VALUES ('next') RETURNING artist_id")
                XCTAssertEqual(next, [[String(max + 1)]])
            } else {
                let rows = try DriverConformance.readAll(target, TableName("artist"))
                XCTAssertEqual(rows.count, Int(max))
                XCTAssertEqual(try target.describe(TableName("artist")).column(named: "artist_id")?.serial, .autoincrement)
            }
        }
        // Back from SQLite into PostgreSQL: the identity counter is right too.
        let lite = try sqlite("serial.db")
        let again = try pg.connect(try pg.makeDatabase("again"))
        XCTAssertTrue(try copy(lite, again, tables: ["artist"]).ok)
        XCTAssertEqual(try again.rows("INSERT INTO artist (name) VALUES ('x') RETURNING artist_id"), [["276"]])
    }

    /// A table whose key is not a serial integer and whose rows are narrow is WITHOUT ROWID in
    /// SQLite (its rows in the key's B-tree, no second copy of every key in an index); its key
    /// stays a plain key both ways, and a table with unbounded columns stays a rowid table.
    func testNarrowKeyedTablesAreWithoutRowidInSQLite() throws {
        let url = try pg.makeDatabase("narrow")
        try pg.psql(url, script: """
            CREATE TABLE n (id bigint PRIMARY KEY, v integer NOT NULL, d date, amount numeric(9,2));
            INSERT INTO n SELECT g * 3 - 4000, g, DATE '2024-02-28' + g % 400, CASE WHEN g % 5 = 0 THEN NULL ELSE g / 7.0 END
              FROM generate_series(1, 5000) g;
            CREATE TABLE pair (code varchar(12), seq smallint, qty integer NOT NULL, PRIMARY KEY (code, seq));
            INSERT INTO pair SELECT 'ç' || (g % 97), g / 97, g FROM generate_series(1, 3000) g;
            CREATE TABLE wide (id bigint PRIMARY KEY, note text);
            INSERT INTO wide SELECT g, repeat('x', g % 300) FROM generate_series(1, 2000) g;
            CREATE TABLE counted (id integer GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, v integer);
            INSERT INTO counted (v) SELECT g FROM generate_series(1, 1500) g;
            """)
        let src = try pg.connect(url, role: .source)
        let lite = try XCTUnwrap(try sqlite("narrow.db") as? SQLiteConnection)
        XCTAssertTrue(try copy(src, lite).ok)
        try assertSame(src, lite)
        func createSQL(_ t: String) throws -> String {
            try lite.prepare("SELECT sql FROM sqlite_schema WHERE name = '\(t)'").rows().first?.first.flatMap { $0 } ?? ""
        }
        let created = try ["n", "pair", "wide", "counted"].map(createSQL)
        XCTAssertTrue(created[0].hasSuffix(") WITHOUT ROWID"), created[0])
        XCTAssertTrue(created[1].hasSuffix(") WITHOUT ROWID"), created[1])
        XCTAssertFalse(created[2].contains("WITHOUT ROWID"), created[2])
        XCTAssertFalse(created[3].contains("WITHOUT ROWID"), created[3])
        XCTAssertNil(try lite.describe(TableName("n")).column(named: "id")?.serial)
        XCTAssertEqual(try lite.describe(TableName("counted")).column(named: "id")?.serial, .autoincrement)
        XCTAssertEqual(try lite.describe(TableName("pair")).primaryKey, ["code", "seq"])
        // A key the source did not give is refused, as PostgreSQL refuses it (a rowid alias would
        // have made one up).
        XCTAssertThrowsError(try lite.execute("INSERT INTO n (v) VALUES (1)"))

        // Changes arrive by upsert and mirror; back in PostgreSQL the key is a plain key again.
        try pg.psql(url, script: """
            UPDATE n SET v = -v WHERE id % 7 = 0; DELETE FROM n WHERE id % 11 = 0; INSERT INTO n VALUES (1000000, 1, NULL, 0.5);
            UPDATE pair SET qty = 0 WHERE seq = 3;
            """)
        XCTAssertTrue(try copy(src, lite, mode: .mirror, tables: ["n", "pair"]).ok)
        try assertSame(src, lite)
        let back = try pg.connect(try pg.makeDatabase("narrowback"))
        XCTAssertTrue(try copy(lite, back).ok)
        try assertSame(src, back)
        XCTAssertNil(try back.describe(TableName("n")).column(named: "id")?.serial)
        XCTAssertEqual(try back.describe(TableName("pair")).primaryKey, ["code", "seq"])
    }

    /// A new table's keys are added after its rows (faster on PostgreSQL) and end as they would
    /// have been created: the same constraints with the same names, in create and replace.
    func testKeysAddedAfterTheLoadEndAsPlanned() throws {
        let lite = try XCTUnwrap(try sqlite("keys.db") as? SQLiteConnection)
        try lite.execute("""
            CREATE TABLE k (id BIGINT PRIMARY KEY, code TEXT NOT NULL UNIQUE, a INT NOT NULL, b INT NOT NULL, UNIQUE (a, b));
            WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < 2500)
            INSERT INTO k SELECT x, 'c' || x, x % 50, x / 50 FROM g;
            """)
        let planned = try PostgresDriver().connect(Endpoint(parsing: try pg.makeDatabase("keysplan")), role: .target)
            .planTable(try lite.describe(TableName("k")), named: TableName("k"))
        XCTAssertEqual(planned.deferredKeys?.keys.count, 3, "\(planned)")
        let db = try pg.connect(try pg.makeDatabase("keys"))
        for mode in [WriteMode.create, .replace] {
            XCTAssertTrue(try copy(lite, db, mode: mode, tables: ["k"]).ok)
            let t = try db.describe(TableName("k"))
            XCTAssertEqual(t.primaryKey, ["id"])
            XCTAssertEqual(Set(t.uniqueKeys.map { $0.sorted() }), [["code"], ["a", "b"]])
            XCTAssertEqual(try db.rows("SELECT conname FROM pg_constraint WHERE conrelid = 'k'::regclass AND contype IN ('p', 'u') ORDER BY 1"),
                           [["k_a_b_key"], ["k_code_key"], ["k_pkey"]])
            try assertSame(lite, db, tables: [TableName("k")])
        }
    }

    func testSakilaTypesDomainsEnumsAndSkips() throws {
        let url = try pg.makeDatabase("sakila")
        try pg.psql(url, script: try pg.dataset("sakila/postgres-sakila-schema.sql"))
        try pg.psql(url, script: try pg.dataset("sakila/postgres-sakila-insert-data-using-copy.sql"))
        let src = try pg.connect(url, role: .source)
        let film = try src.describe(TableName("film"))
        XCTAssertEqual(film.column(named: "release_year")?.logicalType, .int32, "domain year resolves to integer")
        XCTAssertEqual(film.column(named: "rating")?.logicalType, .enumeration(labels: ["G", "PG", "PG-13", "R", "NC-17"]))
        guard case .unsupported = film.column(named: "fulltext")?.logicalType else { return XCTFail("tsvector must be unsupported") }
        guard case .unsupported = film.column(named: "special_features")?.logicalType else { return XCTFail("text[] must be unsupported") }
        XCTAssertEqual(film.unsupportedColumns.map(\.column).sorted(), ["fulltext", "special_features"])
        XCTAssertEqual(film.column(named: "film_id")?.serial, .sequence)

        let lite = try sqlite("sakila.db")
        let summary = try copy(src, lite)
        XCTAssertTrue(summary.ok, "\(summary.tables.compactMap(\.error))")
        XCTAssertEqual(summary.tables.first { $0.source == "film" }?.skippedColumns.map(\.column).sorted(), ["fulltext", "special_features"])
        try assertSame(src, lite)

        let back = try pg.connect(try pg.makeDatabase("sakila_back"))
        let s2 = try copy(lite, back)
        XCTAssertTrue(s2.ok, "\(s2.tables.compactMap(\.error))")
        let pgpg = try pg.connect(try pg.makeDatabase("sakila_pg"))
        let s3 = try copy(src, pgpg)
        XCTAssertTrue(s3.ok, "\(s3.tables.compactMap(\.error))")
        try assertSame(src, pgpg)
        // The enum came across as a native enum type with its labels.
        XCTAssertEqual(try pgpg.describe(TableName("film")).column(named: "rating")?.logicalType,
                       .enumeration(labels: ["G", "PG", "PG-13", "R", "NC-17"]))
        XCTAssertEqual(try pgpg.rows("SELECT count(*) FROM payment WHERE amount::text LIKE '%.__'"), [["16049"]])
    }

    func testPagilaSchemaWithNonASCIIDomains() throws {
        let url = try pg.makeDatabase("pagila")
        try pg.psql(url, script: try pg.dataset("pagila/pagila-schema.sql"))
        let src = try pg.connect(url, role: .source)
        let names = try src.listTables().map(\.name.description)
        XCTAssertTrue(names.contains("actor"), "\(names)")
        XCTAssertFalse(names.contains { $0.hasPrefix("payment_p20") }, "partitions are copied through their parent: \(names)")
        let actor = try src.describe(TableName("actor"))
        XCTAssertEqual(actor.column(named: "actor_id")?.logicalType, .int32)
        let lite = try sqlite("pagila.db")
        let summary = try copy(src, lite)
        XCTAssertTrue(summary.ok, "\(summary.tables.compactMap(\.error))")
    }

    func testEdgeValuesExact() throws {
        let url = try pg.makeDatabase("edge")
        let db = try pg.connect(url)
        try db.run("""
            CREATE TABLE "Odd ""Name"" é" (id int PRIMARY KEY, n numeric, n2 numeric(40,20), ts timestamp(6), tz timestamptz,
              d date, t time, b bytea, j jsonb, js json, f real, dd double precision, ch char(5), u uuid, "select" text);
            INSERT INTO "Odd ""Name"" é" VALUES
              (1, '123456789012345678901234567890123456789012345678901234567890.123456789012345678901234567890123456789012345',
               '-0.00000000000000000001', '1899-12-31 23:59:59.999999', '2100-06-01 12:00:00.000001+02', '0001-01-01', '23:59:59.999999',
               '\\x000102ff00', '{"b": [1, 2.50], "a": "é😀"}', '{"keep":  "spacing",  "n": 1.10}', 1.5, '4.9e-324', 'ab',
               'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', E'& < > '' " \\\\ \\t\\r\\n 中文 😀'),
              (2, 'NaN', '0', '2262-04-11 23:47:16.854775', NULL, '9999-12-31', '00:00:00', '', '[]', 'null', '-Infinity', 'Infinity', '', NULL, ''),
              (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
            """)
        let name = TableName("Odd \"Name\" é")
        let lite = try sqlite("edge.db")
        let s = try copy(db, lite)
        XCTAssertTrue(s.ok, "\(s.tables.compactMap(\.error))")
        try assertSame(db, lite, tables: [name])
        let pgpg = try pg.connect(try pg.makeDatabase("edge2"))
        XCTAssertTrue(try copy(db, pgpg).ok)
        try assertSame(db, pgpg, tables: [name])
        let got = try pgpg.rows("SELECT n::text, js::text, octet_length(ch)::text, dd::text FROM \"Odd \"\"Name\"\" é\" ORDER BY id")
        XCTAssertEqual(got[0], ["123456789012345678901234567890123456789012345678901234567890.123456789012345678901234567890123456789012345",
                                "{\"keep\":  \"spacing\",  \"n\": 1.10}", "5", "5e-324"])
        XCTAssertEqual(got[1], ["NaN", "null", "5", "Infinity"])

        // -0.0 keeps its sign PostgreSQL to PostgreSQL; SQLite would store 0, so Ferry refuses it there.
        try db.run("CREATE TABLE negzero (id int PRIMARY KEY, f float8); INSERT INTO negzero VALUES (1, '-0')")
        XCTAssertTrue(try copy(db, pgpg, tables: ["negzero"]).ok)
        XCTAssertEqual(try pgpg.rows("SELECT f::text FROM negzero"), [["-0"]])
        let refused = try copy(db, lite, tables: ["negzero"])
        XCTAssertTrue(refused.tables[0].error?.contains("column f, key (id=1): -0.0 would lose its sign") == true, refused.tables[0].error ?? "")
    }

    /// Range digests in PostgreSQL's own row hash (`RowHash.lookup3`: `hash_record_extended` in
    /// SQL, reproduced by Ferry beside SQLite) agree between PostgreSQL and a SQLite copy for
    /// every type a mirror compares — NULLs, extremes, infinities, texts of every length, pre-1970
    /// dates and timestamps — and change when any one value of any column changes.
    func testLookup3DigestsAgreeWithSQLiteAndSeeEveryChange() throws {
        let db = try pg.connect(try pg.makeDatabase("lookup3"))
        try db.run("""
            CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
            CREATE TABLE h (id bigint PRIMARY KEY, i2 smallint, i4 integer, b boolean, n numeric(12,2), nn numeric, f4 real,
              f8 double precision, v varchar(40), t text, ch char(5), d date, tm time, ts timestamp(6), tz timestamptz, u uuid,
              by bytea, j jsonb, js json, e mood);
            INSERT INTO h SELECT g, (g % 65535 - 32767)::smallint, g * 7919 - 20000000, g % 3 = 0, (g * 13.37)::numeric(12,2),
              CASE WHEN g % 5 = 0 THEN 'NaN' ELSE (g / 7.0)::numeric END, g / 3.0, g * 1e10 / 7.0, 'v' || repeat('é', g % 20),
              repeat('x', g % 40), substr('abcde', 1, g % 6), date '1950-01-01' + g * 11, time '00:00' + g * interval '17 seconds',
              timestamp '1960-01-01' + g * interval '1 day 0.000123 s', timestamptz '2030-01-01 00:00+05' - g * interval '3 hours',
              md5(g::text)::uuid, decode(repeat(md5(g::text), g % 3), 'hex'), jsonb_build_object('g', g, 's', 'Zoë'),
              json_build_array(g, 'x'), (ARRAY['sad', 'ok', 'happy'])[g % 3 + 1]::mood
            FROM generate_series(1, 3000) g;
            INSERT INTO h (id) VALUES (0);
            INSERT INTO h VALUES (-1, -32768, -2147483648, false, -9999999999.99, '0.00', '-Infinity', 'Infinity', '', '', '',
              '0001-01-01', '23:59:59.999999', '0001-01-01 00:00:00', '1970-01-01 00:00:00+00', '00000000-0000-0000-0000-000000000000',
              '', '{}', '""', 'sad'),
              (-2, 32767, 2147483647, true, 9999999999.99, '123456789012345678901234567890.123456789', '3.4e38', '1e-307',
              repeat('z', 40), repeat('😀', 100), 'abcde', '9999-12-31', '00:00:00', '2262-04-11 23:47:16.854775',
              '1969-12-31 23:59:59.999999+00', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '\\x00ff00', '[1, 2.50]', '{"k":  1.10}', 'happy');
            """)
        let lite = try sqlite("lookup3.db")
        let s = try copy(db, lite, tables: ["h"])
        XCTAssertTrue(s.ok, "\(s.tables.compactMap(\.error))")
        let name = TableName("h")
        func side(_ c: any Connection) throws -> RangeDiff.Side {
            let schema = try c.describe(name)
            return RangeDiff.Side(connection: c, schema: schema, key: schema.primaryKey.compactMap { schema.column(named: $0) }, columns: schema.columns)
        }
        func compare() throws -> RangeDiff.Outcome {
            try RangeDiff.find(source: try side(db), target: try side(lite), estimate: 3003)
        }
        let equal = try compare()
        XCTAssertEqual(equal.rowHash, .lookup3)
        // On loopback PostgreSQL lists every row's key and hash whole (kept, like SQLite's).
        XCTAssertEqual(equal.sourceSpill?.rows, 3003)
        XCTAssertEqual(equal.targetSpill?.rows, 3003)
        XCTAssertTrue(equal.isEqual, "\(equal.buckets.map { "\($0.residues.count) of \($0.modulus) buckets differ" } ?? "everything differs")")
        XCTAssertEqual(equal.sourceRows, 3003)
        XCTAssertEqual(try RangeDiff.find(source: try side(lite), target: try side(db), estimate: 3003).isEqual, true)

        // One value changed in one row, column by column: the digests see it, and only there.
        let changes = [
            "i2 = i2 + 1", "i4 = -i4", "b = NOT b", "n = n + 0.01", "nn = 'NaN'", "f4 = f4 * 2", "f8 = f8 + 1", "v = v || 'a'",
            "t = t || ' '", "ch = 'zz'", "d = d + 1", "tm = tm + interval '1 microsecond'", "ts = ts + interval '1 microsecond'",
            "tz = tz - interval '1 microsecond'", "u = '00000000-0000-0000-0000-000000000001'", "by = by || '\\x00'::bytea",
            "j = j || '{\"x\": 1}'", "js = '[1]'", "e = 'happy'", "t = NULL",
        ]
        try db.run("CREATE TABLE h_orig AS SELECT * FROM h WHERE id = 1234")
        for change in changes {
            try db.run("UPDATE h SET \(change) WHERE id = 1234")
            var outcome = try compare()
            // The row that changed, named by the keyed listing: from the kept lists, and from the
            // tables (PostgreSQL's SQL over a binary COPY, SQLite's reader).
            let kept = try RangeDiff.keyedDifference(source: try side(db), target: try side(lite), found: outcome)
            outcome.sourceSpill = nil
            outcome.targetSpill = nil
            let read = try RangeDiff.keyedDifference(source: try side(db), target: try side(lite), found: outcome)
            try db.run("DELETE FROM h WHERE id = 1234; INSERT INTO h SELECT * FROM h_orig")
            XCTAssertEqual(outcome.buckets?.residues.count, 1, "\(change): \(outcome.buckets.map { "\($0.residues.count) buckets differ" } ?? "everything differs")")
            XCTAssertEqual(kept?.differ, [1234], change)
            XCTAssertEqual(read?.differ, [1234], change)
            XCTAssertEqual(kept?.sourceRows, read?.sourceRows, change)
            XCTAssertEqual(kept?.targetRows, read?.targetRows, change)
        }
    }

    /// Where a mirror's digests of a PostgreSQL table are computed: listed whole for a server on
    /// this machine, in its SQL with `digests=sql` (the default for another host); a choice that
    /// is neither is one line, and the parameter never reaches libpq.
    func testDigestsParameterChoosesWhereDigestsAreComputed() throws {
        let url = try pg.makeDatabase("digests")
        let key = [Column(name: "id", nativeType: "bigint", logicalType: .int64)]
        let request = DigestRequest(key: key, columns: key, modulus: 1)
        XCTAssertTrue(try pg.connect(url).digestsByReading(request), "the test server is on loopback")
        XCTAssertTrue(try pg.connect(url + "?digests=read").digestsByReading(request))
        XCTAssertFalse(try pg.connect(url + "?digests=sql").digestsByReading(request))
        XCTAssertThrowsError(try pg.connect(url + "?digests=fast")) { e in
            XCTAssertTrue("\(e)".contains("digests=fast is not a choice: digests=read"), "\(e)")
        }
        XCTAssertFalse(try PostgresConnection.digestsByListing(Endpoint(parsing: "postgres://u@db.example.com:5432/shop")))
        XCTAssertTrue(try PostgresConnection.digestsByListing(Endpoint(parsing: "postgres://u@localhost/shop")))
        XCTAssertTrue(try PostgresConnection.digestsByListing(Endpoint(parsing: "postgres:///shop?host=/var/run/postgresql")))
        XCTAssertFalse(try PostgresConnection.digestsByListing(Endpoint(parsing: "postgres://u@localhost/shop?digests=sql")))
    }

    /// Numeric values arrive as PostgreSQL's own text of them, digit for digit: every weight
    /// (tiny fractions to 10^40), every scale, signs, zeros with a scale, negative zero, NaN.
    func testNumericTextIsPostgresText() throws {
        let db = try pg.connect(try pg.makeDatabase("numtext"))
        try db.run("""
            CREATE TABLE nums (id int PRIMARY KEY, n numeric);
            INSERT INTO nums
              SELECT g, round(((g * 7919) % 200003 - 100000)::numeric * power(10::numeric, g % 45 - 25), g % 31)
              FROM generate_series(1, 3000) g;
            INSERT INTO nums VALUES (3001, 0), (3002, '0.000'), (3003, '-0.0000'), (3004, 'NaN'), (3005, '1e-30'),
              (3006, '-99999999999999999999.99999999999999999999'), (3007, '10000'), (3008, '0.0001'), (3009, '1000000000000'),
              (3010, '-1.5'), (3011, '123456789.123456789'), (3012, '9999.9999'), (3013, NULL);
            """)
        let lite = try XCTUnwrap(try sqlite("numtext.db") as? SQLiteConnection)
        XCTAssertTrue(try copy(db, lite).ok)
        let expected = try db.rows("SELECT id, n::text FROM nums ORDER BY id")
        let got = try lite.query("SELECT CAST(id AS TEXT), n FROM nums ORDER BY id").map { row in row.map(\.canonicalText) }
        XCTAssertEqual(expected.count, 3013)
        XCTAssertEqual(got.count, expected.count)
        for (e, g) in zip(expected, got) where e != g { XCTFail("numeric \(e) arrived as \(g)"); break }
    }

    /// Decimal text written as PostgreSQL's binary numeric arrives as PostgreSQL's own reading
    /// of that text: signs, leading and trailing zeros, no integer or no fraction digits, every
    /// alignment of the base-10000 groups; text that is no decimal is refused.
    func testDecimalTextIsWrittenAsPostgresReadsIt() throws {
        var rng = SplitMix64(seed: 29)
        var texts = ["0", "-0", "+0", "0.000", "-0.000", "1.", ".5", "+7", "-.25", "00012.3400", "10000", "9999.9999", "0.0001",
                     "100000000", "-1000.0001", "123456789012345678901234567890.123456789012345678901234567890", "NaN", "Infinity", "-Infinity"]
        for _ in 0..<3000 {
            let int = (0..<Int(rng.next() % 24)).map { _ in String(rng.next() % 4 == 0 ? 0 : rng.next() % 10) }.joined()
            let frac = (0..<Int(rng.next() % 24)).map { _ in String(rng.next() % 4 == 0 ? 0 : rng.next() % 10) }.joined()
            let sign = ["", "-", "+"][Int(rng.next() % 3)]
            texts.append(sign + (int.isEmpty && frac.isEmpty ? "0" : int) + (frac.isEmpty && rng.next() % 2 == 0 ? "" : "." + frac))
        }
        let lite = try XCTUnwrap(try sqlite("dec.db") as? SQLiteConnection)
        try lite.execute("CREATE TABLE dec (id INTEGER PRIMARY KEY, n DECIMAL TEXT)")  // TEXT affinity: stored as written
        let db = try pg.connect(try pg.makeDatabase("dec"))
        try db.run("CREATE TABLE expected (id int PRIMARY KEY, t text)")
        for (i, t) in texts.enumerated() {
            try lite.execute("INSERT INTO dec VALUES (\(i), '\(t)')")
            try db.run("INSERT INTO expected VALUES (\(i), '\(t)')")
        }
        let s = try copy(lite, db, tables: ["dec"])
        XCTAssertTrue(s.ok, "\(s.tables.compactMap(\.error))")
        let got = try db.rows("SELECT d.n::text, e.t::numeric::text, e.t FROM dec d JOIN expected e USING (id) ORDER BY d.id")
        XCTAssertEqual(got.count, texts.count)
        for row in got where row[0] != row[1] { XCTFail("'\(row[2] ?? "")' arrived as \(row[0] ?? "NULL"), PostgreSQL reads \(row[1] ?? "NULL")"); break }

        for bad in ["1e5", "1.2.3", "-", ".", "12a"] {
            try lite.execute("DELETE FROM dec; INSERT INTO dec VALUES (1, '\(bad)')")
            let refused = try copy(lite, db, mode: .replace, tables: ["dec"])
            XCTAssertTrue(refused.tables[0].error?.contains("is not a decimal number") == true, refused.tables[0].error ?? "copied '\(bad)'")
        }
    }

    func testRefusalsAndErrors() throws {
        let url = try pg.makeDatabase("bad")
        let db = try pg.connect(url)
        try db.run("CREATE TABLE inf (id int PRIMARY KEY, d date); INSERT INTO inf VALUES (1, '2020-01-01'), (7, 'infinity')")
        let lite = try sqlite("bad.db")
        let s = try copy(db, lite)
        XCTAssertFalse(s.ok)
        XCTAssertTrue(s.tables[0].error?.contains("table inf, column d, key (id=7)") == true, s.tables[0].error ?? "")
        XCTAssertFalse(try lite.tableExists(TableName("inf")))

        // A value the target would round is refused, the target left as it was.
        try db.run("CREATE TABLE money (id int PRIMARY KEY, v numeric); INSERT INTO money VALUES (1, 1.5), (2, 1.005)")
        let target = try pg.connect(try pg.makeDatabase("bad2"))
        try target.run("CREATE TABLE money (id int PRIMARY KEY, v numeric(10,2)); INSERT INTO money VALUES (9, 9.99)")
        let s2 = try copy(db, target, mode: .append, tables: ["money"])
        XCTAssertTrue(s2.tables[0].error?.contains("key (id=2)") == true, s2.tables[0].error ?? "")
        XCTAssertTrue(s2.tables[0].error?.contains("more than 2 decimal places") == true, s2.tables[0].error ?? "")
        XCTAssertEqual(try target.rows("SELECT id, v::text FROM money"), [["9", "9.99"]])

        // A duplicate key on append names the key and changes nothing.
        try target.run("INSERT INTO money VALUES (1, 0)")
        try db.run("DELETE FROM money WHERE id = 2")
        let s3 = try copy(db, target, mode: .append, tables: ["money"])
        XCTAssertTrue(s3.tables[0].error?.contains("key (id=1)") == true, s3.tables[0].error ?? "")
        XCTAssertEqual(try target.rows("SELECT count(*) FROM money"), [["2"]])

        // Far into a long load (a COPY keeps only its rows' keys, 262,144 of one integer key,
        // then the next begins): the row the server refuses is still named by its key, or by its
        // place where the table has none — in the batch that ends the first COPY (rows
        // 261,801–262,500 in batches of 700) and in the last COPY, ended by the load's end.
        try db.run("""
            CREATE TABLE long (id bigint PRIMARY KEY, v integer); INSERT INTO long SELECT g, g FROM generate_series(1, 300000) g;
            CREATE TABLE nokey (v integer); INSERT INTO nokey SELECT g FROM generate_series(1, 300000) g;
            """)
        try target.run("""
            CREATE TABLE long (id bigint PRIMARY KEY, v integer); INSERT INTO long VALUES (262000, 0);
            CREATE TABLE nokey (v integer CHECK (v <> 299990));
            """)
        let s4 = try copy(db, target, mode: .append, tables: ["long", "nokey"])
        XCTAssertEqual(s4.tables.count, 2)
        for t in s4.tables {
            let want = t.source.hasSuffix("nokey") ? "row 299990 (the table has no key)" : "key (id=262000)"
            XCTAssertTrue(t.error?.contains(want) == true, "\(t.source): \(t.error ?? "no error")")
        }
        try target.run("DELETE FROM long; INSERT INTO long VALUES (299999, 0); ALTER TABLE nokey DROP CONSTRAINT nokey_v_check;")
        try target.run("ALTER TABLE nokey ADD CHECK (v <> 262000)")
        let s5 = try copy(db, target, mode: .append, tables: ["long", "nokey"])
        for t in s5.tables {
            let want = t.source.hasSuffix("nokey") ? "row 262000 (the table has no key)" : "key (id=299999)"
            XCTAssertTrue(t.error?.contains(want) == true, "\(t.source): \(t.error ?? "no error")")
        }
        XCTAssertEqual(try target.rows("SELECT (SELECT count(*) FROM long), (SELECT count(*) FROM nokey)"), [["1", "0"]])
    }

    func testConnectionErrorsAreOneClearLine() throws {
        let good = try Endpoint(parsing: pg.adminURL)
        var wrong = good
        wrong.password = "not-the-password"
        XCTAssertThrowsError(try PostgresConnection(endpoint: wrong, role: .source)) { e in
            XCTAssertTrue("\(e)".contains("authentication failed for user ferry"), "\(e)")
            XCTAssertFalse("\(e)".contains("not-the-password"))
            XCTAssertFalse("\(e)".contains("\n"))
        }
        var missing = good
        missing.path = "no_such_database"
        XCTAssertThrowsError(try PostgresConnection(endpoint: missing, role: .source)) { e in
            XCTAssertTrue("\(e)".contains("database \"no_such_database\" does not exist"), "\(e)")
        }
        var unreachable = good
        unreachable.port = 1
        XCTAssertThrowsError(try PostgresConnection(endpoint: unreachable, role: .source)) { e in
            XCTAssertTrue("\(e)".contains("server unreachable"), "\(e)")
        }
        XCTAssertThrowsError(try PostgresConnection(endpoint: Endpoint(parsing: "postgres://u@no-such-host.invalid/db"), role: .source)) { e in
            XCTAssertTrue("\(e)".contains("server unreachable"), "\(e)")
        }
        let db = try pg.connect(pg.adminURL)
        XCTAssertThrowsError(try db.describe(TableName("no_such_table"))) { e in
            XCTAssertTrue("\(e)".contains("table no_such_table not found"), "\(e)")
        }
    }

    func testPermissionDenied() throws {
        let url = try pg.makeDatabase("perm")
        let owner = try pg.connect(url)
        let role = "ferry_reader_\(UUID().uuidString.prefix(6).lowercased())"
        try owner.run("""
            CREATE TABLE secret (id int PRIMARY KEY); CREATE TABLE open (id int PRIMARY KEY); INSERT INTO secret VALUES (1);
            CREATE ROLE \(role) LOGIN PASSWORD 'pw'; GRANT SELECT ON open TO \(role);
            """)
        defer { try? owner.run("DROP OWNED BY \(role); DROP ROLE \(role)") }
        var e = try Endpoint(parsing: url)
        e.user = role
        e.password = "pw"
        let reader = try PostgresConnection(endpoint: e, role: .source)
        defer { reader.close() }
        let lite = try sqlite("perm.db")
        let s = try copy(reader, lite, tables: ["secret", "open"])
        let secret = s.tables.first { $0.source == "secret" }
        XCTAssertEqual(secret?.status, .failed)
        XCTAssertTrue(secret?.error?.contains("permission denied") == true, secret?.error ?? "")
        XCTAssertFalse(try lite.tableExists(TableName("secret")), "nothing written for a table that could not be read")
        XCTAssertEqual(s.tables.first { $0.source == "open" }?.status, .ok)
    }
}

final class PostgresRelationKindsTests: XCTestCase {
    func testPartitionsInheritanceViewsAndSchemas() throws {
        let pg = try PostgresFixture()
        let folder = try TemporaryFolder()
        let db = try pg.connect(try pg.makeDatabase("kinds"))
        try db.run("""
            CREATE TABLE measure (id int, at date NOT NULL, v numeric(6,1), PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
            CREATE TABLE measure_2024 PARTITION OF measure FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
            CREATE TABLE measure_2025 PARTITION OF measure FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
            INSERT INTO measure VALUES (1, '2024-05-01', 1.5), (2, '2025-05-01', 2.5), (3, '2025-06-01', NULL);
            CREATE TABLE city (id int PRIMARY KEY, name text);
            CREATE TABLE capital (country text) INHERITS (city);
            INSERT INTO city VALUES (1, 'Lyon'); INSERT INTO capital VALUES (2, 'Paris', 'France');
            CREATE VIEW big_measures AS SELECT id, v FROM measure WHERE v > 2;
            CREATE SCHEMA sales; CREATE TABLE sales.orders (id int PRIMARY KEY, note text); INSERT INTO sales.orders VALUES (1, 'x');
            """)
        let names = try db.listTables().map(\.name.description)
        XCTAssertEqual(names, ["capital", "city", "measure", "sales.orders"])
        XCTAssertEqual(try db.describe(TableName("measure")).primaryKey, ["id", "at"])

        let lite = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + folder.path("k.db")), role: .target)
        let engine = CopyEngine(registry: DriverRegistry([SQLiteDriver(), PostgresDriver()]))
        var o = CopyOptions()
        o.schemas = ["public"]
        let plan = try engine.plan(source: db, target: lite, options: o)
        XCTAssertEqual(plan.tables.map(\.source.description), ["capital", "city", "measure"])
        let summary = engine.run(plan, source: db, target: lite, options: o, progress: ProgressReporter(style: .quiet) { _ in })
        XCTAssertTrue(summary.ok, "\(summary.tables.compactMap(\.error))")
        XCTAssertEqual(try lite.countRows(TableName("measure")), 3, "a partitioned table is copied once, whole")
        XCTAssertEqual(try lite.countRows(TableName("city")), 1, "inheritance children are not read into the parent")
        XCTAssertEqual(try lite.countRows(TableName("capital")), 1)

        // A view is copied when named.
        o.schemas = []
        o.tables = [TableName("big_measures")]
        let viewPlan = try engine.plan(source: db, target: lite, options: o)
        XCTAssertTrue(engine.run(viewPlan, source: db, target: lite, options: o, progress: ProgressReporter(style: .quiet) { _ in }).ok)
        XCTAssertEqual(try DriverConformance.readAll(lite, TableName("big_measures")), [[.int(2), .decimal("2.5")]])
    }
}
