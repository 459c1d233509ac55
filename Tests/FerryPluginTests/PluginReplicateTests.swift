import FerryCore
import FerryDriverTestKit
import Foundation
import XCTest

/// `ferry replicate` through a driver plugin (the kit's SQLite plugin): the plugin's change feed
/// as a source, its replica transactions as a target; values in SQLite's stored form (a BLOB in
/// a TEXT column, an integer in a REAL one) kept byte for byte between SQLite files.
final class PluginReplicateTests: XCTestCase {
    var folder: TemporaryFolder!
    override func setUpWithError() throws { folder = try TemporaryFolder() }

    func ferry(_ args: [String]) throws -> PluginFixtures.Result {
        try PluginFixtures.run(args, environment: ["FERRY_DRIVER_PATH": PluginFixtures.products.path])
    }

    func sqlite3(_ path: String, _ sql: String) throws {
        _ = try ExternalTool.run(["sqlite3", "-bail", path], input: ".timeout 10000\nPRAGMA foreign_keys = ON;\n" + sql + "\n")
    }

    /// Parents and children in one transaction, a key changed, deletes, INSERT OR REPLACE
    /// removing a row through a UNIQUE index, values of another storage class than declared.
    func workload(_ path: String, round: Int) throws {
        let base = 100_000 * round
        try sqlite3(path, """
            BEGIN;
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 200)
              INSERT INTO customer (id, email, name) SELECT \(base) + n, 'r\(round)-' || n || '@x', 'round \(round)' FROM g;
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 2000)
              INSERT INTO orders (customer_id, total, note) SELECT \(base) + 1 + n % 200, n / 4.0, 'o' || n FROM g;
            COMMIT;
            UPDATE customer SET id = \(base) + 999 WHERE id = \(base) + 5 AND NOT EXISTS (SELECT 1 FROM orders WHERE customer_id = \(base) + 5);
            UPDATE orders SET total = total + 1 WHERE id % 11 = \(round);
            DELETE FROM orders WHERE id % 97 = \(round);
            INSERT INTO orders (customer_id, total, note) VALUES (\(base) + 1, 7, X'00FF\(String(format: "%02X", round))');
            INSERT OR REPLACE INTO customer (id, email, name) VALUES (\(base) + 601, 'spare\(round)@x', 'replaces a spare by its email');
            """)
    }

    func testReplicateFromAndIntoAPlugin() throws {
        let source = folder.path("source.db")
        try sqlite3(source, """
            CREATE TABLE customer (id INTEGER PRIMARY KEY, email VARCHAR(100) NOT NULL UNIQUE, name TEXT);
            CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, customer_id INTEGER NOT NULL REFERENCES customer (id), total REAL, note TEXT);
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 1000)
              INSERT INTO customer (id, email, name) SELECT n, 'c' || n || '@x', 'c' || n FROM g;
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 20000)
              INSERT INTO orders (customer_id, total, note) SELECT 1 + n % 1000, CASE WHEN n % 3 = 0 THEN n ELSE n / 4.0 END, 'n' || n FROM g;
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 10)
              INSERT INTO customer (id, email, name) SELECT 2000 + n, 'spare' || n || '@x', 'no orders' FROM g;
            INSERT INTO orders (customer_id, total, note) VALUES (1, 5, X'00FF');
            """)
        let viaPlugin = ("sqlitekit:" + source, "sqlite:" + folder.path("from-plugin.db"))
        let intoPlugin = ("sqlite:" + source, "sqlitekit:" + folder.path("into-plugin.db"))
        for (s, t) in [viaPlugin, intoPlugin] {
            let first = try ferry(["replicate", s, t, "--until-caught-up"])
            XCTAssertEqual(first.code, 0, "\(s) -> \(t): \(first.err)")
            XCTAssertTrue(first.err.contains("copied 21011 rows"), first.err)
        }
        for round in 1...3 {
            try workload(source, round: round)
            for (s, t) in [viaPlugin, intoPlugin] {
                let again = try ferry(["replicate", s, t, "--until-caught-up"])
                XCTAssertEqual(again.code, 0, "\(s) -> \(t): \(again.err)")
                XCTAssertTrue(again.err.contains("resuming from"), again.err)
                // Stored values compared between the SQLite files themselves.
                let verify = try ferry(["verify", "sqlite:" + source, t.replacingOccurrences(of: "sqlitekit:", with: "sqlite:")])
                XCTAssertEqual(verify.code, 0, "round \(round), \(s) -> \(t): \(verify.out + verify.err)")
            }
        }
        let status = try ferry(["replicate", viaPlugin.0, viaPlugin.1, "--status"])
        XCTAssertEqual(status.code, 0, status.err)
        XCTAssertTrue(status.out.contains("following"), status.out)
        for (s, t) in [viaPlugin, intoPlugin] {
            let dropped = try ferry(["replicate", s, t, "--drop"])
            XCTAssertEqual(dropped.code, 0, dropped.err)
            XCTAssertTrue(dropped.out.contains("the record of"), dropped.out)
        }
        let left = try ExternalTool.run(["sqlite3", source], input: "SELECT count(*) FROM sqlite_schema WHERE name LIKE '%ferry%';\n")
        XCTAssertEqual(left.trimmingCharacters(in: .whitespacesAndNewlines), "0")
        XCTAssertEqual(PluginFixtures.processes(under: [PluginFixtures.products.path]), [])
    }
}
