import FerryCore
import FerryDriverTestKit
import Foundation
import XCTest

/// `ferry replicate` from the command line, on the test PostgreSQL server (wal_level = logical):
/// initial copy, follow, resume, a follower stopped by SIGTERM, serial counters, status, drop.
final class ReplicateTests: XCTestCase {
    var folder: TemporaryFolder!
    override func setUpWithError() throws { folder = try TemporaryFolder() }

    func ferry(_ args: [String]) throws -> CLITests.Result { try CLITests.run(CLITests.binaryURL, args) }

    @discardableResult
    func psql(_ url: String, _ sql: String) throws -> String {
        try ExternalTool.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", url], input: sql)
    }

    /// Runs `ferry ARGS` (a follower) while `work` writes at the source, then stops it with
    /// SIGTERM: it must exit 0. Returns what it wrote on stderr.
    @discardableResult
    func stopFollower(_ args: [String], file: StaticString = #filePath, line: UInt = #line, during work: () throws -> Void) throws -> String {
        let follower = Process()
        follower.executableURL = CLITests.binaryURL
        follower.arguments = args
        let err = Pipe()
        follower.standardError = err
        try follower.run()
        do {
            try work()
        } catch {
            // Never left running behind a failed test.
            follower.terminate()
            follower.waitUntilExit()
            throw error
        }
        follower.terminate()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        follower.waitUntilExit()
        XCTAssertEqual(follower.terminationStatus, 0, String(decoding: stderr, as: UTF8.self), file: file, line: line)
        return String(decoding: stderr, as: UTF8.self)
    }

    /// A follower (`ferry replicate SRC TARGET OPTIONS`) SIGTERMed while `work` writes at the
    /// source, then a run until caught up and `ferry verify`: the target equals the source.
    /// Returns what the follower said.
    @discardableResult
    func followStopAndCatchUp(
        _ src: String, _ target: String, _ options: [String], quietFollower: Bool = true,
        file: StaticString = #filePath, line: UInt = #line, during work: () throws -> Void
    ) throws -> String {
        let said = try stopFollower(["replicate", src, target] + options + (quietFollower ? ["-q"] : []), file: file, line: line, during: work)
        let caughtUp = try ferry(["replicate", src, target] + options + ["--until-caught-up"])
        XCTAssertEqual(caughtUp.code, 0, caughtUp.err, file: file, line: line)
        let verify = try ferry(["verify", src, target] + options)
        XCTAssertEqual(verify.code, 0, verify.out + verify.err, file: file, line: line)
        return said
    }

    /// A few source transactions of every kind: parents with their children, a key changed, rows
    /// deleted, a large TOASTed value written and then left unchanged by an update.
    func workload(_ url: String, round: Int) throws {
        let base = 100_000 * round
        try psql(url, """
            BEGIN;
            INSERT INTO customer (id, name) SELECT \(base) + g, 'round \(round) ' || g FROM generate_series(1, 300) g;
            INSERT INTO customer (id, name) VALUES (\(base) + 500, 'no orders');
            INSERT INTO orders (customer_id, total, note) SELECT \(base) + 1 + g % 300, g / 3.0, 'new' FROM generate_series(1, 3000) g;
            COMMIT;
            UPDATE customer SET id = \(base) + 999 WHERE id = \(base) + 500;
            UPDATE orders SET total = total + 1 WHERE id % 11 = \(round);
            DELETE FROM orders WHERE id % 97 = \(round);
            UPDATE customer SET bio = repeat('long text ', 20000) WHERE id = \(round);
            UPDATE customer SET name = 'renamed \(round)' WHERE id = \(round);
            """)
    }

    func testReplicateCopiesThenFollowsAPostgreSQLSourceIntoSQLiteAndPostgreSQL() throws {
        let admin = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        guard let slash = admin.range(of: "/", options: .backwards) else { return XCTFail("no database in \(admin)") }
        let tag = UUID().uuidString.prefix(8).lowercased()
        let (srcName, dstName) = ("ferry_repl_src_\(tag)", "ferry_repl_dst_\(tag)")
        let src = admin[..<slash.lowerBound] + "/" + srcName, dst = admin[..<slash.lowerBound] + "/" + dstName
        try psql(admin, "CREATE DATABASE \(srcName);\nCREATE DATABASE \(dstName);\n")
        let lite = "sqlite:" + folder.path("replica.db")
        let myAdmin = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        let my = try mariadbURL(myAdmin, database: "ferry_repl_from_pg_\(tag)")
        try mariadb(myAdmin, "CREATE DATABASE ferry_repl_from_pg_\(tag) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;")
        defer {
            for t in [lite, dst, my] { _ = try? ferry(["replicate", src, t, "--drop"]) }
            _ = try? psql(admin, "DROP DATABASE IF EXISTS \(srcName) WITH (FORCE);\nDROP DATABASE IF EXISTS \(dstName) WITH (FORCE);\n")
            _ = try? mariadb(myAdmin, "DROP DATABASE IF EXISTS ferry_repl_from_pg_\(tag);")
        }
        try psql(src, """
            CREATE TABLE customer (id serial PRIMARY KEY, name text NOT NULL, bio text);
            CREATE TABLE orders (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, customer_id int NOT NULL REFERENCES customer (id),
                                 total numeric(12,2), note text, placed timestamp DEFAULT '2026-01-02 03:04:05.678901');
            CREATE TABLE nokey (a int);
            INSERT INTO customer (name) SELECT 'c' || g FROM generate_series(1, 1000) g;
            INSERT INTO orders (customer_id, total, note) SELECT 1 + g % 1000, g / 7.0, repeat('n', g % 40) FROM generate_series(1, 25000) g;
            """)

        // A table without a key is refused before anything is made at the source.
        let refused = try ferry(["replicate", src, "sqlite:" + folder.path("nokey.db"), "--tables", "nokey", "--until-caught-up"])
        XCTAssertNotEqual(refused.code, 0)
        XCTAssertTrue(refused.err.contains("no primary key"), refused.err)
        XCTAssertEqual(try psql(src, "SELECT count(*) FROM pg_publication;").trimmingCharacters(in: .whitespacesAndNewlines), "0")

        for target in [lite, dst, my] {
            let first = try ferry(["replicate", src, target, "--exclude", "nokey", "--until-caught-up"])
            XCTAssertEqual(first.code, 0, first.err)
            XCTAssertTrue(first.err.contains("copied 26000 rows"), first.err)
        }
        try workload(src, round: 1)
        for target in [lite, dst, my] {
            let again = try ferry(["replicate", src, target, "--exclude", "nokey", "--until-caught-up"])
            XCTAssertEqual(again.code, 0, again.err)
            XCTAssertTrue(again.err.contains("resuming from"), again.err)
            XCTAssertFalse(again.err.contains("copied"), again.err)
            let verify = try ferry(["verify", src, target, "--exclude", "nokey"])
            XCTAssertEqual(verify.code, 0, verify.out + verify.err)
        }

        // A follower stopped by SIGTERM while the source writes: it exits 0 between source
        // transactions, and the next run resumes where it stopped.
        try followStopAndCatchUp(src, lite, ["--exclude", "nokey"]) {
            try workload(src, round: 2)
            Thread.sleep(forTimeInterval: 1)
            try workload(src, round: 3)
        }

        // The cut-over: the target's next serial value is past every replicated one.
        let pgCaughtUp = try ferry(["replicate", src, dst, "--exclude", "nokey", "--until-caught-up", "-q"])
        XCTAssertEqual(pgCaughtUp.code, 0, pgCaughtUp.err)
        XCTAssertEqual(try ferry(["verify", src, dst, "--exclude", "nokey"]).code, 0)
        let sourceMax = Int(try psql(src, "SELECT max(id) FROM orders;").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        let next = try psql(String(dst), "INSERT INTO orders (customer_id) VALUES (1) RETURNING id;").trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(Int(next), sourceMax + 1)
        // Into MariaDB.
        let myCaughtUp = try ferry(["replicate", src, my, "--exclude", "nokey", "--until-caught-up", "-q"])
        XCTAssertEqual(myCaughtUp.code, 0, myCaughtUp.err)
        let myVerify = try ferry(["verify", src, my, "--exclude", "nokey"])
        XCTAssertEqual(myVerify.code, 0, myVerify.out + myVerify.err)
        let myNext = try mariadb(my, "INSERT INTO orders (customer_id) VALUES (1); SELECT LAST_INSERT_ID();").trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(Int(myNext), sourceMax + 1)

        let status = try ferry(["replicate", src, lite, "--status"])
        XCTAssertEqual(status.code, 0, status.err)
        XCTAssertTrue(status.out.contains("following") && status.out.contains("bytes of WAL"), status.out)
        let tight = try ferry(["replicate", src, dst, "--status", "--max-retained", "1B"])
        XCTAssertTrue(tight.err.contains("--max-retained"), tight.err)
        XCTAssertFalse(status.out.contains(try Endpoint(parsing: String(src)).password ?? "no password"), "a password in the status")

        for target in [lite, dst, my] {
            let dropped = try ferry(["replicate", src, target, "--drop"])
            XCTAssertEqual(dropped.code, 0, dropped.err)
            XCTAssertTrue(dropped.out.contains("removed replication slot"), dropped.out)
        }
        XCTAssertEqual(try psql(src, "SELECT count(*) FROM pg_replication_slots WHERE database = current_database();").trimmingCharacters(in: .whitespacesAndNewlines), "0")
        XCTAssertEqual(try psql(src, "SELECT count(*) FROM pg_publication;").trimmingCharacters(in: .whitespacesAndNewlines), "0")
        let none = try ferry(["replicate", src, lite, "--status"])
        XCTAssertEqual(none.code, 1)
    }

    /// Writes to a SQLite file by another program (the sqlite3 shell): parents with children,
    /// a key changed, deletes, and an `INSERT OR REPLACE` that removes a row through another
    /// UNIQUE index (which fires no delete trigger).
    func sqliteWorkload(_ path: String, round: Int) throws {
        let base = 100_000 * round
        _ = try ExternalTool.run(["sqlite3", path], input: """
            .timeout 10000
            PRAGMA foreign_keys = ON;
            BEGIN;
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 300)
              INSERT INTO customer (id, email, name) SELECT \(base) + n, 'r\(round)-' || n || '@x', 'round \(round)' FROM g;
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 3000)
              INSERT INTO orders (customer_id, total, placed) SELECT \(base) + 1 + n % 300, n / 4.0, '2026-01-02 03:04:05.5' FROM g;
            COMMIT;
            INSERT INTO customer (id, email, name) VALUES (\(base) + 500, 'lonely\(round)@x', 'no orders');
            UPDATE customer SET id = \(base) + 999 WHERE id = \(base) + 500;
            UPDATE orders SET total = total + 1 WHERE id % 11 = \(round);
            DELETE FROM orders WHERE id % 97 = \(round);
            INSERT OR REPLACE INTO customer (id, email, name) VALUES (\(base) + 601, 'spare\(round)@x', 'replaces customer \(2000 + round) by its email');

            """)
    }

    func testReplicateFollowsASQLiteFileWrittenByAnotherProgram() throws {
        let path = folder.path("source.db")
        _ = try ExternalTool.run(["sqlite3", path], input: """
            PRAGMA foreign_keys = ON;
            CREATE TABLE customer (id INTEGER PRIMARY KEY, email TEXT NOT NULL UNIQUE, name TEXT);
            CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, customer_id INTEGER NOT NULL REFERENCES customer (id),
                                 total NUMERIC(12,2), placed DATETIME);
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 1000)
              INSERT INTO customer (id, email, name) SELECT n, 'c' || n || '@x', 'c' || n FROM g;
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 25000)
              INSERT INTO orders (customer_id, total, placed) SELECT 1 + n % 1000, n / 4.0, '2025-05-06 07:08:09' FROM g;
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 10)
              INSERT INTO customer (id, email, name) SELECT 2000 + n, 'spare' || n || '@x', 'no orders' FROM g;

            """)
        let src = "sqlite:" + path
        let admin = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        guard let slash = admin.range(of: "/", options: .backwards) else { return XCTFail("no database in \(admin)") }
        let dstName = "ferry_repl_lite_\(UUID().uuidString.prefix(8).lowercased())"
        let pg = admin[..<slash.lowerBound] + "/" + dstName
        try psql(admin, "CREATE DATABASE \(dstName);\n")
        defer { _ = try? psql(admin, "DROP DATABASE IF EXISTS \(dstName) WITH (FORCE);\n") }
        let lite = "sqlite:" + folder.path("copy.db")

        for target in [lite, String(pg)] {
            let first = try ferry(["replicate", src, target, "--until-caught-up"])
            XCTAssertEqual(first.code, 0, first.err)
            XCTAssertTrue(first.err.contains("copied 26010 rows"), first.err)
        }
        try sqliteWorkload(path, round: 1)
        for target in [lite, String(pg)] {
            let again = try ferry(["replicate", src, target, "--until-caught-up"])
            XCTAssertEqual(again.code, 0, again.err)
            XCTAssertTrue(again.err.contains("resuming from"), again.err)
            let verify = try ferry(["verify", src, target])
            XCTAssertEqual(verify.code, 0, verify.out + verify.err)
        }
        // The row INSERT OR REPLACE removed through the email index (copied before) is gone at the target too.
        XCTAssertEqual(try psql(String(pg), "SELECT count(*) FROM customer WHERE id = 2001;").trimmingCharacters(in: .whitespacesAndNewlines), "0")

        // A follower stopped by SIGTERM while the file is written.
        try followStopAndCatchUp(src, String(pg), []) {
            try sqliteWorkload(path, round: 2)
            Thread.sleep(forTimeInterval: 1)
            try sqliteWorkload(path, round: 3)
        }
        // The cut-over: the target's next identity value is past the source's rows.
        let sourceMax = Int(try ExternalTool.run(["sqlite3", path], input: "SELECT max(id) FROM orders;\n").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        let next = try psql(String(pg), "INSERT INTO orders (customer_id) VALUES (1) RETURNING id;").trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(Int(next), sourceMax + 1)

        // Dropped: no trigger and no log left in the file, which the application still writes.
        for target in [lite, String(pg)] {
            let dropped = try ferry(["replicate", src, target, "--drop"])
            XCTAssertEqual(dropped.code, 0, dropped.err)
            XCTAssertTrue(dropped.out.contains("capture triggers"), dropped.out)
        }
        let left = try ExternalTool.run(["sqlite3", path], input: "SELECT count(*) FROM sqlite_schema WHERE name LIKE '%ferry%';\n")
        XCTAssertEqual(left.trimmingCharacters(in: .whitespacesAndNewlines), "0")
        try sqliteWorkload(path, round: 4)
    }

    @discardableResult
    func mariadb(_ url: String, _ sql: String) throws -> String {
        let e = try Endpoint(parsing: url)
        return try ExternalTool.run(
            ["mariadb", "--no-defaults", "--default-character-set=utf8mb4", "-N", "-B", "-h", e.host ?? "127.0.0.1", "-P", String(e.port ?? 3306), "-u", e.user ?? "", e.path],
            input: sql, environment: ["MYSQL_PWD": e.password ?? ""])
    }

    /// A MariaDB URL for another database on the test server.
    func mariadbURL(_ admin: String, database: String) throws -> String {
        guard let slash = admin.range(of: "/", options: .backwards) else { throw FerryError.invalidOption("no database in \(admin)") }
        return admin[..<slash.lowerBound] + "/" + database
    }

    /// One row of every MariaDB type the binlog carries, and edge values.
    static let mariadbKinds = """
        CREATE TABLE kinds (id INT PRIMARY KEY, b TINYINT(1), ti TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT, bi BIGINT, bu BIGINT UNSIGNED,
          d DECIMAL(38,10), d2 DECIMAL(5,2), f FLOAT, db DOUBLE, bt BIT(5), b1 BIT(1), b64 BIT(64), y YEAR, c CHAR(5), vc VARCHAR(40), tx TEXT,
          bn BINARY(3), vb VARBINARY(10), bl BLOB, dt DATE, tm TIME(6), t0 TIME, dtm DATETIME(6), dt0 DATETIME, ts TIMESTAMP(6) NULL,
          js JSON, e ENUM('sad','ok','happy'), st SET('a','b','c'), lc CHAR(100));
        """

    static func mariadbKindsRows(_ id: Int) -> String {
        """
        INSERT INTO kinds VALUES (\(id), 1, 255, -32768, -8388608, -9223372036854775808, 18446744073709551615,
          '1234567890123456789012345678.0123456789', -1.5, 1.5, 1.7976931348623157e308, b'10101', b'1',
          b'1000000000000000000000000000000000000000000000000000000000000001', 2024, 'abc', 'Ünïcödé 😀 𝄞', 'text',
          X'0100', X'00FF00', X'00', '2024-02-29', '23:59:59.999999', '12:34:56', '1899-12-31 23:59:59.999999', '9999-12-31 23:59:59',
          '2038-01-19 03:14:07.999999', '{"a": [1, {"b": "ü😀"}]}', 'happy', 'a,c', REPEAT('é', 100));
        INSERT INTO kinds VALUES (\(id + 1), 0, 0, 32767, 8388607, 9223372036854775807, 0, '-0.0000000001', 0.05, -0.25,
          -2.2250738585072014e-308, b'0', b'0', b'0', 1901, 'abcde', 'quote '' and \\\\ backslash', '', X'000000', X'', X'',
          '1000-01-01', '00:00:00.000001', '00:00:00', '1970-01-01 00:00:00.5', '2000-01-01 00:00:00', '1970-01-01 00:00:01.000001', '[]', 'sad', '', '');
        INSERT INTO kinds (id) VALUES (\(id + 2));
        UPDATE kinds SET vc = CONCAT(vc, ' changed'), d2 = 999.99, ts = ts - INTERVAL 1 SECOND WHERE id = \(id);
        UPDATE kinds SET id = \(id + 3) WHERE id = \(id + 2);
        """
    }

    /// Source transactions on MariaDB: parents with their children in one transaction, a key
    /// changed, deletes, a parent deleted with its children by ON DELETE CASCADE (which the
    /// binlog leaves out), a large value, every type.
    func mariadbWorkload(_ url: String, round: Int) throws {
        let base = 100_000 * round
        try mariadb(url, """
            BEGIN;
            INSERT INTO customer (id, name) SELECT \(base) + seq, CONCAT('round \(round) ', seq) FROM seq_1_to_300;
            INSERT INTO orders (customer_id, total, note) SELECT \(base) + 1 + seq % 300, seq / 4, 'new' FROM seq_1_to_3000;
            COMMIT;
            INSERT INTO customer (id, name) VALUES (\(base) + 500, 'no orders');
            UPDATE customer SET id = \(base) + 999 WHERE id = \(base) + 500;
            UPDATE orders SET total = total + 1 WHERE id % 11 = \(round);
            DELETE FROM orders WHERE id % 97 = \(round);
            DELETE FROM customer WHERE id IN (\(base) + 7, \(round) + 20);
            UPDATE customer SET bio = REPEAT('long text ', 20000) WHERE id = \(round);
            \(Self.mariadbKindsRows(10 * round))
            """)
    }

    func testReplicateFollowsMariaDBsBinlogIntoPostgreSQLAndSQLite() throws {
        let admin = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        let pgAdmin = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let tag = UUID().uuidString.prefix(8).lowercased()
        let srcName = "ferry_repl_my_\(tag)", pgName = "ferry_repl_from_my_\(tag)"
        let src = try mariadbURL(admin, database: srcName), pg = try mariadbURL(pgAdmin, database: pgName)
        try mariadb(admin, "CREATE DATABASE \(srcName) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;")
        try psql(pgAdmin, "CREATE DATABASE \(pgName);\n")
        let lite = "sqlite:" + folder.path("from-mariadb.db")
        defer {
            for t in [lite, pg] { _ = try? ferry(["replicate", src, t, "--drop"]) }
            _ = try? mariadb(admin, "DROP DATABASE IF EXISTS \(srcName);")
            _ = try? psql(pgAdmin, "DROP DATABASE IF EXISTS \(pgName) WITH (FORCE);\n")
        }
        try mariadb(src, """
            CREATE TABLE customer (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(100) NOT NULL, bio MEDIUMTEXT);
            CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer_id INT NOT NULL, total DECIMAL(12,2), note TEXT,
              placed DATETIME(6) DEFAULT '2026-01-02 03:04:05.678901', FOREIGN KEY (customer_id) REFERENCES customer (id) ON DELETE CASCADE);
            CREATE TABLE nokey (a INT);
            \(Self.mariadbKinds)
            INSERT INTO customer (name) SELECT CONCAT('c', seq) FROM seq_1_to_1000;
            INSERT INTO orders (customer_id, total, note) SELECT 1 + seq % 1000, seq / 7, REPEAT('n', seq % 40) FROM seq_1_to_25000;
            \(Self.mariadbKindsRows(0))
            """)

        // A table without a key is refused (nothing is made at a MariaDB source).
        let refused = try ferry(["replicate", src, "sqlite:" + folder.path("nokey.db"), "--tables", "nokey", "--until-caught-up"])
        XCTAssertNotEqual(refused.code, 0)
        XCTAssertTrue(refused.err.contains("primary key"), refused.err)

        for target in [lite, pg] {
            let first = try ferry(["replicate", src, target, "--exclude", "nokey", "--until-caught-up"])
            XCTAssertEqual(first.code, 0, first.err)
            XCTAssertTrue(first.err.contains("copied 26003 rows"), first.err)
        }
        try mariadbWorkload(src, round: 1)
        for target in [lite, pg] {
            let again = try ferry(["replicate", src, target, "--exclude", "nokey", "--until-caught-up"])
            XCTAssertEqual(again.code, 0, again.err)
            XCTAssertTrue(again.err.contains("resuming from"), again.err)
            XCTAssertFalse(again.err.contains("copied"), again.err)
            let verify = try ferry(["verify", src, target, "--exclude", "nokey"])
            XCTAssertEqual(verify.code, 0, verify.out + verify.err)
        }
        // The cascade the binlog left out was repeated by the target's own foreign key.
        XCTAssertEqual(try psql(pg, "SELECT count(*) FROM orders WHERE customer_id = 21;").trimmingCharacters(in: .whitespacesAndNewlines), "0")

        // A follower stopped by SIGTERM while the source writes.
        try followStopAndCatchUp(src, pg, ["--exclude", "nokey"]) {
            try mariadbWorkload(src, round: 2)
            Thread.sleep(forTimeInterval: 1)
            try mariadbWorkload(src, round: 3)
        }
        // The cut-over: the target's next serial value is past every replicated one.
        let sourceMax = Int(try mariadb(src, "SELECT max(id) FROM orders;").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        let next = try psql(pg, "INSERT INTO orders (customer_id) VALUES (1) RETURNING id;").trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(Int(next), sourceMax + 1)

        // The binlog reset under the recorded position: one line; --resync mirrors and follows on.
        try mariadbWorkload(src, round: 4)
        try mariadb(src, "RESET MASTER;")
        try mariadb(src, "UPDATE customer SET name = 'after the reset' WHERE id = 3;")
        let lost = try ferry(["replicate", src, lite, "--exclude", "nokey", "--until-caught-up"])
        XCTAssertNotEqual(lost.code, 0)
        XCTAssertTrue(lost.err.contains("--resync"), lost.err)
        XCTAssertEqual(lost.err.split(separator: "\n").filter { $0.hasPrefix("ferry: error") }.count, 1, lost.err)
        let resynced = try ferry(["replicate", src, lite, "--exclude", "nokey", "--until-caught-up", "--resync"])
        XCTAssertEqual(resynced.code, 0, resynced.err)
        XCTAssertTrue(resynced.err.contains("mirrored"), resynced.err)
        try mariadbWorkload(src, round: 5)
        let after = try ferry(["replicate", src, lite, "--exclude", "nokey", "--until-caught-up"])
        XCTAssertEqual(after.code, 0, after.err)
        let verifyLite = try ferry(["verify", src, lite, "--exclude", "nokey"])
        XCTAssertEqual(verifyLite.code, 0, verifyLite.out + verifyLite.err)

        let status = try ferry(["replicate", src, lite, "--status"])
        XCTAssertEqual(status.code, 0, status.err)
        XCTAssertTrue(status.out.contains("transactions"), status.out)
        XCTAssertFalse(status.out.contains(try Endpoint(parsing: src).password ?? "no password"), "a password in the status")
        for target in [lite, pg] {
            let dropped = try ferry(["replicate", src, target, "--drop"])
            XCTAssertEqual(dropped.code, 0, dropped.err)
            XCTAssertTrue(dropped.out.contains("the record of"), dropped.out)
        }
    }

    /// A column added at the source while Ferry follows (rows written before and after it in
    /// one stream) arrives at the target, with its default in the rows the target held;
    /// `--on-schema-change fail` stops in one line instead. PostgreSQL -> MariaDB, MariaDB ->
    /// PostgreSQL, SQLite -> SQLite.
    func testAColumnAddedAtTheSourceArrivesAtTheTarget() throws {
        let pgAdmin = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let myAdmin = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        let tag = UUID().uuidString.prefix(8).lowercased()
        let (pgName, myName) = ("ferry_repl_add_\(tag)", "ferry_repl_add_\(tag)")
        let pg = try mariadbURL(pgAdmin, database: pgName), my = try mariadbURL(myAdmin, database: myName)
        try psql(pgAdmin, "CREATE DATABASE \(pgName);\n")
        try mariadb(myAdmin, "CREATE DATABASE \(myName) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;")
        let lite = folder.path("add.db"), liteCopy = "sqlite:" + folder.path("add-copy.db")
        defer {
            _ = try? ferry(["replicate", pg, my, "--drop"])
            _ = try? ferry(["replicate", my, pg, "--drop"])
            _ = try? psql(pgAdmin, "DROP DATABASE IF EXISTS \(pgName) WITH (FORCE);\n")
            _ = try? mariadb(myAdmin, "DROP DATABASE IF EXISTS \(myName);")
        }
        // Each source: a table of its own (pg_items, my_items, items), followed into the next.
        try psql(pg, "CREATE TABLE pg_items (id int PRIMARY KEY, name text);\nINSERT INTO pg_items SELECT g, 'i' || g FROM generate_series(1, 5000) g;\n")
        try mariadb(my, "CREATE TABLE my_items (id INT PRIMARY KEY, name TEXT); INSERT INTO my_items SELECT seq, CONCAT('i', seq) FROM seq_1_to_5000;")
        _ = try ExternalTool.run(["sqlite3", lite], input: """
            CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT);
            WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 5000) INSERT INTO items SELECT n, 'i' || n FROM g;

            """)
        let pairs: [(source: String, target: String, table: String, write: (String) throws -> Void)] = [
            (pg, my, "pg_items", { try self.psql(pg, $0) }),
            (my, pg, "my_items", { try self.mariadb(my, $0) }),
            ("sqlite:" + lite, liteCopy, "items", { _ = try ExternalTool.run(["sqlite3", lite], input: $0 + "\n") }),
        ]
        for p in pairs {
            let first = try ferry(["replicate", p.source, p.target, "--tables", p.table, "--until-caught-up", "-q"])
            XCTAssertEqual(first.code, 0, first.err)
            // While a follower runs: rows before the column, the column added with a default,
            // rows after it (the follower meets the change in its stream).
            let followed = try followStopAndCatchUp(p.source, p.target, ["--tables", p.table], quietFollower: false) {
                try p.write("INSERT INTO \(p.table) (id, name) VALUES (6001, 'before');\nUPDATE \(p.table) SET name = 'changed before' WHERE id = 2;")
                Thread.sleep(forTimeInterval: 1.5)
                try p.write("""
                    INSERT INTO \(p.table) (id, name) VALUES (6003, 'just before');
                    ALTER TABLE \(p.table) ADD COLUMN grade INT DEFAULT 7;
                    INSERT INTO \(p.table) (id, name, grade) VALUES (6002, 'after', 9);
                    UPDATE \(p.table) SET grade = 1 WHERE id = 3;
                    """)
                Thread.sleep(forTimeInterval: 2)
            }
            XCTAssertTrue(followed.contains("changed at the source") && followed.contains("added it to"), followed)
            // Added while no follower ran, and refused by --on-schema-change fail.
            try p.write("ALTER TABLE \(p.table) ADD COLUMN remark TEXT;\nUPDATE \(p.table) SET remark = 'r' WHERE id = 5;")
            let refused = try ferry(["replicate", p.source, p.target, "--tables", p.table, "--until-caught-up", "--on-schema-change", "fail"])
            XCTAssertNotEqual(refused.code, 0, refused.err)
            XCTAssertTrue(refused.err.contains("remark"), refused.err)
            let again = try ferry(["replicate", p.source, p.target, "--tables", p.table, "--until-caught-up"])
            XCTAssertEqual(again.code, 0, again.err)
            XCTAssertTrue(again.err.contains("added it to"), again.err)
            let verifyAgain = try ferry(["verify", p.source, p.target, "--tables", p.table])
            XCTAssertEqual(verifyAgain.code, 0, verifyAgain.out + verifyAgain.err)
        }
        // The default reached the rows the target held before the column.
        XCTAssertEqual(try mariadb(my, "SELECT grade FROM pg_items WHERE id = 4;").trimmingCharacters(in: .whitespacesAndNewlines), "7")
        XCTAssertEqual(try psql(pg, "SELECT grade FROM my_items WHERE id = 4;").trimmingCharacters(in: .whitespacesAndNewlines), "7")
    }
}
