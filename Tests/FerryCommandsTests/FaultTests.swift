import FerryCore
import FerryDriverTestKit
import Foundation
import XCTest

/// Faults met at the edges: a SQLite target that may not grow, and names no table has.
final class FaultTests: XCTestCase {
    var folder: TemporaryFolder!
    var fixture: Fixture { Fixture(folder: folder) }
    override func setUpWithError() throws { folder = try TemporaryFolder() }

    func ferry(_ args: [String]) throws -> CLITests.Result { try CLITests.run(CLITests.binaryURL, args) }

    /// A token of its own, written alone into the file `name` of the test's folder.
    func tokenFile(_ name: String) throws -> (token: String, path: String) {
        let token = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let path = folder.path(name)
        try Data((token + "\n").utf8).write(to: URL(fileURLWithPath: path))
        return (token, path)
    }

    /// A SQLite target whose file may not grow past 4 MB (`ulimit -f`): the copy fails in one
    /// line with an error exit — not a death by SIGXFSZ (153) — and leaves the file whole and
    /// without the table; with room the same copy goes in.
    /// A relay of the test's own in front of the server of `url`, and the URL through it.
    func relayed(_ url: String) throws -> (FaultRelay, String) {
        let port = try XCTUnwrap(try Endpoint(parsing: url).port)
        let relay = try FaultRelay(upstreamPort: port)
        let host = url.contains("@127.0.0.1:") || url.contains("//127.0.0.1:") ? "127.0.0.1" : "localhost"
        return (relay, url.replacingOccurrences(of: "\(host):\(port)", with: "127.0.0.1:\(relay.port)"))
    }

    func testASQLiteTargetThatCannotGrowFailsWithOneLine() throws {
        let src = try fixture.source(rows: 60_000)
        let target = folder.path("small.db")
        let tiny = fixture.sqlite(target)
        _ = try tiny.query("CREATE TABLE kept (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO kept VALUES (1, 'before')")
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/bash")
        p.arguments = ["-c", "ulimit -f 4096; exec \"$0\" \"$@\"", CLITests.binaryURL.path, "copy", "sqlite:" + src, "sqlite:" + target, "--tables", "bench_orders", "--quiet"]
        let err = Pipe()
        p.standardError = err
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        let said = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationReason, .exit, "ferry died of a signal: \(p.terminationStatus) \(said)")
        XCTAssertEqual(p.terminationStatus, 1, said)
        XCTAssertTrue(said.contains("the file may not grow past its size limit"), said)
        let lines = said.split(separator: "\n").filter { !$0.hasPrefix("ferry: error: 1 of 1 tables failed") }
        XCTAssertEqual(lines.count, 1, said)
        XCTAssertEqual(try tiny.query("PRAGMA integrity_check").trimmingCharacters(in: .whitespacesAndNewlines), "ok")
        XCTAssertEqual(try tiny.tables("bench_orders"), [])
        XCTAssertEqual(try tiny.query("SELECT v FROM kept").trimmingCharacters(in: .whitespacesAndNewlines), "before")
        let r = try ferry(["copy", "sqlite:" + src, "sqlite:" + target, "--tables", "bench_orders", "--quiet"])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertEqual(try ferry(["verify", "sqlite:" + src, "sqlite:" + target, "--tables", "bench_orders"]).code, 0)
    }

    /// A served SQLite file that may not grow (`ferry serve` under `ulimit -f`): the service
    /// answers 507 with a reason that names no path, the copy fails in one line, and the file
    /// is whole and without the table.
    func testAServedFileThatCannotGrowAnswers507() throws {
        let src = try fixture.source(rows: 60_000)
        let db = folder.path("served-small.db")
        _ = try fixture.sqlite(db).query("CREATE TABLE kept (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO kept VALUES (1, 'before')")
        let (token, tokens) = try tokenFile("tokens.txt")
        let log = folder.path("serve-small.log")
        guard FileManager.default.createFile(atPath: log, contents: nil), let handle = FileHandle(forWritingAtPath: log) else {
            return XCTFail("cannot write \(log)")
        }
        let serve = Process()
        serve.executableURL = URL(fileURLWithPath: "/bin/bash")
        serve.arguments = ["-c", "ulimit -f 2048; exec \"$0\" \"$@\"", CLITests.binaryURL.path, "serve", "sqlite:" + db,
                           "--listen", "127.0.0.1:0", "--token-file", tokens]
        serve.standardError = handle
        serve.standardOutput = FileHandle.nullDevice
        try serve.run()
        defer {
            if serve.isRunning { serve.interrupt() }
            serve.waitUntilExit()
        }
        var port: Int?
        for _ in 0..<300 where port == nil && serve.isRunning {
            usleep(50_000)
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            port = text.range(of: "on http://127.0.0.1:").flatMap { Int(text[$0.upperBound...].prefix { $0.isNumber }) }
        }
        let bound = try XCTUnwrap(port, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
        let r = try ferry(["copy", "sqlite:" + src, "http://:\(token)@127.0.0.1:\(bound)/", "--tables", "bench_orders", "--quiet"])
        XCTAssertEqual(r.code, 1, r.err)
        XCTAssertTrue(r.err.contains("has no room to write") && r.err.contains("HTTP 507"), r.err)
        XCTAssertFalse(r.err.contains(db), "the service's answer names the file: \(r.err)")
        XCTAssertEqual(r.err.split(separator: "\n").count, 1, r.err)
        serve.interrupt()
        serve.waitUntilExit()
        let file = fixture.sqlite(db)
        XCTAssertEqual(try file.query("PRAGMA integrity_check").trimmingCharacters(in: .whitespacesAndNewlines), "ok")
        XCTAssertEqual(try file.tables("bench_orders"), [])
        XCTAssertEqual(try file.query("SELECT v FROM kept").trimmingCharacters(in: .whitespacesAndNewlines), "before")
    }

    /// A connection that stalls mid-copy — a relay passes nothing more either way and keeps its
    /// sockets open, as a peer whose kernel still acknowledges — fails the copy after
    /// `--timeout`, in one line, with PostgreSQL and MariaDB as source and as target and with
    /// `ferry serve` as source and as target; the target table is as it was.
    func testAStalledConnectionFailsAfterTheTimeout() throws {
        let src = try fixture.source(rows: 100_000)
        let tag = UUID().uuidString.prefix(8).lowercased()
        let pg = try fixture.postgres("stall_\(tag)"), my = try fixture.mariadb("stall_\(tag)")
        for t in [pg, my] {
            let r = try ferry(["copy", "sqlite:" + src, t.url, "--tables", "bench_orders", "-q"])
            XCTAssertEqual(r.code, 0, r.err)
        }
        let (served, serve) = try fixture.served(pg, tokens: "--token-file")
        defer { serve.stop() }
        let cases: [(String, String, Bool)] = [
            ("postgres as source", pg.url, true), ("postgres as target", pg.url, false),
            ("mariadb as source", my.url, true), ("mariadb as target", my.url, false),
            ("ferry serve as source", served.url, true), ("ferry serve as target", served.url, false),
        ]
        for (name, url, isSource) in cases {
            let (relay, through) = try relayed(url)
            defer { relay.stop() }
            relay.arm(isSource ? .fromServer : .toServer, at: 300_000, stall: true)
            let out = folder.path("stalled-\(name.split(separator: " ").joined(separator: "-")).db")
            let args = isSource
                ? ["copy", through, "sqlite:" + out, "--tables", "bench_orders", "--timeout", "3", "-q"]
                : ["copy", "sqlite:" + src, through, "--tables", "bench_orders", "--mode", "replace", "--timeout", "3", "-q"]
            let started = Date()
            let r = try ferry(args)
            let seconds = Date().timeIntervalSince(started)
            let fired = relay.fired
            relay.disarm()
            XCTAssertTrue(fired, "\(name): the copy ended before the stall (\(r.err))")
            XCTAssertEqual(r.code, 1, "\(name): \(r.err)")
            XCTAssertEqual(r.err.split(separator: "\n").count, 1, "\(name): \(r.err)")
            XCTAssertLessThan(seconds, 60, "\(name): the stall took \(Int(seconds)) s to end the copy: \(r.err)")
            print("\(name): stalled copy ended after \(String(format: "%.1f", seconds)) s: \(r.err)")
        }
        for t in [pg, my] {
            let v = try ferry(["verify", "sqlite:" + src, t.url, "--tables", "bench_orders"])
            XCTAssertEqual(v.code, 0, "\(t.name) after the stalled replace: \(v.out) \(v.err)")
        }
        // The staging table the stalled replace left in MariaDB (DDL commits there; its lease's
        // owner is gone) goes with the next run. (The service's, in PostgreSQL, is its janitor's.)
        let again = try ferry(["copy", "sqlite:" + src, my.url, "--tables", "bench_orders", "--mode", "replace", "-q"])
        XCTAssertEqual(again.code, 0, again.err)
        XCTAssertEqual(try my.tables("_ferry_load_"), [], "mariadb: a staging table was left after the next run")
    }

    /// `--retries` on a direct source: a PostgreSQL reading connection cut mid-table is replaced
    /// by a new one in the copy's exported snapshot and the table read again (its target work
    /// rolled back first): the copy ends 0 and equal, each retry said. When the cut takes the
    /// snapshot's holder too, or the source is MariaDB (no snapshot a new connection can join),
    /// the table fails with one line saying why.
    func testALostSourceConnectionIsReadAgainInTheSameSnapshot() throws {
        let src = try fixture.source(rows: 100_000)
        let tag = UUID().uuidString.prefix(8).lowercased()
        let pg = try fixture.postgres("reread_\(tag)"), my = try fixture.mariadb("reread_\(tag)")
        for t in [pg, my] {
            let r = try ferry(["copy", "sqlite:" + src, t.url, "--tables", "bench_orders", "-q"])
            XCTAssertEqual(r.code, 0, r.err)
        }
        // One connection cut (the one reading rows): read again, equal.
        let (relay, through) = try relayed(pg.url)
        defer { relay.stop() }
        relay.arm(.fromServer, at: 2_000_000, carrierOnly: true)
        let out = folder.path("reread.db")
        let r = try ferry(["copy", through, "sqlite:" + out, "--tables", "bench_orders", "--retries", "2", "-q"])
        XCTAssertTrue(relay.fired, "the copy ended before the cut: \(r.err)")
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertTrue(r.err.contains("table bench_orders: the source connection was lost; reading the table again on a new connection in the copy's snapshot, retry 1 of 2"), r.err)
        let v = try ferry(["verify", pg.url, "sqlite:" + out, "--tables", "bench_orders"])
        XCTAssertEqual(v.code, 0, v.out + v.err)

        // Every connection cut, the snapshot's holder with it: one line, why.
        relay.arm(.fromServer, at: 2_000_000)
        let gone = try ferry(["copy", through, "sqlite:" + folder.path("gone.db"), "--tables", "bench_orders", "--retries", "2", "-q"])
        relay.disarm()
        XCTAssertEqual(gone.code, 1, gone.err)
        let goneErrors = gone.err.split(separator: "\n").filter { $0.hasPrefix("ferry: error") }
        XCTAssertEqual(goneErrors.count, 1, gone.err)
        XCTAssertTrue(gone.err.contains("not read again (--retries)"), gone.err)
        XCTAssertFalse(gone.err.contains("\n\t"), "libpq's message on one line: \(gone.err)")

        // MariaDB: no snapshot a new connection can join.
        let (myRelay, myThrough) = try relayed(my.url)
        defer { myRelay.stop() }
        myRelay.arm(.fromServer, at: 2_000_000, carrierOnly: true)
        let mine = try ferry(["copy", myThrough, "sqlite:" + folder.path("mine.db"), "--tables", "bench_orders", "--retries", "2", "-q"])
        XCTAssertTrue(myRelay.fired, "the copy ended before the cut: \(mine.err)")
        XCTAssertEqual(mine.code, 1, mine.err)
        XCTAssertEqual(mine.err.split(separator: "\n").filter { $0.hasPrefix("ferry: error") }.count, 1, mine.err)
        XCTAssertTrue(mine.err.contains("mysql has no read snapshot a new connection can join"), mine.err)
        print("reread: \(r.err)\nholder gone: \(gone.err)\nmariadb: \(mine.err)")
    }

    /// `ferry replicate --timeout` on a PostgreSQL source whose replication stream stalls (the
    /// relay passes nothing, the sockets stay open): the follower asks the server for an answer
    /// past half the timeout and, with none, ends with one line (it waited for ever before).
    func testAStalledReplicationStreamEndsTheFollower() throws {
        let tag = UUID().uuidString.prefix(8).lowercased()
        let pg = try fixture.postgres("stallrep_\(tag)")
        _ = try pg.query("CREATE TABLE t (id INT PRIMARY KEY, v TEXT); INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 1000) g")
        let (relay, through) = try relayed(pg.url)
        defer { relay.stop() }
        let target = folder.path("follower.db")
        let follower = Process()
        follower.executableURL = CLITests.binaryURL
        follower.arguments = ["replicate", through, "sqlite:" + target, "--timeout", "3", "-q"]
        let err = Pipe()
        follower.standardError = err
        follower.standardOutput = FileHandle.nullDevice
        try follower.run()
        // Following: the initial copy is in the target.
        let started = Date()
        while Date().timeIntervalSince(started) < 60 {
            if (try? fixture.sqlite(target).query("SELECT count(*) FROM t").trimmingCharacters(in: .whitespacesAndNewlines)) == "1000" { break }
            usleep(200_000)
        }
        Thread.sleep(forTimeInterval: 1)
        relay.arm(.fromServer, at: 0, stall: true)
        _ = try pg.query("INSERT INTO t VALUES (5000, 'during the stall')")
        let stalled = Date()
        while follower.isRunning && Date().timeIntervalSince(stalled) < 60 { usleep(100_000) }
        let seconds = Date().timeIntervalSince(stalled)
        if follower.isRunning { follower.terminate() }
        follower.waitUntilExit()
        relay.disarm()
        let said = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertLessThan(seconds, 30, "the follower did not end within 30 s of the stall: \(said)")
        XCTAssertEqual(follower.terminationStatus, 1, said)
        XCTAssertTrue(said.contains("the connection stalled"), said)
        XCTAssertEqual(said.split(separator: "\n").filter { $0.hasPrefix("ferry: error") }.count, 1, said)
        // The next run, unbroken, catches up.
        let again = try ferry(["replicate", through, "sqlite:" + target, "--until-caught-up", "-q"])
        XCTAssertEqual(again.code, 0, again.err)
        XCTAssertEqual(try fixture.sqlite(target).query("SELECT count(*) FROM t").trimmingCharacters(in: .whitespacesAndNewlines), "1001")
        _ = try ferry(["replicate", through, "sqlite:" + target, "--drop"])
        print("stalled replication stream: the follower ended after \(String(format: "%.1f", seconds)) s: \(said)")
    }

    /// A served PostgreSQL source keeps a follower's feed open between its pages (and runs):
    /// when that feed's replication connection dies under it (here its walsender is
    /// terminated, as a database restart does), the next page follows again from the client's
    /// position instead of answering 503 — the first run after every restart failed (found by
    /// scripts/chaos).
    func testAServedFeedWhoseConnectionDiedIsFollowedAgain() throws {
        let tag = UUID().uuidString.prefix(8).lowercased()
        let pg = try fixture.postgres("feedlost_\(tag)")
        _ = try pg.query("CREATE TABLE t (id INT PRIMARY KEY, v TEXT); INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 1000) g")
        let (token, tokens) = try tokenFile("manage.txt")
        let serve = try ServeProcess(pg.url, ["--token-file", tokens], log: folder.path("serve.log"))
        defer { serve.stop() }
        let source = "http://:\(token)@127.0.0.1:\(serve.port)/"
        let target = "sqlite:" + folder.path("follower.db")
        defer { _ = try? ferry(["replicate", source, target, "--drop"]) }
        func count() throws -> String { try fixture.sqlite(folder.path("follower.db")).query("SELECT count(*) FROM t").trimmingCharacters(in: .whitespacesAndNewlines) }
        let first = try ferry(["replicate", source, target, "--until-caught-up", "-q"])
        XCTAssertEqual(first.code, 0, first.err)
        _ = try pg.query("INSERT INTO t VALUES (1001, 'a')")
        let second = try ferry(["replicate", source, target, "--until-caught-up", "-q"])
        XCTAssertEqual(second.code, 0, second.err)
        XCTAssertEqual(try count(), "1001")
        // The service keeps the feed; its connection ends under it.
        let ended = try pg.query("SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE active_pid IS NOT NULL AND database = current_database()")
        XCTAssertEqual(ended.trimmingCharacters(in: .whitespacesAndNewlines), "1", "no walsender of the kept feed was found")
        _ = try pg.query("INSERT INTO t VALUES (1002, 'b')")
        let third = try ferry(["replicate", source, target, "--until-caught-up", "-q"])
        XCTAssertEqual(third.code, 0, third.err)
        XCTAssertEqual(try count(), "1002")
        let log = (try? String(contentsOfFile: folder.path("serve.log"), encoding: .utf8)) ?? ""
        XCTAssertTrue(log.contains("following it again from"), "the service did not say it followed the feed again")
    }

    /// `--resume` through the service, whose chunks' rows and records commit in two steps: a
    /// load killed after its first chunk's rows arrived and before that chunk's record (no chunk
    /// recorded) is resumed from the start with those rows removed — they made the resumed load
    /// fail on its own key before (found by scripts/chaos through the sqlitekit plugin).
    func testAResumedLoadWithNoChunkRecordedDropsTheRowsThatCameWithoutOne() throws {
        let src = try fixture.source(rows: 20_000)
        let lite = fixture.sqlite(folder.path("served-target.db"))
        _ = try lite.query("PRAGMA user_version = 1")
        let (served, serve) = try fixture.served(lite, tokens: "--token-file")
        defer { serve.stop() }
        let port = try XCTUnwrap(try Endpoint(parsing: served.url).port)
        let relay = try FaultRelay(upstreamPort: port)
        defer { relay.stop() }
        let through = served.url.replacingOccurrences(of: "127.0.0.1:\(port)", with: "127.0.0.1:\(relay.port)")
        // Cut before the first chunk (10,000 rows) is sent whole: its staging table and an empty record stay.
        relay.arm(.toServer, at: 200_000)
        let first = try ferry(["copy", "sqlite:" + src, through, "--tables", "bench_orders", "--resume", "--chunk-rows", "10000", "-q"])
        relay.disarm()
        XCTAssertEqual(first.code, 1, first.err)
        let staging = try lite.tables("_ferry_load_").filter { $0.hasSuffix("bench_orders") }
        XCTAssertEqual(staging.count, 1, "the resumable load's staging table: \(staging)")
        let name = try XCTUnwrap(staging.first)
        XCTAssertEqual(try lite.query("SELECT after_key FROM _ferry_loads").trimmingCharacters(in: .whitespacesAndNewlines), "", "no chunk recorded")
        // The first chunk's rows, there without their record (as a kill between the two leaves them).
        _ = try lite.query("ATTACH '\(src)' AS src; INSERT OR IGNORE INTO \"\(name)\" SELECT * FROM src.bench_orders WHERE id <= 10000")
        let resumed = try ferry(["copy", "sqlite:" + src, served.url, "--tables", "bench_orders", "--resume", "--chunk-rows", "10000", "-q"])
        XCTAssertEqual(resumed.code, 0, resumed.err)
        let v = try ferry(["verify", "sqlite:" + src, lite.url, "--tables", "bench_orders"])
        XCTAssertEqual(v.code, 0, v.out + v.err)
        XCTAssertEqual(try lite.tables("_ferry_load_"), [], "the staging table went with the load")
    }

    /// A table name with a NUL byte names no table, on every endpoint that takes one: 404, not
    /// the table the name's first part names (a C library reads a name up to its NUL).
    func testANameWithANulByteIsNoTable() throws {
        let db = folder.path("served.db")
        _ = try fixture.sqlite(db).query("CREATE TABLE Artist (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO Artist VALUES (1, 'a')")
        let (token, tokens) = try tokenFile("manage.txt")
        let serve = try ServeProcess("sqlite:" + db, ["--token-file", tokens], log: folder.path("serve.log"))
        defer { serve.stop() }
        let base = "http://127.0.0.1:\(serve.port)/v1/tables/"
        for (method, path) in [("GET", "Artist%00"), ("GET", "Artist%00/rows"), ("GET", "Artist%00/count"), ("GET", "Artist%00/digests?bits=4&keyhash=integer"),
                               ("DELETE", "Artist%00"), ("POST", "Artist%00/reset-serial"), ("POST", "Artist%00x/rows"), ("GET", "Artist%00%00/rows")] {
            let code = try ExternalTool.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method, "-H", "Authorization: Bearer \(token)", base + path], input: "")
            XCTAssertEqual(code, "404", "\(method) \(path)")
        }
        XCTAssertEqual(try fixture.sqlite(db).query("SELECT count(*) FROM Artist").trimmingCharacters(in: .whitespacesAndNewlines), "1")
    }

    /// A token file rewritten while `ferry serve` runs is read again: the old token is refused,
    /// the new one taken, without a restart; a file rewritten empty is not taken (the tokens
    /// stay as they were, and the log says so without a token).
    func testATokenFileRewrittenIsReadAgain() throws {
        let db = folder.path("served.db")
        _ = try fixture.sqlite(db).query("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        let old = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let new = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let tokens = folder.path("read.txt")
        try Data((old + "\n").utf8).write(to: URL(fileURLWithPath: tokens))
        let serve = try ServeProcess("sqlite:" + db, ["--read-only-token-file", tokens], log: folder.path("serve.log"))
        defer { serve.stop() }
        func status(_ token: String) throws -> String {
            try ExternalTool.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Authorization: Bearer \(token)",
                                  "http://127.0.0.1:\(serve.port)/v1/tables"], input: "")
        }
        XCTAssertEqual(try status(old), "200")
        try Data(("# rotated\n" + new + "\n").utf8).write(to: URL(fileURLWithPath: tokens))
        Thread.sleep(forTimeInterval: 1.2)
        XCTAssertEqual(try status(old), "401", "the old token after its file was rewritten")
        XCTAssertEqual(try status(new), "200", "the new token")
        try Data("\n".utf8).write(to: URL(fileURLWithPath: tokens))
        Thread.sleep(forTimeInterval: 1.2)
        XCTAssertEqual(try status(new), "200", "an empty token file was taken")
        XCTAssertTrue(serve.logText.contains("were not taken"), serve.logText)
        XCTAssertFalse(serve.logText.contains(old) || serve.logText.contains(new), "a token in the log")
    }

    /// Names PostgreSQL would cut short (past 63 bytes) or that are not UTF-8 are refused before
    /// any SQL: 404 for a table that cannot exist, 400 for one a request would create (nothing
    /// created under a shortened name), and a copy that would create one fails in one line.
    func testNamesTheEngineCannotKeepAreRefusedBeforeAnySQL() throws {
        let pg = try Fixture(folder: folder).postgres("names\(UInt32.random(in: 0...UInt32.max))")
        let (token, tokens) = try tokenFile("manage.txt")
        let serve = try ServeProcess(pg.url, ["--token-file", tokens], log: folder.path("serve.log"))
        defer { serve.stop() }
        let long = String(repeating: "a", count: 70)
        let base = "http://127.0.0.1:\(serve.port)/v1/tables/"
        func status(_ method: String, _ path: String, body: String? = nil) throws -> String {
            try ExternalTool.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method, "-H", "Authorization: Bearer \(token)"]
                                 + (body.map { ["--data-binary", $0] } ?? []) + [base + path], input: "")
        }
        for (method, path) in [("GET", long), ("GET", long + "/rows"), ("GET", long + "/count"), ("DELETE", long), ("POST", long + "/reset-serial")] {
            XCTAssertEqual(try status(method, path), "404", "\(method) \(path)")
        }
        for (method, path) in [("GET", "t%FF"), ("GET", "%C3%28/rows")] { XCTAssertEqual(try status(method, path), "400", "\(method) \(path)") }
        let schema = #"<?xml version="1.0"?><table name="\#(long)" engine="postgres"><column name="id" native="bigint" type="int64" nullable="false"/></table>"#
        XCTAssertEqual(try status("POST", "", body: schema), "400")
        XCTAssertEqual(try pg.tables("aaaa"), [], "a table was created under a shortened name")
        let src = folder.path("long.db")
        _ = try fixture.sqlite(src).query("CREATE TABLE \(long) (id INTEGER PRIMARY KEY); INSERT INTO \(long) VALUES (1)")
        let r = try ferry(["copy", "sqlite:" + src, pg.url, "-q"])
        XCTAssertEqual(r.code, 1, r.err)
        XCTAssertTrue(r.err.contains("is 70 bytes long, and postgres keeps 63"), r.err)
        XCTAssertEqual(r.err.split(separator: "\n").count, 1, r.err)
        XCTAssertEqual(try pg.tables("aaaa"), [])
    }

    /// One token cannot take every read snapshot: past --max-snapshots-per-token it is answered
    /// 503 busy, another token still gets one, and a released one makes room.
    func testReadSnapshotsAreLimitedPerToken() throws {
        let db = folder.path("served.db")
        _ = try fixture.sqlite(db).query("PRAGMA journal_mode=WAL; CREATE TABLE t (id INTEGER PRIMARY KEY)")
        func token() -> String { UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased() }
        let (one, other) = (token(), token())
        let tokens = folder.path("read.txt")
        try Data("\(one)\n\(other)\n".utf8).write(to: URL(fileURLWithPath: tokens))
        let serve = try ServeProcess("sqlite:" + db, ["--read-only-token-file", tokens, "--max-snapshots-per-token", "2", "--max-snapshots", "3"],
                                     log: folder.path("serve.log"))
        defer { serve.stop() }
        func call(_ method: String, _ path: String, _ token: String) throws -> String {
            try ExternalTool.run(["curl", "-s", "-w", " %{http_code}", "-X", method, "-H", "Authorization: Bearer \(token)",
                                  "http://127.0.0.1:\(serve.port)/\(path)"], input: "")
        }
        let first = try call("POST", "v1/snapshots", one)
        XCTAssertTrue(first.hasSuffix(" 201"), first)
        XCTAssertTrue(try call("POST", "v1/snapshots", one).hasSuffix(" 201"))
        let third = try call("POST", "v1/snapshots", one)
        XCTAssertTrue(third.hasSuffix(" 503") && third.contains("--max-snapshots-per-token"), third)
        XCTAssertTrue(try call("POST", "v1/snapshots", other).hasSuffix(" 201"), "another token")
        let full = try call("POST", "v1/snapshots", other)
        XCTAssertTrue(full.hasSuffix(" 503") && full.contains("(--max-snapshots)"), full)
        let id = try XCTUnwrap(first.range(of: #"id="([^"]+)""#, options: .regularExpression).map { String(first[$0].dropFirst(4).dropLast()) })
        XCTAssertTrue(try call("DELETE", "v1/snapshots/\(id)", one).hasSuffix(" 200"))
        XCTAssertTrue(try call("POST", "v1/snapshots", one).hasSuffix(" 201"), "room after a release")
    }

    /// `--max-requests-per-token`: a holder (here a label) with that many requests under way —
    /// uploads whose bodies have not ended — is answered 503 busy for the next one, another
    /// holder is not; a request that ends (its client gone) makes room again.
    func testRequestsUnderWayAreLimitedPerToken() throws {
        let db = folder.path("served.db")
        _ = try fixture.sqlite(db).query("PRAGMA journal_mode=WAL; CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        func token() -> String { UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased() }
        let (anna, annaToo, bob) = (token(), token(), token())
        let tokens = folder.path("write.txt")
        // Two tokens under one label share its limit.
        try Data("anna \(anna)\nanna \(annaToo)\nbob \(bob)\n".utf8).write(to: URL(fileURLWithPath: tokens))
        let serve = try ServeProcess("sqlite:" + db, ["--write-token-file", tokens, "--max-requests-per-token", "3"], log: folder.path("serve.log"))
        defer { serve.stop() }
        let script = """
            import socket, sys, time
            port, anna, anna_too, bob = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
            def get(token):
                r = socket.create_connection(("127.0.0.1", port), timeout=10)
                r.sendall(("GET /v1/tables HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer %s\\r\\nConnection: close\\r\\n\\r\\n" % token).encode())
                data = b""
                while True:
                    piece = r.recv(65536)
                    if not piece:
                        break
                    data += piece
                r.close()
                return data.decode("utf-8", "replace")
            held = []
            for t in (anna, anna_too, anna):
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                s.sendall(("POST /v1/tables/t/rows?columns=id,v HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer %s\\r\\n"
                           "Content-Type: application/xml\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n" % t).encode())
                s.sendall(b"5\\r\\n<rows\\r\\n")
                held.append(s)
            time.sleep(1)
            busy = get(anna)
            other = get(bob)
            held[0].close()
            time.sleep(1)
            again = get(anna_too)
            print("BUSY", busy.split("\\r\\n")[0], "limit" if "--max-requests-per-token" in busy else "no-reason")
            print("OTHER", other.split("\\r\\n")[0])
            print("AGAIN", again.split("\\r\\n")[0])
            """
        let out = try ExternalTool.run(["python3", "-c", script, String(serve.port), anna, annaToo, bob], input: "")
        XCTAssertTrue(out.contains("BUSY HTTP/1.1 503 Service Unavailable limit"), out)
        XCTAssertTrue(out.contains("OTHER HTTP/1.1 200"), out)
        XCTAssertTrue(out.contains("AGAIN HTTP/1.1 200"), out)
        // Nothing of the held uploads was loaded.
        XCTAssertEqual(try fixture.sqlite(db).query("SELECT count(*) FROM t").trimmingCharacters(in: .whitespacesAndNewlines), "0")
    }

    /// `--max-bodies-mb`: whole bodies held at once by all requests are bounded. Two change sets
    /// declaring 1 MiB each, half sent, hold the 2 MiB; the next document — declared or chunked,
    /// from any token — is answered 503 busy; one of them ended makes room again.
    func testWholeBodiesHeldAtOnceAreBounded() throws {
        let db = folder.path("served.db")
        _ = try fixture.sqlite(db).query("PRAGMA journal_mode=WAL; CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        func token() -> String { UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased() }
        let (one, other) = (token(), token())
        let tokens = folder.path("write.txt")
        try Data("\(one)\n\(other)\n".utf8).write(to: URL(fileURLWithPath: tokens))
        let serve = try ServeProcess("sqlite:" + db, ["--write-token-file", tokens, "--max-body-mb", "1", "--max-bodies-mb", "2"], log: folder.path("serve.log"))
        defer { serve.stop() }
        let script = """
            import socket, sys, time
            port, one, other = int(sys.argv[1]), sys.argv[2], sys.argv[3]
            def head(token, length=None):
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                framing = "Content-Length: %d" % length if length is not None else "Transfer-Encoding: chunked"
                s.sendall(("POST /v1/tables/t/changes HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer %s\\r\\n"
                           "Content-Type: application/xml\\r\\n%s\\r\\nConnection: close\\r\\n\\r\\n" % (token, framing)).encode())
                return s
            def answer(s):
                data = b""
                while True:
                    piece = s.recv(65536)
                    if not piece:
                        break
                    data += piece
                s.close()
                text = data.decode("utf-8", "replace")
                return text.split("\\r\\n")[0] + (" limit" if "--max-bodies-mb" in text else "")
            held = [head(one, 1 << 20), head(one, 1 << 20)]
            for s in held:
                s.sendall(b"x" * (512 << 10))
            time.sleep(1)
            small = head(other, 12)
            small.sendall(b"<changes/>  ")
            print("DECLARED", answer(small))
            chunked = head(other)
            piece = b"x" * 4096
            try:
                for i in range(64):
                    chunked.sendall(b"%x\\r\\n" % len(piece) + piece + b"\\r\\n")
                chunked.sendall(b"0\\r\\n\\r\\n")
            except OSError:
                pass
            print("CHUNKED", answer(chunked))
            held[0].close()
            time.sleep(1)
            again = head(other, 12)
            again.sendall(b"<changes/>  ")
            print("AGAIN", answer(again))
            """
        let out = try ExternalTool.run(["python3", "-c", script, String(serve.port), one, other], input: "")
        XCTAssertTrue(out.contains("DECLARED HTTP/1.1 503 Service Unavailable limit"), out)
        XCTAssertTrue(out.contains("CHUNKED HTTP/1.1 503 Service Unavailable limit"), out)
        XCTAssertTrue(out.contains("AGAIN HTTP/1.1 ") && !out.contains("AGAIN HTTP/1.1 503"), out)
    }

    /// SIGTERM drains `ferry serve`: a rows upload in flight when it arrives is answered (its
    /// transaction committed), new connections are refused, and the service then exits 0; the
    /// client's copy fails in one line at its next request, its target table untouched.
    func testSIGTERMDrainsRequestsInFlight() throws {
        let src = try fixture.source(rows: 200_000)
        let pg = try fixture.postgres("drain\(UInt32.random(in: 0...UInt32.max))")
        _ = try pg.query("CREATE TABLE bench_orders (id bigint PRIMARY KEY); INSERT INTO bench_orders VALUES (1)")
        let (token, tokens) = try tokenFile("manage.txt")
        let serve = try ServeProcess(pg.url, ["--token-file", tokens], log: folder.path("serve.log"))
        defer { serve.stop() }
        let copy = Process()
        copy.executableURL = CLITests.binaryURL
        copy.arguments = ["copy", "sqlite:" + src, serve.url(token: token), "--tables", "bench_orders", "--mode", "replace", "-q"]
        let err = Pipe()
        copy.standardError = err
        try copy.run()
        // Once the upload of rows has begun (its staging table made), and before it ends.
        var uploading = false
        for _ in 0..<400 where !uploading {
            usleep(25_000)
            uploading = serve.logText.contains("POST /v1/tables 201")
        }
        XCTAssertTrue(uploading, serve.logText)
        usleep(300_000)
        XCTAssertFalse(serve.logText.contains("/rows 200"), "the upload ended before the signal: the test proves nothing")
        kill(serve.process.processIdentifier, SIGTERM)
        serve.process.waitUntilExit()
        let said = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        copy.waitUntilExit()
        XCTAssertEqual(serve.process.terminationReason, .exit)
        XCTAssertEqual(serve.process.terminationStatus, 0, serve.logText)
        XCTAssertTrue(serve.logText.contains("/rows 200"), "the upload in flight was not answered: \(serve.logText)")
        XCTAssertEqual(copy.terminationStatus, 1, said)
        XCTAssertEqual(said.split(separator: "\n").count, 1, said)
        XCTAssertEqual(try pg.query("SELECT count(*) FROM bench_orders").trimmingCharacters(in: .whitespacesAndNewlines), "1")
    }

    /// Slow clients cannot hold the service's sockets: 300 connections that send half a request
    /// (one of them a byte every half second) are closed after --idle-timeout, and the service
    /// answers others all the while.
    func testHalfRequestsAreClosedAfterTheIdleTimeout() throws {
        let db = folder.path("served.db")
        try FileManager.default.copyItem(atPath: CLITests.chinookPath, toPath: db)
        let (token, tokens) = try tokenFile("read.txt")
        let serve = try ServeProcess("sqlite:" + db, ["--read-only-token-file", tokens, "--idle-timeout", "2"], log: folder.path("serve.log"))
        defer { serve.stop() }
        let script = """
            import socket, sys, time
            port, token = int(sys.argv[1]), sys.argv[2]
            held = []
            for i in range(300):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(b"GET /v1/tables HTTP/1.1\\r\\nHost: x\\r\\n")
                s.settimeout(10)
                held.append(s)
            answered = 0
            start = time.time()
            while time.time() - start < 4:
                try:
                    held[0].send(b"X")  # a header a byte at a time: closed all the same
                except OSError:
                    pass
                r = socket.create_connection(("127.0.0.1", port), timeout=5)
                r.sendall(("GET /v1/tables HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer %s\\r\\nConnection: close\\r\\n\\r\\n" % token).encode())
                answered += b" 200 " in r.recv(100)
                r.close()
                time.sleep(0.5)
            closed = 0
            for s in held:
                try:
                    closed += s.recv(100) == b""
                except OSError:
                    closed += 1
            print(answered, closed)
            """
        let out = try ExternalTool.run(["python3", "-c", script, String(serve.port), token], input: "")
        let figures = out.split(whereSeparator: \.isWhitespace).compactMap { Int($0) }
        XCTAssertEqual(figures.count, 2, out)
        XCTAssertGreaterThanOrEqual(figures.first ?? 0, 6, "requests answered while 300 half requests were open: \(out)")
        XCTAssertEqual(figures.last, 300, "half requests still open after the idle timeout: \(out)")
    }

    /// Tokens with labels (`LABEL TOKEN` lines): a load's staging table belongs to the label,
    /// so the holder's token rotated under the same label may still drop it and another label
    /// may not; the audit log has a line per write naming the label, never a token.
    func testALabelledTokenRotatedKeepsItsLoads() throws {
        let db = folder.path("served.db")
        _ = try fixture.sqlite(db).query("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        func token() -> String { UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased() }
        let (anna, annaAgain, bob) = (token(), token(), token())
        let tokens = folder.path("write.txt")
        try Data("# who holds which\nanna \(anna)\nbob\t\(bob)\n".utf8).write(to: URL(fileURLWithPath: tokens))
        let serve = try ServeProcess("sqlite:" + db, ["--write-token-file", tokens], log: folder.path("serve.log"))
        defer { serve.stop() }
        func call(_ method: String, _ path: String, _ token: String, body: String? = nil) throws -> String {
            try ExternalTool.run(["curl", "-s", "-w", " %{http_code}", "-X", method, "-H", "Authorization: Bearer \(token)"]
                                 + (body.map { ["--data-binary", $0] } ?? []) + ["http://127.0.0.1:\(serve.port)/\(path)"], input: "")
        }
        let schema = try call("GET", "v1/tables/t", anna)
        XCTAssertTrue(schema.hasSuffix(" 200"), schema)
        let staging = String(schema.dropLast(4)).replacingOccurrences(of: "name=\"t\"", with: "name=\"_ferry_append_0123\"")
        XCTAssertTrue(try call("POST", "v1/tables", anna, body: staging).hasSuffix(" 201"))
        try Data("anna \(annaAgain)\nbob \(bob)\n".utf8).write(to: URL(fileURLWithPath: tokens))
        Thread.sleep(forTimeInterval: 1.2)
        XCTAssertTrue(try call("GET", "v1/tables", anna).hasSuffix(" 401"), "the rotated-out token")
        XCTAssertTrue(try call("DELETE", "v1/tables/_ferry_append_0123", bob).hasSuffix(" 403"), "another label dropped anna's load")
        XCTAssertTrue(try call("DELETE", "v1/tables/_ferry_append_0123", annaAgain).hasSuffix(" 200"), "anna's new token lost her load")
        let log = serve.logText
        XCTAssertTrue(log.contains("audit: anna (write) POST /v1/tables 201"), log)
        XCTAssertTrue(log.contains("audit: bob (write) DELETE /v1/tables/_ferry_append_0123 403"), log)
        XCTAssertTrue(log.contains("audit: anna (write) DELETE /v1/tables/_ferry_append_0123 200"), log)
        for t in [anna, annaAgain, bob] { XCTAssertFalse(log.contains(t), "a token in the log") }
        // A label that is not one is refused with its line.
        try Data("anna smith \(anna)\n".utf8).write(to: URL(fileURLWithPath: tokens))
        let bad = try CLITests.run(CLITests.binaryURL, ["serve", "sqlite:" + db, "--write-token-file", tokens, "--listen", "127.0.0.1:0"])
        XCTAssertEqual(bad.code, 2, bad.err)
        XCTAssertTrue(bad.err.contains("write.txt:1: a line holds a token, or a label and a token"), bad.err)
    }

    /// A read token may not hold a snapshot of a served SQLite file in a rollback journal, where
    /// its shared lock would keep every writer waiting until it ends: the service does not offer
    /// it snapshots and refuses one (403); its copies read each table as they find it. A write
    /// token still may, and in WAL (readers and writers side by side) so may a read token.
    func testAReadTokenCannotLockWritersOutOfASQLiteFile() throws {
        let db = folder.path("served.db")
        _ = try fixture.sqlite(db).query("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t SELECT value, 'v' || value FROM generate_series(1, 3000)")
        let reader = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let writer = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let readTokens = folder.path("read.txt"), writeTokens = folder.path("write.txt")
        try Data((reader + "\n").utf8).write(to: URL(fileURLWithPath: readTokens))
        try Data((writer + "\n").utf8).write(to: URL(fileURLWithPath: writeTokens))
        let serve = try ServeProcess("sqlite:" + db, ["--read-only-token-file", readTokens, "--write-token-file", writeTokens], log: folder.path("serve.log"))
        defer { serve.stop() }
        func call(_ method: String, _ path: String, _ token: String) throws -> String {
            try ExternalTool.run(["curl", "-s", "-w", " %{http_code}", "-X", method, "-H", "Authorization: Bearer \(token)",
                                  "http://127.0.0.1:\(serve.port)/\(path)"], input: "")
        }
        XCTAssertTrue(try call("POST", "v1/snapshots", reader).hasSuffix(" 403"))
        XCTAssertFalse(try call("GET", "v1/capabilities", reader).contains("\"snapshots\""))
        XCTAssertTrue(try call("GET", "v1/capabilities", writer).contains("\"snapshots\""))
        let held = try call("POST", "v1/snapshots", writer)
        XCTAssertTrue(held.hasSuffix(" 201"), held)
        let id = try XCTUnwrap(held.range(of: #"id="([^"]+)""#, options: .regularExpression).map { String(held[$0].dropFirst(4).dropLast()) })
        XCTAssertTrue(try call("DELETE", "v1/snapshots/\(id)", writer).hasSuffix(" 200"))
        let copy = folder.path("copy.db")
        let r = try ferry(["copy", serve.url(token: reader), "sqlite:" + copy, "--quiet"])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertEqual(try ferry(["verify", "sqlite:" + db, "sqlite:" + copy]).code, 0)
        _ = try fixture.sqlite(db).query("PRAGMA journal_mode=WAL")
        XCTAssertTrue(try call("POST", "v1/snapshots", reader).hasSuffix(" 201"))
    }
}
