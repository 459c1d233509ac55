import FerryCore
import FerryDriverTestKit
@testable import FerryMySQL
@testable import FerryPostgres
@testable import FerrySQLite
import Foundation
import XCTest

/// Driver plugins from the command line, as a user meets them: found through FERRY_DRIVER_PATH
/// or PATH, refused when untrusted or incapable, and one clear line when they misbehave.
final class PluginCommandTests: XCTestCase {
    var folder: TemporaryFolder!
    override func setUpWithError() throws { folder = try TemporaryFolder() }

    var sqlitekitPath: [String: String] { ["FERRY_DRIVER_PATH": PluginFixtures.products.path] }
    var allPluginPaths: [String: String] {
        ["FERRY_DRIVER_PATH": [PluginFixtures.products.path, PluginFixtures.jsonlFolder, PluginFixtures.badFolder].joined(separator: ":")]
    }

    /// A SQLite file opened directly, to set up and check data.
    func sqlite(_ path: String) throws -> SQLiteConnection {
        guard let c = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + path), role: .target) as? SQLiteConnection else {
            throw ConformanceFailure("the SQLite driver returned another kind of connection")
        }
        return c
    }

    func ferry(_ args: [String], env: [String: String]? = nil) throws -> PluginFixtures.Result {
        try PluginFixtures.run(args, environment: env ?? allPluginPaths)
    }

    /// A copy of Chinook both ways through the kit's SQLite plugin, with two jobs, checked
    /// value by value by `ferry verify` both ways.
    func testCopyBothWaysThroughAPlugin() throws {
        let viaPlugin = folder.path("via-plugin.db")
        var r = try ferry(["copy", "sqlite:" + PluginFixtures.chinook, "sqlitekit:" + viaPlugin, "--jobs", "2"])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertTrue(r.err.contains("copied 11 of 11 tables, 15607 rows"), r.err)
        r = try ferry(["copy", "sqlitekit:" + viaPlugin, "sqlite:" + folder.path("back.db"), "--jobs", "2"])
        XCTAssertEqual(r.code, 0, r.err)
        for (a, b) in [("sqlitekit:" + viaPlugin, "sqlite:" + PluginFixtures.chinook), ("sqlite:" + PluginFixtures.chinook, "sqlitekit:" + viaPlugin),
                       ("sqlite:" + folder.path("back.db"), "sqlite:" + PluginFixtures.chinook)] {
            r = try ferry(["verify", a, b])
            XCTAssertEqual(r.code, 0, "\(a) vs \(b): \(r.err)")
            XCTAssertTrue(r.out.contains("all 11 tables are equal") || r.err.contains("all 11 tables are equal"), r.out + r.err)
        }
        // Mirror into the plugin moves only what changed.
        let changed = folder.path("changed.db")
        try FileManager.default.copyItem(atPath: PluginFixtures.chinook, toPath: changed)
        let db = try sqlite(changed)
        try db.execute("UPDATE \"Track\" SET \"Name\" = 'changed ' || \"TrackId\" WHERE \"TrackId\" <= 7")
        try db.execute("DELETE FROM \"PlaylistTrack\" WHERE \"PlaylistId\" = 18")
        db.close()
        r = try ferry(["copy", "sqlite:" + changed, "sqlitekit:" + viaPlugin, "--mode", "mirror"])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertTrue(r.err.contains("7 updated, 1 deleted"), r.err)
        r = try ferry(["verify", "sqlite:" + changed, "sqlitekit:" + viaPlugin])
        XCTAssertEqual(r.code, 0, r.err + r.out)
        XCTAssertEqual(PluginFixtures.processes(under: [PluginFixtures.products.path]), [])
    }

    /// The walk: CSV files into PostgreSQL and MySQL into CSV files through the sample
    /// plugin with two jobs, verify both ways; mirror into CSV moves only what changed; a snapshot
    /// of the CSV folder pulls its changes; push to it is refused (no atomic multi-table writes).
    func testCSVPluginBetweenServers() throws {
        let schema = "plugin_\(UInt32.random(in: 0...UInt32.max))"
        let pgURL = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let myURL = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        guard let pg = try PostgresDriver().connect(Endpoint(parsing: pgURL), role: .target) as? PostgresConnection,
              let my = try MySQLDriver().connect(Endpoint(parsing: myURL), role: .target) as? MySQLConnection
        else { throw ConformanceFailure("the drivers returned other kinds of connections") }
        try pg.execute("CREATE SCHEMA \(schema)")
        try my.execute("CREATE DATABASE \(schema)")
        defer {
            try? pg.execute("DROP SCHEMA \(schema) CASCADE")
            try? my.execute("DROP DATABASE \(schema)")
            pg.close()
            my.close()
        }
        let music = PluginFixtures.root.appendingPathComponent("samples/csv-music").path
        let postgres = pgURL + (pgURL.contains("?") ? "&" : "?") + "options=-csearch_path%3D\(schema)"
        guard var mysqlEndpoint = URLComponents(string: myURL) else { throw ConformanceFailure("bad MySQL URL") }
        mysqlEndpoint.path = "/" + schema
        let mysql = try XCTUnwrap(mysqlEndpoint.string)
        var r = try ferry(["copy", "csv:" + music, postgres, "--jobs", "2"])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertTrue(r.err.contains("copied 5 of 5 tables, 4155 rows"), r.err)
        r = try ferry(["copy", postgres, mysql, "--jobs", "2", "--schema", schema])
        XCTAssertEqual(r.code, 0, r.err)
        let out = folder.path("out")
        r = try ferry(["copy", mysql, "csv:" + out + "/", "--jobs", "2"])
        XCTAssertEqual(r.code, 0, r.err)
        for (a, b) in [("csv:" + music, postgres), (mysql, "csv:" + out), ("csv:" + out, mysql), ("csv:" + out, "csv:" + music)] {
            r = try ferry(["verify", a, b, "--jobs", "2"])
            XCTAssertEqual(r.code, 0, "\(a) vs \(b): \(r.err) \(r.out)")
            XCTAssertTrue((r.out + r.err).contains("all 5 tables are equal"), r.out + r.err)
        }
        // Both sides share their snapshots (the plugin's, PostgreSQL's): two jobs, no note.
        r = try ferry(["verify", postgres, "csv:" + music, "--jobs", "2"] + ["Artist", "Album", "Genre", "MediaType", "Track"].flatMap { ["--tables", schema + "." + $0] })
        XCTAssertEqual(r.code, 0, r.err + r.out)
        XCTAssertFalse(r.err.contains("one job"), r.err)
        XCTAssertTrue((r.out + r.err).contains("\(schema).Track: equal (3503 rows in the source, 3503 in the target)"), r.out + r.err)
        // Mirror into the CSV folder: only the changed rows move.
        try my.execute("UPDATE \(schema).`Track` SET `Name` = CONCAT('changed ', `TrackId`) WHERE `TrackId` IN (5, 500, 3000)")
        try my.execute("DELETE FROM \(schema).`Track` WHERE `TrackId` = 3503")
        try my.execute("INSERT INTO \(schema).`Artist` VALUES (9999, 'New, \\\"quoted\\\" artist')")
        r = try ferry(["copy", mysql, "csv:" + out, "--mode", "mirror"])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertTrue(r.err.contains("(1 inserted, 3 updated, 1 deleted, 4151 unchanged)"), r.err)
        r = try ferry(["verify", mysql, "csv:" + out])
        XCTAssertEqual(r.code, 0, r.err + r.out)
        // A snapshot of the CSV folder, and a pull of a change made to it.
        let snap = folder.path("snap.db")
        r = try ferry(["snapshot", "csv:" + out, snap])
        XCTAssertEqual(r.code, 0, r.err)
        r = try ferry(["copy", mysql, "csv:" + out, "--mode", "upsert", "--tables", "Genre"])
        XCTAssertEqual(r.code, 0, r.err)
        try my.execute("UPDATE \(schema).`Genre` SET `Name` = 'Changed genre' WHERE `GenreId` = 1")
        r = try ferry(["copy", mysql, "csv:" + out, "--mode", "mirror", "--tables", "Genre"])
        XCTAssertEqual(r.code, 0, r.err)
        r = try ferry(["pull", snap])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertTrue((r.out + r.err).contains("1 rows changed") || (r.out + r.err).contains("1 row changed"), r.out + r.err)
        r = try ferry(["verify", "csv:" + out, "sqlite:" + snap, "--tables", "Genre"])
        XCTAssertEqual(r.code, 0, r.err + r.out)
        // Push needs atomic multi-table writes, which the CSV plugin does not declare.
        let file = try sqlite(snap)
        try file.execute("UPDATE \"Genre\" SET \"Name\" = 'offline' WHERE \"GenreId\" = 2")
        file.close()
        let before = try Data(contentsOf: URL(fileURLWithPath: out + "/Genre.csv"))
        r = try ferry(["push", snap])
        XCTAssertEqual(r.code, 2, r.err)
        XCTAssertEqual(r.ferryLines.count, 1, r.err)
        XCTAssertTrue(r.err.contains("does not declare atomic-push, which push (all tables' changes in one transaction) needs; nothing was written"), r.err)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: out + "/Genre.csv")), before)
        XCTAssertEqual(PluginFixtures.processes(under: [PluginFixtures.products.path]), [])
    }

    func testDriversListsBuiltInsAndPlugins() throws {
        let r = try ferry(["drivers", "--json"])
        XCTAssertEqual(r.code, 0, r.err)
        struct Row: Decodable { var scheme: String; var kind: String; var version: String?; var capabilities: [String]; var refused: String? }
        let rows = try JSONDecoder().decode([Row].self, from: Data(r.out.utf8))
        XCTAssertEqual(rows.first { $0.scheme == "postgres" }?.kind, "built-in")
        let kit = try XCTUnwrap(rows.first { $0.scheme == "sqlitekit" })
        XCTAssertEqual(kit.version, "0.1.0")
        XCTAssertEqual(kit.capabilities, ["source", "target", "keyed-reads", "digests-2", "snapshots", "keyed-writes", "atomic-push", "change-feed", "replica-apply", "since-filter", "apply-watermark", "rejects"])
        XCTAssertEqual(rows.first { $0.scheme == "jsonl" }?.capabilities, ["source", "target"])
        XCTAssertTrue(rows.first { $0.scheme == "garbage" }?.refused?.contains("not a frame") == true)
        XCTAssertTrue(rows.first { $0.scheme == "wrongversion" }?.refused?.contains("protocol version 2") == true)
        let text = try ferry(["drivers"])
        XCTAssertTrue(text.out.contains("sqlitekit") && text.out.contains("plugin (FERRY_DRIVER_PATH)"), text.out)
        XCTAssertEqual(PluginFixtures.processes(under: [PluginFixtures.badFolder, PluginFixtures.products.path, PluginFixtures.jsonlFolder]), [])
    }

    /// The Python plugin as a target and a source: values identical to the SQLite original. (The
    /// two SQLite files hold the same values, not the same stored texts: Chinook's `DATETIME`s
    /// come back with six fraction digits, its `NUMERIC` REALs as decimal text; between two SQLite
    /// files verify compares stored values, so each file is compared with the lines instead.)
    func testPythonPluginCopiesExactly() throws {
        var r = try ferry(["copy", "sqlite:" + PluginFixtures.chinook, "jsonl:" + folder.path("lines")])
        XCTAssertEqual(r.code, 0, r.err)
        r = try ferry(["copy", "jsonl:" + folder.path("lines"), "sqlite:" + folder.path("back.db")])
        XCTAssertEqual(r.code, 0, r.err)
        r = try ferry(["verify", "jsonl:" + folder.path("lines"), "sqlite:" + folder.path("back.db")])
        XCTAssertEqual(r.code, 0, r.err + r.out)
        r = try ferry(["verify", "sqlite:" + PluginFixtures.chinook, "sqlite:" + folder.path("back.db")])
        XCTAssertEqual(r.code, 3, "stored forms differ: " + r.err + r.out)
        r = try ferry(["verify", "jsonl:" + folder.path("lines"), "sqlite:" + PluginFixtures.chinook])
        XCTAssertEqual(r.code, 0, r.err + r.out)
    }

    /// Work that needs what a plugin did not declare is refused before anything is written.
    func testUndeclaredCapabilitiesAreRefusedBeforeWriting() throws {
        let lines = folder.path("lines")
        XCTAssertEqual(try ferry(["copy", "sqlite:" + PluginFixtures.chinook, "jsonl:" + lines, "--tables", "Artist"]).code, 0)
        let before = try Data(contentsOf: URL(fileURLWithPath: lines + "/Artist.jsonl"))
        for mode in ["upsert", "mirror"] {
            let r = try ferry(["copy", "sqlite:" + PluginFixtures.chinook, "jsonl:" + lines, "--tables", "Artist", "--mode", mode])
            XCTAssertEqual(r.code, 2, r.err)
            XCTAssertEqual(r.ferryLines.count, 1, r.err)
            XCTAssertTrue(r.err.contains("does not declare keyed-reads and keyed-writes, which --mode \(mode) needs; nothing was written"), r.err)
        }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: lines + "/Artist.jsonl")), before)
        let r = try ferry(["snapshot", "jsonl:" + lines, folder.path("snap.db")])
        XCTAssertNotEqual(r.code, 0)
        XCTAssertTrue(r.err.contains("does not declare keyed-reads, which a snapshot"), r.err)
        XCTAssertFalse(FileManager.default.fileExists(atPath: folder.path("snap.db")), "no snapshot file is left behind")
    }

    /// Every misbehaviour: one line naming the plugin and what it did, exit 1, the target as it
    /// was, no process left behind.
    func testMisbehavingPluginsFailInOneLine() throws {
        let target = folder.path("target.db")
        XCTAssertEqual(try ferry(["copy", "sqlite:" + PluginFixtures.chinook, "sqlite:" + target, "--tables", "Artist"]).code, 0)
        let before = try Data(contentsOf: URL(fileURLWithPath: target))
        let cases: [(scheme: String, says: String)] = [
            ("garbage", "plugin ferry-driver-garbage wrote something that is not a frame: \"usage: this program is not a Ferry plugi"),
            ("wrongversion", "plugin ferry-driver-wrongversion speaks protocol version 2; this Ferry speaks 1"),
            ("nothing", "plugin ferry-driver-nothing declares no capability"),
            ("dies", "plugin ferry-driver-dies exited with status 3 (its last message: cannot go on: simulated crash)"),
            ("hangs", "plugin ferry-driver-hangs did not answer within 2 s (--timeout); stopped it"),
            ("halfdoc", "plugin ferry-driver-halfdoc answered with a malformed table list"),
        ]
        for c in cases {
            let started = Date()
            for args in [["copy", "\(c.scheme):" + folder.path("x"), "sqlite:" + target, "--mode", "replace", "--timeout", "2"],
                         ["copy", "sqlite:" + PluginFixtures.chinook, "\(c.scheme):" + folder.path("x"), "--timeout", "2"]] {
                let r = try ferry(args)
                XCTAssertEqual(r.code, 1, "\(c.scheme): \(r.err)")
                XCTAssertEqual(r.ferryLines.count, 1, "\(c.scheme): one line expected: \(r.err)")
                XCTAssertTrue(r.err.contains(c.says), "\(c.scheme): '\(c.says)' not in \(r.err)")
            }
            XCTAssertLessThan(Date().timeIntervalSince(started), 30, "\(c.scheme): no hang")
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: target)), before, "\(c.scheme): the target is as it was")
            XCTAssertEqual(PluginFixtures.processes(under: [PluginFixtures.badFolder]), [], "\(c.scheme): no process left behind")
        }
    }

    /// A plugin killed in the middle of a copy: one line, the target's table as it was.
    func testAPluginKilledMidCopyLeavesTheTargetAsItWas() throws {
        let source = folder.path("big.db")
        let db = try sqlite(source)
        try db.execute("CREATE TABLE big (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        // Large enough that the copy is still under way when the plugin is killed (200,000 rows
        // were copied whole within the 0.6 s once plugins read in large pages).
        try db.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000000) INSERT INTO big SELECT i, printf('row %08d and some text', i) FROM n")
        db.close()
        let target = folder.path("target.db")
        XCTAssertEqual(try ferry(["copy", "sqlite:" + PluginFixtures.chinook, "sqlite:" + target, "--tables", "Artist"]).code, 0)
        // The target holds a table `big` of 3 rows that a replace would overwrite.
        let t = try sqlite(target)
        try t.execute("CREATE TABLE big (id INTEGER PRIMARY KEY, v TEXT NOT NULL); INSERT INTO big VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        t.close()
        let killer = Thread {
            // The plugin's process, once it runs: killed as soon as it has started answering.
            for _ in 0..<400 {
                if let line = PluginFixtures.processes(under: [PluginFixtures.products.path]).first(where: { $0.contains("ferry-driver-sqlitekit") }),
                   let pid = Int32(line.prefix { $0 != ":" }) {
                    usleep(600_000)
                    kill(pid, SIGKILL)
                    return
                }
                usleep(10_000)
            }
        }
        killer.start()
        let r = try ferry(["copy", "sqlitekit:" + source, "sqlite:" + target, "--tables", "big", "--mode", "replace"], env: sqlitekitPath)
        XCTAssertEqual(r.code, 1, r.err)
        // The copy's report of a failed table: the table's one line says what the plugin did.
        let said = r.err.split(separator: "\n").filter { $0.contains("ferry-driver-sqlitekit") }
        XCTAssertEqual(said.count, 1, r.err)
        XCTAssertTrue(said.first?.hasPrefix("big: FAILED after ") == true && said.first?.hasSuffix("plugin ferry-driver-sqlitekit was killed by signal 9") == true, r.err)
        XCTAssertTrue(r.err.hasSuffix("ferry: error: 1 of 1 tables failed (see the messages above); tables that failed were left as they were\n"), r.err)
        let after = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + target), role: .source)
        defer { after.close() }
        XCTAssertEqual(try DriverConformance.readAll(after, TableName("big")).map { $0.map(\.description) }, [["1", "'a'"], ["2", "'b'"], ["3", "'c'"]])
        XCTAssertEqual(PluginFixtures.processes(under: [PluginFixtures.products.path]), [])
    }

    /// A URL read from a file (a snapshot's stored origin) starts a plugin found only on PATH
    /// just with --allow-plugin; one in FERRY_DRIVER_PATH, or typed on the command line, runs.
    func testAPluginForAURLFromAFileNeedsAllowPlugin() throws {
        let origin = folder.path("origin.db")
        try FileManager.default.copyItem(atPath: PluginFixtures.chinook, toPath: origin)
        let snap = folder.path("snap.db")
        var r = try ferry(["snapshot", "sqlitekit:" + origin, snap, "--tables", "Artist,Album"], env: sqlitekitPath)
        XCTAssertEqual(r.code, 0, r.err)
        // Only on PATH: typed URLs run, the file's stored origin does not.
        let onPath = ["FERRY_DRIVER_PATH": "", "PATH": PluginFixtures.products.path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "")]
        r = try ferry(["pull", snap], env: onPath)
        XCTAssertEqual(r.code, 2, r.err)
        XCTAssertEqual(r.ferryLines.count, 1, r.err)
        XCTAssertTrue(r.err.contains("was not typed on the command line") && r.err.contains("--allow-plugin sqlitekit"), r.err)
        r = try ferry(["pull", snap, "--allow-plugin", "sqlitekit"], env: onPath)
        XCTAssertEqual(r.code, 0, r.err)
        r = try ferry(["pull", snap, "--origin", "sqlitekit:" + origin], env: onPath)
        XCTAssertEqual(r.code, 0, r.err)
        r = try ferry(["pull", snap], env: sqlitekitPath)
        XCTAssertEqual(r.code, 0, r.err)
    }

    /// An unknown scheme says where plugins were looked for; a bad plugin URL's password is masked.
    func testUnknownSchemesAndMaskedPasswords() throws {
        var r = try ferry(["tables", "nosuch:data/"])
        XCTAssertEqual(r.code, 2, r.err)
        XCTAssertTrue(r.err.contains("unknown URL scheme 'nosuch:'") && r.err.contains("no ferry-driver-SCHEME plugin for it in FERRY_DRIVER_PATH or PATH"), r.err)
        r = try ferry(["tables", "dies://me:secret@host/x"])
        XCTAssertEqual(r.code, 1, r.err)
        XCTAssertFalse(r.err.contains("secret"), r.err)
        XCTAssertTrue(r.err.contains("dies://me:****@host/x"), r.err)
    }
}
