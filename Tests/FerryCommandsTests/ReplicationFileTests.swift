import FerryCore
import FerryDriverTestKit
import Foundation
import XCTest

/// `ferry run FILE.yaml` on real servers: the issue's example as written, an environment
/// password full of URL-special characters, casts, filters, columns, an incremental table and
/// a replicate job; bad files fail in one line naming file, line and column.
final class ReplicationFileTests: XCTestCase {
    var folder: TemporaryFolder!
    var fixture: Fixture { Fixture(folder: folder) }
    override func setUpWithError() throws { folder = try TemporaryFolder() }

    func ferry(_ args: [String], environment: [String: String] = [:]) throws -> CLITests.Result {
        let p = Process()
        p.executableURL = CLITests.binaryURL
        p.arguments = args
        p.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        let o = out.fileHandleForReading.readDataToEndOfFile(), e = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return CLITests.Result(code: p.terminationStatus, out: String(decoding: o, as: UTF8.self), err: String(decoding: e, as: UTF8.self))
    }

    func write(_ name: String, _ text: String) throws -> String {
        let path = folder.path(name)
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    func testAFileRunsAsWritten() throws {
        let tag = UUID().uuidString.prefix(8).lowercased()
        let pg = try fixture.postgres(tag)
        // A role whose password needs every kind of escaping in a URL.
        let role = "ferry_run_\(tag)", password = "p@ss:w/rd%?&#= é'"
        _ = try pg.query("""
            CREATE ROLE \(role) LOGIN PASSWORD 'p@ss:w/rd%?&#= é''';
            GRANT ALL ON SCHEMA public TO \(role);
            CREATE TABLE orders (order_id bigint PRIMARY KEY, customer int NOT NULL, paid smallint NOT NULL, secret text, updated_at timestamp NOT NULL);
            INSERT INTO orders SELECT g, g % 50, g % 2, 'hidden', timestamp '2026-01-01' + g * interval '1 minute' FROM generate_series(1, 5000) g;
            CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, country char(2) NOT NULL);
            INSERT INTO customers SELECT g, 'customer ' || g, CASE WHEN g % 3 = 0 THEN 'DE' ELSE 'FR' END FROM generate_series(1, 50) g;
            GRANT SELECT ON orders, customers TO \(role)
            """)
        guard let e = try? Endpoint(parsing: pg.url), let host = e.host, let port = e.port else { return XCTFail("no host in \(pg.url)") }
        let target = folder.path("shop.db")
        let file = try write("shop.yaml", """
            # The issue's example, and more.
            source: postgres://\(role):${APP_PW}@\(host):\(port)/\(e.path)
            target: sqlite:\(target)
            defaults:
              mode: upsert
            tables:
              - name: orders
                key: [order_id]
                incremental: updated_at
                columns: [order_id, customer, paid, updated_at]
                casts: ["column orders.paid to boolean"]
              - name: customers
                where: "country = 'DE'"

            """)
        var r = try ferry(["run", file, "--dry-run"], environment: ["APP_PW": password])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertTrue(r.out.contains("orders") && r.out.contains("rows where: country = 'DE'"), r.out)
        XCTAssertFalse(r.out.contains("secret"), "a column left out by columns: is in the plan: \(r.out)")
        for text in [r.out, r.err] { XCTAssertFalse(text.contains("p@ss") || text.contains("w/rd"), "the password in the output: \(text)") }
        XCTAssertFalse(FileManager.default.fileExists(atPath: target) && (try? String(contentsOfFile: target, encoding: .isoLatin1))?.contains("orders") == true)

        r = try ferry(["run", file], environment: ["APP_PW": password])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertFalse(r.err.contains("p@ss"), r.err)
        let lite = fixture.sqlite(target)
        XCTAssertEqual(try lite.query("SELECT count(*), sum(paid), count(*) FILTER (WHERE typeof(paid) = 'integer') FROM orders").trimmingCharacters(in: .whitespacesAndNewlines), "5000\t2500\t5000")
        XCTAssertEqual(try lite.query("SELECT group_concat(name) FROM pragma_table_info('orders')").trimmingCharacters(in: .whitespacesAndNewlines), "order_id,customer,paid,updated_at")
        XCTAssertEqual(try lite.query("SELECT count(*), min(country), max(country) FROM customers").trimmingCharacters(in: .whitespacesAndNewlines), "16\tDE\tDE")
        _ = try pg.query("UPDATE orders SET customer = 99, updated_at = timestamp '2027-01-01' WHERE order_id <= 10")
        r = try ferry(["run", file, "--json", "--quiet"], environment: ["APP_PW": password])
        XCTAssertEqual(r.code, 0, r.err)
        // The 10 changed rows, and the 5 of the last run's rows in the default lookback of 5 minutes (a row a minute).
        XCTAssertTrue(r.out.contains("\"rowsRead\" : 15"), "the incremental table read only its changed rows: \(r.out)")
        XCTAssertEqual(try lite.query("SELECT count(*) FROM orders WHERE customer = 99").trimmingCharacters(in: .whitespacesAndNewlines), "10")

        // A replicate job after the copies: the source's changes since, until caught up.
        let replica = folder.path("replica.db")
        let job = try write("follow.yaml", """
            source: \(pg.url.replacingOccurrences(of: "ferry_lc_", with: "ferry_lc_"))
            target: sqlite:\(replica)
            replicate:
              tables: [customers]
              until-caught-up: true

            """)
        r = try ferry(["run", job])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertEqual(try fixture.sqlite(replica).query("SELECT count(*) FROM customers").trimmingCharacters(in: .whitespacesAndNewlines), "50")
        _ = try ferry(["replicate", pg.url, "sqlite:" + replica, "--drop"])
    }

    /// Tables with `shards: N` run as the N units of a plan (prepared, run in turn, finished);
    /// `--write-plans DIR` writes that plan for a scheduler instead, and its units run from it.
    func testShardedTablesRunAsUnits() throws {
        let tag = UUID().uuidString.prefix(8).lowercased()
        let pg = try fixture.postgres(tag)
        _ = try pg.query("""
            CREATE TABLE orders (order_id bigint PRIMARY KEY, customer int NOT NULL, note text);
            INSERT INTO orders SELECT g * 7, g % 50, CASE WHEN g % 5 = 0 THEN NULL ELSE 'note ' || g END FROM generate_series(1, 12000) g;
            CREATE INDEX orders_customer ON orders (customer);
            CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL);
            INSERT INTO customers SELECT g, 'customer ' || g FROM generate_series(1, 50) g
            """)
        let maria = try fixture.mariadb(tag)
        let file = try write("big.yaml", """
            source: \(pg.url)
            target: \(maria.url)
            tables:
              - name: orders
                shards: 3
              - customers

            """)
        var r = try ferry(["run", file, "--dry-run"])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertTrue(r.out.contains("3 units, 12000 rows") && r.out.contains("unit 2: 4000 rows"), r.out)
        XCTAssertEqual(try maria.tables("orders"), [], "a dry run created a table")
        r = try ferry(["run", file])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertTrue(r.err.contains("3 units of orders") && r.err.contains("unit 2/3 of plan") && r.err.contains("finished plan"), r.err)
        XCTAssertFalse(r.err.contains(pg.url) || r.err.contains(maria.url), "a password in the output: \(r.err)")
        var v = try ferry(["verify", pg.url, maria.url])
        XCTAssertEqual(v.code, 0, "\(v.out) \(v.err)")
        XCTAssertEqual(try maria.query("SELECT count(*) FROM information_schema.statistics WHERE table_schema = DATABASE() AND index_name = 'orders_customer'")
            .trimmingCharacters(in: .whitespacesAndNewlines), "1", "finish made the index")

        // For a scheduler: the plan written, and its units run from it into another target.
        let other = fixture.sqlite(folder.path("other.db"))
        let second = try write("big2.yaml", """
            source: \(pg.url)
            target: \(other.url)
            tables:
              - name: orders
                shards: 2
                sample-above: 0

            """)
        let plans = folder.path("plans")
        r = try ferry(["run", second, "--write-plans", plans])
        XCTAssertEqual(r.code, 0, r.err)
        let plan = plans + "/big2-step1.plan.json"
        XCTAssertTrue(r.out.contains("ferry copy --plan \(plan) --shard I/2"), r.out)
        XCTAssertEqual(try other.tables("orders"), [], "--write-plans ran a unit")
        let text = try String(contentsOfFile: plan, encoding: .utf8)
        XCTAssertFalse(text.contains(try XCTUnwrap(Endpoint(parsing: pg.url).password)), "a password in the plan")
        for step in [["--prepare"], ["--shard", "1/2"], ["--shard", "0/2"], ["--finish"]] {
            let u = try ferry(["copy", pg.url, other.url, "--plan", plan] + step)
            XCTAssertEqual(u.code, 0, "\(step): \(u.err)")
        }
        v = try ferry(["verify", pg.url, other.url, "--tables", "orders"])
        XCTAssertEqual(v.code, 0, "\(v.out) \(v.err)")
    }

    func testBadFilesNameTheLine() throws {
        let cases: [(String, String, String)] = [
            ("source: sqlite:a.db\ntarget: sqlite:b.db\ntables:\n  - name: t\n    mode: upsrt\n", "5:11", "upsrt"),
            ("source: sqlite:a.db\ntarget: sqlite:b.db\ntables:\n  - name: t\n    increment: x\n", "5:5", "unknown key 'increment' in tables[0]"),
            ("source: postgres://u:${FERRY_TEST_UNSET_PW}@h/db\ntarget: sqlite:b.db\ntables: [t]\n", "1:9", "${FERRY_TEST_UNSET_PW} is not set"),
            ("source: sqlite:a.db\ntarget: sqlite:b.db\ntables:\n  - name: t\n    key: {a: 1}\n", "5:10", "key: is a single value, not a mapping"),
            ("source: sqlite:a.db\ntarget: sqlite:b.db\ntables:\n  - name: t\n    casts: [\"whatever int to text\"]\n", "5:13", "cast rule"),
            ("source: sqlite:a.db\ntarget: sqlite:b.db\ntables:\n  - name: t\n    chunk-rows: many\n", "5:17", "many"),
            ("target: sqlite:b.db\ntables: [t]\n", "1:1", "no source:"),
            ("source: sqlite:a.db\ntarget: sqlite:b.db\nsorce: x\n", "3:1", "unknown key 'sorce'"),
            ("source: sqlite:a.db\ntarget: sqlite:b.db\ntables:\n  - name: t\n    mode: [a\n", "", "not YAML"),
            ("source: sqlite:a.db\ntarget: sqlite:b.db\ntables:\n  - name: t\n    shards: 0\n", "5:13", "--shards must be between 1 and 100000"),
            ("source: sqlite:a.db\ntarget: sqlite:b.db\ntables:\n  - name: t\n    shards: 4\n    resume: true\n", "5:13", "shards: runs these tables as the units of `ferry plan`"),
        ]
        for (i, (text, position, fragment)) in cases.enumerated() {
            let file = try write("bad-\(i).yaml", text)
            let r = try ferry(["run", file])
            XCTAssertEqual(r.code, 2, "case \(i): \(r.err)")
            XCTAssertEqual(r.err.split(separator: "\n").count, 1, "case \(i): \(r.err)")
            XCTAssertTrue(r.err.contains(file + (position.isEmpty ? "" : ":" + position + ":")), "case \(i): \(r.err)")
            XCTAssertTrue(r.err.contains(fragment), "case \(i): '\(fragment)' not in \(r.err)")
        }
    }
}
