import FerryCore
import FerryDriverTestKit
import FerryMySQL
import FerryPostgres
import FerrySQLite
import FerryServer
import FerryHTTPClient
import FerryXML
import Foundation
import XCTest

/// The cross-engine fidelity matrix: every ordered pair of {SQLite, PostgreSQL, MySQL, and the
/// XML service in front of each of them}, over each engine's type-coverage table (every entry
/// of its driver's `nativeTypes`; across engines, there and back) and over the sample databases. Values are compared after
/// each trip under the source's logical types; values a target cannot hold must fail with an
/// error naming table, column and key, and go through once a cast allows the change.
final class FidelityMatrixTests: XCTestCase {
    static let drivers: [any Driver] = [SQLiteDriver(), PostgresDriver(), MySQLDriver(), HTTPDriver.standard]
    let harness = CopyHarness(FidelityMatrixTests.drivers)
    let table = TableName("ferry_types")

    /// One end of a pair: a database, or the XML service in front of one.
    struct Node {
        var label: String
        /// The engine holding the data (`sqlite`, `postgres`, `mysql`).
        var engine: String
        var url: String
        /// The database behind the node (the service's database for http nodes).
        var databaseURL: String
        var viaService: Bool { url != databaseURL }
    }

    /// Source and target databases on every engine, each also behind a running service.
    final class World {
        var sources: [Node] = []
        var targets: [Node] = []
        var services: [RunningService] = []
        let folder: TemporaryFolder
        var dropDatabases: [() -> Void] = []

        init() throws { folder = try TemporaryFolder() }

        static func make(label: String) async throws -> World {
            let pgURL = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
            let myURL = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
            let w = try World()
            var databases: [(String, String, String)] = []  // (role, engine, url)
            for role in ["source", "target"] {
                databases.append((role, "sqlite", "sqlite:" + w.folder.path("\(label)-\(role).db")))
                databases.append((role, "postgres", try w.database(on: pgURL, engine: "postgres", name: "ferry_\(label)_\(role)")))
                databases.append((role, "mysql", try w.database(on: myURL, engine: "mysql", name: "ferry_\(label)_\(role)")))
            }
            for (role, engine, url) in databases {
                let service = try await RunningService(database: url, drivers: FidelityMatrixTests.drivers)
                w.services.append(service)
                let direct = Node(label: engine, engine: engine, url: url, databaseURL: url)
                let served = Node(label: "http(\(engine))", engine: engine, url: service.url(), databaseURL: url)
                if role == "source" { w.sources += [direct, served] } else { w.targets += [direct, served] }
            }
            return w
        }

        /// A fresh database on a server, dropped when the world goes.
        func database(on adminURL: String, engine: String, name: String) throws -> String {
            let unique = name + "_" + UUID().uuidString.prefix(6).lowercased()
            let base = String(adminURL[..<(adminURL.range(of: "/", options: .backwards)?.lowerBound ?? adminURL.endIndex)])
            if engine == "postgres" {
                let admin = try PostgresConnection(endpoint: Endpoint(parsing: adminURL), role: .target)
                defer { admin.close() }
                try admin.run("CREATE DATABASE \(unique)")
                dropDatabases.append {
                    guard let a = try? PostgresConnection(endpoint: Endpoint(parsing: adminURL), role: .target) else { return }
                    try? a.run("DROP DATABASE IF EXISTS \(unique) WITH (FORCE)")
                    a.close()
                }
            } else {
                let admin = try MySQLConnection(endpoint: Endpoint(parsing: adminURL), role: .target)
                defer { admin.close() }
                try admin.run("CREATE DATABASE `\(unique)` CHARACTER SET utf8mb4")
                dropDatabases.append {
                    guard let a = try? MySQLConnection(endpoint: Endpoint(parsing: adminURL), role: .target) else { return }
                    try? a.run("DROP DATABASE IF EXISTS `\(unique)`")
                    a.close()
                }
            }
            return base + "/" + unique
        }

        func stop() {
            for s in services { s.stop() }
            for d in dropDatabases { d() }
        }
    }

    func connect(_ url: String, _ role: ConnectionRole = .target) throws -> any Connection {
        try harness.registry.connect(url, role: role)
    }

    /// Runs SQL text of the test's own on a database.
    func run(_ sql: String, on url: String, checked: Bool = false) throws {
        let c = try connect(url)
        defer { c.close() }
        switch c {
        case let s as SQLiteConnection: try s.run(sql)
        case let p as PostgresConnection: try p.run(sql)
        case let m as MySQLConnection:
            if checked { try m.run("SET SESSION foreign_key_checks = 1") }
            try m.run(sql)
        default: XCTFail("no SQL for \(url)")
        }
    }

    /// Drops every table, referencing tables before the tables they reference.
    func dropAll(in url: String) throws {
        let c = try connect(url)
        defer { c.close() }
        var left = try c.listTables().map(\.name)
        var lastError: (any Error)?
        for _ in 0..<10 where !left.isEmpty {
            for t in left {
                do {
                    // Tables that reference each other (Sakila's store and staff) go together.
                    if let pg = c as? PostgresConnection { try pg.run("DROP TABLE IF EXISTS \(c.dialect.quote(t)) CASCADE") } else {
                        try c.begin(); try c.dropTable(t); try c.commit()
                    }
                    left.removeAll { $0 == t }
                } catch {
                    try? c.rollback()
                    lastError = error
                }
            }
        }
        if !left.isEmpty, let lastError { throw lastError }
    }

    func drop(_ table: TableName, in url: String) throws {
        let c = try connect(url)
        defer { c.close() }
        try c.begin()
        try c.dropTable(table)
        try c.commit()
    }

    static func entries(_ engine: String) -> [NativeTypeEntry] {
        switch engine {
        case "sqlite": return SQLiteTypeMap.nativeTypes
        case "postgres": return PostgresTypeMap.nativeTypes
        default: return MySQLTypeMap.nativeTypes
        }
    }

    static func columnName(_ i: Int) -> String { String(format: "c%02d", i + 1) }

    /// The coverage table: id, then one column per entry; rows 1 and 2 hold the samples, row 3 NULLs.
    func createCoverageTable(engine: String, url: String) throws {
        let entries = Self.entries(engine)
        if engine == "postgres" {
            try run("""
                CREATE TYPE ferry_mood AS ENUM ('sad', 'ok', 'happy');
                CREATE DOMAIN ferry_posint AS integer CHECK (VALUE > 0);
                """, on: url)
        }
        let q: (String) -> String = engine == "mysql" ? { "`\($0)`" } : { "\"\($0)\"" }
        let columns = entries.enumerated().map { i, e in q(Self.columnName(i)) + " " + e.declaration }
        try run("CREATE TABLE \(q(table.name)) (\(q("id")) integer PRIMARY KEY, " + columns.joined(separator: ", ") + ")", on: url)
        for row in 0..<2 {
            try run("INSERT INTO \(q(table.name)) VALUES (\(row + 1), " + entries.map { $0.samples[row] }.joined(separator: ", ") + ")", on: url)
        }
        try run("INSERT INTO \(q(table.name)) (\(q("id"))) VALUES (3)", on: url)
    }

    /// Rows by id, for the named columns (as the table's catalog describes them), read under
    /// `columns`' logical types and hints.
    func rows(_ url: String, _ columns: [Column]) throws -> [[Value]] {
        let c = try connect(url, .source)
        defer { c.close() }
        let schema = try c.describe(table)
        let wanted = [Column(name: "id", nativeType: "", logicalType: .int64)] + columns
        let read = try wanted.map { w -> Column in
            guard var col = schema.column(named: w.name) else { throw FerryError.columnNotFound(table: table, column: w.name) }
            col.logicalType = w.logicalType
            col.readHints = w.readHints
            return col
        }
        return try DriverConformance.readAll(c, table, columns: read)
            .sorted { ($0[0].canonicalText ?? "") < ($1[0].canonicalText ?? "") }
    }

    func testEveryPairCarriesEveryBuiltInType() async throws {
        let world = try await World.make(label: "types")
        defer { world.stop() }

        // Each engine's table, and its catalog's logical types, entry by entry.
        for engine in ["sqlite", "postgres", "mysql"] {
            guard let node = world.sources.first(where: { $0.engine == engine && !$0.viaService }) else { continue }
            try createCoverageTable(engine: engine, url: node.url)
            let c = try connect(node.url, .source)
            let schema = try c.describe(table)
            c.close()
            for (i, e) in Self.entries(engine).enumerated() {
                let got = schema.column(named: Self.columnName(i))?.logicalType
                if case .unsupported = e.logical {
                    XCTAssertEqual(got?.isSupported, false, "\(engine) \(e.declaration): \(String(describing: got))")
                } else {
                    XCTAssertEqual(got, e.logical, "\(engine) \(e.declaration)")
                }
            }
        }

        var pairs = 0
        for source in world.sources {
            let entries = Self.entries(source.engine)
            let indexed = Array(entries.enumerated())
            let supported = indexed.filter { $0.element.logical.isSupported }
            let unsupported = indexed.filter { !$0.element.logical.isSupported }
            for target in world.targets {
                let pair = "\(source.label) -> \(target.label)"
                let refused = supported.filter { $0.element.refusedBy.contains(target.engine) }
                let exact = supported.filter { !$0.element.refusedBy.contains(target.engine) }
                // Types without a logical type travel as the source engine's text form (through the
                // service too: it reads them so on its side).
                var casts = refused.map { "column \(table.name).\(Self.columnName($0.offset)) to skip" }
                casts += unsupported.map { "column \(table.name).\(Self.columnName($0.offset)) to text" }
                try drop(table, in: target.databaseURL)
                let src = try connect(source.url, .source)
                let dst = try connect(target.url)
                let summary = try harness.copy(src, dst, tables: [table.name], casts: casts)
                src.close()
                dst.close()
                XCTAssertTrue(summary.ok, "\(pair): \(summary.tables.compactMap(\.error))")
                guard summary.ok else { continue }
                pairs += 1

                // Carried types: equal under the source's logical types.
                let columns = exact.map { Column(name: Self.columnName($0.offset), nativeType: "", logicalType: $0.element.logical) }
                let want = try rows(source.databaseURL, columns)
                let got = try rows(target.databaseURL, columns)
                XCTAssertEqual(got.count, 3, pair)
                for (w, g) in zip(want, got) {
                    for (k, (a, b)) in zip(w, g).enumerated() where !sameValue(a, b) {
                        let name = k == 0 ? "id" : "\(columns[k - 1].name) (\(exact[k - 1].element.declaration))"
                        XCTFail("\(pair): \(name): \(a) became \(b)")
                    }
                }
                // Text-form casts: the target holds exactly the source engine's text of each value.
                if !unsupported.isEmpty {
                    let asText = unsupported.map { Column(name: Self.columnName($0.offset), nativeType: $0.element.declaration, logicalType: .text) }
                    let sourceText = try rows(source.databaseURL, asText.map { c in
                        var r = c
                        r.readHints = [.textForm]
                        return r
                    })
                    XCTAssertEqual(try rows(target.databaseURL, asText), sourceText, "\(pair): text forms")
                }

                // And back into the source's engine (its target database): the same values again.
                if source.engine != target.engine, let back = world.targets.first(where: { $0.engine == source.engine && !$0.viaService }) {
                    try drop(table, in: back.url)
                    let from = try connect(target.url, .source)
                    let into = try connect(back.url)
                    let returned = try harness.copy(from, into, tables: [table.name])
                    from.close()
                    into.close()
                    XCTAssertTrue(returned.ok, "\(pair) -> \(back.label): \(returned.tables.compactMap(\.error))")
                    if returned.ok {
                        for (w, g) in zip(want, try rows(back.url, columns)) {
                            for (k, (a, b)) in zip(w, g).enumerated() where !sameValue(a, b) {
                                XCTFail("\(pair) -> \(back.label): \(k == 0 ? "id" : columns[k - 1].name): \(a) came back as \(b)")
                            }
                        }
                    }
                    try drop(table, in: back.url)
                }

                // Values the target cannot hold: refused with table, column and key; carried once a cast allows it.
                for (i, e) in refused {
                    let name = Self.columnName(i)
                    let others = indexed.filter { $0.offset != i }.map { "column \(table.name).\(Self.columnName($0.offset)) to skip" }
                    try drop(table, in: target.databaseURL)
                    var s = try connect(source.url, .source)
                    var d = try connect(target.url)
                    let failed = try harness.copy(s, d, tables: [table.name], casts: others)
                    s.close()
                    d.close()
                    let message = failed.tables.first?.error ?? ""
                    XCTAssertFalse(failed.ok, "\(pair): \(e.declaration) should be refused")
                    XCTAssertTrue(message.contains("column \(name)") && message.contains("(id=1)"), "\(pair): \(message)")
                    XCTAssertTrue(try !connect(target.databaseURL).tableExists(table), "\(pair): a failed copy left a table")

                    s = try connect(source.url, .source)
                    d = try connect(target.url)
                    let allowed = try harness.copy(s, d, tables: [table.name], casts: others + ["column \(table.name).\(name) to text"])
                    s.close()
                    d.close()
                    XCTAssertTrue(allowed.ok, "\(pair): \(e.declaration) with a cast to text: \(allowed.tables.compactMap(\.error))")
                    let text = try rows(target.databaseURL, [Column(name: name, nativeType: "", logicalType: .text)])
                    let original = try rows(source.databaseURL, [Column(name: name, nativeType: "", logicalType: e.logical)])
                    XCTAssertEqual(text.map { $0[1].canonicalText }, original.map { $0[1].canonicalText }, "\(pair): \(e.declaration) as text")
                }
                try drop(table, in: target.databaseURL)
            }
        }
        XCTAssertEqual(pairs, 36)
    }
}


extension FidelityMatrixTests {
    /// Same engine (PostgreSQL → PostgreSQL, MySQL → MySQL), directly and through the service in
    /// front of the source, no casts: types with no logical type keep their type and exact values
    /// (PostgreSQL's built-ins but tsquery; MySQL's spatial types).
    func testSameEngineKeepsTypesWithoutALogicalType() async throws {
        let world = try await World.make(label: "same")
        defer { world.stop() }
        for (engine, staysSkipped) in [("postgres", ["tsquery"]), ("mysql", ["inet6"])] {
            guard let source = world.sources.first(where: { $0.engine == engine && !$0.viaService }),
                  let target = world.targets.first(where: { $0.engine == engine && !$0.viaService })
            else { return XCTFail("no \(engine) nodes") }
            try createCoverageTable(engine: engine, url: source.url)
            let unsupported = Self.entries(engine).enumerated().filter { !$0.element.logical.isSupported }
            let carried = unsupported.filter { !staysSkipped.contains($0.element.declaration) }
            for s in world.sources where s.engine == engine {
                try drop(table, in: target.url)
                let src = try connect(s.url, .source)
                let dst = try connect(target.url)
                let summary = try harness.copy(src, dst, tables: [table.name])
                src.close()
                dst.close()
                XCTAssertTrue(summary.ok, "\(s.label): \(summary.tables.compactMap(\.error))")
                XCTAssertEqual(summary.tables.first?.skippedColumns.map(\.column) ?? [],
                               unsupported.filter { staysSkipped.contains($0.element.declaration) }.map { Self.columnName($0.offset) },
                               "\(s.label): only \(staysSkipped) is skipped")
                let a = try connect(source.url, .source)
                let b = try connect(target.url, .source)
                let sa = try a.describe(table)
                let sb = try b.describe(table)
                for (i, e) in carried {
                    let name = Self.columnName(i)
                    XCTAssertEqual(sb.column(named: name)?.nativeType, sa.column(named: name)?.nativeType, "\(s.label): \(e.declaration)")
                }
                let asText = carried.map { e -> Column in
                    var c = Column(name: Self.columnName(e.offset), nativeType: "", logicalType: .text)
                    c.readHints = .textForm
                    return c
                }
                XCTAssertEqual(try rows(target.url, asText), try rows(source.url, asText), "\(s.label): values in the engine's text form")
                let asBytes = carried.map { Column(name: Self.columnName($0.offset), nativeType: "", logicalType: .binary(maxLength: nil)) }
                XCTAssertEqual(try rows(target.url, asBytes), try rows(source.url, asBytes), "\(s.label): values in the engine's binary form")
                XCTAssertEqual(try TableComparison.differences(a, b, table: table), [], s.label)
                a.close()
                b.close()
            }
        }
    }
}

/// The sample databases across every pair: Chinook in each engine, Sakila (PostgreSQL with its
/// data; the MySQL and SQLite schemas), Pagila's schema — each from the database itself and
/// through the XML service in front of it, into every engine directly and through the service.
extension FidelityMatrixTests {
    /// Loads a dataset script (or file) into a database.
    func load(_ dataset: String, engine: String, into url: String) throws {
        let path = try TestDatabases.dataset(dataset).path
        let text = try String(contentsOfFile: path, encoding: .utf8)
        // The scripts' own CREATE/DROP DATABASE, USE and \c lines would leave the database given.
        let script = text.split(separator: "\n", omittingEmptySubsequences: false).filter { line in
            let l = line.uppercased()
            return !l.hasPrefix("DROP DATABASE") && !l.hasPrefix("CREATE DATABASE") && !l.hasPrefix("USE ") && !l.hasPrefix("\\C")
                && !l.hasPrefix("DROP SCHEMA") && !l.hasPrefix("CREATE SCHEMA")
        }.joined(separator: "\n")
        switch engine {
        case "postgres":
            try ExternalTool.run(["psql", "-X", "-q", url], input: script)
        case "mysql":
            let e = try Endpoint(parsing: url)
            try ExternalTool.run(
                ["mariadb", "--no-defaults", "-h", e.host ?? "127.0.0.1", "-P", String(e.port ?? 3306), "-u", e.user ?? "", e.path],
                input: script.replacingOccurrences(of: "sakila.", with: ""), environment: ["MYSQL_PWD": e.password ?? ""])
        default:
            try run(script, on: url)
        }
    }

    /// Copies every table of the dataset in `world`'s sources to every target and compares them.
    func copyEverywhere(_ world: World, engines: [String], casts: [String] = [],
                        serialCheck: (_ sourceEngine: String) -> (table: String, column: String, values: [(String, String)])? = { _ in nil },
                        file: StaticString = #filePath, line: UInt = #line) throws {
        for source in world.sources where engines.contains(source.engine) {
            for target in world.targets {
                let pair = "\(source.label) -> \(target.label)"
                // Fresh target: drop what the previous pair left.
                try dropAll(in: target.databaseURL)
                let src = try connect(source.url, .source)
                let dst = try connect(target.url)
                defer { src.close(); dst.close() }
                let summary = try harness.copy(src, dst, jobs: 2, batchSize: 2000, casts: casts)
                XCTAssertTrue(summary.ok, "\(pair): \(summary.tables.filter { $0.status != .ok }.map { $0.error ?? "" })", file: file, line: line)
                XCTAssertFalse(summary.tables.isEmpty, pair, file: file, line: line)
                let direct = try connect(target.databaseURL, .source)
                defer { direct.close() }
                for t in summary.tables where t.status == .ok {
                    let name = TableName(parsing: t.source)
                    XCTAssertEqual(try TableComparison.differences(src, direct, table: name), [], pair, file: file, line: line)
                    // Keys arrive as constraints.
                    let a = try src.describe(name)
                    let b = try direct.describe(name.unqualified)
                    let carried = Set(b.columns.map(\.name))
                    if a.primaryKey.allSatisfy(carried.contains) {
                        XCTAssertEqual(b.primaryKey, a.primaryKey, "\(pair): \(name) primary key", file: file, line: line)
                    }
                    XCTAssertEqual(Set(b.uniqueKeys), Set(a.uniqueKeys.filter { $0.allSatisfy(carried.contains) }),
                                   "\(pair): \(name) unique keys", file: file, line: line)
                    try assertSameObjects(a, b, summary: t, copied: summary.tables.map { TableName(parsing: $0.target) },
                                          pair: pair, targetEngine: target.engine, file: file, line: line)
                }
                // The next INSERT on the target gets a key past the copied ones.
                if let check = serialCheck(source.engine) {
                    let key = Column(name: check.column, nativeType: "", logicalType: .int64)
                    let before = try DriverConformance.readAll(direct, TableName(check.table), columns: [key])
                        .compactMap { row -> Int64? in if case .int(let v) = row[0] { return v } else { return nil } }.max() ?? 0
                    let q = { (n: String) in direct.dialect.quote(n) }
                    try run("INSERT INTO \(q(check.table)) (" + check.values.map { q($0.0) }.joined(separator: ", ") + ") VALUES ("
                        + check.values.map(\.1).joined(separator: ", ") + ")", on: target.databaseURL)
                    let after = try DriverConformance.readAll(direct, TableName(check.table), columns: [key])
                        .compactMap { row -> Int64? in if case .int(let v) = row[0] { return v } else { return nil } }.max() ?? 0
                    XCTAssertEqual(after, before + 1, "\(pair): the next INSERT into \(check.table)", file: file, line: line)
                }
            }
        }
    }

    /// The target's catalog lists the source's indexes and foreign keys (names may differ;
    /// columns, order, uniqueness and actions may not), less those the copy reported as left out.
    func assertSameObjects(
        _ a: TableSchema, _ b: TableSchema, summary: CopySummary.Table, copied: [TableName], pair: String, targetEngine: String,
        file: StaticString, line: UInt
    ) throws {
        let left = Set(summary.skippedObjects.map { "\($0.kind) \($0.name)" })
        let carried = Set(b.columns.map(\.name))
        struct IndexShape: Hashable { var columns: [IndexColumn]; var unique: Bool }
        let wanted = a.indexes.filter { $0.isStructured && !left.contains("index \($0.name)") && $0.columns.allSatisfy { carried.contains($0.name) } }
        let have = Set(b.indexes.filter(\.isStructured).map { IndexShape(columns: $0.columns, unique: $0.isUnique) })
        for index in wanted {
            XCTAssertTrue(have.contains(IndexShape(columns: index.columns, unique: index.isUnique)),
                          "\(pair): \(a.name) lacks index \(index) (has \(b.indexes))", file: file, line: line)
        }
        // MySQL adds an index of its own for a foreign key no index covers; other engines add none.
        if targetEngine != "mysql" {
            XCTAssertEqual(have.count, Set(wanted.map { IndexShape(columns: $0.columns, unique: $0.isUnique) }).count,
                           "\(pair): \(a.name) indexes \(b.indexes.map(\.name)) for \(wanted.map(\.name))", file: file, line: line)
        }
        // InnoDB checks at once whatever it is told: NO ACTION and RESTRICT are one action there.
        let mysql = targetEngine == "mysql" || a.engine == .mysql
        func action(_ x: ReferentialAction) -> ReferentialAction { mysql && x == .restrict ? .noAction : x }
        struct FKShape: Hashable { var columns: [String]; var table: String; var referenced: [String]; var onDelete: ReferentialAction; var onUpdate: ReferentialAction }
        func shape(_ f: ForeignKey) -> FKShape {
            FKShape(columns: f.columns, table: f.referencedTable.name.lowercased(), referenced: f.referencedColumns,
                    onDelete: action(f.onDelete), onUpdate: action(f.onUpdate))
        }
        let wantedFKs = a.foreignKeys.filter { fk in
            !left.contains("foreign key \(fk.name ?? fk.summary)") && fk.columns.allSatisfy(carried.contains)
                && copied.contains { $0.name == fk.referencedTable.name }
        }
        XCTAssertEqual(Set(b.foreignKeys.map(shape)), Set(wantedFKs.map(shape)), "\(pair): \(a.name) foreign keys", file: file, line: line)
        XCTAssertEqual(summary.foreignKeys, wantedFKs.count, "\(pair): \(a.name) foreign keys counted", file: file, line: line)
    }

    /// Replacing a table other tables reference (Chinook's Artist, which Album references)
    /// keeps the references valid on every engine, directly and through the service; a copy of
    /// a subset of tables reports each foreign key it leaves out.
    func testReplacingAReferencedTableKeepsItsReferences() async throws {
        let world = try await World.make(label: "refs")
        defer { world.stop() }
        let chinook = "sqlite:" + (try TestDatabases.dataset("chinook/Chinook_Sqlite.sqlite").path)
        let src = try connect(chinook, .source)
        defer { src.close() }
        for target in world.targets {
            try dropAll(in: target.databaseURL)
            let dst = try connect(target.url)
            defer { dst.close() }
            let all = try harness.copy(src, dst, jobs: 2)
            XCTAssertTrue(all.ok, "\(target.label): \(all.tables.compactMap(\.error))")
            let again = try harness.copy(src, dst, mode: .replace, tables: ["Artist"])
            XCTAssertTrue(again.ok, "\(target.label): \(again.tables.compactMap(\.error))")
            let direct = try connect(target.databaseURL)
            defer { direct.close() }
            let album = try direct.describe(TableName("Album"))
            XCTAssertEqual(album.foreignKeys.map { $0.referencedTable.name }, ["Artist"], "\(target.label): Album still references Artist")
            XCTAssertEqual(try TableComparison.differences(src, direct, table: TableName("Artist")), [], target.label)
            if target.engine != "sqlite" {
                // The reference is enforced against the new Artist rows.
                // (Ferry's MySQL target sessions load with foreign_key_checks off: turn them on.)
                XCTAssertThrowsError(try run(
                    "INSERT INTO \(direct.dialect.quote("Album")) VALUES (9999, 'x', 424242)", on: target.databaseURL, checked: true),
                    "\(target.label): an album of no artist must be refused")
            }
            // A subset: Album without Artist leaves its foreign key out, and says so.
            let subsetTarget = try connect(target.url)
            defer { subsetTarget.close() }
            let subset = try harness.copy(src, subsetTarget, mode: .replace, tables: ["Album", "Track"])
            XCTAssertTrue(subset.ok, "\(target.label): \(subset.tables.compactMap(\.error))")
            let skipped = subset.tables.flatMap(\.skippedObjects).filter { $0.kind == "foreign key" }.map(\.reason)
            XCTAssertEqual(skipped.filter { $0.contains("Artist") }.count, 1, "\(target.label): \(skipped)")
            XCTAssertEqual(skipped.filter { $0.contains("Genre") || $0.contains("MediaType") }.count, 2, "\(target.label): \(skipped)")
        }
    }

    func testChinookInEveryEngineToEveryEngine() async throws {
        let world = try await World.make(label: "chinook")
        defer { world.stop() }
        for source in world.sources where !source.viaService {
            switch source.engine {
            case "postgres": try load("chinook/Chinook_PostgreSql_SerialPKs.sql", engine: "postgres", into: source.url)
            case "mysql": try load("chinook/Chinook_MySql_AutoIncrementPKs.sql", engine: "mysql", into: source.url)
            default: try load("chinook/Chinook_Sqlite_AutoIncrementPKs.sql", engine: "sqlite", into: source.url)
            }
        }
        // Serial keys in every engine's Chinook: the next artist gets max + 1 on every target.
        try copyEverywhere(world, engines: ["sqlite", "postgres", "mysql"],
                           serialCheck: { engine in
                               engine == "postgres" ? ("artist", "artist_id", [("name", "'next'")]) : ("Artist", "ArtistId", [("Name", "'next'")])
                           })
    }

    func testSakilaAndPagilaToEveryEngine() async throws {
        let world = try await World.make(label: "sakila")
        defer { world.stop() }
        let pg = world.sources.first { $0.engine == "postgres" && !$0.viaService }
        let my = world.sources.first { $0.engine == "mysql" && !$0.viaService }
        let lite = world.sources.first { $0.engine == "sqlite" && !$0.viaService }
        guard let pg, let my, let lite else { return XCTFail("no sources") }
        try load("sakila/postgres-sakila-schema.sql", engine: "postgres", into: pg.url)
        try load("sakila/postgres-sakila-insert-data-using-copy.sql", engine: "postgres", into: pg.url)
        try load("sakila/mysql-sakila-schema.sql", engine: "mysql", into: my.url)
        try load("sakila/sqlite-sakila-schema.sql", engine: "sqlite", into: lite.url)
        // PostgreSQL's Sakila with its data (tsvector carried as text, text[] as JSON); the MySQL
        // and SQLite schemas, empty.
        try copyEverywhere(world, engines: ["sqlite", "postgres", "mysql"],
                           casts: ["type tsvector to text", "type text[] to json"],
                           serialCheck: { engine in
                               engine == "postgres"
                                   ? ("actor", "actor_id", [("first_name", "'A'"), ("last_name", "'B'"), ("last_update", "'2024-01-01 00:00:00'")])
                                   : nil
                           })

        // Pagila's schema (partitions, domains over domains, non-ASCII names), from PostgreSQL.
        let pagila = try await World.make(label: "pagila")
        defer { pagila.stop() }
        let pgPagila = try XCTUnwrap(pagila.sources.first(where: { $0.engine == "postgres" && !$0.viaService }))
        try load("pagila/pagila-schema.sql", engine: "postgres", into: pgPagila.url)
        try copyEverywhere(pagila, engines: ["postgres"], casts: ["type tsvector to text", "type text[] to json"])
    }
}

/// Logical-type equality: exact (doubles by bit pattern), except decimals, which compare by value.
func sameValue(_ a: Value, _ b: Value) -> Bool {
    if case .decimal(let x) = a, case .decimal(let y) = b { return DecimalText.normalized(x) == DecimalText.normalized(y) }
    return a == b
}
