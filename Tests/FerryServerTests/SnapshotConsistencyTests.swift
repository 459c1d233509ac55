import FerryCore
import FerryDriverTestKit
import FerryMySQL
import FerryPostgres
import FerrySQLite
import FerryXML
import Foundation
import XCTest

/// A copy reads every table from one snapshot of the source: a parent and a child table of a
/// live PostgreSQL database, while an application inserts parent+child pairs (each pair in one
/// transaction), arrive with no child whose parent is missing — with one job and with several
/// (the other jobs import job 0's exported snapshot).
final class SnapshotConsistencyTests: XCTestCase {
    let drivers: [any Driver] = [SQLiteDriver(), PostgresDriver(), MySQLDriver(), HTTPDriver()]

    func testCopyOfALiveDatabaseReadsOneSnapshot() throws {
        let harness = CopyHarness(drivers)
        let folder = try TemporaryFolder()
        let url = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let setup = try XCTUnwrap(try harness.registry.connect(url, role: .target) as? PostgresConnection)
        defer { setup.close() }
        try setup.run("""
            DROP TABLE IF EXISTS snap_b_child; DROP TABLE IF EXISTS snap_a_parent;
            CREATE TABLE snap_a_parent (id bigint PRIMARY KEY, label text NOT NULL);
            CREATE TABLE snap_b_child (id bigint PRIMARY KEY, parent_id bigint NOT NULL REFERENCES snap_a_parent (id), label text);
            INSERT INTO snap_a_parent SELECT g, 'parent ' || g FROM generate_series(1, 150000) g;
            INSERT INTO snap_b_child SELECT g, g, repeat('x', 40) FROM generate_series(1, 150000) g;
            """)
        for jobs in [1, 2] {
            // The application: parent+child pairs, one transaction each, until the copy ends.
            let stop = Locked(false)
            let inserted = Locked(0)
            let base = 1_000_000 * jobs
            let drivers = self.drivers.map { $0 as any Driver }
            let writer = Thread {
                guard let app = try? CopyHarness(drivers).registry.connect(url, role: .target) as? PostgresConnection else { return }
                defer { app.close() }
                var i = 0
                while !stop.withLock({ $0 }) {
                    i += 1
                    do {
                        try app.run("BEGIN; INSERT INTO snap_a_parent VALUES (\(base + i), 'live'); INSERT INTO snap_b_child VALUES (\(base + i), \(base + i), 'live'); COMMIT")
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
            let target = try harness.registry.connect("sqlite:" + folder.path("snap-\(jobs).db"), role: .target)
            defer { target.close() }
            let src = try harness.registry.connect(url, role: .source)
            let during = inserted.withLock { $0 }
            let summary = try harness.copy(src, target, mode: .create, tables: ["snap_a_parent", "snap_b_child"], jobs: jobs, batchSize: 5_000)
            let after = inserted.withLock { $0 }
            stop.withLock { $0 = true }
            while !writer.isFinished { usleep(1_000) }
            src.close()
            XCTAssertTrue(summary.ok, "jobs \(jobs): \(summary.tables.compactMap(\.error))")
            XCTAssertGreaterThan(after - during, 0, "jobs \(jobs): the application inserted nothing while the copy ran; the test proves nothing")
            let parents = Set(try DriverConformance.readAll(target, TableName("snap_a_parent")).map { $0[0] })
            let children = try DriverConformance.readAll(target, TableName("snap_b_child"))
            let orphans = children.filter { !parents.contains($0[1]) }
            XCTAssertEqual(orphans.count, 0, "jobs \(jobs): \(orphans.count) child rows arrived without their parent (first: \(orphans.first ?? []))")
            XCTAssertEqual(children.count, parents.count, "jobs \(jobs): pairs are inserted together, so both tables must hold as many rows")
        }
        try setup.run("DROP TABLE snap_b_child; DROP TABLE snap_a_parent")
    }
}
