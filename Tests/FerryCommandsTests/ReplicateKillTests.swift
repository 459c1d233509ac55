import FerryCore
import FerryDriverTestKit
import Foundation
import XCTest

/// The kill harness: a writing application on the source while `ferry replicate` follows it,
/// and at a random moment of every run one of: the follower killed (SIGKILL), the source server
/// killed and restarted, the target server killed and restarted (`scripts/test-services crash`;
/// for a SQLite source, the writing program killed). The next run starts the follower again.
/// Samples of the target taken while it follows never show an orphan child or half of a source
/// transaction (each family's parent counts its children, written in one transaction); at the
/// end, caught up, the target equals the source.
///
/// Runs per pair: FERRY_REPLICATE_KILLS, else 100 with FERRY_TEST_LONG=1 (`scripts/test
/// --long`), else 4. FERRY_REPLICATE_SEED repeats a run; FERRY_REPLICATE_PAIRS=TEXT runs only
/// the pairs whose name holds TEXT ("ferry serve", "mysql ->").
final class ReplicateKillTests: XCTestCase {
    var folder: TemporaryFolder!
    override func setUpWithError() throws { folder = try TemporaryFolder() }

    func ferry(_ args: [String]) throws -> CLITests.Result { try CLITests.run(CLITests.binaryURL, args) }

    static var runs: Int {
        let env = ProcessInfo.processInfo.environment
        if let n = env["FERRY_REPLICATE_KILLS"].flatMap({ Int($0) }) { return n }
        return env["FERRY_TEST_LONG"] == "1" ? 100 : 4
    }

    /// The repository's scripts/test-services, which started the servers.
    static let services = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("scripts/test-services").path

    /// One engine's side of a pair: how SQL reaches it (its own command-line client), and
    /// how it is crashed.
    struct Side {
        /// What `ferry replicate` is given: the database, or the `ferry serve` in front of it.
        var url: String
        /// `scripts/test-services crash` name; nil for a SQLite file.
        let server: String?
        let client: [String]
        let environment: [String: String]
        let preamble: String
        /// The `ferry serve` in front of the database, which a run may kill and restart.
        var service: ServedDatabase?

        /// The database at `url`, reached through `ferry serve` (a manage token).
        static func served(_ url: String, folder: TemporaryFolder, name: String) throws -> Side {
            var side = try of(url)
            let token = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
            let tokens = folder.path("\(name)-tokens.txt")
            try Data((token + "\n").utf8).write(to: URL(fileURLWithPath: tokens))
            let service = try ServedDatabase(url, args: ["--token-file", tokens], token: token, log: folder.path("\(name)-serve.log"))
            side.service = service
            side.url = service.url
            return side
        }

        static func of(_ url: String) throws -> Side {
            if url.hasPrefix("sqlite:") {
                return Side(url: url, server: nil, client: ["sqlite3", "-bail", String(url.dropFirst("sqlite:".count))], environment: [:],
                            preamble: ".timeout 20000\nPRAGMA foreign_keys = ON;\n")
            }
            let e = try Endpoint(parsing: url)
            if url.hasPrefix("mysql:") {
                return Side(url: url, server: "my",
                            client: ["mariadb", "--no-defaults", "--default-character-set=utf8mb4", "-N", "-B", "-h", e.host ?? "127.0.0.1", "-P", String(e.port ?? 3306), "-u", e.user ?? "", e.path],
                            environment: ["MYSQL_PWD": e.password ?? ""], preamble: "")
            }
            return Side(url: url, server: "pg", client: ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", url], environment: [:], preamble: "")
        }

        /// Runs `sql`; throws when the client fails.
        @discardableResult
        func run(_ sql: String) throws -> String {
            try ExternalTool.run(client, input: preamble + sql + "\n", environment: environment)
        }

        /// Starts `sql` in a process of its own (the writing application).
        func start(_ sql: String) throws -> Process {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            p.arguments = client
            p.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
            let input = Pipe()
            p.standardInput = input
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle.nullDevice
            try p.run()
            let text = Data((preamble + sql + "\n").utf8)
            Thread {
                input.fileHandleForWriting.write(text)
                try? input.fileHandleForWriting.close()
            }.start()
            return p
        }

        /// A large text value of `n` characters in this engine's SQL.
        func large(_ n: Int, _ seed: Int) -> String {
            server == nil ? "substr(replace(hex(zeroblob(\(n))), '00', 'x\(seed % 10)'), 1, \(n))" : "repeat('x\(seed % 10)', \(n / 2))"
        }
    }

    /// The families in the source now: parent id -> its children's ids.
    func families(_ side: Side) throws -> [Int: [Int]] {
        var out: [Int: [Int]] = [:]
        for line in try side.run("SELECT id FROM parent;").split(separator: "\n") {
            if let p = Int(line.trimmingCharacters(in: .whitespaces)) { out[p] = [] }
        }
        for line in try side.run("SELECT id, parent_id FROM child;").split(whereSeparator: \.isNewline) {
            let f = line.split(whereSeparator: { $0 == "|" || $0 == "\t" }).compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
            if f.count == 2 { out[f[1], default: []].append(f[0]) }
        }
        return out
    }

    /// A burst of source transactions from `model` (updated as if each committed): families
    /// made, grown, moved between, deleted (their children by ON DELETE CASCADE), children
    /// given new keys, large notes written and then left unchanged, SQLite's INSERT OR REPLACE.
    func burst(_ side: Side, _ model: inout [Int: [Int]], next: inout Int, _ rng: inout SplitMix64, transactions: Int) -> String {
        var sql = ""
        for _ in 0..<transactions {
            var tx: [String] = []
            let parents = model.keys.sorted()
            let pick = { (g: inout SplitMix64) -> Int? in parents.isEmpty ? nil : parents[Int(g.next() % UInt64(parents.count))] }
            switch Int(rng.next() % 10) {
            case 0, 1, 2:
                next += 1
                let p = next
                let kids = (0..<Int(1 + rng.next() % 4)).map { _ -> Int in next += 1; return next }
                tx.append("INSERT INTO parent (id, children, tick, note) VALUES (\(p), \(kids.count), 0, 'family \(p)');")
                for c in kids { tx.append("INSERT INTO child (id, parent_id, payload) VALUES (\(c), \(p), 'child \(c) of \(p)');") }
                model[p] = kids
            case 3:
                guard let p = pick(&rng) else { continue }
                next += 1
                tx.append("INSERT INTO child (id, parent_id, payload) VALUES (\(next), \(p), 'grown');")
                tx.append("UPDATE parent SET children = children + 1 WHERE id = \(p);")
                model[p, default: []].append(next)
            case 4:
                guard let p = pick(&rng) else { continue }
                tx.append("DELETE FROM parent WHERE id = \(p);")
                model[p] = nil
            case 5:
                guard let a = pick(&rng), let b = pick(&rng), a != b, let c = model[a]?.last else { continue }
                tx.append("UPDATE child SET parent_id = \(b) WHERE id = \(c);")
                tx.append("UPDATE parent SET children = children - 1 WHERE id = \(a);")
                tx.append("UPDATE parent SET children = children + 1 WHERE id = \(b);")
                model[a]?.removeLast()
                model[b, default: []].append(c)
            case 6:
                guard let p = pick(&rng), let c = model[p]?.first else { continue }
                next += 1
                tx.append("UPDATE child SET id = \(next) WHERE id = \(c);")
                model[p]?[0] = next
            case 7:
                guard let p = pick(&rng) else { continue }
                tx.append("UPDATE parent SET note = \(side.large(30_000 + Int(rng.next() % 30_000), p)) WHERE id = \(p);")
            case 8:
                // A large note left unchanged (PostgreSQL: an unchanged TOASTed value).
                guard let p = pick(&rng) else { continue }
                tx.append("UPDATE parent SET tick = tick + 1 WHERE id = \(p);")
            default:
                guard let p = pick(&rng), let c = model[p]?.last else { continue }
                tx.append(side.server == nil
                    ? "INSERT OR REPLACE INTO child (id, parent_id, payload) VALUES (\(c), \(p), 'replaced');"
                    : "UPDATE child SET payload = 'updated' WHERE id = \(c);")
            }
            sql += "BEGIN;\n" + tx.joined(separator: "\n") + "\nCOMMIT;\n"
        }
        return sql
    }

    /// Families whose parent does not count its children, and children without a parent.
    static let invariant = """
        SELECT (SELECT count(*) FROM parent p WHERE p.children <> (SELECT count(*) FROM child c WHERE c.parent_id = p.id)),
               (SELECT count(*) FROM child c WHERE NOT EXISTS (SELECT 1 FROM parent p WHERE p.id = c.parent_id));
        """

    /// The last lines of every log the service wrote (one per start), for a failure's message.
    func serviceLogs(_ service: ServedDatabase?) -> String {
        guard let service else { return "" }
        let folder = (service.log as NSString).deletingLastPathComponent
        let name = (service.log as NSString).lastPathComponent
        let files = ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).filter { $0.hasPrefix(name) }.sorted()
        return files.map { file -> String in
            let text = (try? String(contentsOfFile: folder + "/" + file, encoding: .utf8)) ?? ""
            return "\n--- \(file):\n" + text.split(separator: "\n").suffix(30).joined(separator: "\n")
        }.joined()
    }

    func crash(_ server: String) throws {
        _ = try ExternalTool.run([Self.services, "crash", server], input: "")
    }

    /// Runs the harness for one pair; returns the outcomes by kind.
    func harness(source: Side, target: Side, runs: Int, seed: UInt64) throws -> [String: Int] {
        let schema = source.server == "my"
            ? """
            CREATE TABLE parent (id INT PRIMARY KEY, children INT NOT NULL, tick INT NOT NULL, note MEDIUMTEXT);
            CREATE TABLE child (id INT PRIMARY KEY, parent_id INT NOT NULL, payload TEXT,
              FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE);
            """
            : """
            CREATE TABLE parent (id INT PRIMARY KEY, children INT NOT NULL, tick INT NOT NULL, note TEXT);
            CREATE TABLE child (id INT PRIMARY KEY, parent_id INT NOT NULL REFERENCES parent (id) ON DELETE CASCADE, payload TEXT);
            """
        try source.run(schema)
        var rng = SplitMix64(seed: seed)
        var model: [Int: [Int]] = [:]
        var next = 0
        try source.run(burst(source, &model, next: &next, &rng, transactions: 200))
        var outcomes: [String: Int] = [:]
        var samples = 0
        let args = ["replicate", source.url, target.url, "-q"]
        for run in 0..<runs {
            model = try families(source)
            next = max(next, (model.keys.max() ?? 0), model.values.flatMap { $0 }.max() ?? 0) + 1000
            let follower = Process()
            follower.executableURL = CLITests.binaryURL
            follower.arguments = args
            let err = Pipe()
            follower.standardError = err
            follower.standardOutput = FileHandle.nullDevice
            try follower.run()
            let stderrText = Locked(Data())
            let read = DispatchGroup()
            DispatchQueue.global().async(group: read) { stderrText.withLock { $0 = err.fileHandleForReading.readDataToEndOfFile() } }
            let writer = try source.start(burst(source, &model, next: &next, &rng, transactions: 40 + Int(rng.next() % 80)))
            Thread.sleep(forTimeInterval: 0.3 + Double(rng.next() % 1700) / 1000)
            // A sample of the target while it follows (it may not hold the tables yet).
            if let line = try? target.run(Self.invariant), !line.contains("no such table"), !line.contains("does not exist") {
                let f = line.split(whereSeparator: { $0 == "|" || $0 == "\t" || $0.isWhitespace }).map(String.init)
                if f.count == 2 {
                    samples += 1
                    XCTAssertEqual(f, ["0", "0"], "run \(run) (seed \(seed)): the target showed half a transaction or an orphan: \(line)")
                }
            }
            let kind: String
            let service = source.service ?? target.service
            switch Int(rng.next() % (service == nil ? 4 : 5)) {
            case 4:
                kind = "ferry serve (\(source.service != nil ? "source" : "target")) killed"
                try service?.crash()
            case 0 where source.server != nil: kind = "source server killed"; try crash(source.server!)
            case 0: kind = "writing program killed"; kill(writer.processIdentifier, SIGKILL)
            case 1 where target.server != nil: kind = "target server killed"; try crash(target.server!)
            default: kind = "ferry killed"; kill(follower.processIdentifier, SIGKILL)
            }
            writer.waitUntilExit()
            // Still following after a crash it outlived (a SQLite writer killed): stopped as a
            // user stops it; else it ended by the kill, or on the lost server with one line.
            Thread.sleep(forTimeInterval: 0.2)
            if follower.isRunning { follower.terminate() }
            follower.waitUntilExit()
            read.wait()
            let said = String(decoding: stderrText.withLock { $0 }, as: UTF8.self)
            let ended: String
            if follower.terminationReason == .uncaughtSignal {
                XCTAssertEqual(follower.terminationStatus, SIGKILL, "run \(run) (seed \(seed)): ferry died of signal \(follower.terminationStatus): \(said)")
                ended = "killed"
            } else if follower.terminationStatus == 0 {
                ended = "exit 0"
            } else {
                let errors = said.split(separator: "\n").filter { $0.hasPrefix("ferry: error") }
                XCTAssertEqual(errors.count, 1, "run \(run) (seed \(seed)): \(said)")
                XCTAssertLessThan(follower.terminationStatus, 128, said)
                ended = "exit \(follower.terminationStatus)"
            }
            outcomes["\(kind) -> \(ended)", default: 0] += 1
        }
        // Caught up: everything the source committed, nothing twice.
        let last = try ferry(["replicate", source.url, target.url, "--until-caught-up", "-q"])
        XCTAssertEqual(last.code, 0, last.err + serviceLogs(source.service ?? target.service))
        let verify = try ferry(["verify", source.url, target.url])
        XCTAssertEqual(verify.code, 0, "seed \(seed): " + verify.out + verify.err)
        let final = try target.run(Self.invariant).split(whereSeparator: { $0 == "|" || $0 == "\t" || $0.isWhitespace }).map(String.init)
        XCTAssertEqual(final, ["0", "0"])
        outcomes["target samples taken"] = samples
        // Dropped once the server has let go of the last killed follower's connection.
        var dropped = try ferry(["replicate", source.url, target.url, "--drop"])
        for _ in 0..<40 where dropped.code != 0 {
            Thread.sleep(forTimeInterval: 0.5)
            dropped = try ferry(["replicate", source.url, target.url, "--drop"])
        }
        XCTAssertEqual(dropped.code, 0, dropped.err)
        return outcomes
    }

    func testKilledFollowersServersAndWritersLoseNothingAndDoubleNothing() throws {
        let pgAdmin = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let myAdmin = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        guard ProcessInfo.processInfo.environment["FERRY_TEST_STATE"] != nil else {
            return XCTFail("FERRY_TEST_STATE is not set: run the tests with scripts/test, which starts the servers this test crashes and restarts")
        }
        let seed = ProcessInfo.processInfo.environment["FERRY_REPLICATE_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...1_000_000)
        let tag = UUID().uuidString.prefix(8).lowercased()
        func db(_ admin: String, _ name: String) -> String {
            guard let slash = admin.range(of: "/", options: .backwards) else { return admin }
            return admin[..<slash.lowerBound] + "/" + name
        }
        let names = ["ferry_kill_pg_\(tag)", "ferry_kill_my_\(tag)", "ferry_kill_lite_\(tag)", "ferry_kill_spg_\(tag)", "ferry_kill_smy_\(tag)"]
        for n in names {
            try ExternalTool.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", pgAdmin], input: "CREATE DATABASE \(n);\n")
            try Side.of(myAdmin).run("CREATE DATABASE \(n) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;")
        }
        defer {
            for n in names {
                _ = try? ExternalTool.run(["psql", "-X", "-q", pgAdmin], input: "DROP DATABASE IF EXISTS \(n) WITH (FORCE);\n")
                _ = try? Side.of(myAdmin).run("DROP DATABASE IF EXISTS \(n);")
            }
        }
        // Through `ferry serve`: a served PostgreSQL source into a SQLite file, and MariaDB into
        // a served PostgreSQL target; a run may also kill the service and restart it.
        let servedSource = try Side.served(db(pgAdmin, names[3]), folder: folder, name: "served-source")
        let servedTarget = try Side.served(db(pgAdmin, names[4]), folder: folder, name: "served-target")
        defer {
            servedSource.service?.stop()
            servedTarget.service?.stop()
        }
        let pairs: [(Side, Side)] = [
            (try Side.of(db(pgAdmin, names[0])), try Side.of(db(myAdmin, names[0]))),
            (try Side.of(db(myAdmin, names[1])), try Side.of(db(pgAdmin, names[1]))),
            (try Side.of("sqlite:" + folder.path("kill-source.db")), try Side.of(db(pgAdmin, names[2]))),
            (servedSource, try Side.of("sqlite:" + folder.path("kill-from-served.db"))),
            (try Side.of(db(myAdmin, names[4])), servedTarget),
        ]
        var report: [String] = []
        // FERRY_REPLICATE_PAIRS=serve runs only the pairs whose name holds that text.
        let only = ProcessInfo.processInfo.environment["FERRY_REPLICATE_PAIRS"]
        for (i, (source, target)) in pairs.enumerated() {
            func shown(_ side: Side) -> String {
                let scheme = (try? Endpoint(parsing: side.service?.database ?? side.url).scheme) ?? "?"
                return side.service == nil ? scheme : "ferry serve (\(scheme))"
            }
            let pair = "\(shown(source)) -> \(shown(target))"
            if let only, !pair.contains(only) { continue }
            let outcomes = try harness(source: source, target: target, runs: Self.runs, seed: seed &+ UInt64(i))
            report.append("\(pair): \(Self.runs) runs, seed \(seed &+ UInt64(i)): " + outcomes.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        }
        print("replicate kill harness:\n  " + report.joined(separator: "\n  "))
    }
}
