import FerryCore
import FerryDriverTestKit
import FerryMySQL
import FerryPostgres
import FerrySQLite
import FerrySync
import FerryHTTPClient
import FerryXML
import Foundation

/// An origin database for sync tests: five tables (a serial key, a composite natural key, a
/// serial parent and its serial child with a foreign key, a UUID key), created with the
/// engine's own DDL.
struct SyncOrigin {
    let name: String
    let url: String
    let registry: DriverRegistry
    let dialect: Kind
    enum Kind { case sqlite, postgres, mysql }

    static let drivers: [any Driver] = [SQLiteDriver(), PostgresDriver(), MySQLDriver(), HTTPDriver.standard]
    static let tables = ["s", "c", "p", "ch", "u"]
    /// These tables only: the test servers' databases hold other tests' tables too.
    static var options: SnapshotOptions {
        var o = SnapshotOptions()
        o.tables = tables.map { TableName($0) }
        return o
    }

    static func all(folder: TemporaryFolder) throws -> [SyncOrigin] {
        try (0..<3).map { try one($0, folder: folder) }
    }

    /// 0: a SQLite file in `folder`; 1: the PostgreSQL and 2: the MariaDB test server (their
    /// URLs only needed when asked for).
    static func one(_ index: Int, folder: TemporaryFolder) throws -> SyncOrigin {
        let registry = DriverRegistry(drivers)
        switch index {
        case 0: return SyncOrigin(name: "sqlite", url: "sqlite:" + folder.path("origin.db"), registry: registry, dialect: .sqlite)
        case 1: return SyncOrigin(name: "postgres", url: try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL"), registry: registry, dialect: .postgres)
        default: return SyncOrigin(name: "mysql", url: try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL"), registry: registry, dialect: .mysql)
        }
    }

    func connect() throws -> any Connection { try registry.connect(try Endpoint(parsing: url), role: .target) }

    /// Runs SQL at the origin (written for all three engines: lowercase names, no quotes).
    func run(_ sql: String) throws {
        let c = try connect()
        defer { c.close() }
        try run(sql, on: c)
    }

    func run(_ sql: String, on c: any Connection) throws {
        switch c {
        case let s as SQLiteConnection: try s.run(sql)
        case let p as PostgresConnection: try p.run(sql)
        case let m as MySQLConnection:
            for statement in sql.split(separator: ";") where !statement.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
                try m.run(String(statement))
            }
        default: throw ModelFailure(description: "no SQL runner for \(c.endpoint)")
        }
    }

    /// Fresh tables with `rows` rows in each.
    func reset(rows: Int) throws {
        let serial: String, text = "VARCHAR(40)", tail: String
        switch dialect {
        case .sqlite: serial = "INTEGER PRIMARY KEY AUTOINCREMENT"; tail = ""
        case .postgres: serial = "SERIAL PRIMARY KEY"; tail = ""
        case .mysql: serial = "INT AUTO_INCREMENT PRIMARY KEY"; tail = " ENGINE=InnoDB"
        }
        try run("DROP TABLE IF EXISTS ch; DROP TABLE IF EXISTS p; DROP TABLE IF EXISTS s; DROP TABLE IF EXISTS c; DROP TABLE IF EXISTS u; DROP TABLE IF EXISTS _ferry_sync_pushes")
        try run("""
            CREATE TABLE s (id \(serial), tag \(text) NOT NULL UNIQUE, v \(text), n INTEGER)\(tail);
            CREATE TABLE c (a \(text) NOT NULL, b INTEGER NOT NULL, v \(text), n INTEGER, PRIMARY KEY (a, b))\(tail);
            CREATE TABLE p (id \(serial), tag \(text) NOT NULL UNIQUE, v \(text), n INTEGER)\(tail);
            CREATE TABLE ch (id \(serial), tag \(text) NOT NULL UNIQUE, p_id INTEGER REFERENCES p (id), v \(text), n INTEGER)\(tail);
            CREATE TABLE u (id UUID PRIMARY KEY, v \(text), n INTEGER)\(tail)
            """)
        let sql = Self.inserts(rows: rows, explicitKeys: false)
        if !sql.isEmpty { try run(sql.joined(separator: ";\n")) }
    }

    /// `rows` rows in each table: serial keys 1…rows as a fresh table numbers them, given
    /// explicitly or left to the serial counter (which must then advance past them).
    static func inserts(rows: Int, explicitKeys: Bool) -> [String] {
        let id = { (i: Int) in explicitKeys ? ("id, ", "\(i + 1), ") : ("", "") }
        var sql: [String] = []
        for i in 0..<rows {
            sql.append("INSERT INTO s (\(id(i).0)tag, v, n) VALUES (\(id(i).1)'s\(i)', 'v\(i)', \(i))")
            sql.append("INSERT INTO c (a, b, v, n) VALUES ('k\(i % 7)', \(i), 'v\(i)', \(i))")
            sql.append("INSERT INTO p (\(id(i).0)tag, v, n) VALUES (\(id(i).1)'p\(i)', 'v\(i)', \(i))")
            sql.append("INSERT INTO u (id, v, n) VALUES ('\(uuid(UInt64(i) &* 0x9E37_79B9_7F4A_7C15, UInt64(i)))', 'v\(i)', \(i))")
        }
        for i in 0..<rows {
            sql.append("INSERT INTO ch (\(id(i).0)tag, p_id, v, n) VALUES (\(id(i).1)'ch\(i)', \(i % max(rows, 1) + 1), 'v\(i)', \(i))")
        }
        return sql
    }

    /// The rows `reset(rows:)` made, with the same keys, in tables that are already there (no
    /// DDL: on a server, dropping and creating five tables costs more than a whole scenario);
    /// the push ledger emptied. Serial counters stay where they are: rows added later get new
    /// keys, as after any insert.
    func refill(rows: Int) throws {
        var sql = ["DELETE FROM ch", "DELETE FROM p", "DELETE FROM s", "DELETE FROM c", "DELETE FROM u"]
        let c = try connect()
        defer { c.close() }
        if try c.tableExists(TableName("_ferry_sync_pushes")) { sql.append("DELETE FROM _ferry_sync_pushes") }
        sql += Self.inserts(rows: rows, explicitKeys: true)
        try run(sql.joined(separator: ";\n"), on: c)
    }

    /// An RFC 4122 version 4 UUID made of two numbers (MariaDB's UUID type takes no other kind).
    static func uuid(_ a: UInt64, _ b: UInt64) -> String {
        let hi = (a & 0xFFFF_FFFF_FFFF_0FFF) | 0x4000
        let lo = (b & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
        let h = String(hi, radix: 16).leftPadded(16) + String(lo, radix: 16).leftPadded(16)
        let c = Array(h)
        return [c[0..<8], c[8..<12], c[12..<16], c[16..<20], c[20..<32]].map { String($0) }.joined(separator: "-")
    }

    /// Every row of `table`, as values by column name.
    func rows(_ table: String) throws -> [[String: Value]] {
        let c = try connect()
        defer { c.close() }
        return try SyncTestRows.read(c, table)
    }
}

enum SyncTestRows {
    static func read(_ c: any Connection, _ table: String) throws -> [[String: Value]] {
        try read(c, try c.describe(TableName(table)))
    }

    static func read(_ c: any Connection, _ schema: TableSchema) throws -> [[String: Value]] {
        let reader = try c.reader(table: schema, columns: schema.columns, keyRange: nil, batchSize: 1_000)
        defer { reader.close() }
        var out: [[String: Value]] = []
        let types = schema.columns.map(\.logicalType)
        while let b = try reader.next() {
            for r in 0..<b.count {
                let row = b.row(r, types: types)
                out.append(Dictionary(uniqueKeysWithValues: zip(schema.columns.map(\.name), row)))
            }
        }
        return out
    }
}

/// The sqlite3 command-line shell: local edits made by another program than Ferry.
enum SQLiteShell {
    static func run(_ file: String, _ sql: String) throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/sqlite3") else {
            throw FerryError.invalidOption("the sqlite3 shell is missing (scripts/test installs it: apt-get install sqlite3)")
        }
        let (status, errors, _) = try Subprocess("/usr/bin/sqlite3", [file, sql]).wait()
        guard status == 0 else { throw FerryError.invalidOption("sqlite3 \(file) failed (\(status)): \(errors)") }
    }
}

extension PostgresConnection: SQLRunner { func runSQL(_ sql: String) throws { try run(sql) } }
extension MySQLConnection: SQLRunner { func runSQL(_ sql: String) throws { try run(sql) } }

extension String {
    func leftPadded(_ width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}
