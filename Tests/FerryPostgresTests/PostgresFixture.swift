import FerryCore
import FerryDriverTestKit
import FerryPostgres
import Foundation
import XCTest

/// Makes uniquely named databases on the test server (scripts/test starts it) and drops them.
final class PostgresFixture {
    let adminURL: String
    private(set) var created: [String] = []

    /// Fails (never skips) when no server is configured, saying how to start one.
    init() throws {
        adminURL = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
    }

    var base: String {
        guard let slash = adminURL.range(of: "/", options: .backwards) else { return adminURL }
        return String(adminURL[..<slash.lowerBound])
    }

    func url(_ database: String) -> String { base + "/" + database }

    /// Creates a new empty database and returns its URL.
    func makeDatabase(_ label: String = "t") throws -> String {
        let name = "ferry_\(label)_\(UUID().uuidString.prefix(8).lowercased())"
        let admin = try PostgresConnection(endpoint: Endpoint(parsing: adminURL), role: .target)
        defer { admin.close() }
        try admin.run("CREATE DATABASE \(name)")
        created.append(name)
        return url(name)
    }

    func connect(_ url: String, role: ConnectionRole = .target) throws -> PostgresConnection {
        try PostgresConnection(endpoint: Endpoint(parsing: url), role: role)
    }

    /// Runs a SQL script with psql (scripts use psql-only syntax such as COPY … FROM stdin).
    func psql(_ url: String, script: String) throws {
        try ExternalTool.run(["psql", "-X", "-q", url], input: script)
    }

    func dataset(_ path: String) throws -> String {
        try String(contentsOf: TestDatabases.dataset(path), encoding: .utf8)
    }

    /// Loads a Chinook script into a new database (its own CREATE DATABASE / \c lines removed).
    func chinook(_ file: String) throws -> String {
        let script = try dataset("chinook/" + file).split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !$0.hasPrefix("DROP DATABASE") && !$0.hasPrefix("CREATE DATABASE") && !$0.hasPrefix("\\c") }
            .joined(separator: "\n")
        let url = try makeDatabase("chinook")
        try psql(url, script: script)
        return url
    }

    deinit {
        guard let admin = try? PostgresConnection(endpoint: Endpoint(parsing: adminURL), role: .target) else { return }
        for name in created {
            // A replication slot a failed test left behind keeps its database.
            _ = try? admin.rows("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active", [name])
            try? admin.run("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
        }
        admin.close()
    }
}
