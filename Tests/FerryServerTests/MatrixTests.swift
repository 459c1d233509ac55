import FerryCore
import FerryDriverTestKit
import FerryMySQL
import FerryPostgres
import FerrySQLite
import FerryServer
import FerryHTTPClient
import FerryXML
import Foundation
import XCTest

/// Every ordered pair of {SQLite, PostgreSQL, MySQL, the XML service} — each as source and as
/// target — copying a table of every logical type, compared value by value after the trip.
/// Values no engine pair can hold everywhere (NaN, ±infinity, -0.0) are covered by each
/// driver's conformance test and refusal tests instead.
final class MatrixTests: XCTestCase {
    let drivers: [any Driver] = [SQLiteDriver(), PostgresDriver(), MySQLDriver(), HTTPDriver.standard]

    func testEveryPairCarriesEveryType() async throws {
        let pgURL = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let myURL = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        let folder = try TemporaryFolder()
        let harness = CopyHarness(drivers)
        let table = TableName("ferry_matrix")

        // The kit's samples, with infinities swapped for finite extremes.
        let samples = DriverConformance.typeSamples.map { s in
            (s.name, s.type, s.values.map { v -> Value in
                if case .double(let d) = v, d.isInfinite { return .double(d < 0 ? -1.7976931348623157e308 : 2.2250738585072014e-308) }
                return v
            })
        }
        let columns = [Column(name: "id", nativeType: "", logicalType: .int64, isNullable: false)]
            + samples.map { Column(name: $0.0, nativeType: "", logicalType: $0.1) }
        let schema = TableSchema(name: table, engine: Engine("matrix"), columns: columns, primaryKey: ["id"])
        var rows: [[Value]] = (0..<2).map { i in [.int(Int64(i))] + samples.map { $0.2[i] } }
        rows.append([.int(2)] + samples.map { _ in .null })

        let service = try await RunningService(database: "sqlite:" + folder.path("served.db"), drivers: drivers)
        defer { service.stop() }
        let engines: [(String, String)] = [
            ("sqlite", "sqlite:" + folder.path("matrix.db")), ("postgres", pgURL), ("mysql", myURL), ("http", service.url()),
        ]
        func reset(_ url: String) throws -> any Connection {
            let c = try harness.registry.connect(url, role: .target)
            try c.begin()
            try c.dropTable(table)
            try c.commit()
            return c
        }
        for (sourceName, sourceURL) in engines {
            let src = try reset(sourceURL)
            try src.begin()
            try src.createTable(schema, named: table)
            try src.commit()
            let w = try src.writer(into: try src.describe(table), columns: columns)
            try src.begin()
            try w.write(RowBatch(rows: rows, types: columns.map(\.logicalType)))
            try w.finish()
            try src.commit()
            // The source must hold exactly what was written.
            let written = try DriverConformance.readAll(src, table, columns: columns).sorted { $0[0].description < $1[0].description }
            XCTAssertEqual(written, rows, "\(sourceName) did not store the samples exactly")

            for (targetName, targetURL) in engines where targetURL != sourceURL {
                let dst = try reset(targetURL)
                // Copy into a differently named table when source and target share a database.
                let summary = try harness.copy(src, dst, tables: [table.name])
                XCTAssertTrue(summary.ok, "\(sourceName) -> \(targetName): \(summary.tables.compactMap(\.error))")
                XCTAssertEqual(try TableComparison.differences(src, dst, table: table), [], "\(sourceName) -> \(targetName)")
                try dst.begin(); try dst.dropTable(table); try dst.commit()
            }
            try src.begin(); try src.dropTable(table); try src.commit()
        }
    }
}
