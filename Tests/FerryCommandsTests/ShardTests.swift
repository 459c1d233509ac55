import FerryCore
import FerryDriverTestKit
import Foundation
import XCTest
import Yams

/// `ferry plan --shards N` and `ferry copy --plan FILE --prepare / --shard I/N / --finish`, on
/// real servers and through `ferry serve`; the scale-out samples run for real (GNU parallel) or
/// read back (the Kubernetes manifest).
final class ShardTests: XCTestCase {
    var folder: TemporaryFolder!
    var helper: Fixture { Fixture(folder: folder) }

    override func setUpWithError() throws { folder = try TemporaryFolder() }

    func ferry(_ args: [String]) throws -> CLITests.Result { try CLITests.run(CLITests.binaryURL, args) }

    struct PlanFile: Decodable {
        struct Unit: Decodable { var index: Int; var rows: Int64; var pieces: [Piece] }
        struct Piece: Decodable { var table: String; var rows: Int64; var after: [[String]]?; var upTo: [[String]]? }
        var id: String
        var source: String
        var target: String
        var units: [Unit]
    }

    func plan(_ args: [String], file: String) throws -> PlanFile {
        let r = try ferry(["plan"] + args + ["--output", file])
        XCTAssertEqual(r.code, 0, r.err)
        return try JSONDecoder().decode(PlanFile.self, from: try Data(contentsOf: URL(fileURLWithPath: file)))
    }

    /// Runs `ferry ARGS` in several processes at once; their results in order.
    func concurrently(_ runs: [[String]]) throws -> [CLITests.Result] {
        let results = Locked<[Int: CLITests.Result]>([:])
        let workers = runs.enumerated().map { i, args in
            Worker(name: "unit-\(i)") {
                let r = (try? CLITests.run(CLITests.binaryURL, args)) ?? CLITests.Result(code: -1, out: "", err: "did not start")
                results.withLock { $0[i] = r }
            }
        }
        for w in workers { w.join() }
        return runs.indices.map { i in results.withLock { $0[i] } ?? CLITests.Result(code: -1, out: "", err: "did not run") }
    }

    /// Units in any order, two at once, one twice; --finish refused while units are missing;
    /// every engine as target and through the service: the target ends equal to the source,
    /// with its index, and no staging table is left.
    func testUnitsInAnyOrderConcurrentlyAndTwiceOnEveryTarget() throws {
        let src = try helper.source(rows: 150_000)
        try ExternalTool.run(["sqlite3", src], input: "CREATE INDEX bench_orders_sku ON bench_orders (sku);\n")
        let tag = UUID().uuidString.prefix(8).lowercased()
        let pg = try helper.postgres(tag), maria = try helper.mariadb(tag), lite = helper.sqlite(folder.path("target.db"))
        let servedPG = try helper.postgres(tag + "s")
        let token = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let tokenFile = folder.path("manage.txt")
        try Data((token + "\n").utf8).write(to: URL(fileURLWithPath: tokenFile))
        let serve = try ServeProcess(servedPG.url, ["--token-file", tokenFile], log: folder.path("serve.log"))
        defer { serve.stop() }
        for (target, url) in [(pg, pg.url), (maria, maria.url), (lite, lite.url), (servedPG, serve.url(token: token))] {
            let file = folder.path("plan-\(target.name)-\(url.hasPrefix("http") ? "served" : "direct").json")
            let p = try plan(["sqlite:" + src, url, "--shards", "3"], file: file)
            XCTAssertEqual(p.units.count, 3)
            XCTAssertFalse(try String(contentsOfFile: file, encoding: .utf8).contains(token), "a token in the plan")
            XCTAssertEqual(p.units.map(\.rows).reduce(0, +), 150_000)
            XCTAssertTrue(p.units.allSatisfy { $0.rows == 50_000 }, "\(p.units.map(\.rows))")
            let base = ["copy", "sqlite:" + src, url, "--plan", file]
            XCTAssertEqual(try ferry(base + ["--prepare"]).code, 0)
            XCTAssertEqual(try ferry(base + ["--prepare"]).code, 0, "a second --prepare leaves the prepared tables alone")
            var r = try ferry(base + ["--shard", "2/3"])
            XCTAssertEqual(r.code, 0, r.err)
            r = try ferry(base + ["--finish"])
            XCTAssertEqual(r.code, 1, r.err)
            XCTAssertTrue(r.err.contains("2 of 3 units have not finished (units 0, 1)"), r.err)
            for r in try concurrently([base + ["--shard", "0/3"], base + ["--shard", "1/3"]]) { XCTAssertEqual(r.code, 0, "\(target.name): \(r.err)") }
            r = try ferry(base + ["--shard", "1/3", "--json"])
            XCTAssertEqual(r.code, 0, r.err)
            XCTAssertTrue(r.out.contains("\"unchanged\" : 50000"), "a unit run again upserts its rows, all unchanged: \(r.out)")
            r = try ferry(base + ["--finish"])
            XCTAssertEqual(r.code, 0, "\(target.name): \(r.err)")
            XCTAssertTrue(r.err.contains("1 indexes"), r.err)
            XCTAssertEqual(try ferry(base + ["--finish"]).code, 0, "finishing again does nothing")
            let v = try ferry(["verify", "sqlite:" + src, url])
            XCTAssertEqual(v.code, 0, "\(target.name): \(v.out) \(v.err)")
            XCTAssertEqual(try target.tables("_ferry_load_"), [], target.name)
            XCTAssertEqual(try target.tables("_ferry_append_"), [], target.name)
            XCTAssertFalse(try ferry(["tables", url]).out.contains("_ferry_"))
        }
    }

    /// Keys with gaps, one hot range, text keys and a composite key give three non-empty units
    /// within 2x of each other, which load to a target equal to the source.
    func testUnevenKeysGiveBalancedUnits() throws {
        let src = folder.path("uneven.db")
        try ExternalTool.run(["sqlite3", src], input: """
            CREATE TABLE gaps (id INTEGER PRIMARY KEY, v INT);
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 30000)
            INSERT INTO gaps SELECT CASE WHEN n <= 1000 THEN n WHEN n <= 2000 THEN 1000000 + n ELSE 1000000000000 + n * 7 END, n FROM g;
            CREATE TABLE hot (id INTEGER PRIMARY KEY, v INT);
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 30000)
            INSERT INTO hot SELECT CASE WHEN n <= 27000 THEN 500000 + n ELSE n * 1000000 END, n FROM g;
            CREATE TABLE words (k TEXT PRIMARY KEY, v INT);
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 30000)
            INSERT INTO words SELECT CASE WHEN n % 10 < 8 THEN 'a' || hex(randomblob(6)) ELSE 'Zürich ✓ ' || n END, n FROM g;
            CREATE TABLE pairs (a INT NOT NULL, b TEXT NOT NULL, v INT, PRIMARY KEY (a, b));
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 30000)
            INSERT INTO pairs SELECT CASE WHEN n <= 29000 THEN 1 ELSE n END, 'b' || n, n FROM g;

            """)
        let tag = UUID().uuidString.prefix(8).lowercased()
        let pg = try helper.postgres(tag)
        for table in ["gaps", "hot", "words", "pairs"] {
            let file = folder.path("plan-\(table).json")
            let p = try plan(["sqlite:" + src, pg.url, "--tables", table, "--shards", "3"], file: file)
            let sizes = p.units.map(\.rows)
            print("\(table): units of \(sizes.map(String.init).joined(separator: ", ")) rows")
            XCTAssertEqual(sizes.count, 3)
            XCTAssertEqual(sizes.reduce(0, +), 30_000)
            XCTAssertTrue(sizes.allSatisfy { $0 > 0 }, "\(table): \(sizes)")
            XCTAssertLessThanOrEqual(sizes.max() ?? 0, 2 * (sizes.min() ?? 0), "\(table): \(sizes)")
            let base = ["copy", "sqlite:" + src, pg.url, "--plan", file]
            XCTAssertEqual(try ferry(base + ["--prepare"]).code, 0)
            for i in [1, 2, 0] {
                let r = try ferry(base + ["--shard", "\(i)/3"])
                XCTAssertEqual(r.code, 0, "\(table) unit \(i): \(r.err)")
            }
            XCTAssertEqual(try ferry(base + ["--finish"]).code, 0)
            let v = try ferry(["verify", "sqlite:" + src, pg.url, "--tables", table])
            XCTAssertEqual(v.code, 0, "\(table): \(v.out) \(v.err)")
        }
        // Refusals: one line, before anything is written.
        var r = try ferry(["plan", "sqlite:" + src, pg.url, "--tables", "gaps", "--shards", "2", "--mode", "append"])
        XCTAssertEqual(r.code, 2, r.err)
        XCTAssertTrue(r.err.contains("--mode append would add a unit's rows again"), r.err)
        r = try ferry(["plan", "sqlite:" + src, pg.url, "--shards", "2", "--hold-snapshot"])
        XCTAssertEqual(r.code, 2, r.err)
        XCTAssertTrue(r.err.contains("cannot share a snapshot"), r.err)
        let file = folder.path("plan-gaps.json")
        r = try ferry(["copy", "--plan", file, "--shard", "3/5"])
        XCTAssertEqual(r.code, 2, r.err)
        XCTAssertTrue(r.err.contains("has 3 units: --shard I/3"), r.err)
        var text = try String(contentsOfFile: file, encoding: .utf8)
        text = text.replacingOccurrences(of: "\"rows\" : 10000", with: "\"rows\" : 10001")
        try Data(text.utf8).write(to: URL(fileURLWithPath: folder.path("edited.json")))
        r = try ferry(["copy", "--plan", folder.path("edited.json"), "--shard", "0/3"])
        XCTAssertEqual(r.code, 2, r.err)
        XCTAssertTrue(r.err.contains("was changed after `ferry plan` wrote it"), r.err)
    }

    /// Large tables are cut at the quantiles of a random sample of their keys (forced here with
    /// --sample-above 0): PostgreSQL's TABLESAMPLE, MariaDB's and SQLite's random conditions.
    /// A hot range still gives three non-empty units within 2x of each other in rows.
    func testSampledCutsOnEveryEngine() throws {
        let tag = UUID().uuidString.prefix(8).lowercased()
        let pg = try helper.postgres(tag), maria = try helper.mariadb(tag)
        let lite = helper.sqlite(folder.path("sampled.db"))
        _ = try pg.query("CREATE TABLE hot (id bigint PRIMARY KEY, v text); INSERT INTO hot SELECT CASE WHEN g <= 90000 THEN 500000 + g ELSE g::bigint * 1000000 END, 'v' || g FROM generate_series(1, 100000) g; ANALYZE hot")
        _ = try maria.query("CREATE TABLE hot (id BIGINT PRIMARY KEY, v VARCHAR(20)); INSERT INTO hot SELECT IF(seq <= 90000, 500000 + seq, seq * 1000000), CONCAT('v', seq) FROM seq_1_to_100000; ANALYZE TABLE hot")
        _ = try lite.query("CREATE TABLE hot (id INTEGER PRIMARY KEY, v TEXT); WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 100000) INSERT INTO hot SELECT CASE WHEN n <= 90000 THEN 500000 + n ELSE n * 1000000 END, 'v' || n FROM g")
        let target = try helper.postgres(tag + "t")
        for source in [pg, maria, lite] {
            let file = folder.path("sampled-\(source.name).json")
            let r = try ferry(["plan", source.url, target.url, "--tables", "hot", "--shards", "3", "--sample-above", "0", "--output", file])
            XCTAssertEqual(r.code, 0, r.err)
            XCTAssertTrue(r.err.contains("(~"), "\(source.name): the rows are estimates: \(r.err)")
            let base = ["copy", source.url, target.url, "--plan", file]
            XCTAssertEqual(try ferry(base + ["--prepare"]).code, 0)
            var sizes: [Int64] = []
            for i in 0..<3 {
                let u = try ferry(base + ["--shard", "\(i)/3", "--json"])
                XCTAssertEqual(u.code, 0, u.err)
                struct Out: Decodable { var rows: Int64 }
                sizes.append(try JSONDecoder().decode(Out.self, from: Data(u.out.utf8)).rows)
            }
            print("\(source.name), sampled: units of \(sizes.map(String.init).joined(separator: ", ")) rows")
            XCTAssertEqual(sizes.reduce(0, +), 100_000)
            XCTAssertTrue(sizes.allSatisfy { $0 > 0 }, "\(source.name): \(sizes)")
            XCTAssertLessThanOrEqual(sizes.max() ?? 0, 2 * (sizes.min() ?? 0), "\(source.name): \(sizes)")
            XCTAssertEqual(try ferry(base + ["--finish"]).code, 0)
            XCTAssertEqual(try ferry(["verify", source.url, target.url, "--tables", "hot"]).code, 0)
            _ = try target.query("DROP TABLE hot; DELETE FROM _ferry_units")
        }
    }

    /// A PostgreSQL source's snapshot held by `ferry plan --hold-snapshot`: rows changed at the
    /// source after the plan are not in any unit; once the holder stops, a unit fails in one
    /// line rather than read a newer state.
    func testUnitsReadTheHeldSnapshotAndFailWhenItIsGone() throws {
        let tag = UUID().uuidString.prefix(8).lowercased()
        let source = try helper.postgres(tag + "src"), target = try helper.postgres(tag + "dst")
        _ = try source.query("CREATE TABLE t (id bigint PRIMARY KEY, v text); INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 30000) g")
        let file = folder.path("held.json")
        let holder = Process()
        holder.executableURL = CLITests.binaryURL
        holder.arguments = ["plan", source.url, target.url, "--shards", "3", "--hold-snapshot", "--output", file]
        let err = Pipe()
        holder.standardError = err
        try holder.run()
        defer { if holder.isRunning { kill(holder.processIdentifier, SIGKILL) } }
        let deadline = Date().addingTimeInterval(60)
        while !FileManager.default.fileExists(atPath: file) && holder.isRunning && Date() < deadline { usleep(50_000) }
        // Changed after the plan: no unit may see it.
        _ = try source.query("DELETE FROM t WHERE id <= 100; INSERT INTO t VALUES (40000, 'late')")
        let base = ["copy", source.url, target.url, "--plan", file]
        XCTAssertEqual(try ferry(base + ["--prepare"]).code, 0)
        for i in 0..<2 { XCTAssertEqual(try ferry(base + ["--shard", "\(i)/3"]).code, 0) }
        kill(holder.processIdentifier, SIGTERM)
        holder.waitUntilExit()
        XCTAssertEqual(holder.terminationStatus, 0)
        let said = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertTrue(said.contains("holding the source snapshot") && said.contains("vacuum"), said)
        let r = try ferry(base + ["--shard", "2/3"])
        XCTAssertEqual(r.code, 1, r.err)
        XCTAssertTrue(r.err.contains("the plan's source snapshot") && r.err.contains("is gone"), r.err)
        XCTAssertEqual(r.err.split(separator: "\n").count, 1, r.err)
        XCTAssertEqual(try target.query("SELECT count(*), min(id) FROM t").trimmingCharacters(in: .whitespacesAndNewlines), "20000\t1")
    }

    /// A served PostgreSQL source: `--hold-snapshot` holds the service's snapshot id for the
    /// units (a read token may), which read in it; once the holder stops, a unit fails in one
    /// line naming the ended snapshot.
    func testAServedSourcesSnapshotHeldForTheUnits() throws {
        let tag = UUID().uuidString.prefix(8).lowercased()
        let source = try helper.postgres(tag + "src"), target = try helper.postgres(tag + "dst")
        _ = try source.query("CREATE TABLE t (id bigint PRIMARY KEY, v text); INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 30000) g")
        let token = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let tokenFile = folder.path("read.txt")
        try Data((token + "\n").utf8).write(to: URL(fileURLWithPath: tokenFile))
        let serve = try ServeProcess(source.url, ["--read-only-token-file", tokenFile], log: folder.path("serve.log"))
        defer { serve.stop() }
        let url = serve.url(token: token)
        let file = folder.path("served.json")
        let holder = Process()
        holder.executableURL = CLITests.binaryURL
        holder.arguments = ["plan", url, target.url, "--shards", "3", "--hold-snapshot", "--output", file]
        holder.standardError = FileHandle.nullDevice
        try holder.run()
        defer { if holder.isRunning { kill(holder.processIdentifier, SIGKILL) } }
        let deadline = Date().addingTimeInterval(60)
        while !FileManager.default.fileExists(atPath: file) && holder.isRunning && Date() < deadline { usleep(50_000) }
        XCTAssertFalse(try String(contentsOfFile: file, encoding: .utf8).contains(token))
        _ = try source.query("DELETE FROM t WHERE id <= 100")
        let base = ["copy", url, target.url, "--plan", file]
        XCTAssertEqual(try ferry(base + ["--prepare"]).code, 0)
        for i in 0..<2 { XCTAssertEqual(try ferry(base + ["--shard", "\(i)/3"]).code, 0) }
        kill(holder.processIdentifier, SIGTERM)
        holder.waitUntilExit()
        XCTAssertEqual(holder.terminationStatus, 0)
        let r = try ferry(base + ["--shard", "2/3", "--quiet"])
        XCTAssertEqual(r.code, 1, r.err)
        XCTAssertTrue(r.err.contains("is unknown or has ended"), r.err)
        XCTAssertEqual(try target.query("SELECT count(*), min(id) FROM t").trimmingCharacters(in: .whitespacesAndNewlines), "20000\t1")
    }

    /// samples/scale-out/parallel.sh for real: 4 units, 2 at a time, PostgreSQL to MariaDB;
    /// and the Kubernetes manifest read back: an Indexed Job whose index becomes --shard, the
    /// plan from a ConfigMap, passwords from a Secret and nowhere in the manifest.
    func testTheScaleOutSamples() throws {
        let src = try helper.source(rows: 120_000)
        let tag = UUID().uuidString.prefix(8).lowercased()
        let target = try helper.mariadb(tag)
        let script = TestDatabases.packageRoot().appendingPathComponent("samples/scale-out/parallel.sh").path
        let p = Process()
        p.executableURL = URL(fileURLWithPath: script)
        p.arguments = ["sqlite:" + src, target.url, "4", "2"]
        var env = ProcessInfo.processInfo.environment
        env["FERRY"] = CLITests.binaryURL.path
        env["PLAN"] = folder.path("parallel-plan.json")
        p.environment = env
        let err = Pipe()
        p.standardError = err
        try p.run()
        let said = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, said)
        XCTAssertTrue(said.contains("4 units, 120000 rows"), said)
        let v = try ferry(["verify", "sqlite:" + src, target.url])
        XCTAssertEqual(v.code, 0, "\(v.out) \(v.err)")

        let manifest = try String(contentsOf: TestDatabases.packageRoot().appendingPathComponent("samples/scale-out/kubernetes.yaml"), encoding: .utf8)
        let documents = try Yams.load_all(yaml: manifest).compactMap { $0 as? [String: Any] }
        XCTAssertEqual(documents.count, 3)
        let jobs = documents.filter { $0["kind"] as? String == "Job" }
        XCTAssertEqual(jobs.count, 3)
        func spec(_ d: [String: Any]) -> [String: Any] { d["spec"] as? [String: Any] ?? [:] }
        guard let units = jobs.first(where: { spec($0)["completionMode"] as? String == "Indexed" }) else { return XCTFail("no Indexed Job") }
        let completions = spec(units)["completions"] as? Int
        XCTAssertNotNil(completions)
        let pod = (spec(units)["template"] as? [String: Any]).flatMap { $0["spec"] as? [String: Any] } ?? [:]
        let container = (pod["containers"] as? [[String: Any]])?.first ?? [:]
        let command = ((container["command"] as? [String]) ?? []) + ((container["args"] as? [String]) ?? [])
        XCTAssertTrue(command.joined(separator: " ").contains("--shard \"${JOB_COMPLETION_INDEX}/\(completions ?? -1)\""), "\(command)")
        let volumes = pod["volumes"] as? [[String: Any]] ?? []
        XCTAssertTrue(volumes.contains { $0["configMap"] != nil }, "the plan from a ConfigMap")
        XCTAssertTrue(volumes.contains { $0["secret"] != nil }, "passwords from a Secret")
        let steps = jobs.compactMap { (($0["metadata"] as? [String: Any])?["labels"] as? [String: Any])?["step"] as? String }
        XCTAssertEqual(Set(steps), ["prepare", "units", "finish"])
        for job in jobs {
            let text = "\(job)"
            XCTAssertFalse(text.contains("password=") || text.contains(":****@"), "a password in \(text)")
        }
    }
}
