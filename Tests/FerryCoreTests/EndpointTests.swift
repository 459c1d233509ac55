import FerryCore
import XCTest

final class EndpointTests: XCTestCase {
    func testSQLiteForms() throws {
        XCTAssertEqual(try Endpoint(parsing: "sqlite:data/app.db").path, "data/app.db")
        XCTAssertEqual(try Endpoint(parsing: "sqlite:///abs/app.db").path, "/abs/app.db")
        XCTAssertEqual(try Endpoint(parsing: "SQLITE:/abs/app.db").path, "/abs/app.db")
        XCTAssertEqual(try Endpoint(parsing: "sqlite:my%20file.db").path, "my file.db")
        XCTAssertEqual(try Endpoint(parsing: "sqlite:app.db").redacted, "sqlite:app.db")
    }

    func testServerURLs() throws {
        let pg = try Endpoint(parsing: "postgres://dba:s3cr%40t@db.example:5433/shop?sslmode=require&application_name=x")
        XCTAssertEqual(pg.scheme, "postgres")
        XCTAssertEqual(pg.user, "dba")
        XCTAssertEqual(pg.password, "s3cr@t")
        XCTAssertEqual(pg.host, "db.example")
        XCTAssertEqual(pg.port, 5433)
        XCTAssertEqual(pg.path, "shop")
        XCTAssertEqual(pg.parameter("sslmode"), "require")
        XCTAssertEqual(pg.redacted, "postgres://dba:****@db.example:5433/shop?sslmode=require&application_name=x")
        XCTAssertFalse(pg.description.contains("s3cr"))

        let my = try Endpoint(parsing: "mysql://root@[::1]:3306/app")
        XCTAssertEqual(my.host, "::1")
        XCTAssertEqual(my.port, 3306)
        XCTAssertEqual(my.redacted, "mysql://root@[::1]:3306/app")

        for scheme in ["postgresql", "mariadb", "http", "https"] {
            XCTAssertEqual(try Endpoint(parsing: "\(scheme)://h/").scheme, scheme)
        }
        let token = try Endpoint(parsing: "http://:tok3n@127.0.0.1:8080/")
        XCTAssertEqual(token.password, "tok3n")
        XCTAssertFalse(token.redacted.contains("tok3n"))
        XCTAssertFalse(try Endpoint(parsing: "postgres://u@h/db?password=pw").redacted.contains("pw&"))
        XCTAssertTrue(try Endpoint(parsing: "postgres://u@h/db?password=pw").redacted.hasSuffix("password=****"))
    }

    func testBadURLs() {
        for (text, fragment) in [
            ("app.db", "no scheme"), ("postgres:db", "expected postgres://host"), ("sqlite:", "no file path"),
            ("mysql://u:pw@h:99999/db", "port"), ("1abc://x", "not a URL scheme"),
        ] {
            XCTAssertThrowsError(try Endpoint(parsing: text), text) { error in
                XCTAssertTrue("\(error)".contains(fragment), "\(text): \(error)")
                XCTAssertTrue((error as? FerryError)?.isUsage == true)
            }
        }
        XCTAssertThrowsError(try Endpoint(parsing: "mysql://u:hunter2@h:99999/db")) { error in
            XCTAssertFalse("\(error)".contains("hunter2"), "\(error)")
        }
    }

    func testRegistry() throws {
        let registry = DriverRegistry()
        XCTAssertThrowsError(try registry.connect("oracle://x/y", role: .source)) { error in
            XCTAssertEqual("\(error)".contains("unknown URL scheme 'oracle:'"), true, "\(error)")
        }
    }

    func testTableNameParsing() {
        XCTAssertEqual(TableName(parsing: "album"), TableName("album"))
        XCTAssertEqual(TableName(parsing: "public.album"), TableName(schema: "public", "album"))
        XCTAssertEqual(TableName(parsing: "\"my.table\""), TableName("my.table"))
        XCTAssertEqual(TableName(parsing: "s.\"a\"\"b.c\""), TableName(schema: "s", "a\"b.c"))
        XCTAssertEqual(TableName(schema: "s", "a.b").description, "s.\"a.b\"")
        XCTAssertTrue(TableName(schema: "public", "x").matches(TableName("x")))
        XCTAssertFalse(TableName(schema: "public", "x").matches(TableName(schema: "other", "x")))
    }
}
