@_exported import FerryCore
import FerrySQLite
import FerryXML
import FerryHTTPClient
import Foundation
#if canImport(FerryPostgres)
import FerryPostgres
#endif
#if canImport(FerryMySQL)
import FerryMySQL
#endif

/// Ferry as a library: copy, verify and describe tables between any two databases Ferry
/// knows, from an app or a script, in a few lines and without the command-line module.
///
/// ```swift
/// import FerryKit
///
/// var options = CopyOptions()
/// options.mode = .replace
/// let outcome = try await Ferry.copy(from: "sqlite:chinook.sqlite", to: "postgres://app@db/music", options: options)
/// for table in outcome.tables { print(table.source, table.status, table.rows) }
/// ```
///
/// URLs are those of the command line (`sqlite:FILE`, `postgres://…`, `mysql://…`,
/// `http(s)://…` for `ferry serve`); passwords come from the URL, the environment
/// (`PGPASSWORD`, `MYSQL_PWD`, `FERRY_TOKEN`) or driver options, and never appear in anything
/// Ferry returns. Every call runs its blocking database work on a thread of its own, so it
/// never blocks Swift's cooperative pool, and honours task cancellation: the table being
/// written is rolled back.
public enum Ferry {
    /// The drivers built into this platform's FerryKit: SQLite and the XML service everywhere
    /// (iOS included), PostgreSQL and MySQL/MariaDB where their C client libraries exist.
    public static var drivers: DriverRegistry {
        var all: [any Driver] = [SQLiteDriver()]
        #if canImport(FerryPostgres)
        all.append(PostgresDriver())
        #endif
        #if canImport(FerryMySQL)
        all.append(MySQLDriver())
        #endif
        all.append(HTTPDriver.standard)
        return DriverRegistry(all)
    }

    /// Copies tables from `source` to `target` (URLs) as `ferry copy` does: plan, then each
    /// table in one target transaction. Returns when every table has ended; a table that failed
    /// is reported in the outcome (its error one line), not thrown. Throws for what stops the
    /// copy before any table starts (a bad URL, a connection refused, a table that does not
    /// exist, `--mode create` into an existing table). `observer` receives progress events from
    /// the copy's threads.
    public static func copy(
        from source: String, to target: String, options: CopyOptions = CopyOptions(),
        driverOptions: [String: String] = [:], observer: (@Sendable (ProgressReporter.Event) -> Void)? = nil
    ) async throws -> CopyOutcome {
        let registry = drivers
        let sourceEndpoint = try registry.applying(driverOptions, to: Endpoint(parsing: source))
        let targetEndpoint = try registry.applying(driverOptions, to: Endpoint(parsing: target))
        let progress = observer.map { ProgressReporter(observer: $0) } ?? ProgressReporter(style: .quiet) { _ in }
        return try await blocking { cancellation in
            let session = try CopySession(source: sourceEndpoint, target: targetEndpoint, registry: registry)
            defer { session.close() }
            let plan = try session.plan(options)
            return CopyOutcome(session.run(plan, options: options, progress: progress, cancellation: cancellation))
        }
    }

    /// Compares the tables of `source` with their copies in `target`, value by value, as
    /// `ferry verify` does: each side in one read snapshot where its engine can, `options.jobs`
    /// tables at a time.
    public static func verify(
        _ source: String, against target: String, options: Verifier.Options = Verifier.Options(), driverOptions: [String: String] = [:]
    ) async throws -> Verifier.Report {
        let registry = drivers
        let sourceEndpoint = try registry.applying(driverOptions, to: Endpoint(parsing: source))
        let targetEndpoint = try registry.applying(driverOptions, to: Endpoint(parsing: target))
        return try await blocking { cancellation in
            try Verifier.compare(sourceEndpoint, with: targetEndpoint, options: options, registry: registry, cancellation: cancellation)
        }
    }

    /// The schema of each table (all listed tables, or those named): columns with native and
    /// logical types, keys, serial columns and a row estimate.
    public static func describe(_ url: String, tables: [String] = [], driverOptions: [String: String] = [:]) async throws -> [TableSchema] {
        let registry = drivers
        let endpoint = try registry.applying(driverOptions, to: Endpoint(parsing: url))
        return try await blocking { cancellation in
            let c = try registry.connect(endpoint, role: .source)
            defer { c.close() }
            let chosen = try CopyEngine.selectTables(in: c, tables: tables.map { TableName(parsing: $0) }, exclude: []).chosen
            return try chosen.map { name in
                if cancellation.isCancelled { throw FerryError.cancelled }
                return try c.describe(name)
            }
        }
    }

    /// Runs blocking work on its own thread; a cancelled task cancels it.
    static func blocking<T: Sendable>(_ work: @escaping @Sendable (Cancellation) throws -> T) async throws -> T {
        let cancellation = Cancellation()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let thread = Thread {
                    continuation.resume(with: Result { try work(cancellation) })
                }
                thread.name = "ferry-library"
                thread.stackSize = 4 << 20
                thread.start()
            }
        } onCancel: {
            cancellation.cancel()
        }
    }
}

/// What a copy did, table by table.
public struct CopyOutcome: Sendable {
    /// Per table, in the order planned.
    public let tables: [CopySummary.Table]
    /// Warnings of the plan (skipped columns are per table, in `skippedColumns`).
    public let warnings: [String]
    public let seconds: Double
    /// The whole summary, as `ferry copy --json` prints it.
    public let summary: CopySummary

    init(_ summary: CopySummary) {
        self.summary = summary
        tables = summary.tables
        warnings = summary.warnings
        seconds = summary.seconds
    }

    /// True when every table's status is `.ok`.
    public var succeeded: Bool { summary.ok }
    /// Rows committed in the target, over all tables that succeeded.
    public var rowsCopied: Int64 { tables.filter { $0.status == .ok }.reduce(0) { $0 + $1.rows } }
}
