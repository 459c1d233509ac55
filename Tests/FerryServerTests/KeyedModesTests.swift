import FerryCore
import FerryDriverTestKit
import FerryMySQL
import FerryPostgres
import FerrySQLite
import FerryXML
import Foundation
import XCTest

/// `--mode upsert` into every engine: a target that differs from the source by inserted,
/// updated and missing rows (a NULL ↔ '' change, a 1 µs timestamp change, a composite key),
/// more than two batches; the counts match the differences exactly, a second run changes
/// nothing, and a row the target refuses leaves it as it was.
final class KeyedModesTests: XCTestCase {
    let drivers: [any Driver] = [SQLiteDriver(), PostgresDriver(), MySQLDriver(), HTTPDriver()]

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

        let service = try await RunningService(database: "sqlite:" + folder.path("served.db"), drivers: drivers)
        defer { service.stop() }
        let targets = [("sqlite", "sqlite:" + folder.path("keyed-target.db")),
                       ("postgres", try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")),
                       ("mysql", try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL"))]
        for (label, url) in targets {
            let dst = try harness.registry.connect(url, role: .target)
            defer { dst.close() }
            for t in [Self.items.name, Self.pairs.name] { try dst.begin(); try dst.dropTable(t); try dst.commit() }
            // The first upsert creates the tables: every row inserted.
            let first = try harness.copy(src, dst, mode: .upsert, tables: ["keyed_items", "keyed_pairs"], batchSize: 1_000)
            XCTAssertTrue(first.ok, "\(label): \(first.tables.compactMap(\.error))")
            XCTAssertEqual(first.tables.compactMap(\.counts).reduce(MergeCounts(), +), MergeCounts(inserted: Int64(n + 300)), label)

            // Make the target differ: 10 rows missing, 20 labels changed, a NULL that is '' at
            // the source (and an '' that is NULL), a timestamp 1 µs off, 3 pair values; and 5
            // rows the source does not have (upsert leaves them).
            try delete((100..<110).map { [.int(Int64($0))] }, from: Self.items, on: dst)
            var changed = (200..<220).map { i -> [Value] in var r = Self.itemRow(i); r[1] = .text("changed \(i)"); return r }
            var nullRow = Self.itemRow(700)  // note NULL (700 % 7 == 0) at the source: '' on the target
            nullRow[2] = .text("")
            var emptyRow = Self.itemRow(701)
            emptyRow[2] = .null
            var microsecond = Self.itemRow(702)
            if case .timestamp(let t) = microsecond[3] { microsecond[3] = .timestamp(t + 1) }
            changed += [nullRow, emptyRow, microsecond]
            try write(changed, into: Self.items, on: dst, upsert: true)
            try write((n..<(n + 5)).map(Self.itemRow), into: Self.items, on: dst)
            try write([[.int(0), .text("x"), .int(-1)], [.int(1), .text("y"), .null], [.int(99), .text("Z"), .int(7)]], into: Self.pairs, on: dst, upsert: true)

            let second = try harness.copy(src, dst, mode: .upsert, tables: ["keyed_items", "keyed_pairs"], batchSize: 1_000)
            XCTAssertTrue(second.ok, "\(label): \(second.tables.compactMap(\.error))")
            let items = second.tables.first { $0.source == "keyed_items" }?.counts
            XCTAssertEqual(items, MergeCounts(inserted: 10, updated: 23, unchanged: Int64(n - 10 - 23)), label)
            XCTAssertEqual(second.tables.first { $0.source == "keyed_pairs" }?.counts, MergeCounts(inserted: 0, updated: 3, unchanged: 297), label)
            // The target now holds the source's rows, value for value (less its own 5 extra rows).
            try delete((n..<(n + 5)).map { [.int(Int64($0))] }, from: Self.items, on: dst)
            XCTAssertEqual(try harness.differences(src, dst, tables: [Self.items.name, Self.pairs.name]), [], label)

            // Nothing differs: nothing is written.
            let third = try harness.copy(src, dst, mode: .upsert, tables: ["keyed_items", "keyed_pairs"], batchSize: 1_000)
            XCTAssertEqual(third.tables.compactMap(\.counts).reduce(MergeCounts(), +), MergeCounts(unchanged: Int64(n + 300)), label)

            // A row the target refuses (longer than label's 20 characters) in the third batch:
            // the target is left exactly as it was, and the error names table, column or key.
            if label != "sqlite" {
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

        // Into the XML service: refused with one line before anything is written.
        let http = try harness.registry.connect(service.url(), role: .target)
        defer { http.close() }
        XCTAssertThrowsError(try harness.copy(src, http, mode: .upsert, tables: ["keyed_items"])) { error in
            XCTAssertTrue("\(error)".contains("not available yet"), "\(error)")
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
}
