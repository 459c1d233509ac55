import FerryCore
import FerryDriverTestKit
import Foundation
import XCTest

/// `ferry copy --mode upsert --incremental COLUMN`: only rows above the last run's watermark,
/// directly and through `ferry serve`; two runs at once cannot both move the watermark.
final class IncrementalTests: XCTestCase {
    var folder: TemporaryFolder!
    var fixture: Fixture { Fixture(folder: folder) }
    override func setUpWithError() throws { folder = try TemporaryFolder() }

    func ferry(_ args: [String]) throws -> CLITests.Result { try CLITests.run(CLITests.binaryURL, args) }

    struct Output: Decodable {
        struct Summary: Decodable { var tables: [Table] }
        struct Table: Decodable { var rows: Int64; var rowsRead: Int64?; var watermark: String?; var status: String; var error: String? }
        var ok: Bool
        var summary: Summary
    }

    func run(_ args: [String], file: StaticString = #filePath, line: UInt = #line) throws -> Output.Table {
        let r = try ferry(args + ["--json"])
        XCTAssertEqual(r.code, 0, r.err, file: file, line: line)
        let out = try JSONDecoder().decode(Output.self, from: Data(r.out.utf8))
        return try XCTUnwrap(out.summary.tables.first, file: file, line: line)
    }

    /// A PostgreSQL source followed by its `updated_at` into SQLite and MariaDB, through a
    /// served PostgreSQL into SQLite, and into a served SQLite file (a write token; the watermark
    /// moves in the service's apply of the rows): the second run reads the rows added and updated
    /// since the first (and, with the default lookback of 5 minutes, the one row at the old
    /// watermark).
    func testTheSecondRunReadsOnlyWhatChanged() throws {
        let tag = UUID().uuidString.prefix(8).lowercased()
        let source = try fixture.postgres(tag)
        _ = try source.query("""
            CREATE TABLE orders (id bigint PRIMARY KEY, note text, total numeric(12,2), updated_at timestamp(6) NOT NULL);
            INSERT INTO orders SELECT g, 'order ' || g, g * 1.5, timestamp '2026-01-01' + g * interval '1 hour' FROM generate_series(1, 20000) g
            """)
        let token = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let tokenFile = folder.path("read.txt")
        try Data((token + "\n").utf8).write(to: URL(fileURLWithPath: tokenFile))
        let serve = try ServeProcess(source.url, ["--read-only-token-file", tokenFile], log: folder.path("serve.log"))
        defer { serve.stop() }
        let maria = try fixture.mariadb(tag)
        // A served target: its table made directly (a write token writes rows, not tables).
        let servedFile = fixture.sqlite(folder.path("served-target.db"))
        XCTAssertEqual(try ferry(["copy", source.url, servedFile.url, "--tables", "orders", "--where", "id < 0", "--quiet"]).code, 0)
        let (servedTarget, serveTarget) = try fixture.served(servedFile, tokens: "--write-token-file")
        defer { serveTarget.stop() }
        let pairs = [(source.url, fixture.sqlite(folder.path("direct.db"))), (source.url, maria), (serve.url(token: token), fixture.sqlite(folder.path("served.db"))),
                     (source.url, servedTarget)]
        for (from, to) in pairs {
            let first = try run(["copy", from, to.url, "--tables", "orders", "--mode", "upsert", "--incremental", "updated_at"])
            XCTAssertEqual(first.rows, 20_000, to.name)
        }
        // Changed after the first runs: 50 updated (moved past the watermark), 30 added.
        _ = try source.query("""
            UPDATE orders SET note = 'changed', updated_at = timestamp '2030-01-01' + id * interval '1 second' WHERE id <= 50;
            INSERT INTO orders SELECT g, 'new ' || g, g, timestamp '2030-02-01' + g * interval '1 second' FROM generate_series(20001, 20030) g
            """)
        for (i, (from, to)) in pairs.enumerated() {
            let second = try run(["copy", from, to.url, "--tables", "orders", "--mode", "upsert", "--incremental", "updated_at"])
            XCTAssertEqual(second.rowsRead, 81, "\(to.name) #\(i): the rows changed, and the last run's last row within the lookback")
            XCTAssertEqual(second.watermark, "2030-02-01 05:33:50", to.name)
            let v = try ferry(["verify", source.url, to.url, "--tables", "orders"])
            XCTAssertEqual(v.code, 0, "\(to.name): \(v.out) \(v.err)")
            // Nothing changed: with no lookback nothing is read, and the watermark stays.
            let third = try run(["copy", from, to.url, "--tables", "orders", "--mode", "upsert", "--incremental", "updated_at", "--incremental-lookback", "0"])
            XCTAssertEqual(third.rowsRead, 0, to.name)
            XCTAssertEqual(third.watermark, "2030-02-01 05:33:50", to.name)
        }
        XCTAssertFalse(serve.logText.contains(token), "the token in the service's log")
    }

    /// A serial id followed from MariaDB into PostgreSQL (no lookback: integers default to 0);
    /// and the refusals, each one line before anything is written.
    func testASerialIdAndTheRefusals() throws {
        let tag = UUID().uuidString.prefix(8).lowercased()
        let source = try fixture.mariadb(tag), target = try fixture.postgres(tag)
        _ = try source.query("""
            CREATE TABLE events (id BIGINT AUTO_INCREMENT PRIMARY KEY, kind VARCHAR(20) NOT NULL, at DATETIME(6) NOT NULL);
            INSERT INTO events (kind, at) SELECT 'boot', NOW(6) FROM seq_1_to_5000
            """)
        let args = ["copy", source.url, target.url, "--tables", "events", "--mode", "upsert", "--incremental", "events=id"]
        XCTAssertEqual(try run(args).rowsRead, 5_000)
        _ = try source.query("INSERT INTO events (kind, at) SELECT 'tick', NOW(6) FROM seq_1_to_70")
        let second = try run(args)
        XCTAssertEqual(second.rowsRead, 70)
        // InnoDB hands out AUTO_INCREMENT values to INSERT … SELECT in blocks: gaps are normal.
        XCTAssertEqual(second.watermark, try source.query("SELECT max(id) FROM events").trimmingCharacters(in: .whitespacesAndNewlines))
        XCTAssertEqual(try ferry(["verify", source.url, target.url, "--tables", "events"]).code, 0)

        var r = try ferry(["copy", source.url, target.url, "--tables", "events", "--incremental", "id"])
        XCTAssertEqual(r.code, 2, r.err)
        XCTAssertTrue(r.err.contains("--incremental writes the rows it reads by upsert: add --mode upsert"), r.err)
        r = try ferry(["copy", source.url, target.url, "--tables", "events", "--mode", "upsert", "--incremental", "kind"])
        XCTAssertEqual(r.code, 2, r.err)
        XCTAssertTrue(r.err.contains("follows an integer, date or timestamp column"), r.err)
        r = try ferry(["copy", source.url, target.url, "--tables", "events", "--mode", "upsert", "--incremental", "id", "--incremental-lookback", "5m"])
        XCTAssertEqual(r.code, 2, r.err)
        XCTAssertTrue(r.err.contains("is an integer column: give a number of values"), r.err)
        r = try ferry(["copy", source.url, target.url, "--tables", "events", "--mode", "upsert", "--incremental", "nothere"])
        XCTAssertEqual(r.code, 1, r.err)
        XCTAssertTrue(r.err.contains("nothere"), r.err)
    }

    /// Two runs at once against one target, both reading from the same watermark: one moves
    /// it, the other fails without committing anything, and the target is right either way —
    /// directly, and through the service (whose apply checks the watermark it moves).
    func testTwoRunsAtOnceCannotBothMoveTheWatermark() throws {
        let tag = UUID().uuidString.prefix(8).lowercased()
        try twoRunsAtOnce(try fixture.postgres(tag + "src"), try fixture.postgres(tag + "dst"), rows: 400_000, served: false)
        try twoRunsAtOnce(try fixture.postgres(tag + "src2"), try fixture.postgres(tag + "dst2"), rows: 60_000, served: true)
    }

    func twoRunsAtOnce(_ source: Fixture.Target, _ direct: Fixture.Target, rows: Int, served: Bool) throws {
        _ = try source.query("""
            CREATE TABLE items (id bigint PRIMARY KEY, v text, version bigint NOT NULL);
            INSERT INTO items SELECT g, 'v' || g, g FROM generate_series(1, 1000) g
            """)
        var target = direct
        var serve: ServeProcess?
        if served {
            XCTAssertEqual(try ferry(["copy", source.url, direct.url, "--tables", "items", "--where", "id < 0", "--quiet"]).code, 0)
            (target, serve) = try fixture.served(direct, tokens: "--write-token-file")
        }
        defer { serve?.stop() }
        let args = ["copy", source.url, target.url, "--tables", "items", "--mode", "upsert", "--incremental", "version"]
        XCTAssertEqual(try run(args).rowsRead, 1_000)
        _ = try source.query("INSERT INTO items SELECT g, 'v' || g, g FROM generate_series(1001, \(rows)) g")
        let results = Locked<[CLITests.Result]>([])
        let workers = (0..<2).map { i in
            Worker(name: "run-\(i)") {
                if let r = try? CLITests.run(CLITests.binaryURL, args) { results.withLock { $0.append(r) } }
            }
        }
        for w in workers { w.join() }
        let done = results.withLock { $0 }
        XCTAssertEqual(done.count, 2)
        let failed = done.filter { $0.code != 0 }
        XCTAssertEqual(failed.count, 1, done.map(\.err).joined(separator: "\n"))
        XCTAssertTrue(failed.first?.err.contains("another run moved the watermark") == true, "\(target.name): " + (failed.first?.err ?? ""))
        XCTAssertEqual(try direct.query("SELECT watermark FROM _ferry_watermarks").trimmingCharacters(in: .whitespacesAndNewlines), #"[["int","\#(rows)"]]"#)
        XCTAssertEqual(try ferry(["verify", source.url, target.url, "--tables", "items"]).code, 0)
    }
}
