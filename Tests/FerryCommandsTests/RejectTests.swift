import FerryCore
import FerryDriverTestKit
import Foundation
import XCTest

/// `--on-error reject=FILE`: rows a target refuses are set aside in a SQLite file with their
/// reasons, the rest loads, the exit code says so (3), and the file, once fixed, loads again
/// into the target — every value arriving as it was.
final class RejectTests: XCTestCase {
    var folder: TemporaryFolder!
    var fixture: Fixture { Fixture(folder: folder) }
    override func setUpWithError() throws { folder = try TemporaryFolder() }

    /// Driver plugins (sqlitekit, csv) found next to the ferry under test.
    func ferry(_ args: [String]) throws -> CLITests.Result {
        try CLITests.run(CLITests.binaryURL, args, environment: ["FERRY_DRIVER_PATH": CLITests.binaryURL.deletingLastPathComponent().path])
    }

    static let rows = 30_000
    /// Rows every target below refuses: NULL names (NOT NULL), negative quantities (CHECK) and
    /// a code another row has (UNIQUE).
    static let refused: [Int: String] = [7: "name", 15_001: "name", 29_999: "name", 500: "qty", 20_000: "qty", 22_222: "code"]

    /// 30,000 rows of every kind of value (integers, non-ASCII text, doubles, blobs), six of
    /// which a target with constraints refuses.
    func source() throws -> String {
        let path = folder.path("items.db")
        _ = try fixture.sqlite(path).query("""
            CREATE TABLE items (id INTEGER PRIMARY KEY, code TEXT, name TEXT, qty INTEGER, price REAL, data BLOB);
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(Self.rows))
            INSERT INTO items SELECT i, 'c' || i, 'item ' || i || ' é☃', i % 97, i * 1.25 + 0.1, randomblob(1 + i % 20) FROM n;
            UPDATE items SET name = NULL WHERE id IN (7, 15001, 29999);
            UPDATE items SET qty = -3 WHERE id IN (500, 20000);
            UPDATE items SET code = 'c100' WHERE id = 22222
            """)
        return path
    }

    /// The same table with constraints, in each engine.
    func targets(_ tag: String) throws -> [Fixture.Target] {
        let sqlite = fixture.sqlite(folder.path("target.db"))
        _ = try sqlite.query(
            "CREATE TABLE items (id INTEGER PRIMARY KEY, code TEXT UNIQUE, name TEXT NOT NULL, qty INTEGER CHECK (qty >= 0), price REAL, data BLOB)")
        let pg = try fixture.postgres(tag)
        _ = try pg.query(
            "CREATE TABLE items (id bigint PRIMARY KEY, code text UNIQUE, name text NOT NULL, qty bigint CHECK (qty >= 0), price double precision, data bytea)")
        let my = try fixture.mariadb(tag)
        _ = try my.query(
            "CREATE TABLE items (id bigint PRIMARY KEY, code varchar(20) UNIQUE, name text NOT NULL, qty bigint CHECK (qty >= 0), price double, data longblob)")
        return [sqlite, pg, my]
    }

    /// Into SQLite, PostgreSQL and MariaDB, appended or upserted in batches of 1,000 (30 batches,
    /// six with a refused row): the six are set aside with their reasons and the rest loads;
    /// fixed in the file, they load again, and the target then equals the fixed source value by
    /// value.
    func testRefusedRowsAreSetAsideAndLoadAgainOnceFixed() throws {
        let src = try source()
        let tag = "rej\(UInt32.random(in: 0...UInt32.max))"
        for (n, target) in try targets(tag).enumerated() {
            try roundTrip(src, into: target, mode: n == 0 ? "append" : "upsert")
            guard n == 2 else { continue }
            // MariaDB's upsert (ON DUPLICATE KEY UPDATE) took the row with another row's code for
            // that row and rewrote it, silently; it is refused now. Appended too.
            _ = try target.query("DELETE FROM items")
            try roundTrip(src, into: target, mode: "append", file: "again")
        }
    }

    /// The same through `ferry serve` (serving a SQLite file in a rollback journal, PostgreSQL
    /// and MariaDB) and through the sqlitekit plugin, appended and upserted: the service sets the
    /// refused rows aside on its side — NULL names as the rows arrive, the duplicate code and
    /// the negative quantities when it merges the staged rows at commit, every one of them when
    /// it applies staged upserts — and sends them back; the file and the target end as directly.
    func testRefusedRowsAreSetAsideThroughTheServiceAndAPlugin() throws {
        let src = try source()
        let tag = "rejs\(UInt32.random(in: 0...UInt32.max))"
        var serves: [ServeProcess] = []
        defer { for s in serves { s.stop() } }
        for (n, database) in try targets(tag).enumerated() {
            let (served, serve) = try fixture.served(database, tokens: "--token-file")
            serves.append(serve)
            try roundTrip(src, into: served, mode: n == 1 ? "upsert" : "append", log: serve.log)
            _ = try database.query("DELETE FROM items")
            try roundTrip(src, into: served, mode: n == 1 ? "append" : "upsert", file: "again", log: serve.log)
        }
        let kitFile = folder.path("kit.db")
        _ = try fixture.sqlite(kitFile).query(
            "CREATE TABLE items (id INTEGER PRIMARY KEY, code TEXT UNIQUE, name TEXT NOT NULL, qty INTEGER CHECK (qty >= 0), price REAL, data BLOB)")
        var kit = fixture.sqlite(kitFile)
        kit.name = "sqlitekit plugin"
        kit.url = "sqlitekit:" + kitFile
        try roundTrip(src, into: kit, mode: "append")
        _ = try kit.query("DELETE FROM items")
        try roundTrip(src, into: kit, mode: "upsert", file: "again")
    }

    /// One copy with `--on-error reject` into `target` (whose items table has the constraints
    /// and no rows), then the checks: exit 3, one line, the six rows and their reasons in the
    /// file, the rest in the target; fixed and loaded again, the target equals the fixed source.
    func roundTrip(_ src: String, into target: Fixture.Target, mode: String, file suffix: String = "", log: String? = nil) throws {
        let label = "\(target.name), \(mode)"
        let rejects = folder.path("refused-\(target.name.replacingOccurrences(of: " ", with: "-"))\(suffix).db")
        let r = try ferry(["copy", "sqlite:" + src, target.url, "--mode", mode, "--on-error", "reject=" + rejects, "--batch-size", "1000", "--quiet"])
        // A service's log says why it failed a request.
        let said = r.code == 3 ? "" : log.flatMap { try? String(contentsOfFile: $0, encoding: .utf8) }.map { "\nservice log:\n" + $0.split(separator: "\n").suffix(30).joined(separator: "\n") } ?? ""
        XCTAssertEqual(r.code, 3, "\(label): \(r.err)\(said)")
        XCTAssertTrue(r.err.contains("items: 6 rows refused by the target, set aside in \(rejects)"), "\(label): \(r.err)")
        XCTAssertEqual(r.err.split(separator: "\n").count, 1, "\(label): \(r.err)")
        XCTAssertEqual(try target.query("SELECT count(*) FROM items").trimmingCharacters(in: .whitespacesAndNewlines), String(Self.rows - 6), label)
        // No staging table left behind (a served database keeps its `_ferry_leases`).
        XCTAssertEqual(try target.tables("_ferry_append") + target.tables("_ferry_upsert"), [], label)
        let file = fixture.sqlite(rejects)
        let kept = try file.query("SELECT id FROM items ORDER BY id").split(separator: "\n").compactMap { Int($0) }
        XCTAssertEqual(kept, Self.refused.keys.sorted(), label)
        // One reason per row, naming its key and what the target refused.
        let reasons = try file.query("SELECT row_key, reason FROM _ferry_rejects ORDER BY row_number").split(separator: "\n")
        XCTAssertEqual(reasons.count, 6, label)
        for line in reasons {
            let parts = line.split(separator: "\t", maxSplits: 1).map(String.init)
            guard parts.count == 2, let id = Int(parts[0].dropFirst(4).dropLast()), let column = Self.refused[id] else {
                XCTFail("\(label): \(line)")
                continue
            }
            let said = parts[1].lowercased()
            switch column {
            case "name": XCTAssertTrue(said.contains("null"), "\(label): \(line)")
            case "qty": XCTAssertTrue(said.contains("check") || said.contains("constraint"), "\(label): \(line)")
            default: XCTAssertTrue(said.contains("unique") || said.contains("duplicate"), "\(label): \(line)")
            }
        }
        // The refused rows kept every value as the source had it (blobs, doubles, non-ASCII text).
        let original = fixture.sqlite(src)
        let columns = "id, code, quote(name), qty, quote(price), hex(data)"
        let ids = Self.refused.keys.sorted().map(String.init).joined(separator: ", ")
        XCTAssertEqual(try file.query("SELECT \(columns) FROM items ORDER BY id"), try original.query("SELECT \(columns) FROM items WHERE id IN (\(ids)) ORDER BY id"), label)
        // Fixed in the file (and the same fix in a copy of the source, to compare with).
        let fix = "UPDATE items SET name = coalesce(name, 'fixed'), qty = abs(qty), code = code || '-' || id"
        _ = try file.query(fix)
        let fixed = folder.path("fixed-\(UUID().uuidString.prefix(8)).db")
        try FileManager.default.copyItem(atPath: src, toPath: fixed)
        _ = try fixture.sqlite(fixed).query("ATTACH '\(rejects)' AS r; \(fix) WHERE id IN (SELECT id FROM r.items)")
        let again = try ferry(["copy", "sqlite:" + rejects, target.url, "--tables", "items", "--mode", "append", "--quiet"])
        XCTAssertEqual(again.code, 0, "\(label): \(again.err)")
        let v = try ferry(["verify", "sqlite:" + fixed, target.url, "--tables", "items"])
        XCTAssertEqual(v.code, 0, "\(label): \(v.out) \(v.err)")
    }

    /// Past --max-rejects the table fails whole (one line, nothing committed, nothing set
    /// aside), directly and through the service; a plugin that cannot set rows aside is refused
    /// at once; and a copy where nothing is refused ends 0.
    func testLimitsAndTargetsThatCannotSetRowsAside() throws {
        let src = try source()
        let target = fixture.sqlite(folder.path("target.db"))
        _ = try target.query(
            "CREATE TABLE items (id INTEGER PRIMARY KEY, code TEXT UNIQUE, name TEXT NOT NULL, qty INTEGER CHECK (qty >= 0), price REAL, data BLOB)")
        let rejects = folder.path("refused.db")
        let over = try ferry(["copy", "sqlite:" + src, target.url, "--mode", "append", "--on-error", "reject=" + rejects, "--max-rejects", "5", "--quiet"])
        XCTAssertEqual(over.code, 1, over.err)
        XCTAssertTrue(over.err.contains("items: the target refused more than 5 rows (--max-rejects)"), over.err)
        XCTAssertEqual(over.err.split(separator: "\n").count, 1, over.err)
        XCTAssertEqual(try target.query("SELECT count(*) FROM items").trimmingCharacters(in: .whitespacesAndNewlines), "0")
        XCTAssertEqual(try fixture.sqlite(rejects).tables("items"), [])

        let clean = folder.path("clean.db")
        let none = try ferry(["copy", "sqlite:" + src, "sqlite:" + clean, "--on-error", "reject=" + folder.path("none.db"), "--quiet"])
        XCTAssertEqual(none.code, 0, none.err)
        XCTAssertEqual(try ferry(["verify", "sqlite:" + src, "sqlite:" + clean]).code, 0)

        // Through the service the limit holds across its requests and its merge: nothing of the
        // table committed, nothing set aside, no staging table left.
        let (served, serve) = try fixture.served(target, tokens: "--token-file")
        defer { serve.stop() }
        let overThere = try ferry(["copy", "sqlite:" + src, served.url, "--mode", "append", "--on-error", "reject=" + rejects, "--max-rejects", "5",
                                   "--batch-size", "1000", "--quiet"])
        XCTAssertEqual(overThere.code, 1, overThere.err)
        XCTAssertTrue(overThere.err.contains("items: the target refused more than 5 rows (--max-rejects)"), overThere.err)
        XCTAssertEqual(overThere.err.split(separator: "\n").count, 1, overThere.err)
        XCTAssertEqual(try target.query("SELECT count(*) FROM items").trimmingCharacters(in: .whitespacesAndNewlines), "0")
        XCTAssertEqual(try target.tables("_ferry_append"), [])
        XCTAssertEqual(try fixture.sqlite(rejects).tables("items"), [])
        // A service sends at most 10,000 refused rows back: a larger limit is refused up front.
        let large = try ferry(["copy", "sqlite:" + src, served.url, "--mode", "append", "--on-error", "reject=" + rejects, "--max-rejects", "20000"])
        XCTAssertEqual(large.code, 2, large.err)
        XCTAssertTrue(large.err.contains("a service or plugin sends at most 10000 refused rows back"), large.err)
        // A plugin that does not declare rejects (the CSV sample) is refused before anything is written.
        let csv = folder.path("csv")
        try FileManager.default.createDirectory(atPath: csv, withIntermediateDirectories: true)
        let refused = try ferry(["copy", "sqlite:" + src, "csv:" + csv, "--on-error", "reject=" + rejects, "--quiet"])
        XCTAssertEqual(refused.code, 2, refused.err)
        XCTAssertTrue(refused.err.contains("cannot set refused rows aside"), refused.err)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: csv), [])
        let mirror = try ferry(["copy", "sqlite:" + src, target.url, "--mode", "mirror", "--on-error", "reject=" + rejects])
        XCTAssertEqual(mirror.code, 2, mirror.err)
    }
}
