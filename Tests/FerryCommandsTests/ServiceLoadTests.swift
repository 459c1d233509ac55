import FerryCore
import FerryDriverTestKit
import Foundation
import XCTest

/// One `ferry serve` in front of PostgreSQL with a pool of two database connections, and 50
/// clients at once: 25 copy a table out of it, 25 copy a table each into it. Requests wait in
/// line for a connection, read snapshots past `--max-snapshots` are asked again (`--retries`),
/// every copy ends 0 and is verified value by value, and the service never held more than two
/// request connections (its `/metrics`).
final class ServiceLoadTests: XCTestCase {
    static let clients = 50
    static let rows = 4_000

    func testFiftyClientsThroughAPoolOfTwo() throws {
        let folder = try TemporaryFolder()
        let fixture = Fixture(folder: folder)
        let pg = try fixture.postgres("load\(UInt32.random(in: 0...UInt32.max))")
        let half = Self.clients / 2
        // The table read out, and one file per client that copies in.
        let src = folder.path("items.db")
        _ = try fixture.sqlite(src).query("""
            CREATE TABLE items (id INTEGER PRIMARY KEY, code TEXT NOT NULL, name TEXT, qty INTEGER, price REAL, data BLOB);
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(Self.rows))
            INSERT INTO items SELECT i, 'c' || i, CASE WHEN i % 13 = 0 THEN NULL ELSE 'item ' || i || ' é☃' END, i % 97, i * 1.25 + 0.1, randomblob(1 + i % 20) FROM n
            """)
        XCTAssertEqual(try CLITests.run(CLITests.binaryURL, ["copy", "sqlite:" + src, pg.url, "-q"]).code, 0)
        for i in 1...half {
            _ = try fixture.sqlite(folder.path("in\(i).db")).query(
                "ATTACH '\(src)' AS s; CREATE TABLE load_\(i) (id INTEGER PRIMARY KEY, code TEXT, qty INTEGER, data BLOB); INSERT INTO load_\(i) SELECT id, code || '-\(i)', qty + \(i), data FROM s.items")
        }
        let token = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let tokens = folder.path("tokens.txt")
        try Data((token + "\n").utf8).write(to: URL(fileURLWithPath: tokens))
        let serve = try ServeProcess(
            pg.url, ["--token-file", tokens, "--max-connections", "2", "--connection-wait", "600", "--metrics", "127.0.0.1:0"],
            log: folder.path("serve.log"))
        defer { serve.stop() }
        let service = serve.url(token: token)

        // All at once: each its own ferry process.
        var runs: [(name: String, process: Process, log: String)] = []
        for i in 1...half {
            for (name, args) in [("in\(i)", ["copy", "sqlite:" + folder.path("in\(i).db"), service, "--mode", "replace"]),
                                 ("out\(i)", ["copy", service, "sqlite:" + folder.path("out\(i).db"), "--tables", "items"])] {
                let log = folder.path(name + ".log")
                guard FileManager.default.createFile(atPath: log, contents: nil), let handle = FileHandle(forWritingAtPath: log) else {
                    return XCTFail("cannot write \(log)")
                }
                let p = Process()
                p.executableURL = CLITests.binaryURL
                p.arguments = args + ["--retries", "30", "--quiet"]
                p.standardError = handle
                p.standardOutput = FileHandle.nullDevice
                try p.run()
                runs.append((name, p, log))
            }
        }
        var retried = 0
        for run in runs {
            run.process.waitUntilExit()
            let said = (try? String(contentsOfFile: run.log, encoding: .utf8)) ?? ""
            XCTAssertEqual(run.process.terminationStatus, 0, "\(run.name): \(said)")
            retried += said.components(separatedBy: "(--retries)").count - 1
        }
        // Every copy, value by value.
        for i in 1...half {
            let inward = try CLITests.run(CLITests.binaryURL, ["verify", "sqlite:" + folder.path("in\(i).db"), pg.url, "--tables", "load_\(i)"])
            XCTAssertEqual(inward.code, 0, "in\(i): \(inward.out) \(inward.err)")
            let outward = try CLITests.run(CLITests.binaryURL, ["verify", "sqlite:" + src, "sqlite:" + folder.path("out\(i).db"), "--tables", "items"])
            XCTAssertEqual(outward.code, 0, "out\(i): \(outward.out) \(outward.err)")
        }
        // The pool held: at most two request connections at once, and nobody timed out.
        let log = serve.logText
        let port = try XCTUnwrap(log.range(of: "metrics on http://127.0.0.1:").flatMap { Int(log[$0.upperBound...].prefix { $0.isNumber }) }, log)
        let metrics = try ExternalTool.run(["curl", "-sf", "http://127.0.0.1:\(port)/metrics"], input: "")
        func gauge(_ name: String) -> Double? {
            metrics.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
        }
        XCTAssertEqual(gauge("ferry_serve_db_connections_peak"), 2, metrics)
        XCTAssertEqual(gauge("ferry_serve_db_connection_waits_timed_out"), 0, metrics)
        XCTAssertTrue(metrics.contains("ferry_serve_requests_total{method=\"POST\",endpoint=\"/v1/tables/:table/rows\",status=\"2xx\"}"), metrics)
        // The health check needs no token.
        XCTAssertEqual(try ExternalTool.run(["curl", "-sf", "http://127.0.0.1:\(serve.port)/healthz"], input: ""), "<health status=\"ok\"/>\n")
        print("50 clients through a pool of 2: \(retried) requests asked again (503), all 50 copies verified")
    }

    /// A short run of scripts/fuzz-serve.py (the measured run is `scripts/fuzz-serve --requests
    /// 500000`): 20,000 random and mutated requests at a served SQLite file, half with valid read
    /// or write tokens — no crash, no hang, no 500, no read token's write, no DDL outside staging,
    /// no leak in an error. (Debug build: peak RSS checked against 96 MiB; the release run's 64.)
    func testTwentyThousandFuzzedRequests() throws {
        let folder = try TemporaryFolder()
        let db = folder.path("served.db")
        try FileManager.default.copyItem(atPath: CLITests.chinookPath, toPath: db)
        _ = try Fixture(folder: folder).sqlite(db).query("PRAGMA journal_mode=WAL")
        func token(_ file: String) throws -> String {
            let t = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
            try Data((t + "\n").utf8).write(to: URL(fileURLWithPath: folder.path(file)))
            return t
        }
        let (read, write) = (try token("read.txt"), try token("write.txt"))
        let serve = try ServeProcess(
            "sqlite:" + db, ["--read-only-token-file", folder.path("read.txt"), "--write-token-file", folder.path("write.txt")],
            log: folder.path("serve.log"))
        defer { serve.stop() }
        let base = "http://127.0.0.1:\(serve.port)"
        let rows = try ExternalTool.run(["curl", "-sf", "-H", "Authorization: Bearer \(read)", base + "/v1/tables/Artist/rows?limit=5"], input: "")
        let schema = try ExternalTool.run(["curl", "-sf", "-H", "Authorization: Bearer \(read)", base + "/v1/tables/Artist"], input: "")
        let script = TestDatabases.packageRoot().appendingPathComponent("scripts/fuzz-serve.py").path
        let seed = UInt32.random(in: 1...UInt32.max)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["python3", script, "--url", base, "--read-token", read, "--write-token", write, "--pid", String(serve.process.processIdentifier),
                       "--requests", "20000", "--workers", "2", "--seed", String(seed), "--max-rss-mb", "96", "--tables", "Artist,Album,Track",
                       "--docs", rows, "--docs", schema,
                       "--docs", "<changes><insert><r><v>9001</v><v>fuzz</v></r></insert><delete><r><v>9001</v></r></delete></changes>"]
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        let said = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let summary = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, "seed \(seed): \(said) \(summary)")
        XCTAssertTrue(serve.process.isRunning, "ferry serve died: \(serve.logText.suffix(2000))")
        print("fuzzed ferry serve (seed \(seed)): \(summary)")
    }
}
