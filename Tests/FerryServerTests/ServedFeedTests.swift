import FerryCore
import FerryDriverTestKit
import FerryHTTPClient
import FerryMySQL
import FerryPostgres
import FerrySQLite
import FerryXML
import Foundation
import XCTest

/// A change feed through the service, as a follower's runs meet it.
final class ServedFeedTests: XCTestCase {
    let drivers: [any Driver] = [SQLiteDriver(), PostgresDriver(), MySQLDriver(), HTTPDriver.standard]

    /// A follower that applied and recorded a transaction and ended before its confirm went out
    /// (with the next page) leaves the service's kept feed with that transaction handed out and
    /// not confirmed. The next run follows from what it recorded and must confirm that with its
    /// first page: otherwise the kept feed never says the goal is reached once the source's WAL
    /// moved past the last transaction — `ferry replicate --until-caught-up` waited for ever
    /// (found by scripts/chaos: a follower killed between its commit and its next page).
    func testAFollowerConfirmsWhereItResumes() async throws {
        let admin = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let database = "ferry_feed_" + UUID().uuidString.prefix(8).lowercased()
        let base = String(admin[..<(admin.range(of: "/", options: .backwards)?.lowerBound ?? admin.endIndex)])
        let url = base + "/" + database
        let server = try PostgresConnection(endpoint: Endpoint(parsing: admin), role: .target)
        defer { server.close() }
        try server.run("CREATE DATABASE \(database)")
        let direct = try PostgresConnection(endpoint: Endpoint(parsing: url), role: .target)
        try direct.run("CREATE TABLE t (id INT PRIMARY KEY, v TEXT); INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g")
        let service = try await RunningService(database: url, drivers: drivers)
        let registry = DriverRegistry(drivers)
        let name = "_ferry_r_test" + UUID().uuidString.prefix(8).lowercased()
        let first = try registry.connect(service.url(), role: .source)
        defer {
            if let c = try? registry.connect(service.url(), role: .source), let capture = try? c.changeCapture() {
                _ = try? capture.drop(name: name)
                c.close()
            }
            first.close()
            service.stop()
            direct.close()
            try? server.run("DROP DATABASE IF EXISTS \(database) WITH (FORCE)")
        }
        let tables = [try first.describe(TableName("t"))]
        let capture = try XCTUnwrap(try first.changeCapture())
        let start = try capture.start(name: name, tables: tables)
        _ = try start.beginSnapshot(on: first)
        let feed = try start.follow()

        // One transaction handed out, and the follower gone before confirming it.
        try direct.run("INSERT INTO t VALUES (101, 'after the start')")
        var applied: ChangePosition?
        let until = Date().addingTimeInterval(30)
        while applied == nil && Date() < until {
            if case .commit(let p, _)? = try feed.next(timeout: 1) { applied = p }
        }
        let recorded = try XCTUnwrap(applied, "the feed did not hand out the transaction")
        feed.close()
        // The source's WAL moves on with nothing the feed follows.
        try direct.run("CREATE TABLE other (x INT); INSERT INTO other VALUES (1)")

        // The next run, from what it recorded.
        let second = try registry.connect(service.url(), role: .source)
        defer { second.close() }
        let again = try XCTUnwrap(try second.changeCapture())
        let resumed = try again.follow(name: name, tables: tables, from: recorded)
        let goal = try again.currentPosition(name: name)
        let deadline = Date().addingTimeInterval(20)
        var reached = false
        while !reached && Date() < deadline {
            if let e = try resumed.next(timeout: 1), case .commit = e { XCTFail("a transaction handed out again: \(e)") }
            reached = try resumed.reached(goal)
        }
        resumed.close()
        XCTAssertTrue(reached, "the resumed feed never reached \(goal) (recorded \(recorded))")
    }
}
