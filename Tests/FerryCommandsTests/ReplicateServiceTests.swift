import FerryCore
import FerryDriverTestKit
import Foundation
import XCTest

/// A `ferry serve` process on a free loopback port, its log in a file (the service logs every
/// request: a pipe nobody reads would stop it).
final class ServeProcess {
    let process = Process()
    let port: Int
    let log: String

    /// Starts `ferry serve URL --listen 127.0.0.1:PORT ARGS` (a free port when 0) and waits
    /// for the port it bound.
    init(_ url: String, _ args: [String], log: String, port listen: Int = 0) throws {
        self.log = log
        guard FileManager.default.createFile(atPath: log, contents: nil) else { throw FerryError.invalidOption("cannot create \(log)") }
        guard let handle = FileHandle(forWritingAtPath: log) else { throw FerryError.invalidOption("cannot write \(log)") }
        process.executableURL = CLITests.binaryURL
        process.arguments = ["serve", url, "--listen", "127.0.0.1:\(listen)"] + args
        process.standardError = handle
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        var bound: Int?
        for _ in 0..<300 where bound == nil && process.isRunning {
            usleep(50_000)
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            // The service's own line (a metrics address is said before it).
            if let said = text.range(of: "ferry: serving "), let r = text.range(of: "on http://127.0.0.1:", range: said.upperBound..<text.endIndex) {
                bound = Int(text[r.upperBound...].prefix { $0.isNumber })
            }
        }
        guard let bound else {
            if process.isRunning { process.terminate() }
            throw FerryError.invalidOption("ferry serve \(url) did not start: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        }
        port = bound
    }

    func url(token: String) -> String { "http://:\(token)@127.0.0.1:\(port)/" }

    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGINT)
        process.waitUntilExit()
    }

    var logText: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
}

/// A database behind `ferry serve` that a test may kill (SIGKILL) and restart on the same port,
/// so that the service's URL, and the replica named after it, stay the same.
final class ServedDatabase {
    let database: String
    let args: [String]
    let log: String
    let token: String
    private(set) var serve: ServeProcess

    init(_ database: String, args: [String], token: String, log: String) throws {
        self.database = database
        self.args = args
        self.token = token
        self.log = log
        serve = try ServeProcess(database, args, log: log)
    }

    var url: String { serve.url(token: token) }

    /// Kills the service and starts it again on its port.
    func crash() throws {
        kill(serve.process.processIdentifier, SIGKILL)
        serve.process.waitUntilExit()
        var lastError: (any Error)?
        for attempt in 0..<20 {
            do {
                serve = try ServeProcess(database, args, log: log + ".\(attempt)", port: serve.port)
                return
            } catch {
                lastError = error
                Thread.sleep(forTimeInterval: 0.25)
            }
        }
        throw lastError ?? FerryError.invalidOption("ferry serve did not restart")
    }

    func stop() { serve.stop() }
}

/// `ferry replicate` through `ferry serve`: the service as a source (its change feed) and as a
/// target (its replica transactions), with every engine behind it.
extension ReplicateTests {
    func token(_ name: String) throws -> (path: String, token: String) {
        let token = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let path = folder.path(name)
        try Data((token + "\n").utf8).write(to: URL(fileURLWithPath: path))
        return (path, token)
    }

    func testReplicateThroughFerryServeAsSourceAndTarget() throws {
        let pgAdmin = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let myAdmin = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        let tag = UUID().uuidString.prefix(8).lowercased()
        let (pgSrcName, pgDstName, mySrcName, myDstName) = ("ferry_rs_src_\(tag)", "ferry_rs_dst_\(tag)", "ferry_rs_my_\(tag)", "ferry_rs_mydst_\(tag)")
        let pgSrc = try mariadbURL(pgAdmin, database: pgSrcName), pgDst = try mariadbURL(pgAdmin, database: pgDstName)
        let mySrc = try mariadbURL(myAdmin, database: mySrcName), myDst = try mariadbURL(myAdmin, database: myDstName)
        try psql(pgAdmin, "CREATE DATABASE \(pgSrcName);\nCREATE DATABASE \(pgDstName);\n")
        try mariadb(myAdmin, "CREATE DATABASE \(mySrcName) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin; CREATE DATABASE \(myDstName) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;")
        let liteSrc = folder.path("served-source.db"), liteDst = folder.path("served-target.db")
        let manage = try token("manage.txt"), reader = try token("read.txt")
        var services: [ServeProcess] = []
        var pairs: [(String, String)] = []
        defer {
            for (s, t) in pairs { _ = try? ferry(["replicate", s, t, "--drop"]) }
            for s in services { s.stop() }
            _ = try? psql(pgAdmin, "DROP DATABASE IF EXISTS \(pgSrcName) WITH (FORCE);\nDROP DATABASE IF EXISTS \(pgDstName) WITH (FORCE);\n")
            _ = try? mariadb(myAdmin, "DROP DATABASE IF EXISTS \(mySrcName); DROP DATABASE IF EXISTS \(myDstName);")
        }
        try psql(pgSrc, """
            CREATE TABLE customer (id serial PRIMARY KEY, name text NOT NULL, bio text);
            CREATE TABLE orders (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, customer_id int NOT NULL REFERENCES customer (id),
                                 total numeric(12,2), note text, placed timestamp DEFAULT '2026-01-02 03:04:05.678901');
            INSERT INTO customer (name) SELECT 'c' || g FROM generate_series(1, 1000) g;
            INSERT INTO orders (customer_id, total, note) SELECT 1 + g % 1000, g / 7.0, repeat('n', g % 40) FROM generate_series(1, 25000) g;
            """)
        try mariadb(mySrc, """
            CREATE TABLE customer (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(100) NOT NULL, bio MEDIUMTEXT);
            CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer_id INT NOT NULL, total DECIMAL(12,2), note TEXT,
              placed DATETIME(6) DEFAULT '2026-01-02 03:04:05.678901', FOREIGN KEY (customer_id) REFERENCES customer (id) ON DELETE CASCADE);
            \(Self.mariadbKinds)
            INSERT INTO customer (name) SELECT CONCAT('c', seq) FROM seq_1_to_1000;
            INSERT INTO orders (customer_id, total, note) SELECT 1 + seq % 1000, seq / 7, REPEAT('n', seq % 40) FROM seq_1_to_25000;
            \(Self.mariadbKindsRows(0))
            """)
        _ = try ExternalTool.run(["sqlite3", liteSrc], input: """
            PRAGMA foreign_keys = ON;
            CREATE TABLE customer (id INTEGER PRIMARY KEY, email VARCHAR(100) NOT NULL UNIQUE, name TEXT);
            CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, customer_id INTEGER NOT NULL REFERENCES customer (id),
                                 total NUMERIC(12,2), placed DATETIME);
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 1000)
              INSERT INTO customer (id, email, name) SELECT n, 'c' || n || '@x', 'c' || n FROM g;
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 25000)
              INSERT INTO orders (customer_id, total, placed) SELECT 1 + n % 1000, n / 4.0, '2025-05-06 07:08:09' FROM g;
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 10)
              INSERT INTO customer (id, email, name) SELECT 2000 + n, 'spare' || n || '@x', 'no orders' FROM g;

            """)
        func serve(_ url: String, _ args: [String], _ name: String) throws -> ServeProcess {
            let s = try ServeProcess(url, args, log: folder.path("serve-\(name).log"))
            services.append(s)
            return s
        }
        // Served sources: PostgreSQL (manage token), MariaDB (read token, --allow-feed), SQLite.
        let pgServed = try serve(pgSrc, ["--token-file", manage.path], "pg")
        let myServed = try serve(mySrc, ["--read-only-token-file", reader.path, "--allow-feed"], "my")
        let liteServed = try serve("sqlite:" + liteSrc, ["--token-file", manage.path], "lite")
        // Served targets: a SQLite file and PostgreSQL.
        // Documents of at most 1 MB: a target transaction larger than half of it stages its rows.
        let liteTarget = try serve("sqlite:" + liteDst, ["--token-file", manage.path, "--max-body-mb", "1"], "lite-target")
        let pgTarget = try serve(pgDst, ["--token-file", manage.path], "pg-target")

        // A read-only token may not start a feed unless the service allows it: one line, and
        // nothing made at the source.
        let readOnlyPG = try serve(pgSrc, ["--read-only-token-file", reader.path], "pg-read")
        let refused = try ferry(["replicate", readOnlyPG.url(token: reader.token), "sqlite:" + folder.path("refused.db"), "--until-caught-up"])
        XCTAssertNotEqual(refused.code, 0)
        XCTAssertTrue(refused.err.contains("--allow-feed"), refused.err)
        XCTAssertEqual(refused.err.split(separator: "\n").filter { $0.hasPrefix("ferry: error") }.count, 1, refused.err)
        XCTAssertEqual(try psql(pgSrc, "SELECT count(*) FROM pg_replication_slots WHERE database = current_database();").trimmingCharacters(in: .whitespacesAndNewlines), "0")

        let viaPG = (pgServed.url(token: manage.token), "sqlite:" + folder.path("from-served-pg.db"))
        let intoLite = (pgSrc, liteTarget.url(token: manage.token))
        let myToServedPG = (myServed.url(token: reader.token), pgTarget.url(token: manage.token))
        let liteToMy = (liteServed.url(token: manage.token), myDst)
        pairs = [viaPG, intoLite, myToServedPG, liteToMy]
        for (s, t) in pairs {
            let first = try ferry(["replicate", s, t, "--until-caught-up"])
            XCTAssertEqual(first.code, 0, "\(s) -> \(t): \(first.err)")
            XCTAssertTrue(first.err.contains("copied"), first.err)
            XCTAssertFalse(first.err.contains(manage.token) || first.err.contains(reader.token), "a token in the output")
        }
        try workload(pgSrc, round: 1)
        try mariadbWorkload(mySrc, round: 1)
        try sqliteWorkload(liteSrc, round: 1)
        for (s, t) in pairs {
            let again = try ferry(["replicate", s, t, "--until-caught-up"])
            XCTAssertEqual(again.code, 0, "\(s) -> \(t): \(again.err)")
            XCTAssertTrue(again.err.contains("resuming from"), again.err)
            let verify = try ferry(["verify", s, t])
            XCTAssertEqual(verify.code, 0, "\(s) -> \(t): \(verify.out + verify.err)")
        }
        // Through the service, the cascade MariaDB's binlog leaves out is repeated by the
        // served target's own foreign key.
        XCTAssertEqual(try psql(pgDst, "SELECT count(*) FROM orders WHERE customer_id = 21;").trimmingCharacters(in: .whitespacesAndNewlines), "0")

        // Followers stopped by SIGTERM while the sources write, on both sides of the service.
        try followStopAndCatchUp(viaPG.0, viaPG.1, []) {
            try workload(pgSrc, round: 2)
            Thread.sleep(forTimeInterval: 1)
            try workload(pgSrc, round: 3)
        }
        try followStopAndCatchUp(intoLite.0, intoLite.1, []) {
            try workload(pgSrc, round: 4)
            Thread.sleep(forTimeInterval: 1)
            try workload(pgSrc, round: 5)
        }
        try followStopAndCatchUp(myToServedPG.0, myToServedPG.1, []) {
            try mariadbWorkload(mySrc, round: 2)
            Thread.sleep(forTimeInterval: 1)
            try mariadbWorkload(mySrc, round: 3)
        }
        // The cut-over through the service: the served target's next serial value is past
        // every replicated one.
        let sourceMax = Int(try mariadb(mySrc, "SELECT max(id) FROM orders;").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        let next = try psql(pgDst, "INSERT INTO orders (customer_id) VALUES (1) RETURNING id;").trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(Int(next), sourceMax + 1)
        try sqliteWorkload(liteSrc, round: 2)
        let lite = try ferry(["replicate", liteToMy.0, liteToMy.1, "--until-caught-up"])
        XCTAssertEqual(lite.code, 0, lite.err)
        XCTAssertEqual(try ferry(["verify", liteToMy.0, liteToMy.1]).code, 0)

        // A column added at the source arrives through the service, on either side of it.
        try psql(pgSrc, "ALTER TABLE customer ADD COLUMN tier int DEFAULT 3;\nINSERT INTO customer (name, tier) VALUES ('tiered', 9);\n")
        // And one source transaction of several MB (staged on its way into the served SQLite file).
        try psql(pgSrc, "UPDATE orders SET note = repeat('s', 200);\n")
        for (s, t) in [viaPG, intoLite] {
            let added = try ferry(["replicate", s, t, "--until-caught-up"])
            XCTAssertEqual(added.code, 0, "\(s) -> \(t): \(added.err)")
            XCTAssertTrue(added.err.contains("the source added the column tier"), added.err)
            let verify = try ferry(["verify", s, t])
            XCTAssertEqual(verify.code, 0, "\(s) -> \(t): \(verify.out + verify.err)")
        }

        // And one MariaDB transaction of over 20,000 rows carried in the document into the served
        // PostgreSQL (default --max-body-mb): checked, then written 10,000 rows at a time.
        // (The cut-over's row written at the target, taken out again.)
        try psql(pgDst, "DELETE FROM orders WHERE id = \(sourceMax + 1);")
        try mariadb(mySrc, "UPDATE orders SET note = REPEAT('m', 200);")
        let carried = try ferry(["replicate", myToServedPG.0, myToServedPG.1, "--until-caught-up"])
        XCTAssertEqual(carried.code, 0, carried.err)
        XCTAssertTrue(liteTarget.logText.contains("_ferry_replica_"), "the served SQLite file's --max-body-mb 1 staged the large transaction")
        XCTAssertFalse(pgTarget.logText.contains("_ferry_replica_"), "the transaction was staged, not carried in the document")
        let carriedVerify = try ferry(["verify", myToServedPG.0, myToServedPG.1])
        XCTAssertEqual(carriedVerify.code, 0, carriedVerify.out + carriedVerify.err)
        XCTAssertEqual(try psql(pgDst, "SELECT count(*) FROM orders WHERE note = repeat('m', 200);").trimmingCharacters(in: .whitespacesAndNewlines),
                       try mariadb(mySrc, "SELECT count(*) FROM orders;").trimmingCharacters(in: .whitespacesAndNewlines))

        // Status through the service: the source's position and what it keeps.
        let status = try ferry(["replicate", viaPG.0, viaPG.1, "--status"])
        XCTAssertEqual(status.code, 0, status.err)
        XCTAssertTrue(status.out.contains("following") && status.out.contains("bytes of WAL"), status.out)
        let served = try ferry(["replicate", intoLite.0, intoLite.1, "--status"])
        XCTAssertEqual(served.code, 0, served.err)
        XCTAssertTrue(served.out.contains("following"), served.out)

        // Dropped: no slot, publication, trigger or log left, and no staging table at a target.
        for (s, t) in pairs {
            let dropped = try ferry(["replicate", s, t, "--drop"])
            XCTAssertEqual(dropped.code, 0, dropped.err)
            XCTAssertTrue(dropped.out.contains("the record of"), dropped.out)
        }
        pairs = []
        XCTAssertEqual(try psql(pgSrc, "SELECT count(*) FROM pg_replication_slots WHERE database = current_database();").trimmingCharacters(in: .whitespacesAndNewlines), "0")
        XCTAssertEqual(try psql(pgSrc, "SELECT count(*) FROM pg_publication;").trimmingCharacters(in: .whitespacesAndNewlines), "0")
        let left = try ExternalTool.run(["sqlite3", liteSrc], input: "SELECT count(*) FROM sqlite_schema WHERE name LIKE '%ferry%';\n")
        XCTAssertEqual(left.trimmingCharacters(in: .whitespacesAndNewlines), "0")
        // (Ferry's bookkeeping, hidden from the catalogs, may stay: the replicas' records, the service's staging leases.)
        let staging = try ExternalTool.run(["sqlite3", liteDst], input: "SELECT count(*) FROM sqlite_schema WHERE name LIKE '\\_ferry\\_%' ESCAPE '\\' AND name NOT IN ('_ferry_replication', '_ferry_leases');\n")
        XCTAssertEqual(staging.trimmingCharacters(in: .whitespacesAndNewlines), "0")
        for s in services {
            XCTAssertFalse(s.logText.contains(manage.token) || s.logText.contains(reader.token), "a token in the service's log")
        }
    }
}
