import FerryCore
import FerryDriverTestKit
import FerryMySQL
import FerryPostgres
import FerrySQLite
import FerryHTTPClient
import FerryXML
import Foundation
import XCTest

/// A copy reads every table from one snapshot of the source: a parent and a child table of a
/// live PostgreSQL database, while an application inserts parent+child pairs (each pair in one
/// transaction), arrive with no child whose parent is missing — with one job and with several
/// (the other jobs import job 0's exported snapshot).
final class SnapshotConsistencyTests: XCTestCase {
    let drivers: [any Driver] = [SQLiteDriver(), PostgresDriver(), MySQLDriver(), HTTPDriver.standard]

    func testCopyOfALivePostgreSQLDatabaseReadsOneSnapshot() throws {
        try copyWhileAnApplicationWrites(try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL"), into: try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL"))
    }

    /// MySQL cannot share a snapshot between connections: with two jobs, both begin theirs
    /// while `FLUSH TABLES WITH READ LOCK` holds writes for a moment (as mydumper does).
    func testCopyOfALiveMySQLDatabaseReadsOneSnapshot() throws {
        try copyWhileAnApplicationWrites(try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL"), into: try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL"))
    }

    /// Through the service: the client asks it for a snapshot (`POST /v1/snapshots`) and every
    /// page of both tables, from both jobs, names it. PostgreSQL behind the service shares it
    /// by exported snapshot (a connection per request); MySQL takes turns on the one connection
    /// holding it.
    func testCopyOfALiveDatabaseThroughTheServiceReadsOneSnapshot() async throws {
        let postgres = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let mysql = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        for (served, target) in [(postgres, mysql), (mysql, postgres)] {
            let service = try await RunningService(database: served, drivers: drivers)
            defer { service.stop() }
            try copyWhileAnApplicationWrites(served, into: target, readingThrough: service.url(), rows: 30_000)
        }
    }

    /// SQLite cannot share a read snapshot: with two jobs, both begin their read transactions
    /// while another handle holds the write lock (BEGIN IMMEDIATE). In WAL mode, so that the
    /// application's writes go on while the copy reads.
    func testCopyOfALiveSQLiteDatabaseReadsOneSnapshot() throws {
        let folder = try TemporaryFolder()
        let url = "sqlite:" + folder.path("live.db")
        let setup = try CopyHarness(drivers).registry.connect(url, role: .target)
        try Self.run(setup, "PRAGMA journal_mode=WAL")
        setup.close()
        try copyWhileAnApplicationWrites(url, into: try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL"), rows: 60_000)
    }

    /// A run of SQL on a PostgreSQL, MySQL or SQLite connection (tests only).
    static func run(_ c: any Connection, _ sql: String) throws {
        if let p = c as? PostgresConnection { try p.run(sql) } else if let m = c as? MySQLConnection { try m.run(sql) } else if let l = c as? SQLiteConnection {
            try l.run(sql)
        } else {
            throw ConformanceFailure("no SQL runner for \(c.endpoint)")
        }
    }

    /// Copies into `targetURL`, a server (a SQLite target takes one writer, so one job).
    func copyWhileAnApplicationWrites(_ url: String, into targetURL: String, readingThrough readURL: String? = nil, rows: Int = 150_000) throws {
        let harness = CopyHarness(drivers)
        let setup = try harness.registry.connect(url, role: .target)
        defer { setup.close() }
        try Self.run(setup, "DROP TABLE IF EXISTS snap_b_child")
        try Self.run(setup, "DROP TABLE IF EXISTS snap_a_parent")
        try Self.run(setup, "CREATE TABLE snap_a_parent (id bigint PRIMARY KEY, label varchar(40) NOT NULL)")
        try Self.run(setup, "CREATE TABLE snap_b_child (id bigint PRIMARY KEY, parent_id bigint NOT NULL REFERENCES snap_a_parent (id), label varchar(60))")
        let parent = try setup.describe(TableName("snap_a_parent"))
        let child = try setup.describe(TableName("snap_b_child"))
        try setup.begin()
        for start in stride(from: 1, through: rows, by: 10_000) {
            let ids = Array(start..<(start + 10_000))
            for (schema, rows) in [(parent, ids.map { [Value.int(Int64($0)), .text("parent \($0)")] }),
                                   (child, ids.map { [Value.int(Int64($0)), .int(Int64($0)), .text(String(repeating: "x", count: 40))] })] {
                let w = try setup.writer(into: schema, columns: schema.columns)
                try w.write(RowBatch(rows: rows, types: schema.columns.map(\.logicalType)))
                try w.finish()
            }
        }
        try setup.commit()
        for jobs in [1, 2] {
            // The application: parent+child pairs, one transaction each, until the copy ends.
            let stop = Locked(false)
            let inserted = Locked(0)
            let base = 1_000_000 * jobs
            let drivers = self.drivers.map { $0 as any Driver }
            let writer = Thread {
                guard let app = try? CopyHarness(drivers).registry.connect(url, role: .target) else { return }
                defer { app.close() }
                var i = 0
                while !stop.withLock({ $0 }) {
                    i += 1
                    do {
                        try Self.run(app, "BEGIN")
                        try Self.run(app, "INSERT INTO snap_a_parent VALUES (\(base + i), 'live')")
                        try Self.run(app, "INSERT INTO snap_b_child VALUES (\(base + i), \(base + i), 'live')")
                        try Self.run(app, "COMMIT")
                        inserted.withLock { $0 += 1 }
                    } catch { break }
                }
            }
            writer.start()
            let deadline = Date().addingTimeInterval(20)
            while inserted.withLock({ $0 }) < 5 {
                guard Date() < deadline else { throw ConformanceFailure("the application thread inserted nothing in 20 s") }
                usleep(1_000)
            }
            let target = try harness.registry.connect(targetURL, role: .target)
            defer { target.close() }
            try Self.run(target, "DROP TABLE IF EXISTS snap_b_child")
            try Self.run(target, "DROP TABLE IF EXISTS snap_a_parent")
            let src = try harness.registry.connect(readURL ?? url, role: .source)
            let during = inserted.withLock { $0 }
            let notes = Locked<[String]>([])
            let summary = try harness.copy(src, target, mode: .create, tables: ["snap_a_parent", "snap_b_child"], jobs: jobs, batchSize: 5_000,
                                           observer: { if case .note(let n) = $0 { notes.withLock { $0.append(n) } } })
            let after = inserted.withLock { $0 }
            stop.withLock { $0 = true }
            while !writer.isFinished { usleep(1_000) }
            src.close()
            XCTAssertTrue(summary.ok, "\(readURL == nil ? "direct" : "through the service") jobs \(jobs): \(summary.tables.compactMap(\.error))")
            XCTAssertEqual(summary.jobs, jobs, "the copy ran with \(summary.jobs) jobs")
            XCTAssertEqual(notes.withLock { $0 }.filter { $0.contains("snapshot") }, [], "jobs \(jobs)")
            XCTAssertGreaterThan(after - during, 0, "jobs \(jobs): the application inserted nothing while the copy ran; the test proves nothing")
            let parents = Set(try DriverConformance.readAll(target, TableName("snap_a_parent")).map { $0[0] })
            let children = try DriverConformance.readAll(target, TableName("snap_b_child"))
            let orphans = children.filter { !parents.contains($0[1]) }
            XCTAssertEqual(orphans.count, 0, "\(readURL == nil ? "direct" : "through the service") jobs \(jobs): \(orphans.count) child rows arrived without their parent (first: \(orphans.first ?? []))")
            XCTAssertEqual(children.count, parents.count, "jobs \(jobs): pairs are inserted together, so both tables must hold as many rows")
        }
        for c in [setup, try harness.registry.connect(targetURL, role: .target)] {
            try Self.run(c, "DROP TABLE IF EXISTS snap_b_child")
            try Self.run(c, "DROP TABLE IF EXISTS snap_a_parent")
        }
    }

    /// A MySQL table without transactions (MyISAM) cannot be read from the snapshot: the copy
    /// says so, naming it.
    func testAMyISAMTableIsNamedAsOutsideTheSnapshot() throws {
        let harness = CopyHarness(drivers)
        let folder = try TemporaryFolder()
        let url = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        let setup = try harness.registry.connect(url, role: .target)
        defer { setup.close() }
        try Self.run(setup, "DROP TABLE IF EXISTS snap_myisam")
        try Self.run(setup, "CREATE TABLE snap_myisam (id int PRIMARY KEY) ENGINE=MyISAM")
        try Self.run(setup, "INSERT INTO snap_myisam VALUES (1), (2)")
        let target = try harness.registry.connect("sqlite:" + folder.path("myisam.db"), role: .target)
        defer { target.close() }
        let notes = Locked<[String]>([])
        let summary = try harness.copy(setup, target, mode: .create, tables: ["snap_myisam"],
                                       observer: { if case .note(let n) = $0 { notes.withLock { $0.append(n) } } })
        XCTAssertTrue(summary.ok, "\(summary.tables.compactMap(\.error))")
        XCTAssertTrue(notes.withLock { $0 }.contains { $0.contains("snap_myisam uses the MyISAM storage engine") }, "\(notes.withLock { $0 })")
        try Self.run(setup, "DROP TABLE snap_myisam")
    }
}
