import FerryCore
import FerryDriverTestKit
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The versions of the suite's table `items`: A (every row), B (three quarters of A's keys, every
/// tenth row changed), D (the quarter B lacks), C = B ∪ D. Every copy the suite makes turns a
/// target from one of these (or no table) into another, so each outcome is checked against a
/// known table.
enum Dataset: String, CaseIterable, Comparable {
    case a = "A", b = "B", c = "C", d = "D"
    static func < (l: Dataset, r: Dataset) -> Bool { l.rawValue < r.rawValue }
    /// The versions sources hold (C exists only as the reference to compare with).
    static let sources: [Dataset] = [.a, .b, .d]
}

/// A database the runner reads and changes directly, never through Ferry: to drop the target
/// table, look for staging tables and check a SQLite file.
enum Direct {
    case sqlite(String)
    case postgres(String)
    case mysql(String)

    @discardableResult
    func run(_ sql: String) throws -> String {
        switch self {
        case .sqlite(let path):
            return try ExternalTool.run(["sqlite3", "-bail", path], input: ".timeout 20000\n" + sql + "\n")
        case .postgres(let url):
            return try ExternalTool.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", url], input: sql + "\n")
        case .mysql(let url):
            let e = try Endpoint(parsing: url)
            return try ExternalTool.run(
                ["mariadb", "--no-defaults", "--default-character-set=utf8mb4", "-N", "-B", "-h", e.host ?? "127.0.0.1", "-P", String(e.port ?? 3306), "-u", e.user ?? "", e.path],
                input: sql + "\n", environment: ["MYSQL_PWD": e.password ?? ""])
        }
    }

    /// Whether `items` exists.
    func hasItems() throws -> Bool { try hasTable("items") }

    /// Whether the table `name` (a plain lowercase name) exists.
    func hasTable(_ name: String) throws -> Bool {
        switch self {
        case .sqlite: return try run("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '\(name)';").trimmed == "1"
        case .postgres: return try run("SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = '\(name)';").trimmed == "1"
        case .mysql: return try run("SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = '\(name)';").trimmed == "1"
        }
    }

    func dropItems() throws { try run("DROP TABLE IF EXISTS items;") }

    /// Tables whose name starts with `_ferry_`, and the rows of `_ferry_loads` (a load still open).
    func ferryTables() throws -> [String] {
        let list: String
        switch self {
        case .sqlite: list = try run("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '\\_ferry\\_%' ESCAPE '\\';")
        case .postgres: list = try run("SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE '\\_ferry\\_%';")
        case .mysql: list = try run("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE '\\_ferry\\_%';")
        }
        return list.split(separator: "\n").map { String($0).trimmed }.filter { !$0.isEmpty }
    }

    /// For a SQLite file: `PRAGMA integrity_check` says ok.
    func integrity() throws -> String {
        guard case .sqlite = self else { return "ok" }
        return try run("PRAGMA integrity_check;").trimmed
    }
}

extension String {
    var trimmed: String { trimmingCharacters(in: .whitespacesAndNewlines) }
}

/// `ferry serve` in front of a database, on a port that stays the same when the suite kills it
/// and starts it again.
final class Served: @unchecked Sendable {  // crash() runs on the fault's thread while the runner waits for ferry
    let database: String
    let args: [String]
    let logPrefix: String
    let ferry: URL
    private(set) var process: Process
    private(set) var port: Int
    private var starts = 0

    init(ferry: URL, database: String, args: [String], log: String) throws {
        self.ferry = ferry
        self.database = database
        self.args = args
        logPrefix = log
        (process, port) = try Self.start(ferry: ferry, database: database, args: args, log: log + ".0", port: 0)
    }

    static func start(ferry: URL, database: String, args: [String], log: String, port listen: Int) throws -> (Process, Int) {
        guard FileManager.default.createFile(atPath: log, contents: nil), let handle = FileHandle(forWritingAtPath: log) else {
            throw ChaosFailure("cannot write \(log)")
        }
        let p = Process()
        p.executableURL = ferry
        p.arguments = ["serve", database, "--listen", "127.0.0.1:\(listen)"] + args
        p.standardError = handle
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        for _ in 0..<400 where p.isRunning {
            usleep(50_000)
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            if let r = text.range(of: "on http://127.0.0.1:"), let port = Int(text[r.upperBound...].prefix { $0.isNumber }) {
                return (p, port)
            }
        }
        if p.isRunning { p.terminate() }
        throw ChaosFailure("ferry serve did not start: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
    }

    /// SIGKILL, then the same service on the same port.
    func crash() throws {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        var last: (any Error)?
        for _ in 0..<40 {
            starts += 1
            do {
                (process, port) = try Self.start(ferry: ferry, database: database, args: args, log: logPrefix + ".\(starts)", port: port)
                return
            } catch {
                last = error
                usleep(250_000)
            }
        }
        throw last ?? ChaosFailure("ferry serve did not start again")
    }

    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGINT)
        process.waitUntilExit()
    }
}

/// Where the suite's processes run servers: `scripts/test-services crash pg|my`.
struct Servers {
    let script: String
    func crash(_ server: String) throws {
        _ = try ExternalTool.run([script, "crash", server], input: "")
    }
}

/// One side of a copy. A source reads versions A, B and D; a target holds `items` in one state.
final class Side {
    enum Kind: String { case sqlite, postgres, mysql, served, plugin }
    let kind: Kind
    /// "postgres", "ferry serve (postgres)", "plugin sqlitekit (sqlite)", …
    let label: String
    /// The server a kill takes down with this side (pg, my), if any.
    let server: String?
    /// Sources: the URL of each version, through the relay when there is one.
    var sources: [Dataset: String] = [:]
    var sourceRelays: [Dataset: FaultRelay] = [:]
    var sourceServices: [Dataset: Served] = [:]
    /// Targets: the URL Ferry writes through, the database behind it, and what it holds.
    var target = ""
    var targetRelay: FaultRelay?
    var targetService: Served?
    var direct: Direct?
    /// The URL `ferry verify` reads the target at (the engine itself, no relay, no service).
    var verifyURL = ""
    var sqliteFile: String?
    var state: Dataset?

    init(kind: Kind, label: String, server: String?) {
        self.kind = kind
        self.label = label
        self.server = server
    }
}

struct ChaosFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}
