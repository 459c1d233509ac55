import FerryCore
import FerryDriverTestKit
@testable import FerrySQLite
import XCTest

final class VerifierTests: XCTestCase {
    func testFindsChangedMissingAndExtraRowsByKey() throws {
        let folder = try TemporaryFolder()
        let datasets = try TestDatabases.datasetsFolder()
        let src = try SQLiteConnection(
            endpoint: Endpoint(parsing: "sqlite:" + datasets.appendingPathComponent("chinook/Chinook_Sqlite.sqlite").path), role: .source)
        let dst = try SQLiteConnection(endpoint: Endpoint(parsing: "sqlite:" + folder.path("copy.db")), role: .target)
        XCTAssertTrue(try CopyHarness([SQLiteDriver()]).copy(src, dst).ok)

        var options = Verifier.Options()
        options.buckets = 64
        let equal = try Verifier().verify(source: src, target: dst, options: options)
        XCTAssertTrue(equal.equal, "\(equal.tables.filter { $0.status != .equal })")
        XCTAssertEqual(equal.tables.count, 11)
        XCTAssertEqual(equal.tables.first { $0.source == "Track" }?.targetRows, 3503)

        try dst.execute("""
            UPDATE Track SET Name = Name || ' (live)' WHERE TrackId = 42;
            UPDATE Invoice SET Total = '9.90' WHERE InvoiceId = 7;
            DELETE FROM Genre WHERE GenreId = 25;
            INSERT INTO Genre VALUES (99, 'Polka');
            UPDATE InvoiceLine SET UnitPrice = 0.990 WHERE InvoiceLineId = 1;
            """)
        let report = try Verifier().verify(source: src, target: dst, options: options)
        XCTAssertFalse(report.equal)
        let track = report.tables.first { $0.source == "Track" }
        XCTAssertEqual(track?.differences, [Verifier.Difference(kind: "changed", key: "(TrackId=42)", columns: ["Name"])])
        XCTAssertEqual(report.tables.first { $0.source == "Invoice" }?.differences.first?.columns, ["Total"])
        let genre = report.tables.first { $0.source == "Genre" }?.differences ?? []
        XCTAssertEqual(Set(genre.map(\.kind)), ["missing in target", "extra in target"])
        XCTAssertTrue(genre.contains { $0.key == "(GenreId=25)" } && genre.contains { $0.key == "(GenreId=99)" })
        // 0.99 stored as text '0.990' is the same number: not a difference.
        XCTAssertEqual(report.tables.first { $0.source == "InvoiceLine" }?.status, .equal)
        XCTAssertEqual(report.tables.filter { $0.status == .different }.count, 3)
    }

    func testDecimalNormalisation() {
        XCTAssertEqual(DecimalText.normalized("+001.500"), "1.5")
        XCTAssertEqual(DecimalText.normalized("-0.00"), "0")
        XCTAssertEqual(DecimalText.normalized("12"), "12")
        XCTAssertEqual(DecimalText.normalized(".5"), "0.5")
        XCTAssertEqual(DecimalText.normalized("-10.0"), "-10")
        XCTAssertEqual(DecimalText.normalized("NaN"), "NaN")
    }
}
