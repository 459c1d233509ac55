import FerryCore
import FerryDriverTestKit
import FerryMySQL
import FerryPostgres
import FerrySQLite
import FerryHTTPClient
import FerryXML
import Foundation
import XCTest

/// `--mode upsert` into every engine: a target that differs from the source by inserted,
/// updated and missing rows (a NULL ↔ '' change, a 1 µs timestamp change, a composite key),
/// more than two batches; the counts match the differences exactly, a second run changes
/// nothing, and a row the target refuses leaves it as it was.
final class KeyedModesTests: XCTestCase {
    let drivers: [any Driver] = [SQLiteDriver(), PostgresDriver(), MySQLDriver(), HTTPDriver.standard]

    static let items = TableSchema(
        name: TableName("keyed_items"), engine: .sqlite,
        columns: [
            Column(name: "id", nativeType: "", logicalType: .int64, isNullable: false),
            Column(name: "label", nativeType: "", logicalType: .text(maxLength: 20, fixed: false), isNullable: false),
            Column(name: "note", nativeType: "", logicalType: .text),
            Column(name: "at", nativeType: "", logicalType: .timestamp(precision: 6, timeZone: false)),
        ], primaryKey: ["id"])
    static let pairs = TableSchema(
        name: TableName("keyed_pairs"), engine: .sqlite,
        columns: [
            Column(name: "a", nativeType: "", logicalType: .int32, isNullable: false),
            Column(name: "b", nativeType: "", logicalType: .text(maxLength: 10, fixed: false), isNullable: false),
            Column(name: "v", nativeType: "", logicalType: .int64),
        ], primaryKey: ["a", "b"])

    static func itemRow(_ i: Int) -> [Value] {
        [.int(Int64(i)), .text("label \(i)"), i % 7 == 0 ? .null : .text("note \(i)"), .timestamp(1_700_000_000_000_000 + Int64(i) * 1_000_123)]
    }

    func write(_ rows: [[Value]], into schema: TableSchema, on c: any Connection, upsert: Bool = false) throws {
        let types = schema.columns.map(\.logicalType)
        try c.begin()
        if upsert {
            _ = try c.upsertRows(into: try c.describe(schema.name), columns: schema.columns, key: schema.primaryKey, rows: RowBatch(rows: rows, types: types))
        } else {
            let w = try c.writer(into: try c.describe(schema.name), columns: schema.columns)
            try w.write(RowBatch(rows: rows, types: types))
            try w.finish()
        }
        try c.commit()
    }

    func delete(_ keys: [[Value]], from schema: TableSchema, on c: any Connection) throws {
        let keyColumns = schema.primaryKey.compactMap { schema.column(named: $0) }
        try c.begin()
        _ = try c.deleteRows(from: try c.describe(schema.name), key: keyColumns, keys: RowBatch(rows: keys, types: keyColumns.map(\.logicalType)))
        try c.commit()
    }

    func testUpsertCountsExactlyOnEveryEngine() async throws {
        let harness = CopyHarness(drivers)
        let folder = try TemporaryFolder()
        let sourceURL = "sqlite:" + folder.path("keyed-source.db")
        let src = try harness.registry.connect(sourceURL, role: .target)
        defer { src.close() }
        for schema in [Self.items, Self.pairs] {
            try src.begin(); try src.createTable(schema, named: schema.name); try src.commit()
        }
        let n = 2_500
        try write((0..<n).map(Self.itemRow), into: Self.items, on: src)
        let pairRows: [[Value]] = (0..<300).map { i in [.int(Int64(i / 3)), .text(["x", "y", "Z"][i % 3]), .int(Int64(i))] }
        try write(pairRows, into: Self.pairs, on: src)

        let postgres = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let service = try await RunningService(database: "sqlite:" + folder.path("served.db"), drivers: drivers)
        defer { service.stop() }
        // Through the service the rows are staged and applied at commit in one transaction.
        let pgService = try await RunningService(database: postgres, drivers: drivers)
        defer { pgService.stop() }
        let targets = [("sqlite", "sqlite:" + folder.path("keyed-target.db")),
                       ("postgres", postgres),
                       ("mysql", try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")),
                       ("http(sqlite)", service.url()),
                       ("http(postgres)", pgService.url())]
        for (label, url) in targets {
            let dst = try harness.registry.connect(url, role: .target)
            defer { dst.close() }
            for t in [Self.items.name, Self.pairs.name] { try dst.begin(); try dst.dropTable(t); try dst.commit() }
            // The first upsert creates the tables: every row inserted.
            let first = try harness.copy(src, dst, mode: .upsert, tables: ["keyed_items", "keyed_pairs"], batchSize: 1_000)
            XCTAssertTrue(first.ok, "\(label): \(first.tables.compactMap(\.error))")
            XCTAssertEqual(first.tables.compactMap(\.counts).reduce(MergeCounts(), +), MergeCounts(inserted: Int64(n + 300)), label)

            // Make the target differ (see `diverge`); upsert leaves the rows the source lacks.
            try diverge(dst, rows: n)

            let second = try harness.copy(src, dst, mode: .upsert, tables: ["keyed_items", "keyed_pairs"], batchSize: 1_000)
            XCTAssertTrue(second.ok, "\(label): \(second.tables.compactMap(\.error))")
            let items = second.tables.first { $0.source == "keyed_items" }?.counts
            XCTAssertEqual(items, MergeCounts(inserted: 10, updated: 23, unchanged: Int64(n - 10 - 23)), label)
            XCTAssertEqual(second.tables.first { $0.source == "keyed_pairs" }?.counts, MergeCounts(inserted: 0, updated: 3, unchanged: 297), label)
            // The target now holds the source's rows, value for value (less its own 5 extra rows).
            try delete((n..<(n + 5)).map { [.int(Int64($0))] }, from: Self.items, on: dst)
            try delete([[.int(500), .text("new")], [.int(501), .text("new")]], from: Self.pairs, on: dst)
            XCTAssertEqual(try harness.differences(src, dst, tables: [Self.items.name, Self.pairs.name]), [], label)

            // Nothing differs: nothing is written.
            let third = try harness.copy(src, dst, mode: .upsert, tables: ["keyed_items", "keyed_pairs"], batchSize: 1_000)
            XCTAssertEqual(third.tables.compactMap(\.counts).reduce(MergeCounts(), +), MergeCounts(unchanged: Int64(n + 300)), label)

            // A row the target refuses (longer than label's 20 characters) in the third batch:
            // the target is left exactly as it was, and the error names table, column or key.
            if !label.contains("sqlite") {
                let before = try DriverConformance.readAll(dst, Self.items.name)
                var long = Self.itemRow(2_100)
                long[1] = .text(String(repeating: "too long ", count: 5))
                try write([long], into: Self.items, on: src, upsert: true)
                let refused = try harness.copy(src, dst, mode: .upsert, tables: ["keyed_items"], batchSize: 1_000)
                XCTAssertFalse(refused.ok, label)
                let message = refused.tables.first?.error ?? ""
                XCTAssertTrue(message.contains("keyed_items") && message.contains("2100"), "\(label): \(message)")
                XCTAssertEqual(try DriverConformance.readAll(dst, Self.items.name), before, "\(label): the target changed")
                try write([Self.itemRow(2_100)], into: Self.items, on: src, upsert: true)
            }
            for t in [Self.items.name, Self.pairs.name] { try dst.begin(); try dst.dropTable(t); try dst.commit() }
        }

        // A table without a key is refused, named.
        try src.begin()
        try src.createTable(TableSchema(name: TableName("keyless"), engine: .sqlite, columns: [Column(name: "x", nativeType: "", logicalType: .int64)]),
                            named: TableName("keyless"))
        try src.commit()
        let other = try harness.registry.connect("sqlite:" + folder.path("other.db"), role: .target)
        defer { other.close() }
        XCTAssertThrowsError(try harness.copy(src, other, mode: .upsert, tables: ["keyless"])) { error in
            XCTAssertTrue("\(error)".contains("table keyless has no primary key"), "\(error)")
        }
    }

    /// Makes `dst` (a copy of the source's two tables) differ: 10 rows missing, 23 changed
    /// (labels, NULL ↔ '', 1 µs), 5 rows the source lacks; 3 pair values changed, 2 extra pairs.
    func diverge(_ dst: any Connection, rows n: Int) throws {
        try delete((100..<110).map { [.int(Int64($0))] }, from: Self.items, on: dst)
        var changed = (200..<220).map { i -> [Value] in var r = Self.itemRow(i); r[1] = .text("changed \(i)"); return r }
        var nullRow = Self.itemRow(700)
        nullRow[2] = .text("")
        var emptyRow = Self.itemRow(701)
        emptyRow[2] = .null
        var microsecond = Self.itemRow(702)
        if case .timestamp(let t) = microsecond[3] { microsecond[3] = .timestamp(t + 1) }
        changed += [nullRow, emptyRow, microsecond]
        try write(changed, into: Self.items, on: dst, upsert: true)
        try write((n..<(n + 5)).map(Self.itemRow), into: Self.items, on: dst)
        try write([[.int(0), .text("x"), .int(-1)], [.int(1), .text("y"), .null], [.int(99), .text("Z"), .int(7)],
                   [.int(500), .text("new"), .int(1)], [.int(501), .text("new"), .null]], into: Self.pairs, on: dst, upsert: true)
    }

    /// `--mode mirror` from and into every engine: the counts match the differences exactly
    /// (deletes included), only the differing buckets are read, a second run reads no row
    /// and writes nothing, and the guards (--max-delete, empty source, --where) hold.
    func testMirrorCountsExactlyBetweenEveryEngine() async throws {
        let harness = CopyHarness(drivers)
        let folder = try TemporaryFolder()
        let postgres = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let mysql = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        let n = 2_500
        let pairRows: [[Value]] = (0..<300).map { i in [.int(Int64(i / 3)), .text(["x", "y", "Z"][i % 3]), .int(Int64(i))] }
        let served = "sqlite:" + folder.path("m-served.db")
        let service = try await RunningService(database: served, drivers: drivers)
        defer { service.stop() }
        let mysqlService = try await RunningService(database: mysql, drivers: drivers)
        defer { mysqlService.stop() }
        // (label, where the rows are written, where the copy reads them, target)
        let routes = [("sqlite", "sqlite:" + folder.path("m-source.db"), nil, "sqlite", "sqlite:" + folder.path("m-target.db")),
                      ("sqlite", "sqlite:" + folder.path("m-source.db"), nil, "postgres", postgres),
                      ("sqlite", "sqlite:" + folder.path("m-source.db"), nil, "mysql", mysql),
                      ("postgres", postgres, nil, "sqlite", "sqlite:" + folder.path("m-target2.db")),
                      ("mysql", mysql, nil, "postgres", postgres),
                      ("http(sqlite)", served, service.url(), "postgres", postgres),
                      ("sqlite", "sqlite:" + folder.path("m-source.db"), nil, "http(sqlite)", service.url()),
                      ("postgres", postgres, nil, "http(mysql)", mysqlService.url())]
        for (from, sourceURL, readURL, to, targetURL) in routes {
            let label = "\(from) -> \(to)"
            let src = try harness.registry.connect(sourceURL, role: .target)
            let reads = try readURL.map { try harness.registry.connect($0, role: .source) }
            let dst = try harness.registry.connect(targetURL, role: .target)
            defer { src.close(); dst.close(); reads?.close() }
            for t in [Self.items.name, Self.pairs.name] {
                try src.begin(); try src.dropTable(t); try src.createTable(t == Self.items.name ? Self.items : Self.pairs, named: t); try src.commit()
            }
            try write((0..<n).map(Self.itemRow), into: Self.items, on: src)
            try write(pairRows, into: Self.pairs, on: src)
            for t in [Self.items.name, Self.pairs.name] { try dst.begin(); try dst.dropTable(t); try dst.commit() }
            let tables = ["keyed_items", "keyed_pairs"]
            // Into a missing table, a mirror is a load.
            let first = try harness.copy(reads ?? src, dst, mode: .mirror, tables: tables, batchSize: 1_000)
            XCTAssertTrue(first.ok, "\(label): \(first.tables.compactMap(\.error))")
            XCTAssertEqual(first.tables.compactMap(\.counts).reduce(MergeCounts(), +), MergeCounts(inserted: Int64(n + 300)), label)

            try diverge(dst, rows: n)
            // More deletes than --max-delete allows: the table fails and stays as it was.
            let before = try DriverConformance.readAll(dst, Self.items.name)
            let limited = try harness.copy(reads ?? src, dst, mode: .mirror, tables: ["keyed_items"], batchSize: 1_000) { $0.maxDelete = .rows(4) }
            XCTAssertFalse(limited.ok, label)
            XCTAssertTrue(limited.tables.first?.error?.contains("would delete 5 of the 2495 rows") == true, "\(label): \(limited.tables.compactMap(\.error))")
            XCTAssertEqual(try DriverConformance.readAll(dst, Self.items.name), before, "\(label): a refused mirror changed the target")

            let second = try harness.copy(reads ?? src, dst, mode: .mirror, tables: tables, batchSize: 1_000) { $0.maxDelete = .percent(1) }
            XCTAssertTrue(second.ok, "\(label): \(second.tables.compactMap(\.error))")
            let items = second.tables.first { $0.source == "keyed_items" }
            XCTAssertEqual(items?.counts, MergeCounts(inserted: 10, updated: 23, unchanged: Int64(n - 10 - 23), deleted: 5), label)
            XCTAssertEqual(second.tables.first { $0.source == "keyed_pairs" }?.counts, MergeCounts(inserted: 0, updated: 3, unchanged: 297, deleted: 2), label)
            let stats = try XCTUnwrap(items?.mirror, label)
            // From MariaDB on this machine (its rows read whole to hash them) each row is compared
            // as it is read, and only those that differ are written (CopyEngine.mirrorByStreaming).
            XCTAssertEqual(stats.levels == 0, from == "mysql", "\(label): \(stats)")
            if from == "mysql" {
                XCTAssertEqual(items?.rows, 33, label)
                XCTAssertEqual([stats.sourceRows, stats.targetRows, stats.targetKeysRead], [Int64(n), Int64(n - 5), Int64(n - 5)], "\(label): \(stats)")
                XCTAssertGreaterThanOrEqual(stats.sourceRowsRead, Int64(n), label)
                XCTAssertLessThanOrEqual(stats.sourceRowsRead, Int64(n + 33), label)
            }
            // Else only the differing buckets were read: a small part of each side.
            XCTAssertGreaterThanOrEqual(stats.sourceRowsRead, 33, label)
            if !label.contains("http") && label != "sqlite -> sqlite" && from != "mysql" {
                // Both sides list their rows' hashes in the differing buckets (an integer key;
                // SQLite to SQLite the key travels in its stored form, hashed by MD5): only the
                // 10 new and 23 changed rows are read, by key.
                XCTAssertEqual(stats.sourceRowsRead, 33, "\(label): \(stats)")
            }
            if from != "mysql" {
                XCTAssertLessThan(stats.sourceRowsRead, Int64(n / 4), "\(label): \(stats)")
                XCTAssertLessThan(stats.targetKeysRead, Int64(n / 4), "\(label): \(stats)")
            }
            XCTAssertEqual(try harness.differences(src, dst, tables: [Self.items.name, Self.pairs.name]), [], label)

            // Equal: one level of digests, no row read, nothing written.
            let third = try harness.copy(reads ?? src, dst, mode: .mirror, tables: tables, batchSize: 1_000)
            XCTAssertEqual(third.tables.compactMap(\.counts).reduce(MergeCounts(), +), MergeCounts(unchanged: Int64(n + 300)), label)
            XCTAssertEqual(third.tables.map(\.rows), [0, 0], label)
            if from != "mysql" {
                XCTAssertEqual(third.tables.compactMap(\.mirror).map(\.sourceRowsRead), [0, 0], label)
                XCTAssertEqual(third.tables.compactMap(\.mirror).map(\.levels), [1, 1], label)
            }

            // With --where, the condition runs on both sides and deletes stay inside it.
            try write((n..<(n + 3)).map(Self.itemRow), into: Self.items, on: dst)
            try delete([[.int(5)], [.int(6)]], from: Self.items, on: src)
            if reads != nil || to.hasPrefix("http") {
                // The service takes no SQL: --where is refused with one line.
                do {
                    let refused = try harness.copy(reads ?? src, dst, mode: .mirror, tables: ["keyed_items"]) { $0.filters = ["id < 1000"] }
                    XCTAssertFalse(refused.ok, label)
                    XCTAssertTrue(refused.tables.first?.error?.contains("does not take") == true, "\(label): \(refused.tables.compactMap(\.error))")
                } catch {
                    XCTAssertTrue("\(error)".contains("does not take"), "\(label): \(error)")
                }
                try delete((n..<(n + 3)).map { [.int(Int64($0))] }, from: Self.items, on: dst)
                try write([Self.itemRow(5), Self.itemRow(6)], into: Self.items, on: src)
            } else {
                let filtered = try harness.copy(src, dst, mode: .mirror, tables: ["keyed_items"], batchSize: 1_000) { $0.filters = ["id < 1000"] }
                XCTAssertTrue(filtered.ok, "\(label): \(filtered.tables.compactMap(\.error))")
                XCTAssertEqual(filtered.tables.first?.counts, MergeCounts(unchanged: 998, deleted: 2), label)
                XCTAssertEqual(try dst.countRows(Self.items.name), Int64(n - 2 + 3), "\(label): rows outside --where were touched")
            }

            // An empty source table empties nothing unless asked.
            try src.begin(); try src.dropTable(Self.pairs.name); try src.createTable(Self.pairs, named: Self.pairs.name); try src.commit()
            let empty = try harness.copy(reads ?? src, dst, mode: .mirror, tables: ["keyed_pairs"], batchSize: 1_000)
            XCTAssertFalse(empty.ok, label)
            XCTAssertTrue(empty.tables.first?.error?.contains("--allow-empty-source") == true, "\(label): \(empty.tables.compactMap(\.error))")
            XCTAssertEqual(try dst.countRows(Self.pairs.name), 300, label)
            let emptied = try harness.copy(reads ?? src, dst, mode: .mirror, tables: ["keyed_pairs"], batchSize: 1_000) { $0.allowEmptySource = true }
            XCTAssertEqual(emptied.tables.first?.counts, MergeCounts(deleted: 300), "\(label): \(emptied.tables.compactMap(\.error))")
            for t in [Self.items.name, Self.pairs.name] { try dst.begin(); try dst.dropTable(t); try dst.commit() }
        }
    }

    /// A target whose key compares text without regard to case (MySQL `_ci`, SQLite `NOCASE`)
    /// would merge the source's 'K1500' and 'k1500' into one row: upsert and mirror fail naming
    /// both keys, and the target keeps what it had — directly and through the service.
    func testKeysACaseInsensitiveTargetWouldMergeAreRefusedNamingBoth() async throws {
        let harness = CopyHarness(drivers)
        let folder = try TemporaryFolder()
        let mysql = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        let src = try harness.registry.connect("sqlite:" + folder.path("ci-source.db"), role: .target)
        defer { src.close() }
        let codes = TableSchema(
            name: TableName("ci_codes"), engine: .sqlite,
            columns: [Column(name: "code", nativeType: "", logicalType: .text(maxLength: 20, fixed: false), isNullable: false),
                      Column(name: "v", nativeType: "", logicalType: .int64)],
            primaryKey: ["code"])
        try src.begin(); try src.createTable(codes, named: codes.name); try src.commit()
        // 'K1500' reads in the first batch (upper case sorts first), 'k1500' in the second.
        try write((0..<2_500).map { [.text("k\($0)"), .int(Int64($0))] } + [[.text("K1500"), .int(-1)]], into: codes, on: src)

        let mysqlService = try await RunningService(database: mysql, drivers: drivers)
        defer { mysqlService.stop() }
        let targets: [(String, String, String)] = [
            ("mysql", mysql, "CREATE TABLE ci_codes (code varchar(20) COLLATE utf8mb4_general_ci NOT NULL PRIMARY KEY, v bigint) DEFAULT CHARSET=utf8mb4"),
            ("sqlite", "sqlite:" + folder.path("ci-target.db"), "CREATE TABLE ci_codes (code text COLLATE NOCASE NOT NULL PRIMARY KEY, v integer)"),
            ("http(mysql)", mysqlService.url(), ""),
        ]
        for (label, url, ddl) in targets {
            if !ddl.isEmpty {
                let direct = try harness.registry.connect(url, role: .target)
                try direct.begin(); try direct.dropTable(codes.name); try direct.commit()
                if let m = direct as? MySQLConnection { try m.run(ddl) }
                if let l = direct as? SQLiteConnection { try l.run(ddl) }
                try write([[.text("other"), .int(7)]], into: codes, on: direct)
                direct.close()
            }
            let dst = try harness.registry.connect(url, role: .target)
            defer { dst.close() }
            for mode in [WriteMode.upsert, .mirror] {
                let result = try harness.copy(src, dst, mode: mode, tables: ["ci_codes"], batchSize: 1_000)
                XCTAssertFalse(result.ok, "\(label) \(mode)")
                let message = result.tables.first?.error ?? ""
                XCTAssertTrue(message.contains("'k1500'") && message.contains("'K1500'") && message.contains("nothing was changed"),
                              "\(label) \(mode): \(message)")
                XCTAssertEqual(try DriverConformance.readAll(dst, codes.name).count, 1, "\(label) \(mode): the target changed")
            }
        }
    }
}
