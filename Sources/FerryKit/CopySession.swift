@_exported import FerryCore
import Foundation

/// One copy between two open databases, step by step: plan, run, then (optionally) compare
/// what was copied against the snapshot the copy read. The blocking core of `Ferry.copy` and of
/// the command line's `ferry copy`, for callers that need the plan before running it (a dry
/// run), their own progress reporter, or the source snapshot afterwards. Every call blocks:
/// from Swift concurrency, use `Ferry.copy`, which runs it on a thread of its own.
///
/// ```swift
/// let session = try CopySession(source: Endpoint(parsing: "sqlite:a.db"), target: Endpoint(parsing: "sqlite:b.db"))
/// defer { session.close() }
/// var options = CopyOptions()
/// options.keepSourceSnapshot = true
/// let plan = try session.plan(options)
/// let summary = session.run(plan, options: options)
/// let report = try session.verify(plan, options: options)
/// ```
public final class CopySession {
    public let source: any Connection
    public let target: any Connection
    public let registry: DriverRegistry
    private var closed = false

    /// Connects to both sides (the source read-only where the engine allows). A target that
    /// cannot be reached closes the source again before throwing.
    public init(source: Endpoint, target: Endpoint, registry: DriverRegistry = Ferry.drivers) throws {
        self.registry = registry
        let s = try registry.connect(source, role: .source)
        do {
            self.target = try registry.connect(target, role: .target)
        } catch {
            s.close()
            throw error
        }
        self.source = s
    }

    deinit { close() }

    /// The tables, keys, columns, skipped columns and statements the copy would run; touches
    /// nothing. Throws for what stops a copy before any table starts.
    public func plan(_ options: CopyOptions) throws -> CopyPlan {
        try CopyEngine(registry: registry).plan(source: source, target: target, options: options)
    }

    /// Runs `plan`, each table in one target transaction. A table that fails is reported in the
    /// summary (its error one line), not thrown.
    public func run(
        _ plan: CopyPlan, options: CopyOptions, progress: ProgressReporter = ProgressReporter(style: .quiet) { _ in },
        cancellation: Cancellation = Cancellation()
    ) -> CopySummary {
        CopyEngine(registry: registry).run(plan, source: source, target: target, options: options, progress: progress, cancellation: cancellation)
    }

    /// Compares every table of `plan` with its copy, value by value. With
    /// `options.keepSourceSnapshot` the source side reads the snapshot the copy read (then ends
    /// it), so a source that changed since does not show as a difference.
    public func verify(_ plan: CopyPlan, options: CopyOptions, cancellation: Cancellation? = nil) throws -> Verifier.Report {
        var v = Verifier.Options()
        v.tables = plan.tables.map(\.source)
        v.keys = options.keys
        v.casts = options.casts
        defer { if options.keepSourceSnapshot { try? source.rollback() } }
        return try Verifier().verify(source: source, target: target, options: v, cancellation: cancellation)
    }

    /// Closes both connections (also done when the session goes away).
    public func close() {
        guard !closed else { return }
        closed = true
        source.close()
        target.close()
    }
}

extension Verifier {
    /// Compares the tables of `source` with their copies in `target` (both opened read-only),
    /// each side read in one snapshot for every table where its engine can (else `say` says
    /// so, and each table is read as of its own moment), with `options.jobs` pairs of
    /// connections where both sides can share their snapshot. `say` receives what a user
    /// should read, one line each, starting `warning:` or `note:`. The blocking core of
    /// `Ferry.verify` and `ferry verify`.
    public static func compare(
        _ source: Endpoint, with target: Endpoint, options: Options, registry: DriverRegistry = Ferry.drivers,
        cancellation: Cancellation? = nil, say: (String) -> Void = { _ in }
    ) throws -> Report {
        let s = try registry.connect(source, role: .source)
        defer { s.close() }
        let t = try registry.connect(target, role: .source)
        defer { t.close() }
        for c in [s, t] {
            do { try c.beginSnapshot() } catch {
                try? c.rollback()
                say("warning: \(c.endpoint) could not start a read snapshot (\(error)); each table is read as of its own moment")
            }
        }
        defer {
            try? s.rollback()
            try? t.rollback()
        }
        return try Verifier().verify(
            source: s, target: t, options: options, cancellation: cancellation, connect: { try registry.connect($0, role: .source) },
            note: { say("note: " + $0) })
    }
}
