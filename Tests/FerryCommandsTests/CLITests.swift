import FerryCore
import FerryDriverTestKit
import FerrySQLite
import Foundation
import XCTest

/// End-to-end tests that run the built `ferry` binary.
final class CLITests: XCTestCase {
    var folder: TemporaryFolder!
    let chinook = CLITests.chinookPath
    static let chinookPath = TestDatabases.packageRoot().appendingPathComponent("samples/chinook.sqlite").path

    override func setUpWithError() throws {
        folder = try TemporaryFolder()
        // Readable by another user for the read-only-target test.
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: folder.url.path)
    }

    struct Result {
        var code: Int32
        var out: String
        var err: String
    }

    var binary: URL { Self.binaryURL }

    static var binaryURL: URL {
        // On Linux, XCTest's bundle sits in the products folder next to the executables.
        let products = Bundle.main.bundleURL
        let candidate = products.appendingPathComponent("ferry")
        if FileManager.default.fileExists(atPath: candidate.path) { return candidate }
        return TestDatabases.packageRoot().appendingPathComponent(".build/debug/ferry")
    }

    func ferry(_ args: [String], asUser user: String? = nil) throws -> Result {
        try Self.run(binary, args, asUser: user)
    }

    static func run(_ binary: URL, _ args: [String], asUser user: String? = nil, environment: [String: String] = [:]) throws -> Result {
        let p = Process()
        if !environment.isEmpty { p.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        if let user {
            p.executableURL = URL(fileURLWithPath: "/usr/sbin/runuser")
            p.arguments = ["-u", user, "--", binary.path] + args
        } else {
            p.executableURL = binary
            p.arguments = args
        }
        let out = Pipe()
        let err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        let o = out.fileHandleForReading.readDataToEndOfFile()
        let e = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return Result(code: p.terminationStatus, out: String(decoding: o, as: UTF8.self), err: String(decoding: e, as: UTF8.self))
    }

    func fileHash(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }

    func assertOneLineError(_ r: Result, code: Int32, contains fragment: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(r.code, code, "exit code; stderr: \(r.err)", file: file, line: line)
        let lines = r.err.split(separator: "\n")
        XCTAssertEqual(lines.count, 1, "one line expected, got: \(r.err)", file: file, line: line)
        XCTAssertTrue(r.err.contains(fragment), "'\(fragment)' not in: \(r.err)", file: file, line: line)
    }

    func testHelpHasExamples() throws {
        for cmd in [[], ["tables"], ["describe"], ["copy"], ["plan"], ["run"]] {
            let r = try ferry(cmd + ["--help"])
            XCTAssertEqual(r.code, 0, r.err)
            XCTAssertTrue(r.out.contains("Examples:") || r.out.contains("Example"), "\(cmd): \(r.out)")
        }
    }

    /// The README's completion lines: every shell's script names every subcommand.
    func testShellCompletions() throws {
        for shell in ["bash", "zsh", "fish"] {
            let r = try ferry(["--generate-completion-script", shell])
            XCTAssertEqual(r.code, 0, r.err)
            for command in ["copy", "verify", "describe", "tables", "serve"] {
                XCTAssertTrue(r.out.contains(command), "\(shell) completion lacks \(command)")
            }
        }
    }

    func testTablesAndDescribe() throws {
        let t = try ferry(["tables", "sqlite:" + chinook])
        XCTAssertEqual(t.code, 0, t.err)
        XCTAssertTrue(t.out.contains("Track          3503"), t.out)
        let j = try ferry(["tables", "--json", "sqlite:" + chinook])
        let rows = try JSONSerialization.jsonObject(with: Data(j.out.utf8)) as? [[String: Any]]
        XCTAssertEqual(rows?.count, 11)

        let d = try ferry(["describe", "sqlite:" + chinook, "track"])  // case-insensitive match
        XCTAssertEqual(d.code, 0, d.err)
        XCTAssertTrue(d.out.contains("UnitPrice"), d.out)
        XCTAssertTrue(d.out.contains("decimal(10,2)"), d.out)
        XCTAssertTrue(d.out.contains("primary key: (TrackId)"), d.out)
        XCTAssertTrue(d.out.contains("rowid"), d.out)
        let dj = try ferry(["describe", "--json", "sqlite:" + chinook, "Invoice"])
        let obj = try JSONSerialization.jsonObject(with: Data(dj.out.utf8)) as? [String: Any]
        let schema = obj?["schema"] as? [String: Any]
        XCTAssertEqual(schema?["primaryKey"] as? [String], ["InvoiceId"])
    }

    func testCopyChinookAndRefuseToOverwrite() throws {
        let target = folder.path("chinook-copy.db")
        let r = try ferry(["copy", "sqlite:" + chinook, "sqlite:" + target])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertTrue(r.err.contains("copied 11 of 11 tables, 15607 rows"), r.err)
        let before = fileHash(target)

        let again = try ferry(["copy", "sqlite:" + chinook, "sqlite:" + target, "--tables", "Album"])
        assertOneLineError(again, code: 1, contains: "table Album already exists")
        XCTAssertEqual(fileHash(target), before, "the target must be left exactly as it was")

        let json = try ferry(["copy", "sqlite:" + chinook, "sqlite:" + target, "--mode", "replace", "--tables", "Artist,Genre", "--json"])
        XCTAssertEqual(json.code, 0, json.err)
        let obj = try JSONSerialization.jsonObject(with: Data(json.out.utf8)) as? [String: Any]
        XCTAssertEqual(obj?["ok"] as? Bool, true)
        XCTAssertEqual(obj?["rows"] as? Int, 300)
    }

    func testDryRunTouchesNothing() throws {
        let target = folder.path("never.db")
        let r = try ferry(["copy", "--dry-run", "sqlite:" + chinook, "sqlite:" + target, "--exclude", "PlaylistTrack"])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertTrue(r.out.contains("plan: copy sqlite:"), r.out)
        XCTAssertTrue(r.out.contains("CREATE TABLE \"Track\""), r.out)
        XCTAssertTrue(r.out.contains("key: primary key (TrackId)"), r.out)
        XCTAssertFalse(r.out.contains("PlaylistTrack"), r.out)
        XCTAssertFalse(FileManager.default.fileExists(atPath: target), "dry run created the target file")
    }

    func testBadInput() throws {
        let target = folder.path("t.db")
        assertOneLineError(try ferry(["tables", "sqlite:" + folder.path("missing.db")]), code: 1, contains: "no such file")
        let text = folder.path("text.db")
        try Data("hello, not a database".utf8).write(to: URL(fileURLWithPath: text))
        assertOneLineError(try ferry(["tables", "sqlite:" + text]), code: 1, contains: "is not a SQLite database")
        assertOneLineError(try ferry(["describe", "sqlite:" + chinook, "NoSuchTable"]), code: 1, contains: "table NoSuchTable not found")
        assertOneLineError(try ferry(["copy", "sqlite:" + chinook, "sqlite:" + target, "--tables", "Nope"]), code: 1,
                           contains: "table Nope not found")
        assertOneLineError(try ferry(["tables", "oracle://scott:tiger@db/orcl"]), code: 2, contains: "unknown URL scheme 'oracle:'")
        let masked = try ferry(["tables", "oracle://scott:tiger@db/orcl"])
        XCTAssertFalse(masked.err.contains("tiger"), "password leaked: \(masked.err)")
        assertOneLineError(try ferry(["tables", chinook]), code: 2, contains: "no scheme")
        // A service that does not run (nothing listens on port 1 of loopback): one line after the
        // retries, the token masked.
        let gone = try ferry(["tables", "http://:secret-token-1234@127.0.0.1:1/"])
        assertOneLineError(gone, code: 1, contains: "the service did not answer: connection refused")
        XCTAssertFalse(gone.err.contains("secret-token-1234"), "token leaked: \(gone.err)")
        let usage = try ferry(["copy", "sqlite:a", "sqlite:b", "--jobs", "0"])
        XCTAssertEqual(usage.code, 2, usage.err)
        XCTAssertTrue(usage.err.contains("--jobs must be between 1 and 64"), usage.err)
        XCTAssertFalse(FileManager.default.fileExists(atPath: target), "a failed copy created \(target)")
    }

    func testReadOnlyTarget() throws {
        let target = folder.path("ro.db")
        XCTAssertEqual(try ferry(["copy", "sqlite:" + chinook, "sqlite:" + target, "--tables", "Genre", "-q"]).code, 0)
        try FileManager.default.setAttributes([.posixPermissions: 0o444], ofItemAtPath: target)
        let before = fileHash(target)
        // root writes through file permissions: run as an unprivileged user then.
        let user: String? = getuid() == 0 ? "nobody" : nil
        let r = try ferry(["copy", "sqlite:" + chinook, "sqlite:" + target, "--tables", "Artist"], asUser: user)
        assertOneLineError(r, code: 1, contains: "cannot write to sqlite:\(target)")
        XCTAssertEqual(fileHash(target), before)
    }

    func testVerify() throws {
        let target = folder.path("v.db")
        let copied = try ferry(["copy", "-q", "--verify", "sqlite:" + chinook, "sqlite:" + target])
        XCTAssertEqual(copied.code, 0, copied.err)
        XCTAssertTrue(copied.out.contains("Track: equal (3503 rows in the source, 3503 in the target)"), copied.out)
        try ExternalTool.run(["sqlite3", target, "UPDATE Artist SET Name = 'AC/DC!' WHERE ArtistId = 1"], input: "")
        let r = try ferry(["verify", "sqlite:" + chinook, "sqlite:" + target])
        XCTAssertEqual(r.code, 3, "differences exit 3 (ExitStatus.differences): " + r.err)
        XCTAssertTrue(r.out.contains("Artist: different"), r.out)
        XCTAssertTrue(r.out.contains("changed (ArtistId=1): Name"), r.out)
        XCTAssertTrue(r.err.contains("1 of 11 tables differ"), r.err)
        let json = try ferry(["verify", "--json", "--tables", "Artist", "sqlite:" + chinook, "sqlite:" + target])
        let obj = try JSONSerialization.jsonObject(with: Data(json.out.utf8)) as? [String: Any]
        XCTAssertEqual(obj?["equal"] as? Bool, false)
    }

    func testCastRules() throws {
        let target = folder.path("cast.db")
        let casts = folder.path("casts.txt")
        try "# Chinook\ncolumn Track.Composer to text(10) using trim\ncolumn Genre.Name to skip\ntype blob to text\n"
            .write(toFile: casts, atomically: true, encoding: .utf8)
        let args = ["copy", "sqlite:" + chinook, "sqlite:" + target, "--tables", "Track,Genre,MediaType",
                    "--cast", "type numeric(10,2) to float64", "--casts", casts, "--cast", "column MediaType.Name to text(3)"]

        // --dry-run: which rule decided each column, the unused rule, the table left with no column.
        let plan = try ferry(args + ["--dry-run"])
        XCTAssertEqual(plan.code, 0, plan.err)
        XCTAssertTrue(plan.out.contains("column UnitPrice: NUMERIC(10,2) -> decimal(10,2) -> float64  (cast rule --cast #1 'type numeric(10,2) to float64')"), plan.out)
        XCTAssertTrue(plan.out.contains("column Composer: NVARCHAR(220) -> text(220) -> text(10) using trim  (cast rule \(casts):2"), plan.out)
        XCTAssertTrue(plan.out.contains("column TrackId: INTEGER -> int64 [rowid]  (sqlite type map)"), plan.out)
        XCTAssertTrue(plan.out.contains("cast rule \(casts):4 'type blob to text' matched no column"), plan.out)
        XCTAssertTrue(plan.out.contains("\"UnitPrice\" REAL NOT NULL"), plan.out)
        XCTAssertFalse(FileManager.default.fileExists(atPath: target))

        // The copy: Genre (its only other column is its key) keeps GenreId; values converted as the rules say.
        let r = try ferry(args + ["-q", "--verify"])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertTrue(r.out.contains("Track: equal (3503 rows"), "verify compares cast columns as converted: \(r.out)")
        let rows = try ExternalTool.run(["sqlite3", target, """
            SELECT Composer, typeof(UnitPrice), UnitPrice FROM Track WHERE TrackId = 1;
            SELECT count(*) FROM pragma_table_info('Genre');
            SELECT Name FROM MediaType WHERE MediaTypeId = 1;
            """], input: "")
        XCTAssertEqual(rows, "Angus Youn|real|0.99\n1\nMPE\n")

        // verify with the copy's rules finds a changed converted value and names its key.
        try ExternalTool.run(["sqlite3", target, "UPDATE Track SET UnitPrice = 1.99 WHERE TrackId = 7"], input: "")
        let v = try ferry(["verify", "sqlite:" + chinook, "sqlite:" + target, "--tables", "Track",
                           "--cast", "type numeric(10,2) to float64", "--casts", casts])
        XCTAssertEqual(v.code, 3, v.err)
        XCTAssertTrue(v.out.contains("changed (TrackId=7): UnitPrice"), v.out)

        // A table whose every column is skipped is reported and not created.
        let empty = try ferry(["copy", "sqlite:" + chinook, "sqlite:" + folder.path("empty.db"), "--tables", "Genre,Artist",
                               "--cast", "column Genre.Name to skip", "--cast", "column Genre.GenreId to skip"])
        XCTAssertEqual(empty.code, 0, empty.err)
        XCTAssertTrue(empty.err.contains("warning: table Genre: every column is skipped; the table is not copied"), empty.err)
        XCTAssertEqual(try ExternalTool.run(["sqlite3", folder.path("empty.db"), "SELECT name FROM sqlite_master WHERE type = 'table'"], input: ""),
                       "Artist\n")

        // describe shows the deciding rule too.
        let d = try ferry(["describe", "sqlite:" + chinook, "Track", "--cast", "type integer when not serial to int32"])
        XCTAssertEqual(d.code, 0, d.err)
        XCTAssertTrue(d.out.contains("DECIDED BY"), d.out)
        XCTAssertTrue(d.out.contains("cast rule --cast #1 'type integer when not serial to int32'"), d.out)
        XCTAssertTrue(d.out.range(of: #"TrackId +INTEGER +int64 +no +rowid +int64 +sqlite type map"#, options: .regularExpression) != nil, d.out)

        // With --target, native types a rule names are checked by that target (never opened for writing).
        let never = folder.path("describe-target.db")
        let dt = try ferry(["describe", "sqlite:" + chinook, "Genre", "--target", "sqlite:" + never, "--cast", "column Genre.Name to VARCHAR(5)"])
        XCTAssertEqual(dt.code, 0, dt.err)
        XCTAssertTrue(dt.out.contains("VARCHAR(5) (text(5))"), dt.out)
        assertOneLineError(try ferry(["describe", "sqlite:" + chinook, "Genre", "--target", "sqlite:" + never, "--cast", "column Genre.Name to NUMERIC(10,2)"]),
                           code: 2, contains: "the target has no type 'NUMERIC(10,2)'")
        XCTAssertFalse(FileManager.default.fileExists(atPath: never), "describe created its --target")

        // Bad rules: one line, exit 2, nothing written.
        let other = folder.path("never.db")
        assertOneLineError(try ferry(["copy", "sqlite:" + chinook, "sqlite:" + other, "--cast", "type integer to number"]), code: 2,
                           contains: "cast rule --cast #1 'type integer to number': the target has no type 'number'")
        assertOneLineError(try ferry(["copy", "sqlite:" + chinook, "sqlite:" + other, "--cast", "type integer into text"]), code: 2,
                           contains: "it has no 'to TARGET'")
        assertOneLineError(try ferry(["copy", "sqlite:" + chinook, "sqlite:" + other, "--casts", folder.path("nope.txt")]), code: 2,
                           contains: "cannot read --casts file")
        // A value the new type cannot hold: the table fails naming column and key, the target keeps nothing of it.
        let bad = try ferry(["copy", "-q", "sqlite:" + chinook, "sqlite:" + other, "--tables", "Artist", "--cast", "column Artist.Name to int64"])
        XCTAssertEqual(bad.code, 1)
        XCTAssertTrue(bad.err.contains("table Artist, column Name, key (ArtistId=1): 'AC/DC' cannot be cast to int64"), bad.err)
        XCTAssertFalse(FileManager.default.fileExists(atPath: other), "a failed copy left \(other)")
    }

    func testProgressLinesWhenNotATerminal() throws {
        let r = try ferry(["copy", "sqlite:" + chinook, "sqlite:" + folder.path("p.db"), "--tables", "Track"])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertTrue(r.err.contains("Track: copying (~3503 rows)"), r.err)
        XCTAssertTrue(r.err.contains("Track: 3503 rows in"), r.err)
        XCTAssertFalse(r.err.contains("\u{1B}["), "no terminal escapes when stderr is a pipe")
        let quiet = try ferry(["copy", "-q", "sqlite:" + chinook, "sqlite:" + folder.path("q.db"), "--tables", "Track"])
        XCTAssertEqual(quiet.err, "")
    }
}

/// `ferry copy` from the command line through PostgreSQL and MySQL and back.
final class ServerCLITests: XCTestCase {
    func testCopyThroughEachServer() throws {
        let folder = try TemporaryFolder()
        let chinook = CLITests.chinookPath
        for variable in ["FERRY_TEST_POSTGRES_URL", "FERRY_TEST_MYSQL_URL"] {
            let url = try TestDatabases.serverURL(variable)
            let there = try CLITests.run(CLITests.binaryURL, ["copy", "-q", "--mode", "replace", "--tables", "Artist,Album", "sqlite:" + chinook, url])
            XCTAssertEqual(there.code, 0, there.err)
            XCTAssertFalse(there.err.contains(try Endpoint(parsing: url).password ?? "-"), "password printed")
            let back = folder.path("back-\(variable).db")
            let r = try CLITests.run(CLITests.binaryURL, ["copy", "-q", "--tables", "Artist,Album", "--verify", url, "sqlite:" + back])
            XCTAssertEqual(r.code, 0, r.err)
            XCTAssertTrue(r.out.contains("Artist: equal (275 rows in the source, 275 in the target)"), r.out)
            let v = try CLITests.run(CLITests.binaryURL, ["verify", "--tables", "Artist,Album", "sqlite:" + chinook, "sqlite:" + back])
            XCTAssertEqual(v.code, 0, v.out + v.err)
            let d = try CLITests.run(CLITests.binaryURL, ["describe", url, "Album"])
            XCTAssertTrue(d.out.contains("primary key: (AlbumId)"), d.out)
            // A table copied onto itself is refused at once (it waited for ever on its own read's lock).
            let onto = try CLITests.run(CLITests.binaryURL, ["copy", "-q", "--mode", "replace", "--tables", "Artist", url, url])
            XCTAssertEqual(onto.code, 2, onto.err)
            XCTAssertTrue(onto.err.contains("Artist would be copied onto itself"), onto.err)
            XCTAssertEqual(try CLITests.run(CLITests.binaryURL, ["copy", "-q", "--mode", "replace", "--tables", "Artist", url, "sqlite:" + back]).code, 0)
        }
        // Two paths to one SQLite file (a link) are one database.
        let copy = folder.path("self.db")
        try FileManager.default.copyItem(atPath: chinook, toPath: copy)
        try FileManager.default.createSymbolicLink(atPath: folder.path("alias.db"), withDestinationPath: copy)
        let onto = try CLITests.run(CLITests.binaryURL, ["copy", "-q", "--mode", "replace", "--tables", "Artist", "sqlite:" + copy, "sqlite:" + folder.path("alias.db")])
        XCTAssertEqual(onto.code, 2, onto.err)
        XCTAssertTrue(onto.err.contains("are the same database"), onto.err)
    }
}

/// The schema objects, --where and the zero-date advice, from the command line on every engine.
final class SchemaAndFilterCLITests: XCTestCase {
    func ferry(_ args: [String]) throws -> CLITests.Result { try CLITests.run(CLITests.binaryURL, args) }

    func testDryRunShowsIndexesAndForeignKeysInOrderAndTheFlagsLeaveThemOut() throws {
        let folder = try TemporaryFolder()
        let target = folder.path("objects.db")
        let plan = try ferry(["copy", "--dry-run", "sqlite:" + CLITests.chinookPath, "sqlite:" + target])
        XCTAssertEqual(plan.code, 0, plan.err)
        let out = plan.out
        guard let create = out.range(of: "CREATE TABLE \"Album\""), let index = out.range(of: "CREATE INDEX \"IFK_AlbumArtistId\" ON \"Album\"") else {
            return XCTFail("no CREATE TABLE / CREATE INDEX for Album in:\n\(out)")
        }
        XCTAssertLessThan(create.lowerBound, index.lowerBound, "the index is built after the table")
        XCTAssertTrue(out.contains("FOREIGN KEY (\"ArtistId\") REFERENCES \"Artist\" (\"ArtistId\")"), out)

        let copy = try ferry(["copy", "sqlite:" + CLITests.chinookPath, "sqlite:" + target])
        XCTAssertEqual(copy.code, 0, copy.err)
        XCTAssertTrue(copy.err.contains("copied 11 of 11 tables, 15607 rows, 11 indexes, 11 foreign keys"), copy.err)
        let bare = folder.path("bare.db")
        let none = try ferry(["copy", "sqlite:" + CLITests.chinookPath, "sqlite:" + bare, "--no-indexes", "--no-foreign-keys"])
        XCTAssertEqual(none.code, 0, none.err)
        XCTAssertTrue(none.err.contains("copied 11 of 11 tables, 15607 rows in"), none.err)
        let album = try ferry(["describe", "sqlite:" + bare, "Album"])
        XCTAssertFalse(album.out.contains("index ") || album.out.contains("foreign key "), album.out)
        let described = try ferry(["describe", "sqlite:" + target, "Album"])
        XCTAssertTrue(described.out.contains("index IFK_AlbumArtistId: (ArtistId)"), described.out)
        XCTAssertTrue(described.out.contains("foreign key (unnamed): (ArtistId) → Artist(ArtistId)"), described.out)

        // A subset reports each foreign key it leaves out.
        let subset = try ferry(["copy", "sqlite:" + CLITests.chinookPath, "sqlite:" + folder.path("subset.db"), "--tables", "Album"])
        XCTAssertEqual(subset.code, 0, subset.err)
        XCTAssertTrue(subset.err.contains("it references Artist, which is not part of this copy"), subset.err)
    }

    func testWhereOnEveryEngineAndRefusedThroughTheService() throws {
        let folder = try TemporaryFolder()
        let chinook = "sqlite:" + CLITests.chinookPath
        let targets = ["sqlite:" + folder.path("where.db"), try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL"),
                       try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")]
        for target in targets {
            let r = try ferry(["copy", chinook, target, "--mode", "replace", "--tables", "Invoice,Customer",
                               "--where", "Invoice=Total > 10", "--where", "Customer=Country = 'Germany'", "--no-foreign-keys", "--json", "-q"])
            XCTAssertEqual(r.code, 0, r.err)
            let obj = try JSONSerialization.jsonObject(with: Data(r.out.utf8)) as? [String: Any]
            let tables = ((obj?["summary"] as? [String: Any])?["tables"] as? [[String: Any]]) ?? []
            XCTAssertEqual(tables.first { $0["source"] as? String == "Invoice" }?["rows"] as? Int, 64, "\(target): \(r.out)")
            XCTAssertEqual(tables.first { $0["source"] as? String == "Customer" }?["rows"] as? Int, 4, "\(target): \(r.out)")
        }
        // With the foreign key: invoices of customers outside the filter break it, and the copy says so.
        for target in targets.dropFirst() {
            let r = try ferry(["copy", chinook, target, "--mode", "replace", "--tables", "Invoice,Customer",
                               "--where", "Invoice=Total > 10", "--where", "Customer=Country = 'Germany'", "-q"])
            XCTAssertEqual(r.code, 1, r.err)
            XCTAssertTrue(r.err.contains("the rows arrived, but its foreign keys could not be added"), r.err)
        }
        let unnamed = try ferry(["copy", chinook, "sqlite:" + folder.path("x.db"), "--where", "Total > 10"])
        XCTAssertEqual(unnamed.code, 2, unnamed.err)
        XCTAssertTrue(unnamed.err.contains("applies to the tables named with --tables"), unnamed.err)
        let withVerify = try ferry(["copy", chinook, "sqlite:" + folder.path("y.db"), "--tables", "Invoice", "--where", "Total > 10", "--verify"])
        XCTAssertEqual(withVerify.code, 2, withVerify.err)
    }

    func testZeroDatesNullMakesTheColumnNullableAndKeepsTheDefaults() throws {
        let mysqlURL = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        let pgURL = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let e = try Endpoint(parsing: mysqlURL)
        try ExternalTool.run(
            ["mariadb", "--no-defaults", "-h", e.host ?? "127.0.0.1", "-P", String(e.port ?? 3306), "-u", e.user ?? "", e.path],
            input: """
                SET SESSION sql_mode = '';
                DROP TABLE IF EXISTS zero_days;
                CREATE TABLE zero_days (id int PRIMARY KEY, day date NOT NULL DEFAULT '0000-00-00',
                  stamp timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, label varchar(10) NOT NULL DEFAULT 'x');
                INSERT INTO zero_days (id, day) VALUES (1, '0000-00-00'), (2, '2024-05-06');
                """, environment: ["MYSQL_PWD": e.password ?? ""])
        let failed = try ferry(["copy", mysqlURL, pgURL, "--tables", "zero_days", "--mode", "replace", "-q"])
        XCTAssertEqual(failed.code, 1)
        XCTAssertTrue(failed.err.contains("--zero-dates null"), failed.err)
        let plan = try ferry(["copy", mysqlURL, pgURL, "--tables", "zero_days", "--mode", "replace", "--zero-dates", "null", "--dry-run"])
        XCTAssertTrue(plan.out.contains("column day: date -> date [nullable: zero dates are read as NULL]"), plan.out)
        XCTAssertTrue(plan.out.contains("skip on update stamp"), plan.out)
        // The advice works: the copy succeeds, and an INSERT that omits the defaulted columns too.
        let ok = try ferry(["copy", mysqlURL, pgURL, "--tables", "zero_days", "--mode", "replace", "--zero-dates", "null", "-q"])
        XCTAssertEqual(ok.code, 0, ok.err)
        let pg = try ExternalTool.run(["psql", "-X", "-A", "-t", pgURL], input: "INSERT INTO zero_days (id) VALUES (3) RETURNING id, day IS NULL, stamp IS NOT NULL, label;\n")
        XCTAssertTrue(pg.contains("3|t|t|x"), pg)
        _ = try ExternalTool.run(["psql", "-X", "-q", pgURL], input: "DROP TABLE zero_days;\n")
    }
}

/// A test that needs a server fails (never skips) when scripts/test did not start it.
final class TestServicesTests: XCTestCase {
    func testServerURLsArePresentOnLoopback() throws {
        for variable in ["FERRY_TEST_POSTGRES_URL", "FERRY_TEST_MYSQL_URL"] {
            let url = try TestDatabases.serverURL(variable)
            let endpoint = try Endpoint(parsing: url)
            XCTAssertEqual(endpoint.host, "127.0.0.1", "test servers listen on loopback only")
        }
    }
}

/// `ferry serve` the Chinook sample, copy it through http with a token, stop with SIGINT.
final class ServeCLITests: XCTestCase {
    func testServeChinookAndCopyThroughHTTP() throws {
        let folder = try TemporaryFolder()
        let binary = CLITests.binaryURL
        let chinook = CLITests.chinookPath
        func ferry(_ args: [String]) throws -> CLITests.Result { try CLITests.run(binary, args) }
        let tokenFile = folder.path("token.txt")
        let token = UUID().uuidString.replacingOccurrences(of: "-", with: "")
        try Data((token + "\n").utf8).write(to: URL(fileURLWithPath: tokenFile))
        let port = 20_000 + Int(getpid() % 20_000)
        let server = Process()
        server.executableURL = binary
        server.arguments = ["serve", "sqlite:" + chinook, "--listen", "127.0.0.1:\(port)", "--read-only-token-file", tokenFile]
        let log = Pipe()
        server.standardError = log
        server.standardOutput = FileHandle.nullDevice
        try server.run()
        defer { if server.isRunning { server.terminate() } }
        // Wait until it answers.
        var up = false
        for _ in 0..<100 where !up {
            up = (try? ferry(["tables", "http://:\(token)@127.0.0.1:\(port)/"]))?.code == 0
            if !up { usleep(100_000) }
        }
        XCTAssertTrue(up, "ferry serve did not come up")
        let target = folder.path("copy.db")
        let r = try ferry(["copy", "http://127.0.0.1:\(port)/", "sqlite:" + target, "--token-file", tokenFile])
        XCTAssertEqual(r.code, 0, r.err)
        XCTAssertTrue(r.err.contains("copied 11 of 11 tables, 15607 rows"), r.err)
        XCTAssertFalse(r.err.contains(token), "the token was printed")
        // Driver options are values, not URL parameters: no URL Ferry prints carries them.
        XCTAssertFalse(r.err.contains("token-file"), "an option leaked into a printed URL: \(r.err)")
        let json = try ferry(["copy", "--json", "--mode", "replace", "--tables", "Artist", "http://127.0.0.1:\(port)/", "sqlite:" + target,
                              "--token-file", tokenFile])
        XCTAssertEqual(json.code, 0, json.err)
        XCTAssertFalse(json.out.contains("token-file"), "an option leaked into a printed URL: \(json.out)")
        let src = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + chinook), role: .source)
        let dst = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + target), role: .source)
        XCTAssertEqual(try CopyHarness([SQLiteDriver()]).differences(src, dst), [])
        // A wrong token is one clear line, exit 1.
        let bad = try ferry(["tables", "http://:wrong-token-0123456789@127.0.0.1:\(port)/"])
        XCTAssertEqual(bad.code, 1)
        XCTAssertTrue(bad.err.contains("refused the token"), bad.err)
        // Graceful shutdown on SIGINT.
        kill(server.processIdentifier, SIGINT)
        server.waitUntilExit()
        XCTAssertEqual(server.terminationStatus, 0)
        let output = String(decoding: log.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertFalse(output.contains(token), "the token was logged")
    }
}
