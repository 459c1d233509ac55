import FerryCore
import FerryDriverTestKit
import FerryMySQL
import FerryPostgres
import FerrySQLite
import FerryHTTPClient
import FerryXML
import Foundation
import XCTest

/// Every key type walked page by page (more than two pages), on every engine and through the
/// XML service in front of it — the path on which a served SQLite table keyed by UUID once
/// copied 50,000 of 120,000 rows and reported success. Text keys also under collations that
/// are not byte order: PostgreSQL with an ICU collation, MariaDB with utf8mb4_general_ci.
final class KeyedWalkTests: XCTestCase {
    let drivers: [any Driver] = [SQLiteDriver(), PostgresDriver(), MySQLDriver(), HTTPDriver.standard]

    func testKeyedWalksOnEveryEngineAndThroughTheService() async throws {
        let folder = try TemporaryFolder()
        let pgURL = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let myURL = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        var drops: [() -> Void] = []
        defer { drops.forEach { $0() } }
        func base(_ url: String) -> String { String(url[..<(url.range(of: "/", options: .backwards)?.lowerBound ?? url.endIndex)]) }
        func unique(_ label: String) -> String { "ferry_walk_\(label)_" + UUID().uuidString.prefix(6).lowercased() }

        let pgName = unique("icu")
        do {
            let admin = try PostgresConnection(endpoint: Endpoint(parsing: pgURL), role: .target)
            defer { admin.close() }
            try admin.run("CREATE DATABASE \(pgName) TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'")
            drops.append {
                guard let a = try? PostgresConnection(endpoint: Endpoint(parsing: pgURL), role: .target) else { return }
                try? a.run("DROP DATABASE IF EXISTS \(pgName) WITH (FORCE)")
                a.close()
            }
        }
        var databases: [(label: String, url: String)] = [
            ("sqlite", "sqlite:" + folder.path("walk.db")),
            ("postgres (ICU en-US)", base(pgURL) + "/" + pgName),
        ]
        for collation in ["utf8mb4_general_ci", "utf8mb4_bin"] {
            let name = unique(collation.hasSuffix("_ci") ? "ci" : "bin")
            let admin = try MySQLConnection(endpoint: Endpoint(parsing: myURL), role: .target)
            defer { admin.close() }
            try admin.run("CREATE DATABASE `\(name)` CHARACTER SET utf8mb4 COLLATE \(collation)")
            drops.append {
                guard let a = try? MySQLConnection(endpoint: Endpoint(parsing: myURL), role: .target) else { return }
                try? a.run("DROP DATABASE IF EXISTS `\(name)`")
                a.close()
            }
            databases.append(("mariadb (\(collation))", base(myURL) + "/" + name))
        }

        let registry = DriverRegistry(drivers)
        let kit = DriverConformance { throw ConformanceFailure("not used: the walk tables are loaded into the databases above") }
        for (label, url) in databases {
            let db = try registry.connect(url, role: .target)
            defer { db.close() }
            let tables = try kit.loadWalkTables(db)
            for (table, keyLabel) in tables {
                XCTAssertNoThrow(try DriverConformance.checkKeyedWalk(db, table, label: "\(label), \(keyLabel) key"))
            }
            let service = try await RunningService(database: url, drivers: drivers)
            defer { service.stop() }
            let http = try XCTUnwrap(HTTPDriver.standard.connect(Endpoint(parsing: service.url()), role: .source) as? HTTPConnection)
            http.pageRows = DriverConformance.walkPage
            for (table, keyLabel) in tables {
                let what = "http(\(label)), \(keyLabel) key"
                XCTAssertNoThrow(try DriverConformance.checkKeyedWalk(http, table, label: what))
                do {
                    // A whole-table read through the service (paged by the client) is the engine's ordered read.
                    let key = try XCTUnwrap(try db.describe(table).preferredKey?.columns)
                    let direct = try DriverConformance.readAll(db, table, keyRange: KeyRange(key: key))
                    let served = try DriverConformance.readAll(http, table)
                    XCTAssertEqual(served.count, direct.count, what)
                    if let i = served.indices.first(where: { $0 < direct.count && served[$0] != direct[$0] }) {
                        XCTFail("\(what): row \(i) read through the service is \(served[i]), directly \(direct[i])")
                    }
                } catch {
                    XCTFail("\(what): \(error)")
                }
            }
        }
    }
}
