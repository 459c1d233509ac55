import FerryCore
import FerryDriverTestKit
@testable import FerrySQLite
import XCTest

final class SQLiteDriverTests: XCTestCase {
    var folder: TemporaryFolder!

    override func setUpWithError() throws {
        folder = try TemporaryFolder()
    }

    func open(_ name: String, role: ConnectionRole = .target) throws -> SQLiteConnection {
        try SQLiteConnection(endpoint: Endpoint(parsing: "sqlite:" + folder.path(name)), role: role)
    }

    func chinook() throws -> URL {
        let datasets = try TestDatabases.datasetsFolder()
        return datasets.appendingPathComponent("chinook")
    }

    let harness = CopyHarness([SQLiteDriver()])

    /// Copies every table with the engine and returns the summary.
    func copy(_ src: any Connection, _ dst: any Connection, mode: WriteMode = .create, tables: [String] = [], batchSize: Int = 500) throws -> CopySummary {
        try harness.copy(src, dst, mode: mode, tables: tables, batchSize: batchSize)
    }

    func assertSame(_ a: any Connection, _ b: any Connection, file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertEqual(try harness.differences(a, b), [], file: file, line: line)
    }

    /// Every value and its storage class, straight from SQLite, in rowid order.
    func raw(_ db: SQLiteConnection, _ table: String) throws -> [[String?]] {
        let cols = try db.describe(TableName(table)).columns.map { db.dialect.quote($0.name) }
        let sel = cols.map { "typeof(\($0)) || ':' || quote(\($0))" }.joined(separator: ", ")
        return try db.prepare("SELECT \(sel) FROM \(db.dialect.quote(table)) ORDER BY rowid").rows()
    }

    /// Row hashes of a rowid-keyed table whose other columns are compared as stored (SQLite to
    /// SQLite) computed straight from the statement are those of the reader's batches, for every
    /// storage class in any column, NULLs, values longer than the first scratch buffer, and more
    /// rows than a batch; any other shape of request is left to the reader.
    func testStoredRowHashesEqualTheReadersForEveryStorageClass() throws {
        let db = try open("stored.db")
        try db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a, b TEXT, c REAL, d BLOB, e NUMERIC)")
        try db.execute("""
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 25000)
            INSERT INTO t SELECT n * 3 - 30000,
              CASE n % 5 WHEN 0 THEN NULL WHEN 1 THEN n WHEN 2 THEN n / 7.0 WHEN 3 THEN 'é' || n ELSE randomblob(n % 40) END,
              CASE WHEN n % 11 = 0 THEN n ELSE printf('%.*c', n % 700, 'x') END,
              CASE WHEN n % 13 = 0 THEN 'not a number' ELSE n * 1.5 END,
              CASE WHEN n % 3 = 0 THEN zeroblob(n % 500) WHEN n % 3 = 1 THEN NULL ELSE 'text in a blob column' END,
              CASE WHEN n % 2 = 0 THEN '12.50' ELSE -n END
            FROM g
            """)
        try db.execute("INSERT INTO t VALUES (9223372036854775807, -9223372036854775808, '', -0.0, x'', 1e308)")
        let schema = try db.describe(TableName("t"))
        let key = try XCTUnwrap(schema.column(named: "id"))
        let columns = schema.columns.map { $0.name == "id" ? $0 : $0.storedForm }
        let forms = columns.map(ColumnHashForm.init)
        XCTAssertEqual(forms.first, .integer)
        let request = DigestRequest(key: [key], columns: columns, modulus: 1, keyHash: .integer, rowHash: .lookup3, hashForms: forms)
        XCTAssertNotNil(SQLiteStoredRowHashes(db, table: schema, request: request), "the statement's own path is taken")
        var direct: [Int64] = [], read: [Int64] = []
        try db.keyedRowHashes(schema, request: request) { direct += [$0, $1] }
        try DigestComputer.keyedRowHashes(db, table: schema, request: request) { read += [$0, $1] }
        XCTAssertEqual(direct.count, 2 * 25_001)
        XCTAssertEqual(direct, read)
        // A column in another form, a filter, the MD5 row hash: the reader's path.
        var other = request
        other.filter = "id > 0"
        XCTAssertNil(SQLiteStoredRowHashes(db, table: schema, request: other))
        other = request
        other.rowHash = .md5
        XCTAssertNil(SQLiteStoredRowHashes(db, table: schema, request: other))
        other = DigestRequest(key: [key], columns: schema.columns, modulus: 1, keyHash: .integer, rowHash: .lookup3)
        XCTAssertNil(SQLiteStoredRowHashes(db, table: schema, request: other))
    }

    /// A mirror with a tenth of its rows changed — more differing buckets than a filter may name
    /// (`RangeDiff.maxBuckets`) — still compares key by key where both sides kept their keys and
    /// row hashes: only the changed rows are read, not the whole table, and the counts are exact.
    func testMirrorWithManyChangesReadsOnlyTheChangedRows() throws {
        let src = try open("many-src.db"), dst = try open("many-dst.db")
        try src.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, v INTEGER, t TEXT)")
        try src.execute("""
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 300000)
            INSERT INTO m SELECT n, n * 7, 'row ' || n FROM g
            """)
        XCTAssertTrue(try copy(src, dst, batchSize: 10_000).ok)
        try src.execute("UPDATE m SET v = v + 1 WHERE id % 10 = 3")
        try src.execute("DELETE FROM m WHERE id % 1000 = 5")
        let s = try copy(src, dst, mode: .mirror, batchSize: 10_000)
        XCTAssertTrue(s.ok, "\(s.tables.compactMap(\.error))")
        XCTAssertEqual(s.tables.first?.counts, MergeCounts(updated: 30_000, unchanged: 269_700, deleted: 300))
        // ~25,000 of 65,536 buckets differ: past a SQL filter's 20,000, this read all 300,000 rows.
        XCTAssertEqual(s.tables.first?.mirror?.sourceRowsRead, 30_000, "\(s.tables.first?.mirror.map { "\($0)" } ?? "")")
        try assertSame(src, dst)
    }

    func testChinookCatalog() throws {
        let db = try SQLiteConnection(
            endpoint: Endpoint(parsing: "sqlite:" + chinook().appendingPathComponent("Chinook_Sqlite.sqlite").path), role: .source)
        let tables = try db.listTables()
        XCTAssertEqual(tables.map(\.name.name), ["Album", "Artist", "Customer", "Employee", "Genre", "Invoice", "InvoiceLine",
                                                  "MediaType", "Playlist", "PlaylistTrack", "Track"])
        XCTAssertEqual(tables.first { $0.name.name == "Track" }?.rowEstimate, 3503)
        let track = try db.describe(TableName("Track"))
        XCTAssertEqual(track.primaryKey, ["TrackId"])
        XCTAssertEqual(track.column(named: "TrackId")?.serial, .rowid)
        XCTAssertEqual(track.column(named: "Name")?.logicalType, .text(maxLength: 200, fixed: false))
        XCTAssertEqual(track.column(named: "UnitPrice")?.logicalType, .decimal(precision: 10, scale: 2))
        XCTAssertEqual(track.column(named: "Composer")?.isNullable, true)
        let pt = try db.describe(TableName("PlaylistTrack"))
        XCTAssertEqual(pt.primaryKey, ["PlaylistId", "TrackId"])
        XCTAssertNil(pt.column(named: "TrackId")?.serial)
        XCTAssertEqual(try db.describe(TableName("Invoice")).column(named: "InvoiceDate")?.logicalType,
                       .timestamp(precision: nil, timeZone: false))
    }

    /// A table is described with a row estimate read from its rowids (no scan): their span,
    /// never more rows than the file could hold; a count where there is no rowid to ask. The
    /// table list still counts.
    func testRowEstimatesComeFromTheRowidsWithoutAScan() throws {
        let db = try open("estimates.db")
        try db.execute("""
            CREATE TABLE dense (id INTEGER PRIMARY KEY, v TEXT);
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000) INSERT INTO dense SELECT i, 'x' || i FROM n;
            CREATE TABLE sparse (v TEXT);
            INSERT INTO sparse (rowid, v) VALUES (-9000000000000000000, 'a'), (9000000000000000000, 'b');
            CREATE TABLE keyed (k TEXT PRIMARY KEY, v INTEGER) WITHOUT ROWID;
            INSERT INTO keyed VALUES ('a', 1), ('b', 2), ('c', 3);
            CREATE TABLE shadowed (rowid TEXT, _rowid_ TEXT, oid TEXT);
            INSERT INTO shadowed VALUES ('z', 'z', 'z'), ('y', 'y', 'y');
            CREATE TABLE empty (v TEXT);
            """)
        func estimate(_ t: String) throws -> Int64? { try db.describe(TableName(t)).rowEstimate }
        XCTAssertEqual(try estimate("dense"), 5000)
        try db.execute("DELETE FROM dense WHERE id % 2 = 0")
        // Deleted rows leave their span: an estimate, at most twice the rows here.
        XCTAssertEqual(try estimate("dense"), 4999)
        // 1.8e19 ids apart: bounded by the file's size (a few pages), not the span.
        let sparse = try XCTUnwrap(try estimate("sparse"))
        XCTAssertTrue(sparse >= 2 && sparse < 1_000_000, "\(sparse)")
        XCTAssertEqual(try estimate("keyed"), 3)
        XCTAssertEqual(try estimate("shadowed"), 2)
        XCTAssertEqual(try estimate("empty"), 0)
        XCTAssertNil(try db.describe(TableName("dense"), rowEstimate: false).rowEstimate)
        XCTAssertEqual(try db.listTables().first { $0.name.name == "dense" }?.rowEstimate, 2500)
    }

    func testChinookCopiesIdentically() throws {
        let src = try SQLiteConnection(
            endpoint: Endpoint(parsing: "sqlite:" + chinook().appendingPathComponent("Chinook_Sqlite.sqlite").path), role: .source)
        let dst = try open("copy.db")
        let summary = try copy(src, dst)
        XCTAssertTrue(summary.ok, "\(summary.tables.compactMap(\.error))")
        XCTAssertEqual(summary.totalRows, 15607)
        try assertSame(src, dst)
        for t in try src.listTables() {
            XCTAssertEqual(try raw(src, t.name.name), try raw(dst, t.name.name), "storage classes of \(t.name)")
        }
        // The copy is a new SQLite database with the same keys.
        XCTAssertEqual(try dst.describe(TableName("Track")).column(named: "TrackId")?.serial, .rowid)
    }

    func testChinookAutoincrementScript() throws {
        let script = try String(contentsOf: chinook().appendingPathComponent("Chinook_Sqlite_AutoIncrementPKs.sql"), encoding: .utf8)
        let src = try open("auto.db")
        try src.execute(script)
        let album = try src.describe(TableName("Album"))
        XCTAssertEqual(album.column(named: "AlbumId")?.serial, .autoincrement)
        let dst = try open("auto-copy.db")
        XCTAssertTrue(try copy(src, dst, batchSize: 100).ok)
        try assertSame(src, dst)
        XCTAssertEqual(try dst.describe(TableName("Album")).column(named: "AlbumId")?.serial, .autoincrement)
        // The counter moved past the copied maximum: the next insert gets max + 1.
        try dst.execute("INSERT INTO Album (Title, ArtistId) VALUES ('new', 1)")
        XCTAssertEqual(try dst.prepare("SELECT max(AlbumId) FROM Album").rows(), [["348"]])
        XCTAssertEqual(try dst.prepare("SELECT seq FROM sqlite_sequence WHERE name = 'Album'").rows(), [["348"]])
    }

    func testEdgeCasesSurviveACopy() throws {
        let src = try open("edge.db")
        try src.execute("""
            CREATE TABLE "odd ""name"".x; select" (
              "id" INTEGER PRIMARY KEY, "select" TEXT, "a b" BLOB, "r" REAL, "i" BIGINT, "d" DECIMAL(38,10),
              "when" DATETIME, "flag" BOOLEAN, "u" UUID, "j" JSON);
            CREATE TABLE nokey (t TEXT, n INT);
            CREATE TABLE empty (a TEXT PRIMARY KEY, b INT UNIQUE);
            INSERT INTO nokey VALUES ('x', 1), ('x', 1), (NULL, NULL);
            """)
        let big = String(repeating: "ab\u{0}c", count: 262_144)  // 1 MB with NULs
        let ins = try src.prepare("INSERT INTO \"odd \"\"name\"\".x; select\" VALUES (?,?,?,?,?,?,?,?,?,?)")
        let rows: [[Value]] = [
            [.int(1), .text(""), .binary([0, 0, 1, 0]), .double(.infinity), .int(.min), .text("1234567890123456789012345678.0123456789"),
             .text("2024-02-29 23:59:59.123456"), .int(1), .text("00010203-0405-0607-0809-0a0b0c0d0e0f"), .text("{\"k\":\"é😀\"}")],
            [.int(2), .null, .null, .null, .null, .null, .null, .null, .null, .null],
            [.int(3), .text("& < > ' \" é 中文 😀 \u{1}\t\r\n"), .binary([]), .double(-.infinity), .int(.max), .int(42),
             .text("1899-12-31 00:00:00"), .int(0), .null, .text("12.30")],
            [.int(4), .text(big), .binary(Array(repeating: 0, count: 1000)), .double(Double.leastNonzeroMagnitude), .int(0), .double(0.1),
             .text("2100-01-01 00:00:00"), .null, .null, .text("[]")],
            [.int(5), .text(" "), .null, .double(-1.7976931348623157e308), .int(-1), .text("-0.0000000001"), .null, .null, .null, .null],
        ]
        for r in rows {
            ins.reset()
            try ins.bind(r)
            _ = try ins.step()
        }
        let dst = try open("edge-copy.db")
        let summary = try copy(src, dst, batchSize: 2)
        XCTAssertTrue(summary.ok, "\(summary.tables.compactMap(\.error))")
        try assertSame(src, dst)
        for t in ["odd \"name\".x; select", "nokey", "empty"] {
            XCTAssertEqual(try raw(src, t), try raw(dst, t), t)
        }
        XCTAssertEqual(try dst.countRows(TableName("nokey")), 3)
        XCTAssertEqual(try dst.describe(TableName("empty")).uniqueKeys, [["b"]])
        XCTAssertEqual(try dst.describe(TableName("empty")).primaryKey, ["a"])
    }

    func testCrossEngineDDLKeepsValuesExact() throws {
        // A schema described by another engine gets Ferry's SQLite conventions (TEXT affinity for
        // decimals and JSON), so values are kept to the last digit.
        let db = try open("conv.db")
        let schema = TableSchema(
            name: TableName("t"), engine: Engine("postgres"),
            columns: [
                Column(name: "d", nativeType: "numeric(40,20)", logicalType: .decimal(precision: 40, scale: 20)),
                Column(name: "j", nativeType: "jsonb", logicalType: .json),
                Column(name: "ts", nativeType: "timestamptz", logicalType: .timestamp(precision: 6, timeZone: true)),
                Column(name: "e", nativeType: "mood", logicalType: .enumeration(labels: ["ok", "it's bad"])),
            ])
        let ddl = try db.planTable(schema, named: TableName("t")).statements
        XCTAssertTrue(ddl[0].contains("\"d\" DECIMAL TEXT(40,20)"), ddl[0])
        XCTAssertTrue(ddl[0].contains("\"j\" JSON TEXT"), ddl[0])
        XCTAssertTrue(ddl[0].contains("CHECK (\"e\" IN ('ok', 'it''s bad'))"), ddl[0])
        try db.createTable(schema, named: TableName("t"))
        let w = try db.writer(into: try db.describe(TableName("t")), columns: schema.columns)
        try w.write(RowBatch(rows: [[.decimal("12.30000000000000000000"), .json("12.30"), .timestamp(1), .text("it's bad")]],
                             types: schema.columns.map(\.logicalType)))
        XCTAssertEqual(try raw(db, "t"), [["text:'12.30000000000000000000'", "text:'12.30'", "text:'1970-01-01 00:00:00.000001+00:00'", "text:'it''s bad'"]])
        XCTAssertEqual(try db.describe(TableName("t")).columns.map(\.logicalType),
                       [.decimal(precision: 40, scale: 20), .json, .timestamp(precision: 6, timeZone: true), .text])
        let bad = try db.writer(into: try db.describe(TableName("t")), columns: [schema.columns[3]])
        XCTAssertThrowsError(try bad.write(RowBatch(rows: [[.text("nope")]], types: [schema.columns[3].logicalType])))
    }

    func testValuesTakeTheExistingColumnsFormSoKeyRangesFindThem() throws {
        // Timestamps with six fraction digits appended to a table whose key is a plain DATETIME:
        // stored in the column's own form (the form its key-range bounds are bound in), so a
        // keyed walk in pages of 2 meets every row once.
        let db = try open("existing.db")
        try db.execute("CREATE TABLE ev (at DATETIME PRIMARY KEY, n INTEGER)")
        let source = [Column(name: "at", nativeType: "timestamp(6)", logicalType: .timestamp(precision: 6, timeZone: false)),
                      Column(name: "n", nativeType: "int", logicalType: .int64)]
        let micros: [Int64] = [0, 1, 500_000, 1_000_000, 60_000_000, 86_400_000_000, 86_400_000_001]
        try db.begin()
        let w = try db.writer(into: try db.describe(TableName("ev")), columns: source)
        try w.write(RowBatch(rows: micros.reversed().map { [.timestamp($0), .int($0)] }, types: source.map(\.logicalType)))
        try db.commit()
        let table = try db.describe(TableName("ev"))
        var seen: [Value] = []
        var after: [Value]?
        while true {
            let reader = try db.reader(table: table, columns: table.columns, keyRange: KeyRange(key: ["at"], after: after, limit: 2), batchSize: 10)
            var page: [[Value]] = []
            while let b = try reader.next() { for r in 0..<b.count { page.append(b.row(r, types: table.columns.map(\.logicalType))) } }
            reader.close()
            guard let last = page.last else { break }
            seen += page.map { $0[1] }
            after = [last[0]]
            XCTAssertLessThanOrEqual(seen.count, micros.count, "the walk repeats rows")
            if seen.count > micros.count { break }
        }
        XCTAssertEqual(seen, micros.map { .int($0) })

        // A file another program wrote: timestamps with three fraction digits, none, or one, and
        // times likewise; key ranges find each row once whatever digits it was stored with.
        try db.execute("""
            CREATE TABLE other (at TIMESTAMP PRIMARY KEY, n INTEGER);
            INSERT INTO other VALUES ('2020-01-01 00:00:37.000', 1), ('2020-01-01 00:00:37.5', 2), ('2020-01-01 00:00:37.51', 3),
              ('2020-01-01 00:00:38', 4), ('2020-01-01 00:01:00.000', 5), ('2020-01-02 00:00:00', 6), ('2020-01-02 00:00:00.000001', 7);
            CREATE TABLE clock (t TIME PRIMARY KEY, n INTEGER);
            INSERT INTO clock VALUES ('00:00:01.000', 1), ('00:00:01.25', 2), ('00:00:02', 3), ('12:00:00.000', 4), ('23:59:59.999999', 5);
            """)
        for (name, count) in [("other", 7), ("clock", 5)] {
            let t = try db.describe(TableName(name))
            let key = t.primaryKey
            var got: [Value] = []
            var from: [Value]?
            while got.count <= count {
                let reader = try db.reader(table: t, columns: t.columns, keyRange: KeyRange(key: key, after: from, limit: 2), batchSize: 10)
                var page: [[Value]] = []
                while let b = try reader.next() { for r in 0..<b.count { page.append(b.row(r, types: t.columns.map(\.logicalType))) } }
                reader.close()
                guard let last = page.last else { break }
                got += page.map { $0[1] }
                from = [last[0]]
            }
            XCTAssertEqual(got, (1...count).map { .int(Int64($0)) }, name)
            // An inclusive upper bound at a stored three-digit value takes that row.
            let upTo = try db.reader(table: t, columns: t.columns, keyRange: KeyRange(key: key, upTo: [name == "other" ? .timestamp(37_000_000 + 1_577_836_800_000_000) : .time(1_000_000)]), batchSize: 10)
            var n = 0
            while let b = try upTo.next() { n += b.count }
            upTo.close()
            XCTAssertEqual(n, 1, "\(name): rows up to the first key")
        }
    }

    func testMismatchedStorageIsReportedWithTheKey() throws {
        let src = try open("mismatch.db")
        try src.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, n INTEGER, d DATE); INSERT INTO m VALUES (1, 5, '2020-01-01'), (7, 'seven', '2020-01-02')")
        // Into another SQLite database every value goes as stored, whatever its storage class.
        let dst = try open("mismatch-copy.db")
        XCTAssertTrue(try copy(src, dst).ok)
        XCTAssertEqual(try raw(dst, "m"), try raw(src, "m"))
        // Read by its types (as into another engine): the value that has none is named by its key.
        XCTAssertThrowsError(try DriverConformance.readAll(src, TableName("m"))) { error in
            let message = "\(error)"
            XCTAssertTrue(message.contains("table m, column n, key (id=7)"), message)
            XCTAssertTrue(message.contains("a TEXT value 'seven'"), message)
        }
        try src.execute("CREATE TABLE dates (id INTEGER PRIMARY KEY, d DATE); INSERT INTO dates VALUES (3, 20200101)")
        XCTAssertThrowsError(try DriverConformance.readAll(src, TableName("dates"))) { error in
            let message = "\(error)"
            XCTAssertTrue(message.contains("key (id=3)") && message.contains("ISO-8601"), message)
        }
    }

    /// The fidelity finding: SQLite to SQLite keeps each stored text, not the instant it stands
    /// for (`…10.000010` was copied as `…10.00001`, `00:00:00.500000` as `00:00:00.5`, and verify
    /// called the files equal), and keyed walks and bounds work on stored values.
    func testSQLiteToSQLiteKeepsStoredValues() throws {
        let src = try open("stored.db")
        try src.execute("""
            CREATE TABLE s (ts DATETIME PRIMARY KEY, tm TIME, u UUID, amount DECIMAL(10,2), x);
            INSERT INTO s VALUES ('1969-12-31 23:01:10.000010', '00:00:00.500000', '550E8400-E29B-41D4-A716-446655440000', '12.30', 1.5),
                                 ('2020-01-01 00:00:00.5', '12:00', X'00112233445566778899AABBCCDDEEFF', 12.5, 'x'),
                                 (1700000000, 3.25, 'not a uuid', 'n/a', X'00');
            """)
        let dst = try open("stored-copy.db")
        XCTAssertTrue(try copy(src, dst, batchSize: 1).ok)
        func sorted(_ db: SQLiteConnection) throws -> [[String?]] { try raw(db, "s").sorted { ($0[0] ?? "") < ($1[0] ?? "") } }
        XCTAssertEqual(try sorted(dst), try sorted(src))
        XCTAssertEqual(try dst.describe(TableName("s")).columns.map(\.nativeType), ["DATETIME", "TIME", "UUID", "DECIMAL(10,2)", ""])
        XCTAssertEqual(try Verifier().verify(source: src, target: dst, options: Verifier.Options()).tables.map(\.status), [.equal])
        // Only the stored text differs: verify sees it; mirror puts it back.
        try dst.execute("UPDATE s SET ts = '1969-12-31 23:01:10.00001' WHERE ts = '1969-12-31 23:01:10.000010'")
        let report = try Verifier().verify(source: src, target: dst, options: Verifier.Options())
        XCTAssertEqual(report.tables.map(\.status), [.different])
        // A changed key: missing in the target and extra there, each shown as its stored text.
        XCTAssertEqual(Set(report.tables.first?.differences.map(\.key) ?? []),
                       ["(ts='1969-12-31 23:01:10.000010')", "(ts='1969-12-31 23:01:10.00001')"])
        XCTAssertTrue(try copy(src, dst, mode: .mirror, batchSize: 1).ok)
        XCTAssertEqual(try sorted(dst), try sorted(src))
        // Key ranges over stored keys (what --jobs and the service's pages use).
        let schema = try src.describe(TableName("s"))
        let stored = schema.columns.map(\.storedForm)
        // In SQLite's order of stored values: INTEGER before TEXT.
        let all = try DriverConformance.readAll(src, TableName("s"), columns: stored, keyRange: KeyRange(key: ["ts"]))
        let keys: [String?] = all.map { row -> String? in
            guard case .binary(let b) = row[0] else { return nil }
            return StoredValue.describe(b)
        }
        XCTAssertEqual(keys, ["1700000000", "'1969-12-31 23:01:10.000010'", "'2020-01-01 00:00:00.5'"])
        XCTAssertEqual(all.count, 3)
        let after = try DriverConformance.readAll(src, TableName("s"), columns: stored, keyRange: KeyRange(key: ["ts"], after: [all[0][0]]))
        XCTAssertEqual(after, Array(all.dropFirst()))
    }

    /// Into a SQLite column Ferry creates from another engine, times and timestamps take one
    /// fraction width per column (six without a declared precision), so text order and text
    /// equality agree with time.
    func testTimesFromAnotherEngineTakeOneFractionWidth() throws {
        let db = try open("width.db")
        let schema = TableSchema(
            name: TableName("w"), engine: Engine("postgres"),
            columns: [
                Column(name: "ts", nativeType: "timestamp", logicalType: .timestamp(precision: nil, timeZone: false)),
                Column(name: "tm", nativeType: "time", logicalType: .time(precision: nil)),
                Column(name: "t3", nativeType: "timestamp(3)", logicalType: .timestamp(precision: 3, timeZone: false)),
            ])
        try db.createTable(schema, named: TableName("w"))
        XCTAssertEqual(try db.describe(TableName("w")).columns.map(\.nativeType), ["DATETIME(6)", "TIME(6)", "DATETIME(3)"])
        let w = try db.writer(into: try db.describe(TableName("w")), columns: schema.columns)
        try w.write(RowBatch(rows: [[.timestamp(-2_929_999_990), .time(500_000), .timestamp(120_000)], [.timestamp(0), .time(0), .timestamp(0)]],
                             types: schema.columns.map(\.logicalType)))
        XCTAssertEqual(try raw(db, "w"), [
            ["text:'1969-12-31 23:11:10.000010'", "text:'00:00:00.500000'", "text:'1970-01-01 00:00:00.120'"],
            ["text:'1970-01-01 00:00:00.000000'", "text:'00:00:00.000000'", "text:'1970-01-01 00:00:00.000'"],
        ])
    }

    func testReplaceKeepsTheOldTableOnFailure() throws {
        let src = try open("r-src.db")
        let dst = try open("r-dst.db")
        try src.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER); INSERT INTO t VALUES (1, 1), (2, 2)")
        XCTAssertTrue(try copy(src, dst).ok)
        let before = try raw(dst, "t")
        // The new source has a value that cannot be read as the cast asks (SQLite to SQLite
        // copies it as stored without one): the replace must fail whole.
        try src.execute("INSERT INTO t VALUES (3, 3); INSERT INTO t VALUES (4, 'four')")
        let failed = try harness.copy(src, dst, mode: .replace, batchSize: 1, casts: ["column t.n to int64"])
        XCTAssertFalse(failed.ok)
        XCTAssertEqual(try raw(dst, "t"), before)
        XCTAssertEqual(try dst.listTables().map(\.name.name), ["t"], "no staging table left behind")
        try src.execute("DELETE FROM t WHERE id = 4")
        XCTAssertTrue(try copy(src, dst, mode: .replace).ok)
        XCTAssertEqual(try dst.countRows(TableName("t")), 3)
    }

    func testOpeningErrors() throws {
        XCTAssertThrowsError(try open("missing.db", role: .source)) { e in
            XCTAssertTrue("\(e)".contains("no such file"), "\(e)")
        }
        try Data("this is not a database, just text".utf8).write(to: URL(fileURLWithPath: folder.path("text.db")))
        XCTAssertThrowsError(try open("text.db", role: .source)) { e in
            XCTAssertTrue("\(e)".contains("is not a SQLite database"), "\(e)")
        }
        XCTAssertThrowsError(try SQLiteConnection(endpoint: Endpoint(parsing: "sqlite:/nonexistent-dir/x.db"), role: .target)) { e in
            XCTAssertTrue("\(e)".contains("does not exist"), "\(e)")
        }
        let db = try open("ro.db")
        try db.execute("CREATE TABLE t (a)")
        db.close()
        try FileManager.default.setAttributes([.posixPermissions: 0o444], ofItemAtPath: folder.path("ro.db"))
        if getuid() != 0 {  // root may write anyway
            XCTAssertThrowsError(try open("ro.db")) { e in XCTAssertTrue("\(e)".contains("read-only"), "\(e)") }
        }
    }

    func testTypeMap() {
        let cases: [(String, LogicalType)] = [
            ("INTEGER", .int64), ("int", .int32), ("BIGINT UNSIGNED", .int64), ("SMALLINT", .int16), ("TINYINT", .int16),
            ("NVARCHAR(120)", .text(maxLength: 120, fixed: false)), ("CHAR(3)", .text(maxLength: 3, fixed: true)),
            ("NUMERIC(10,2)", .decimal(precision: 10, scale: 2)), ("DECIMAL TEXT(38,10)", .decimal(precision: 38, scale: 10)),
            ("DOUBLE PRECISION", .float64), ("FLOAT4", .float32), ("BLOB", .binary(maxLength: nil)), ("", .binary(maxLength: nil)),
            ("DATETIME", .timestamp(precision: nil, timeZone: false)), ("TIMESTAMPTZ(3)", .timestamp(precision: 3, timeZone: true)),
            ("DATE", .date), ("TIME(6)", .time(precision: 6)), ("BOOLEAN", .boolean), ("UUID", .uuid), ("JSON TEXT", .json),
            ("STRING", .text), ("MONEY", .decimal(precision: nil, scale: nil)), ("VARYING CHARACTER(5)", .text(maxLength: 5, fixed: false)),
        ]
        for (declared, expected) in cases {
            XCTAssertEqual(SQLiteTypeMap.logicalType(declared: declared), expected, declared)
        }
        // Every type Ferry creates reads back as itself (enumerations read back as text).
        let types: [LogicalType] = [.boolean, .int16, .int32, .int64, .decimal(precision: 12, scale: 3), .float32, .float64,
                                    .text(maxLength: 9, fixed: false), .text(maxLength: 2, fixed: true), .text, .binary(maxLength: 16),
                                    .binary(maxLength: nil), .date, .time(precision: 3), .timestamp(precision: 6, timeZone: false),
                                    .timestamp(precision: 0, timeZone: true), .uuid, .json]
        for t in types {
            let declared = SQLiteTypeMap.declaredType(for: t) ?? "?"
            XCTAssertEqual(SQLiteTypeMap.logicalType(declared: declared), t, "\(t) -> \(declared)")
        }
        // Without a precision: six digits, one width per column (text order is time order).
        XCTAssertEqual(SQLiteTypeMap.declaredType(for: .timestamp(precision: nil, timeZone: true)), "TIMESTAMPTZ(6)")
        XCTAssertEqual(SQLiteTypeMap.declaredType(for: .time(precision: nil)), "TIME(6)")
        XCTAssertEqual(SQLiteTypeMap.affinity(of: "DECIMAL TEXT(38,10)"), .text)
        XCTAssertEqual(SQLiteTypeMap.affinity(of: "JSON TEXT"), .text)
        XCTAssertNil(SQLiteTypeMap.declaredType(for: .unsupported(native: "tsvector")))
        XCTAssertTrue(SQLiteConnection.containsKeyword("CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT)", "AUTOINCREMENT"))
        XCTAssertFalse(SQLiteConnection.containsKeyword("CREATE TABLE \"AUTOINCREMENT\" (a) -- AUTOINCREMENT", "AUTOINCREMENT"))
    }

    func testGeneratedColumnsAreSkipped() throws {
        let src = try open("gen.db")
        try src.execute("CREATE TABLE g (a INT PRIMARY KEY, b INT GENERATED ALWAYS AS (a * 2) VIRTUAL); INSERT INTO g (a) VALUES (1), (2)")
        let d = try src.describe(TableName("g"))
        XCTAssertEqual(d.column(named: "b")?.generated, true)
        let dst = try open("gen-copy.db")
        let summary = try copy(src, dst)
        XCTAssertTrue(summary.ok)
        XCTAssertEqual(summary.tables[0].skippedColumns.map(\.column), ["b"])
        XCTAssertEqual(try dst.describe(TableName("g")).columns.map(\.name), ["a"])
    }
}

final class TypeMappingDocTests: XCTestCase {
    /// docs/type-mapping.md must list every declared type the driver creates, so it cannot drift.
    func testDocListsEveryDeclaredType() throws {
        let doc = try String(contentsOf: TestDatabases.packageRoot().appendingPathComponent("docs/type-mapping.md"), encoding: .utf8)
        let types: [LogicalType] = [.boolean, .int16, .int32, .int64, .decimal(precision: 1, scale: 1), .float32, .float64,
                                    .text(maxLength: 1, fixed: false), .text(maxLength: 1, fixed: true), .text,
                                    .binary(maxLength: 1), .binary(maxLength: nil), .date, .time(precision: 1),
                                    .timestamp(precision: 1, timeZone: false), .timestamp(precision: 1, timeZone: true), .uuid, .json,
                                    .enumeration(labels: ["a"])]
        for t in types {
            guard let declared = SQLiteTypeMap.declaredType(for: t) else { return XCTFail("\(t) has no SQLite type") }
            let name = declared.replacingOccurrences(of: "(1,1)", with: "(p,s)").replacingOccurrences(of: "(1)", with: t.description.contains("char") || t.description.contains("text") || t.description.contains("binary") ? "(n)" : "(p)")
            XCTAssertTrue(doc.contains("`\(name)"), "docs/type-mapping.md does not mention `\(name)` for \(t)")
        }
    }
}

final class UserKeyTests: XCTestCase {
    func testANamedKeyThatIsNotUniqueFailsBeforeAnythingIsWritten() throws {
        let folder = try TemporaryFolder()
        let src = try SQLiteConnection(endpoint: Endpoint(parsing: "sqlite:" + folder.path("k.db")), role: .target)
        try src.execute("CREATE TABLE events (day TEXT, n INT, note TEXT); INSERT INTO events VALUES ('mon', 1, 'a'), ('tue', 1, 'b'), ('mon', 2, 'c'), ('mon', 1, 'dup')")
        let dst = try SQLiteConnection(endpoint: Endpoint(parsing: "sqlite:" + folder.path("k2.db")), role: .target)
        let engine = CopyEngine(registry: DriverRegistry([SQLiteDriver()]))
        var o = CopyOptions()
        o.keys = [TableName("events"): ["day", "n"]]
        XCTAssertThrowsError(try engine.plan(source: src, target: dst, options: o)) { e in
            XCTAssertEqual("\(e)", "--key events=day,n is not unique: two rows have (day='mon', n=1); name columns that identify one row")
        }
        XCTAssertTrue(try dst.listTables().isEmpty)
        o.keys = [TableName("events"): ["day", "n", "note"]]
        let plan = try engine.plan(source: src, target: dst, options: o)
        XCTAssertEqual(plan.tables.first?.key, TableKey(columns: ["day", "n", "note"], origin: .user))
    }
}

/// The change feed of a SQLite file never splits a source transaction: one of 50,000 inserts
/// (more than a window of the log) and the updates after it come out as one transaction.
final class SQLiteChangeFeedTests: XCTestCase {
    func testATransactionLargerThanAWindowIsHandedOutWhole() throws {
        let folder = try TemporaryFolder()
        let path = folder.path("source.db")
        let db = try SQLiteConnection(endpoint: Endpoint(parsing: "sqlite:" + path), role: .target)
        defer { db.close() }
        try db.query("CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        guard let capture = try db.changeCapture() else { return XCTFail("a SQLite file has a change capture") }
        let start = try capture.start(name: "_ferry_r_feedtest", tables: [try db.describe(TableName("items"))])
        let reader = try SQLiteConnection(endpoint: Endpoint(parsing: "sqlite:" + path), role: .source)
        defer { reader.close() }
        _ = try start.beginSnapshot(on: reader)
        try reader.rollback()
        let feed = try start.follow()
        defer { feed.close() }
        let rows = SQLiteChangeFeed.window * 5 / 2
        try db.query("""
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(rows))
            INSERT INTO items SELECT i, 'v' || i FROM n
            """)
        try db.query("UPDATE items SET v = 'changed' WHERE id <= 10")
        var transactions: [Int] = []
        var open: Int?
        while let e = try feed.next(timeout: 1) {
            switch e {
            case .begin:
                XCTAssertNil(open, "a transaction began inside another")
                open = 0
            case .upserts(_, let batch):
                open = (open ?? 0) + batch.count
            case .commit:
                transactions.append(open ?? 0)
                open = nil
            default:
                XCTFail("unexpected \(e)")
            }
        }
        XCTAssertNil(open, "a transaction was left open")
        // Both source transactions were committed before the feed read: one read, one
        // transaction (the ten keys updated come again in the window of their update).
        XCTAssertEqual(transactions, [rows + 10], "the feed split the source's changes: \(transactions)")
    }
}
