import FerryCore
import FerryDriverTestKit
import FerrySQLite
import FerryXML
import Foundation
import XCTest

/// The service takes no SQL from a request: a schema posted as coming from the served engine
/// itself carries native type text and defaults, which a driver would paste into its DDL.
final class ServiceSchemaSafetyTests: XCTestCase {
    func testAPostedSchemaCannotRunSQL() async throws {
        let folder = try TemporaryFolder()
        let path = folder.path("served.db")
        let db = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + path), role: .target)
        try db.createTable(TableSchema(name: TableName("victim"), engine: .sqlite, columns: [
            Column(name: "id", nativeType: "INTEGER", logicalType: .int64, isNullable: false),
        ], primaryKey: ["id"]), named: TableName("victim"))
        db.close()
        let service = try await RunningService(database: "sqlite:" + path, drivers: [SQLiteDriver()])
        defer { service.stop() }

        let posted = """
            <table name="evil" engine="sqlite">
            <column name="a" native="TEXT); DROP TABLE victim; --" type="text" nullable="true"/>
            <column name="b" native="INTEGER" type="int64" nullable="true" default="1); DROP TABLE victim; CREATE TABLE x (y"/>
            </table>
            """
        let (status, body) = try service.request("POST", "v1/tables", token: service.readWrite, body: Data(posted.utf8))
        XCTAssertEqual(status, 201, body)

        let check = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + path), role: .source)
        defer { check.close() }
        XCTAssertTrue(try check.tableExists(TableName("victim")), "a posted schema dropped a table")
        XCTAssertFalse(try check.tableExists(TableName("x")), "a posted default ran as SQL")
        let evil = try check.describe(TableName("evil"))
        XCTAssertEqual(evil.columns.map(\.name), ["a", "b"])
        XCTAssertEqual(evil.columns[0].logicalType, .text, "the unsafe native type was replaced by the type map's")
        XCTAssertNil(evil.columns[1].defaultExpression, "defaults do not cross the service")
    }

    /// Indexes and foreign keys are requested as column lists, and a foreign key may reference
    /// only a table the service serves (else it could block deletes in, and probe, any table).
    func testObjectsRequestsAreStructuredAndStayInsideTheServedTables() async throws {
        let folder = try TemporaryFolder()
        let path = folder.path("served.db")
        let db = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + path), role: .target)
        for name in ["open_table", "secret"] {
            try db.createTable(TableSchema(name: TableName(name), engine: .sqlite, columns: [
                Column(name: "id", nativeType: "INTEGER", logicalType: .int64, isNullable: false),
                Column(name: "ref", nativeType: "INTEGER", logicalType: .int64),
            ], primaryKey: ["id"]), named: TableName(name))
        }
        db.close()
        let service = try await RunningService(database: "sqlite:" + path, drivers: [SQLiteDriver()], tables: [TableName("open_table")])
        defer { service.stop() }

        let toSecret = """
            <objects><foreignKey name="probe" table="secret" onDelete="NO ACTION" onUpdate="NO ACTION"><c references="id">ref</c></foreignKey></objects>
            """
        var (status, body) = try service.request("POST", "v1/tables/open_table/foreign-keys", token: service.readWrite, body: Data(toSecret.utf8))
        XCTAssertEqual(status, 404, body)
        let posted = """
            <table name="open_table2"><column name="id" type="int64" nullable="false"/><column name="ref" type="int64" nullable="true"/>
            <foreignKey name="probe" table="secret"><c references="id">ref</c></foreignKey></table>
            """
        (status, body) = try service.request("POST", "v1/tables", token: service.readWrite, body: Data(posted.utf8))
        XCTAssertEqual(status, 404, body)

        let index = #"<objects><index name="by ref &quot;); DROP TABLE secret; --"><c>ref</c></index></objects>"#
        (status, body) = try service.request("POST", "v1/tables/open_table/indexes", token: service.readWrite, body: Data(index.utf8))
        XCTAssertEqual(status, 200, body)
        (status, body) = try service.request("POST", "v1/tables/open_table/indexes", token: service.readOnly, body: Data(index.utf8))
        XCTAssertEqual(status, 403, body)
        let check = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + path), role: .source)
        defer { check.close() }
        XCTAssertTrue(try check.tableExists(TableName("secret")))
        XCTAssertEqual(try check.describe(TableName("open_table")).indexes.map(\.name), ["by ref \"); DROP TABLE secret; --"])
        (status, body) = try service.request("GET", "v1/objects", token: service.readOnly)
        XCTAssertEqual(status, 200, body)
    }
}
