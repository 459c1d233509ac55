import FerryCore
import Foundation

/// Runs copies the way the CLI does (plan, then run, quietly) for driver tests.
public struct CopyHarness {
    public let registry: DriverRegistry

    public init(_ drivers: [any Driver]) {
        registry = DriverRegistry(drivers)
    }

    public func copy(
        _ source: any Connection, _ target: any Connection, mode: WriteMode = .create, tables: [String] = [],
        jobs: Int = 1, batchSize: Int = 500, casts: [String] = [], configure: (inout CopyOptions) -> Void = { _ in },
        observer: (@Sendable (ProgressReporter.Event) -> Void)? = nil
    ) throws -> CopySummary {
        let engine = CopyEngine(registry: registry)
        var o = CopyOptions()
        o.mode = mode
        o.tables = tables.map { TableName(parsing: $0) }
        o.batchSize = batchSize
        o.jobs = jobs
        o.casts = try CastRuleSet.load(options: casts, files: [])
        configure(&o)
        let plan = try engine.plan(source: source, target: target, options: o)
        let progress = observer.map { ProgressReporter(observer: $0) } ?? ProgressReporter(style: .quiet) { _ in }
        return engine.run(plan, source: source, target: target, options: o, progress: progress)
    }

    /// Differences between every table of `a` (or those named) and its copy in `b`.
    public func differences(_ a: any Connection, _ b: any Connection, tables: [TableName]? = nil) throws -> [String] {
        try (tables ?? a.listTables().map(\.name)).flatMap { try TableComparison.differences(a, b, table: $0) }
    }
}

/// Runs a command-line client (psql, mariadb) feeding it a script on stdin.
public enum ExternalTool {
    /// Returns the combined output; throws when the tool exits non-zero.
    @discardableResult
    public static func run(_ arguments: [String], input: String, environment: [String: String] = [:]) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = arguments
        p.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let stdin = Pipe()
        let output = Pipe()
        p.standardInput = stdin
        p.standardOutput = output
        p.standardError = output
        try p.run()
        let writer = Thread {
            stdin.fileHandleForWriting.write(Data(input.utf8))
            try? stdin.fileHandleForWriting.close()
        }
        writer.start()
        let out = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        guard p.terminationStatus == 0 else {
            throw ConformanceFailure("\(arguments.first ?? "tool") exited with \(p.terminationStatus): \(out.prefix(500))")
        }
        return out
    }
}
