import FerryCore
import FerryDriverTestKit
@testable import FerryPostgres
import Foundation
import XCTest

/// PostgreSQL's change capture on the test server (scripts/test-services starts it with
/// wal_level = logical): a slot's snapshot and its stream meet exactly, the stream's events
/// carry every value as a copy reads it, in commit order, and it resumes from a position.
final class PostgresLogicalCaptureTests: XCTestCase {
    var pg: PostgresFixture!

    override func setUpWithError() throws { pg = try PostgresFixture() }

    /// One source transaction's events, and where the stream stood after it.
    struct Transaction {
        var events: [ChangeEvent] = []
        var position = ChangePosition("")

        /// Row counts by kind and table, in order ("upserts parent 1").
        var shape: [String] {
            events.map { e in
                switch e {
                case .begin, .commit: return ""
                case .upserts(let t, let b): return "upserts \(t.name) \(b.count)"
                case .updates(let t, let c, let b): return "updates \(t.name) \(c.joined(separator: ",")) \(b.count)"
                case .partialUpserts(let t, let c, let b): return "partial upserts \(t.name) \(c.joined(separator: ",")) \(b.count)"
                case .deletes(let t, let b): return "deletes \(t.name) \(b.count)"
                case .truncate(let ts): return "truncate " + ts.map(\.name).joined(separator: ",")
                }
            }.filter { !$0.isEmpty }
        }
    }

    /// Reads transactions until `count` commits arrived (fails after 60 s without one).
    func read(_ feed: any ChangeFeed, transactions count: Int) throws -> [Transaction] {
        var out: [Transaction] = []
        var current: Transaction?
        var idle = Date()
        while out.count < count {
            guard let e = try feed.next(timeout: 1) else {
                if Date().timeIntervalSince(idle) > 60 { XCTFail("no commit within 60 s after \(out.count) transactions"); break }
                continue
            }
            idle = Date()
            switch e {
            case .begin:
                XCTAssertNil(current, "a transaction began inside another")
                current = Transaction()
            case .commit(let p, _):
                guard var t = current else { XCTFail("a commit without a begin"); continue }
                t.position = p
                out.append(t)
                current = nil
            default:
                XCTAssertNotNil(current, "a change outside a transaction")
                current?.events.append(e)
            }
        }
        return out
    }

    /// A replication command whose answer never comes (the server's side stalls, its kernel
    /// still acknowledging) ends within `--timeout` with one line: PQexec waited for ever, and a
    /// follower whose source stalled as it asked for the stream never ended (found by
    /// scripts/chaos). Without a timeout the command waits as long as it takes.
    func testAReplicationCommandWhoseAnswerStallsEndsWithinTheTimeout() throws {
        var endpoint = try Endpoint(parsing: try pg.makeDatabase("stallcmd"))
        let relay = try FaultRelay(upstreamPort: try XCTUnwrap(endpoint.port))
        defer { relay.stop() }
        endpoint.host = "127.0.0.1"
        endpoint.port = relay.port
        endpoint.options["timeout"] = "2"
        let replication = try PostgresReplicationConnection(endpoint: endpoint)
        defer { replication.close() }
        XCTAssertNoThrow(try replication.exec("IDENTIFY_SYSTEM"), "answered before the stall")
        relay.arm(.fromServer, at: 0, stall: true)
        let started = Date()
        XCTAssertThrowsError(try replication.exec("IDENTIFY_SYSTEM")) { error in
            XCTAssertTrue("\(error)".contains("the connection stalled"), "\(error)")
            XCTAssertTrue("\(error)".contains("--timeout"), "\(error)")
        }
        let waited = Date().timeIntervalSince(started)
        XCTAssertGreaterThanOrEqual(waited, 1.9)
        XCTAssertLessThan(waited, 10, "the stalled command did not end within the timeout")
        relay.disarm()
    }

    func testTheStreamBeginsWhereTheSnapshotEndsAndCarriesEveryChangeInOrder() throws {
        let url = try pg.makeDatabase("capture")
        let db = try pg.connect(url)
        defer { db.close() }
        try db.run("""
            CREATE TABLE parent (id bigint PRIMARY KEY, name text, big text, amount numeric(10,2), at timestamp, u uuid,
                                 flag boolean, data jsonb, code char(5), d date, f double precision);
            CREATE TABLE child (id int PRIMARY KEY, parent_id bigint REFERENCES parent (id), note text);
            CREATE TABLE nokey (a int);
            INSERT INTO parent SELECT g, 'name ' || g, NULL, g / 100.0, '2024-01-01'::timestamp + g * interval '1 second',
                   md5(g::text)::uuid, g % 2 = 0, jsonb_build_object('g', g, 'list', jsonb_build_array(g, 'x')), 'c' || (g % 10),
                   '2020-02-29'::date + g, g * 1.5
              FROM generate_series(1, 3000) g;
            """)
        let tables = [try db.describe(TableName("parent")), try db.describe(TableName("child"))]
        guard let capture = try db.changeCapture() else { return XCTFail("PostgreSQL has a change capture") }
        defer { _ = try? capture.drop(name: "ferry_t1") }

        // A table without a key is refused before anything is made at the source.
        XCTAssertThrowsError(try capture.start(name: "ferry_t2", tables: [try db.describe(TableName("nokey"))])) { e in
            XCTAssertTrue("\(e)".contains("no primary key"), "\(e)")
        }
        XCTAssertEqual(try db.rows("SELECT count(*) FROM pg_publication WHERE pubname = 'ferry_t2'"), [["0"]])

        let start = try capture.start(name: "ferry_t1", tables: tables)
        // Committed after the slot was made: in the stream, not in the snapshot.
        try db.run("INSERT INTO parent (id, name, amount) VALUES (100001, 'after', 1.25)")
        let reader = try pg.connect(url, role: .source)
        defer { reader.close() }
        let (startPosition, shared) = try start.beginSnapshot(on: reader)
        XCTAssertNotNil(shared, "PostgreSQL exports the slot's snapshot")
        XCTAssertEqual(try reader.countRows(TableName("parent")), 3000)
        try reader.commit()

        let feed = try start.follow()
        try db.run("""
            BEGIN;
            UPDATE parent SET name = 'renamed' WHERE id = 1;
            UPDATE parent SET id = 5000 WHERE id = 2;
            DELETE FROM parent WHERE id = 3;
            INSERT INTO child VALUES (1, 1, 'first child');
            COMMIT
            """)
        // One transaction each (statements sent together would run as one).
        try db.run("UPDATE parent SET big = repeat('toast ', 40000) WHERE id = 10")
        try db.run("UPDATE parent SET name = 'big one' WHERE id = 10")
        try db.run("INSERT INTO parent (id, name) SELECT g, 'bulk' FROM generate_series(200000, 204999) g")
        try db.run("TRUNCATE child")
        let got = try read(feed, transactions: 6)
        XCTAssertEqual(got.count, 6)
        guard got.count == 6 else { return }
        XCTAssertEqual(got[0].shape, ["upserts parent 1"])
        XCTAssertEqual(got[1].shape, ["upserts parent 1", "deletes parent 1", "upserts parent 1", "deletes parent 1", "upserts child 1"])
        XCTAssertEqual(got[2].shape, ["upserts parent 1"])
        // The TOASTed value did not change: left out, never sent as NULL.
        XCTAssertEqual(got[3].shape, ["updates parent id,name,amount,at,u,flag,data,code,d,f 1"])
        XCTAssertEqual(got[4].shape, ["upserts parent 4096", "upserts parent 904"])
        XCTAssertEqual(got[5].shape, ["truncate child"])
        let positions = got.compactMap { PostgresPosition($0.position.text) }
        XCTAssertEqual(positions.count, 6)
        XCTAssertEqual(positions, positions.sorted())
        XCTAssertTrue(positions[0] > PostgresPosition(startPosition.text) ?? .max)

        // Values as a copy reads them: the rows now at the source, through the table's reader.
        func current(_ id: Int64) throws -> [Value] {
            let r = try db.reader(table: tables[0], columns: tables[0].columns, keyRange: KeyRange(key: ["id"], filter: "id = \(id)"), batchSize: 10)
            defer { r.close() }
            guard let b = try r.next(), b.count == 1 else { throw ConformanceFailure("row \(id) missing") }
            return b.row(0, types: tables[0].columns.map(\.logicalType))
        }
        let types = tables[0].columns.map(\.logicalType)
        if case .upserts(_, let b) = got[0].events[0] { XCTAssertEqual(b.row(0, types: types), try current(100001)) }
        if case .upserts(_, let b) = got[1].events[0] { XCTAssertEqual(b.row(0, types: types), try current(1)) }
        if case .deletes(_, let b) = got[1].events[1] { XCTAssertEqual(b.row(0, types: [.int64]), [.int(2)]) }
        if case .upserts(_, let b) = got[1].events[2] { XCTAssertEqual(b.row(0, types: types), try current(5000)) }
        if case .upserts(_, let b) = got[2].events[0] {
            // Before the next transaction renamed it.
            var before = try current(10)
            before[1] = .text("name 10")
            XCTAssertEqual(b.row(0, types: types), before)
        }
        if case .updates(_, let columns, let b) = got[3].events[0] {
            let all = try current(10)
            let expected = columns.compactMap { name in tables[0].columns.firstIndex { $0.name == name }.map { all[$0] } }
            XCTAssertEqual(b.row(0, types: columns.compactMap { tables[0].column(named: $0)?.logicalType }), expected)
        }

        // Confirmed up to the second transaction, then followed again from there: the third
        // transaction is the first to come again.
        try feed.confirm(got[1].position)
        feed.close()
        let again = try capture.follow(name: "ferry_t1", tables: tables, from: got[1].position)
        let resumed = try read(again, transactions: 4)
        XCTAssertEqual(resumed.map(\.position), got[2...].map(\.position))
        XCTAssertEqual(resumed.map(\.shape), got[2...].map(\.shape))
        try again.confirm(got[5].position)
        // The server takes the status update a moment later.
        var flushed: String?
        for _ in 0..<50 {
            flushed = try db.rows("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'ferry_t1'").first?.first ?? nil
            if let f = flushed, let p = PostgresPosition(f), let want = PostgresPosition(got[5].position.text), p >= want { break }
            Thread.sleep(forTimeInterval: 0.1)
        }
        XCTAssertGreaterThanOrEqual(PostgresPosition(flushed ?? "") ?? .min, PostgresPosition(got[5].position.text) ?? .max)
        again.close()

        // Dropped: nothing of Ferry's left at the source.
        XCTAssertEqual(try capture.drop(name: "ferry_t1"), ["replication slot ferry_t1", "publication ferry_t1"])
        XCTAssertEqual(try db.rows("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'ferry_t1'"), [["0"]])
        XCTAssertEqual(try capture.drop(name: "ferry_t1"), [])
    }
}

/// An LSN as a number, to compare positions in tests.
struct PostgresPosition: Comparable {
    let value: UInt64
    static let min = PostgresPosition(value: 0), max = PostgresPosition(value: .max)
    init(value: UInt64) { self.value = value }
    init?(_ text: String) {
        let parts = text.split(separator: "/")
        guard parts.count == 2, let hi = UInt64(parts[0], radix: 16), let lo = UInt64(parts[1], radix: 16) else { return nil }
        value = hi << 32 | lo
    }
    static func < (a: Self, b: Self) -> Bool { a.value < b.value }
}
