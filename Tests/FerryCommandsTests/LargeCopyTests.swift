import FerryCore
import FerryDriverTestKit
import Foundation
import XCTest

/// Large copies: a load is never seen half done, a killed one resumes from its last chunk, and
/// what an earlier run left behind is cleaned up by the next.
final class LargeCopyTests: XCTestCase {
    /// The killed-and-resumed copy's table: 600,000 rows (12 chunks of 50,000), a million with
    /// FERRY_TEST_LONG=1 (`scripts/test --long`). Killed at most halfway, so that at least 300,000
    /// rows are left when it is killed: at 400,000, a SQLite target once finished first.
    static let rows = ProcessInfo.processInfo.environment["FERRY_TEST_LONG"] == "1" ? 1_000_000 : 600_000
    var folder: TemporaryFolder!
    override func setUpWithError() throws { folder = try TemporaryFolder() }

    func ferry(_ args: [String]) throws -> CLITests.Result { try CLITests.run(CLITests.binaryURL, args) }

    var fixture: Fixture { Fixture(folder: folder) }
    func source(rows: Int = LargeCopyTests.rows) throws -> String { try fixture.source(rows: rows) }
    func postgres(_ tag: String) throws -> Fixture.Target { try fixture.postgres(tag) }
    func mariadb(_ tag: String) throws -> Fixture.Target { try fixture.mariadb(tag) }
    func sqlite(_ file: String) -> Fixture.Target { fixture.sqlite(file) }

    /// `ferry ARGS` started, its output dropped.
    func start(_ args: [String]) throws -> Process {
        let p = Process()
        p.executableURL = CLITests.binaryURL
        p.arguments = args
        p.standardError = FileHandle.nullDevice
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        return p
    }

    /// Starts `ferry ARGS`, waits until `ready` holds (polled), then a random moment more, checks
    /// `whileRunning`, and kills it with SIGKILL.
    func killMidway(_ args: [String], seed: inout SplitMix64, jitter: UInt64 = 400_000, ready: () throws -> Bool, whileRunning: () throws -> Void,
                    file: StaticString = #filePath, line: UInt = #line) throws {
        let p = try start(args)
        defer { if p.isRunning { kill(p.processIdentifier, SIGKILL); p.waitUntilExit() } }
        let deadline = Date().addingTimeInterval(120)
        while !(try ready()) {
            XCTAssertTrue(p.isRunning, "ferry \(args.joined(separator: " ")) ended before it could be killed", file: file, line: line)
            guard p.isRunning, Date() < deadline else { return }
            usleep(20_000)
        }
        usleep(UInt32(seed.next() % jitter))
        try whileRunning()
        XCTAssertTrue(p.isRunning, "ferry ended before it was killed: make the table larger", file: file, line: line)
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
    }

    struct CopyOutput: Decodable {
        struct Summary: Decodable { var tables: [Table] }
        struct Table: Decodable { var rows: Int64; var rowsRead: Int64?; var status: String }
        var ok: Bool
        var rows: Int64
        var summary: Summary
    }

    /// `ferry copy … --resume` killed (SIGKILL) at a random moment after its first chunks,
    /// on every engine as target: the target table is not there while it loads, the resumed run
    /// reads fewer rows than the table holds and ends equal to the source, and nothing of
    /// Ferry's is left but its (empty) bookkeeping tables.
    func testKilledCopyResumesFromItsLastChunkOnEveryTarget() throws {
        let src = try source()
        let tag = UUID().uuidString.prefix(8).lowercased()
        var seed = SplitMix64(seed: UInt64(ProcessInfo.processInfo.environment["FERRY_TEST_SEED"] ?? "") ?? UInt64.random(in: 0...UInt64.max))
        // And through the service: a served PostgreSQL database, looked into directly.
        let (served, serve) = try fixture.served(try postgres(tag + "s"), tokens: "--token-file")
        defer { serve.stop() }
        for target in [try postgres(tag), try mariadb(tag), sqlite(folder.path("target.db")), served] {
            let args = ["copy", "sqlite:" + src, target.url, "--tables", "bench_orders", "--resume", "--chunk-rows", "50000"]
            // Killed after a random number of committed rows, up to half the table.
            let after = 1 + Int(seed.next() % UInt64(Self.rows / 2))
            try killMidway(args, seed: &seed, jitter: 100_000, ready: {
                guard try target.tables("_ferry_loads").count == 1 else { return false }
                return (Int(try target.query("SELECT max(rows_loaded) FROM _ferry_loads").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0) >= after
            }, whileRunning: {
                XCTAssertEqual(try target.tables("bench_orders"), [], "\(target.name): the target table is visible before its load is complete")
            })
            XCTAssertEqual(try target.tables("bench_orders"), [], "\(target.name): a killed load left a table under the target's name")
            XCTAssertEqual(try target.tables("_ferry_load_").count, 1, "\(target.name): the killed load's staging table")
            if target.url.hasPrefix("http"), let staging = try target.tables("_ferry_load_").first {
                // Through the service a chunk's rows and its record commit one after the other: a
                // kill between them leaves rows past the record, which the resumed run removes
                // before it reads that chunk again. Such rows, made here at once.
                _ = try target.query("INSERT INTO \"\(staging)\" (id, customer_id, qty, sku) VALUES (9000000001, 1, 1, 'past the record'), (9000000002, 2, 2, 'past the record')")
            }

            let r = try ferry(args + ["--json"])
            XCTAssertEqual(r.code, 0, "\(target.name): \(r.err)")
            let out = try JSONDecoder().decode(CopyOutput.self, from: Data(r.out.utf8))
            XCTAssertTrue(out.ok)
            XCTAssertEqual(out.summary.tables.first?.rows, Int64(Self.rows), target.name)
            let read = try XCTUnwrap(out.summary.tables.first?.rowsRead, target.name)
            XCTAssertLessThan(read, Int64(Self.rows), "\(target.name): the resumed run read the whole table again")
            XCTAssertGreaterThan(read, 0, target.name)
            print("\(target.name): the resumed run read \(read) of \(Self.rows) rows")

            let v = try ferry(["verify", "sqlite:" + src, target.url, "--tables", "bench_orders"])
            XCTAssertEqual(v.code, 0, "\(target.name): \(v.out) \(v.err)")
            XCTAssertEqual(try target.tables("_ferry_load_"), [], "\(target.name): a staging table was left behind")
            XCTAssertEqual(try target.tables("_ferry_append_"), [], "\(target.name): a staging table was left behind")
            XCTAssertEqual(try target.query("SELECT count(*) FROM _ferry_loads").trimmingCharacters(in: .whitespacesAndNewlines), "0", target.name)
            if target.url.hasPrefix("http") { continue }
            XCTAssertEqual(try target.query("SELECT count(*) FROM _ferry_leases").trimmingCharacters(in: .whitespacesAndNewlines), "0", target.name)
            // Ferry's tables stay out of the catalog.
            let listed = try ferry(["tables", target.url])
            XCTAssertFalse(listed.out.contains("_ferry_"), listed.out)
        }
    }

    /// `--mode append` and `--mode upsert` with --resume, killed (SIGKILL) after their first
    /// chunks on every engine as target and through the service: the existing table does not
    /// change while the rows load into the staging table nor after the kill; the rerun reads
    /// fewer rows than it loads, merges the staging table in one transaction, and the target ends
    /// equal to the source.
    func testKilledAppendAndUpsertResumeAndMergeWhole() throws {
        let n = 150_000
        let src = try source(rows: n)
        let tag = UUID().uuidString.prefix(8).lowercased()
        var seed = SplitMix64(seed: UInt64(ProcessInfo.processInfo.environment["FERRY_TEST_SEED"] ?? "") ?? UInt64.random(in: 0...UInt64.max))
        let direct = try postgres(tag + "s")
        let (served, serve) = try fixture.served(direct, tokens: "--write-token-file")
        defer { serve.stop() }
        for target in [sqlite(folder.path("target.db")), try postgres(tag), try mariadb(tag), served] {
            // Looked into directly, also behind the service.
            let watched = target.url.hasPrefix("http") ? direct : target
            // (Created directly: the service's write token writes rows, it does not create tables.)
            let first = try ferry(["copy", "sqlite:" + src, watched.url, "--tables", "bench_orders", "--where", "id <= \(n / 3)", "--quiet"])
            XCTAssertEqual(first.code, 0, "\(target.name): \(first.err)")
            func state() throws -> String { try watched.query("SELECT count(*), sum(qty) FROM bench_orders").trimmingCharacters(in: .whitespacesAndNewlines) }
            for (mode, extra, loads) in [("append", ["--where", "id > \(n / 3)"], n - n / 3), ("upsert", [], n)] {
                if mode == "upsert" {
                    // Rows that differ, and rows the target lacks.
                    _ = try watched.query("UPDATE bench_orders SET qty = qty + 5000 WHERE id % 7 = 0")
                    _ = try watched.query("DELETE FROM bench_orders WHERE id > \(n * 5 / 6)")
                }
                let before = try state()
                let args = ["copy", "sqlite:" + src, target.url, "--tables", "bench_orders", "--mode", mode, "--resume", "--chunk-rows", "10000"] + extra
                // (Soon after: a load of this size takes about a second.)
                let after = 10_000 + Int(seed.next() % UInt64(loads / 3))
                try killMidway(args, seed: &seed, jitter: 20_000, ready: {
                    guard try watched.tables("_ferry_loads").count == 1 else { return false }
                    return (Int(try watched.query("SELECT max(rows_loaded) FROM _ferry_loads").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0) >= after
                }, whileRunning: {
                    XCTAssertEqual(try state(), before, "\(target.name) \(mode): the table changed before its load was complete")
                })
                XCTAssertEqual(try state(), before, "\(target.name) \(mode): a killed load changed the table")
                XCTAssertEqual(try watched.tables("_ferry_load_").count, 1, "\(target.name) \(mode): the killed load's staging table")

                let r = try ferry(args + ["--json"])
                XCTAssertEqual(r.code, 0, "\(target.name) \(mode): \(r.err)")
                let out = try JSONDecoder().decode(CopyOutput.self, from: Data(r.out.utf8))
                XCTAssertEqual(out.summary.tables.first?.rows, Int64(loads), "\(target.name) \(mode)")
                let read = try XCTUnwrap(out.summary.tables.first?.rowsRead, "\(target.name) \(mode)")
                XCTAssertLessThan(read, Int64(loads), "\(target.name) \(mode): the resumed run read every row again")
                XCTAssertGreaterThan(read, 0, "\(target.name) \(mode)")
                print("\(target.name) \(mode): the resumed run read \(read) of \(loads) rows")
                let v = try ferry(["verify", "sqlite:" + src, target.url, "--tables", "bench_orders"])
                XCTAssertEqual(v.code, 0, "\(target.name) \(mode): \(v.out) \(v.err)")
                XCTAssertEqual(try watched.tables("_ferry_load_"), [], "\(target.name) \(mode): a staging table was left behind")
                XCTAssertEqual(try watched.tables("_ferry_append_"), [], "\(target.name) \(mode): a staging table was left behind")
                XCTAssertEqual(try watched.tables("_ferry_upsert_"), [], "\(target.name) \(mode): a staging table was left behind")
                XCTAssertEqual(try watched.query("SELECT count(*) FROM _ferry_loads").trimmingCharacters(in: .whitespacesAndNewlines), "0", target.name)
            }
        }
    }

    /// A resumable append whose merge fails (a key the table holds already) keeps its staging
    /// table for the next --resume; a rerun that finds the record of a load whose staging table
    /// is gone (merged: the service removes the record in a request after the merge) loads
    /// nothing again.
    func testAFailedMergeKeepsItsChunksAndAMergedLoadIsNotLoadedTwice() throws {
        let src = try source(rows: 30_000)
        let target = sqlite(folder.path("target.db"))
        XCTAssertEqual(try ferry(["copy", "sqlite:" + src, target.url, "--tables", "bench_orders", "--where", "id <= 100", "--quiet"]).code, 0)
        let args = ["copy", "sqlite:" + src, target.url, "--tables", "bench_orders", "--mode", "append", "--resume", "--chunk-rows", "1000"]
        let failed = try ferry(args)
        XCTAssertEqual(failed.code, 1, failed.err)
        XCTAssertTrue(failed.err.contains("run the same copy with --resume to merge them"), failed.err)
        XCTAssertEqual(try target.query("SELECT count(*) FROM bench_orders").trimmingCharacters(in: .whitespacesAndNewlines), "100")
        let staging = try XCTUnwrap(try target.tables("_ferry_load_").first)
        // As if its merge had gone in and only the record's removal had not.
        _ = try target.query("DELETE FROM \"\(staging)\"; DROP TABLE \"\(staging)\"")
        let again = try ferry(args)
        XCTAssertEqual(again.code, 0, again.err)
        XCTAssertTrue(again.err.contains("was merged whole by its run"), again.err)
        XCTAssertEqual(try target.query("SELECT count(*) FROM bench_orders").trimmingCharacters(in: .whitespacesAndNewlines), "100")
        XCTAssertEqual(try target.query("SELECT count(*) FROM _ferry_loads").trimmingCharacters(in: .whitespacesAndNewlines), "0")
        // Modes --resume does not take, in one line each.
        let mirror = try ferry(["copy", "sqlite:" + src, target.url, "--tables", "bench_orders", "--mode", "mirror", "--resume"])
        XCTAssertEqual(mirror.code, 2, mirror.err)
        XCTAssertTrue(mirror.err.contains("a rerun of --mode mirror moves only what differs"), mirror.err)
        let incremental = try ferry(["copy", "sqlite:" + src, target.url, "--tables", "bench_orders", "--mode", "upsert", "--incremental", "id", "--resume"])
        XCTAssertNotEqual(incremental.code, 0, incremental.err)
        XCTAssertTrue(incremental.err.contains("--resume and --incremental do not go together"), incremental.err)
        XCTAssertEqual(incremental.err.split(separator: "\n").count, 1, incremental.err)
        // The next append is a new one (and fails again on the same keys, changing nothing).
        XCTAssertEqual(try ferry(args).code, 1)
        XCTAssertEqual(try target.query("SELECT count(*) FROM bench_orders").trimmingCharacters(in: .whitespacesAndNewlines), "100")
    }

    /// A connection cut mid-load (a relay closing both directions at once) fails the copy with
    /// one line that says how to continue; the same command with --resume continues after the
    /// last committed chunk.
    func testACutConnectionResumesFromItsLastChunk() throws {
        let src = try source(rows: 400_000)
        let target = try postgres(UUID().uuidString.prefix(8).lowercased())
        let proxy = try ByteCountingProxy.inFront(of: target.url)
        defer { proxy.stop() }
        let args = ["copy", "sqlite:" + src, proxy.url(replacing: target.url), "--tables", "bench_orders", "--resume", "--chunk-rows", "20000", "--quiet"]
        let p = Process()
        p.executableURL = CLITests.binaryURL
        p.arguments = args
        let err = Pipe()
        p.standardError = err
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        let deadline = Date().addingTimeInterval(120)
        while p.isRunning && Date() < deadline {
            if try target.tables("_ferry_loads").count == 1,
               (Int(try target.query("SELECT max(rows_loaded) FROM _ferry_loads").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0) >= 100_000 { break }
            usleep(20_000)
        }
        proxy.cutConnections()
        let said = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 1, said)
        XCTAssertTrue(said.contains("run the same copy with --resume to continue"), said)
        XCTAssertFalse(said.contains(target.url), "a password in the output")
        XCTAssertEqual(try target.tables("bench_orders"), [])

        let r = try ferry(Array(args.dropLast()) + ["--json"])
        XCTAssertEqual(r.code, 0, r.err)
        let out = try JSONDecoder().decode(CopyOutput.self, from: Data(r.out.utf8))
        let read = try XCTUnwrap(out.summary.tables.first?.rowsRead)
        XCTAssertLessThan(read, 400_000 - 100_000 + 20_000 + 1, "the resumed run read more than one chunk again")
        print("after a cut connection the resumed run read \(read) of 400000 rows")
        let v = try ferry(["verify", "sqlite:" + src, target.url, "--tables", "bench_orders"])
        XCTAssertEqual(v.code, 0, "\(v.out) \(v.err)")
    }

    /// A write token's resumable staging table stays its own after `ferry serve` restarts (the
    /// owner is kept in the served database by the token's fingerprint, never the token): the
    /// same token may still fill and drop it, another write token may not.
    func testAStagingTablesOwnerSurvivesARestartOfTheService() throws {
        let db = try postgres(UUID().uuidString.prefix(8).lowercased())
        let mine = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let theirs = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let tokens = folder.path("write.txt")
        try Data((mine + "\n" + theirs + "\n").utf8).write(to: URL(fileURLWithPath: tokens))
        let served = try ServedDatabase(db.url, args: ["--write-token-file", tokens], token: mine, log: folder.path("serve.log"))
        defer { served.stop() }
        let schema = "<table name=\"_ferry_load_0123abcd_t\" engine=\"http\"><column name=\"id\" native=\"\" type=\"int64\" nullable=\"false\"/><primaryKey><c>id</c></primaryKey></table>"
        func call(_ method: String, _ path: String, _ token: String, body: String? = nil) throws -> String {
            var args = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method, "-H", "Authorization: Bearer \(token)"]
            if let body { args += ["-H", "Content-Type: application/xml", "--data-binary", body] }
            return try ExternalTool.run(args + ["http://127.0.0.1:\(served.serve.port)/\(path)"], input: "")
        }
        XCTAssertEqual(try call("POST", "v1/tables", mine, body: schema), "201")
        XCTAssertEqual(try call("POST", "v1/tables/_ferry_load_0123abcd_t/rows", mine, body: "<rows><r><v>1</v></r></rows>"), "200")
        // A resumable load's record (else the restarted service's sweep drops the table its dead
        // predecessor leased: a load no `--resume` could continue).
        _ = try db.query("""
            CREATE TABLE IF NOT EXISTS _ferry_loads (staging text PRIMARY KEY, target text NOT NULL, fingerprint text NOT NULL,
              after_key text NOT NULL, rows_loaded bigint NOT NULL, source text NOT NULL, started_at text NOT NULL);
            INSERT INTO _ferry_loads VALUES ('_ferry_load_0123abcd_t', 't', 'f', '', 1, 'test', '2026-11-28T00:00:00Z');
            """)
        try served.crash()
        XCTAssertEqual(try call("POST", "v1/tables/_ferry_load_0123abcd_t/rows", theirs, body: "<rows><r><v>2</v></r></rows>"), "403")
        XCTAssertEqual(try call("POST", "v1/tables/_ferry_load_0123abcd_t/rows", mine, body: "<rows><r><v>3</v></r></rows>"), "200")
        XCTAssertEqual(try call("DELETE", "v1/tables/_ferry_load_0123abcd_t", theirs), "403")
        XCTAssertEqual(try call("DELETE", "v1/tables/_ferry_load_0123abcd_t", mine), "200")
        let kept = try db.query("SELECT owner FROM _ferry_staging_owners").trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(kept, "", "the record goes with the table")
        XCTAssertFalse(try db.query("SELECT count(*) FROM _ferry_staging_owners").contains(mine))
    }

    /// The transient staging tables a load through the service makes (`_ferry_append_…`) do
    /// not outlive their client or the service: one left by a killed client is dropped once
    /// unused for `--staging-idle-limit`, and one left by a killed `ferry serve` by the next
    /// service at its start (the dead one's lease in `_ferry_leases` has expired).
    func testTheServiceDropsTheStagingTablesOfKilledClientsAndServices() throws {
        let src = try source(rows: 300_000)
        let db = try postgres(UUID().uuidString.prefix(8).lowercased())
        XCTAssertEqual(try ferry(["copy", "sqlite:" + src, db.url, "--tables", "bench_orders", "--where", "id < 0", "--quiet"]).code, 0)
        let token = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let tokens = folder.path("write.txt")
        try Data((token + "\n").utf8).write(to: URL(fileURLWithPath: tokens))
        let served = try ServedDatabase(db.url, args: ["--write-token-file", tokens, "--staging-idle-limit", "2"], token: token, log: folder.path("serve.log"))
        defer { served.stop() }
        let args = ["copy", "sqlite:" + src, served.url, "--tables", "bench_orders", "--mode", "append"]
        func waitUntilGone(_ what: String) {
            let deadline = Date().addingTimeInterval(30)
            while ((try? db.tables("_ferry_append_")) ?? ["?"]) != [] && Date() < deadline { usleep(100_000) }
            XCTAssertEqual(try db.tables("_ferry_append_"), [], what)
            XCTAssertEqual(try db.query("SELECT count(*) FROM _ferry_leases WHERE staging LIKE '%append%'").trimmingCharacters(in: .whitespacesAndNewlines), "0", what)
        }

        var seed = SplitMix64(seed: 1)
        try killMidway(args, seed: &seed, jitter: 1, ready: { try !db.tables("_ferry_append_").isEmpty }, whileRunning: {})
        XCTAssertEqual(try db.tables("_ferry_append_").count, 1, "the killed client's staging table")
        waitUntilGone("a killed client's staging table")
        XCTAssertTrue(served.serve.logText.contains("dropped the staging table") && served.serve.logText.contains("its client is gone"), served.serve.logText)

        let client = try start(args)
        defer { if client.isRunning { kill(client.processIdentifier, SIGKILL) } }
        let deadline = Date().addingTimeInterval(60)
        while try db.tables("_ferry_append_").isEmpty && client.isRunning && Date() < deadline { usleep(20_000) }
        try served.crash()
        client.waitUntilExit()
        XCTAssertNotEqual(client.terminationStatus, 0, "the copy went on without its service")
        waitUntilGone("a killed service's staging table")
        XCTAssertEqual(try db.query("SELECT count(*) FROM bench_orders").trimmingCharacters(in: .whitespacesAndNewlines), "0")

        let r = try ferry(args)
        XCTAssertEqual(r.code, 0, r.err)
        let v = try ferry(["verify", "sqlite:" + src, db.url, "--tables", "bench_orders"])
        XCTAssertEqual(v.code, 0, "\(v.out) \(v.err)")
        XCTAssertEqual(try db.tables("_ferry_append_"), [])
    }

    /// A killed `create` (or an append creating its table) without --resume leaves no table under the target's name where the
    /// engine's DDL commits as it goes (MariaDB) and through the service; the next run removes
    /// what it left, says so, and copies.
    func testKilledCreateLeavesNothingUnderTheTargetsName() throws {
        let src = try source(rows: 250_000)
        let tag = UUID().uuidString.prefix(8).lowercased()
        var seed = SplitMix64(seed: UInt64.random(in: 0...UInt64.max))
        let maria = try mariadb(tag)
        let pg = try postgres(tag)
        let token = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let tokenFile = folder.path("manage.txt")
        try Data((token + "\n").utf8).write(to: URL(fileURLWithPath: tokenFile))
        let serve = try ServeProcess(pg.url, ["--token-file", tokenFile], log: folder.path("serve.log"))
        defer { serve.stop() }
        // And an append into a table MariaDB lacks: staged as a create is.
        let appended = try mariadb(tag + "a")
        for (target, url, watched, mode) in [(maria, maria.url, maria, "create"), (pg, serve.url(token: token), pg, "create"), (appended, appended.url, appended, "append")] {
            let args = ["copy", "sqlite:" + src, url, "--tables", "bench_orders", "--mode", mode]
            try killMidway(args, seed: &seed, ready: { try !watched.tables("_ferry_load_").isEmpty }, whileRunning: {
                XCTAssertEqual(try watched.tables("bench_orders"), [], "\(target.name): the target table is visible before its load is complete")
            })
            XCTAssertEqual(try watched.tables("bench_orders"), [], "\(target.name): a killed create left a table under the target's name")
            let r = try ferry(args)
            XCTAssertEqual(r.code, 0, "\(url): \(r.err)")
            XCTAssertTrue(r.err.contains("removed") && r.err.contains("_ferry_load_"), "\(target.name): the leftover is reported: \(r.err)")
            XCTAssertFalse(r.err.contains(token), "a token in the output")
            XCTAssertEqual(try watched.tables("_ferry_load_"), [], target.name)
            let v = try ferry(["verify", "sqlite:" + src, url, "--tables", "bench_orders"])
            XCTAssertEqual(v.code, 0, "\(target.name): \(v.out) \(v.err)")
        }
    }

    /// A live load's staging table is never taken by another run: a second copy into the same
    /// table while the first loads fails in one line naming the other process, and the first
    /// finishes.
    func testASecondRunLeavesALiveLoadAlone() throws {
        let src = try source(rows: 300_000)
        let tag = UUID().uuidString.prefix(8).lowercased()
        let target = try mariadb(tag)
        let args = ["copy", "sqlite:" + src, target.url, "--tables", "bench_orders", "--resume", "--chunk-rows", "20000"]
        let first = try start(args)
        defer { if first.isRunning { kill(first.processIdentifier, SIGKILL) } }
        let deadline = Date().addingTimeInterval(60)
        while try target.tables("_ferry_load_").isEmpty && Date() < deadline && first.isRunning { usleep(20_000) }
        let second = try ferry(args)
        XCTAssertEqual(second.code, 1, second.err)
        XCTAssertTrue(second.err.contains("another Ferry is loading bench_orders") && second.err.contains("process \(first.processIdentifier)"), second.err)
        first.waitUntilExit()
        XCTAssertEqual(first.terminationStatus, 0)
        let v = try ferry(["verify", "sqlite:" + src, target.url, "--tables", "bench_orders"])
        XCTAssertEqual(v.code, 0, "\(v.out) \(v.err)")
    }
}

/// Databases on the test servers and SQLite files in a test's folder, looked into with each
/// engine's own client.
struct Fixture {
    let folder: TemporaryFolder

    /// A target a test can look into with the engine's own client.
    struct Target {
        var name: String
        var url: String
        /// Runs one query, returning its text (one line per row, tab-separated).
        var query: (String) throws -> String
        /// Names of the tables whose name starts with `prefix`.
        var tables: (String) throws -> [String]
    }

    /// A SQLite file of `rows` bench_orders rows (every kind of value, NULLs).
    func source(rows: Int) throws -> String {
        let path = folder.path("orders.db")
        let script = TestDatabases.packageRoot().appendingPathComponent("scripts/bench-gen-sqlite").path
        try ExternalTool.run([script, String(rows), path], input: "")
        return path
    }

    func postgres(_ tag: String) throws -> Target {
        let admin = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let name = "ferry_lc_\(tag)"
        try ExternalTool.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", admin], input: "CREATE DATABASE \(name);\n")
        let url = try Self.replacingDatabase(admin, with: name)
        let query = { (sql: String) throws -> String in try ExternalTool.run(["psql", "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", url], input: sql + ";\n") }
        return Target(name: "postgres", url: url, query: query, tables: { prefix in
            try query("SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND starts_with(tablename, '\(prefix)') ORDER BY 1")
                .split(separator: "\n").map(String.init)
        })
    }

    func mariadb(_ tag: String) throws -> Target {
        let admin = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        let name = "ferry_lc_\(tag)"
        func run(_ url: String, _ sql: String) throws -> String {
            let e = try Endpoint(parsing: url)
            return try ExternalTool.run(
                ["mariadb", "--no-defaults", "-N", "-B", "-h", e.host ?? "127.0.0.1", "-P", String(e.port ?? 3306), "-u", e.user ?? "", e.path],
                input: sql + ";\n", environment: ["MYSQL_PWD": e.password ?? ""])
        }
        _ = try run(admin, "CREATE DATABASE \(name) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        let url = try Self.replacingDatabase(admin, with: name)
        return Target(name: "mariadb", url: url, query: { try run(url, $0) }, tables: { prefix in
            try run(url, "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND LEFT(table_name, \(prefix.count)) = '\(prefix)' ORDER BY 1")
                .split(separator: "\n").map(String.init)
        })
    }

    func sqlite(_ file: String) -> Target {
        let query = { (sql: String) throws -> String in try ExternalTool.run(["sqlite3", "-separator", "\t", file], input: ".timeout 10000\n" + sql + ";\n") }
        return Target(name: "sqlite", url: "sqlite:" + file, query: query, tables: { prefix in
            guard FileManager.default.fileExists(atPath: file) else { return [] }
            return try query("SELECT name FROM sqlite_master WHERE type = 'table' AND substr(name, 1, \(prefix.count)) = '\(prefix)' ORDER BY 1")
                .split(separator: "\n").map(String.init)
        })
    }

    /// `database` served by a `ferry serve` of its own, with one token of the kind `tokens`
    /// names (`--token-file`: manage; `--write-token-file`: write); the target reaches it
    /// through the service and still looks into the database directly.
    func served(_ database: Target, tokens: String) throws -> (Target, ServeProcess) {
        let token = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let tokenFile = folder.path("tokens-\(UUID().uuidString.prefix(8)).txt")
        try Data((token + "\n").utf8).write(to: URL(fileURLWithPath: tokenFile))
        let serve = try ServeProcess(database.url, [tokens, tokenFile], log: folder.path("serve.log"))
        var served = database
        served.name = "served " + database.name
        served.url = serve.url(token: token)
        return (served, serve)
    }

    static func replacingDatabase(_ admin: String, with name: String) throws -> String {
        guard let slash = admin.range(of: "/", options: .backwards) else { throw FerryError.invalidOption("no database in \(admin)") }
        return admin[..<slash.lowerBound] + "/" + name
    }
}
