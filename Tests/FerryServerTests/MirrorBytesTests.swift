import FerryCore
import FerryDriverTestKit
import FerryMySQL
import FerryPostgres
import FerrySQLite
import FerryHTTPClient
import FerryXML
import Foundation
import XCTest

/// At 0.1% of rows changed, a mirror of a 1,000,000-row table reads at most 5% of the bytes a
/// full copy reads, on each side: measured on the wire, by relays in front of PostgreSQL (the
/// source) and MariaDB (the target).
final class MirrorBytesTests: XCTestCase {
    let drivers: [any Driver] = [SQLiteDriver(), PostgresDriver(), MySQLDriver(), HTTPDriver.standard]

    func testMirrorOfAMillionRowsReadsAFewPercentOfAFullCopy() throws {
        let harness = CopyHarness(drivers)
        let postgres = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let mysql = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        let setup = try XCTUnwrap(try harness.registry.connect(postgres, role: .target) as? PostgresConnection)
        defer { setup.close() }
        try setup.run("""
            DROP TABLE IF EXISTS mirror_million;
            CREATE TABLE mirror_million (id bigint PRIMARY KEY, customer_id integer NOT NULL, amount numeric(12,2),
              weight double precision, sku varchar(64) NOT NULL, note text, created_at timestamp(6), ext_ref uuid);
            INSERT INTO mirror_million SELECT g, (g::bigint * 7919) % 1000003, CASE WHEN g % 10 = 0 THEN NULL ELSE round(g * 1.37, 2) END,
              g::float8 / 7, 'SKU-' || lpad(g::text, 10, '0'), CASE WHEN g % 5 = 0 THEN NULL ELSE 'order note ' || md5(g::text) END,
              timestamp '2000-01-01' + g * interval '1.000001 second', md5(g::text || 'u')::uuid
            FROM generate_series(1, 1000000) g;
            ANALYZE mirror_million;
            """)
        let pgRelay = try ByteCountingProxy.inFront(of: postgres)
        let myRelay = try ByteCountingProxy.inFront(of: mysql)
        defer { pgRelay.stop(); myRelay.stop() }
        let src = try harness.registry.connect(pgRelay.url(replacing: postgres) + (postgres.contains("?") ? "&" : "?") + "digests=sql", role: .source)
        // Through the relays both servers are on loopback, where Ferry would read every row's hash
        // (MariaDB's rows, hashed beside it; PostgreSQL's keys and row hashes, listed whole) — faster
        // than their SQL's digests, with no network to spare; `digests=sql` asks for what a server
        // on another host gets by default: digests in its SQL, a few bytes a bucket.
        let dst = try harness.registry.connect(myRelay.url(replacing: mysql) + (mysql.contains("?") ? "&" : "?") + "digests=sql", role: .target)
        defer { src.close(); dst.close() }
        try dst.begin(); try dst.dropTable(TableName("mirror_million")); try dst.commit()

        pgRelay.reset()
        let full = try harness.copy(src, dst, mode: .create, tables: ["mirror_million"], batchSize: 10_000) { $0.indexes = false }
        XCTAssertTrue(full.ok, "\(full.tables.compactMap(\.error))")
        let fullBytes = pgRelay.bytesFromServer
        XCTAssertGreaterThan(fullBytes, 50_000_000, "a full copy of a million rows read only \(fullBytes) bytes")

        // 0.1% of the rows change at the source: 1,000 updates.
        try setup.run("UPDATE mirror_million SET note = 'changed ' || id WHERE id % 1000 = 7")
        pgRelay.reset()
        myRelay.reset()
        let mirror = try harness.copy(src, dst, mode: .mirror, tables: ["mirror_million"], batchSize: 10_000)
        XCTAssertTrue(mirror.ok, "\(mirror.tables.compactMap(\.error))")
        XCTAssertEqual(mirror.tables.first?.counts, MergeCounts(updated: 1_000, unchanged: 999_000))
        let sourceBytes = pgRelay.bytesFromServer
        let targetBytes = myRelay.bytesFromServer
        let line = "full copy read \(fullBytes) bytes from the source; the mirror read \(sourceBytes) from the source and \(targetBytes) from the target (\(mirror.tables.first?.mirror.map { "\($0)" } ?? ""))"
        print(line)
        XCTAssertLessThanOrEqual(sourceBytes, fullBytes / 20, line)
        XCTAssertLessThanOrEqual(targetBytes, fullBytes / 20, line)
        try setup.run("DROP TABLE mirror_million")
        try dst.begin(); try dst.dropTable(TableName("mirror_million")); try dst.commit()
    }
}
