import FerryCore
import FerryDriverTestKit
import FerryMySQL
import FerryPostgres
import FerrySQLite
import Foundation
import XCTest

/// docs/type-mapping.md's tables of every built-in type are generated from the drivers' data,
/// so they cannot drift: this test fails when they differ (with FERRY_UPDATE_DOCS=1 it rewrites
/// them and still fails; scripts/gen-type-docs does that and shows the diff).
final class TypeMappingDocTests: XCTestCase {
    static let engines = [
        TypeMappingDocument.Section(title: "SQLite", entries: SQLiteTypeMap.nativeTypes, dialect: SQLiteDialect()),
        TypeMappingDocument.Section(title: "PostgreSQL", entries: PostgresTypeMap.nativeTypes, dialect: PostgresDialect()),
        TypeMappingDocument.Section(title: "MySQL", entries: MySQLTypeMap.nativeTypes, dialect: MySQLDialect()),
    ]

    func testGeneratedTablesAreCurrent() throws {
        let url = TestDatabases.packageRoot().appendingPathComponent("docs/type-mapping.md")
        let doc = try String(contentsOf: url, encoding: .utf8)
        let generated = TypeMappingDocument.render(Self.engines)
        guard let updated = TypeMappingDocument.replacingGenerated(in: doc, with: generated) else {
            return XCTFail("docs/type-mapping.md lost its generated-section markers")
        }
        guard doc != updated else { return checkEntries(doc) }
        // Out of date: the test fails, also when asked to rewrite the file (it never passes
        // while the file it checks is being rewritten; run it again to check the new text).
        if ProcessInfo.processInfo.environment["FERRY_UPDATE_DOCS"] == "1" {
            try updated.write(to: url, atomically: true, encoding: .utf8)
            return XCTFail("docs/type-mapping.md was out of date and has been rewritten: review the diff, then run the test again")
        }
        XCTFail("docs/type-mapping.md is out of date: run scripts/gen-type-docs")
    }

    func checkEntries(_ doc: String) {
        // Every entry appears, and every target column names a real DDL type.
        for e in Self.engines {
            for entry in e.entries { XCTAssertTrue(doc.contains("| `\(entry.declaration)` |"), entry.declaration) }
        }
    }
}
