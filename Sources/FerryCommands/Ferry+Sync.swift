import ArgumentParser
import FerryCore
import FerrySync
import Foundation

/// Where a snapshot's origin is and how to reach it: the URL the snapshot records (it holds
/// no password), or `--origin`, with the credentials every command takes.
struct OriginOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Where the origin lives now, when it moved (the snapshot's recorded URL otherwise).", valueName: "url"))
    var origin: String?

    @OptionGroup var driverSettings: DriverSettings

    func endpoint(_ file: SyncFile) throws -> Endpoint {
        try driverSettings.endpoint(origin ?? file.origin(), registry: Ferry.registry)
    }
}

/// What push, pull and sync take: the snapshot, the conflict policy, the origin, the output.
struct SyncArguments: ParsableArguments {
    @Argument(help: "The snapshot file.")
    var file: String

    @Option(name: .customLong("on-conflict"), help: "A row changed on both sides: fail (default: apply nothing, list them), local, origin or merge.")
    var onConflict: ConflictPolicy = .fail

    @OptionGroup var originOptions: OriginOptions
    @OptionGroup var output: OutputOptions

    /// Opens the snapshot, runs `body` with the sync engine, the file, the origin and the policy.
    func run<T>(_ body: (FerrySync.Sync, SyncFile, Endpoint, ConflictPolicy) throws -> T) throws -> T {
        let f = try SyncFile.open(file)
        defer { f.close() }
        return try body(FerrySync.Sync(registry: Ferry.registry), f, try originOptions.endpoint(f), onConflict)
    }
}

extension ConflictPolicy: ExpressibleByArgument {}

extension Ferry {
    /// `ferry snapshot ORIGIN FILE.db`
    struct Snapshot: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Copy tables into a new SQLite file to edit offline, and sync back later.",
            discussion: """
                The snapshot holds the tables (keys, serial columns, indexes, foreign keys) and Ferry's
                bookkeeping: the origin's URL without password or token, each table's key and schema,
                and triggers that record every local insert, update and delete with the row it started
                from — whatever program edits the file (the sqlite3 shell, an app, Ferry's library).
                Every table needs a key: a primary key, a unique NOT NULL key, or --key TABLE=COLS.
                Rows inserted offline into a table with a serial key are numbered above 2^31 (2^53 for
                64-bit keys) and get the origin's next key when pushed.

                Examples:
                  ferry snapshot postgres://app@db/shop laptop.db
                  ferry snapshot https://data.example.com/ laptop.db --token-file ~/.ferry-token
                  ferry snapshot mysql://app@db/shop laptop.db --tables orders,customers --where "orders=created > '2026-01-01'"
                Then: ferry status laptop.db; ferry sync laptop.db
                """)

        @Argument(help: "The database to copy from (URL).")
        var origin: String

        @Argument(help: "The snapshot file to create (must not exist).")
        var file: String

        @OptionGroup var tableOptions: TableOptions

        @Option(name: .long, help: "TABLE=CONDITION: only matching rows (the origin's SQL); pulls keep to them. Repeatable.")
        var `where`: [String] = []

        @OptionGroup var driverSettings: DriverSettings

        @Flag(name: .long, help: "No progress on stderr.")
        var quiet = false

        @OptionGroup var output: OutputOptions

        func run() throws {
            var options = SnapshotOptions()
            options.tables = tableOptions.named
            options.exclude = tableOptions.excluded
            options.keys = tableOptions.keys
            options.filters = self.where
            let endpoint = try driverSettings.endpoint(origin, registry: Ferry.registry)
            let progress = ProgressReporter(quiet: quiet || output.json)
            let report = try FerrySync.Sync(registry: Ferry.registry).snapshot(origin: endpoint, to: file, options: options, progress: progress)
            if output.json { return try Console.json(report) }
            let rows = report.tables.reduce(Int64(0)) { $0 + $1.rows }
            Console.out("snapshot \(report.file) of \(report.origin): \(report.tables.count) tables, \(rows) rows in \(String(format: "%.2f", report.seconds)) s")
            for t in report.tables {
                var line = "  \(t.name): \(t.rows) rows, key (\(t.key.joined(separator: ", ")))"
                if let from = t.offlineKeysFrom { line += ", offline rows numbered from \(from)" }
                if !t.skippedColumns.isEmpty { line += ", columns left out: " + t.skippedColumns.map { "\($0.column) (\($0.reason))" }.joined(separator: ", ") }
                Console.out(line)
            }
        }
    }

    /// `ferry status FILE.db`
    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a snapshot's origin, last push and pull, and its pending local changes.",
            discussion: """
                Works offline: it reads only the file. A row edited back to its original values is not pending.

                Examples:
                  ferry status laptop.db
                  ferry status laptop.db --verbose
                  ferry status laptop.db --json     # {"pending": N, "tables": [...]}
                """)

        @Argument(help: "The snapshot file.")
        var file: String

        @Flag(name: .long, help: "List the key of every pending row.")
        var verbose = false

        @OptionGroup var output: OutputOptions

        func run() throws {
            let f = try SyncFile.open(file)
            defer { f.close() }
            let report = try FerrySync.Sync(registry: Ferry.registry).status(f, verbose: verbose)
            if output.json { return try Console.json(report) }
            Console.out("snapshot \(report.file)")
            Console.out("origin     \(report.origin)")
            Console.out("created    \(report.created ?? "–")")
            Console.out("last push  \(report.lastPush ?? "never")")
            Console.out("last pull  \(report.lastPull ?? "–")")
            if let p = report.pushInFlight { Console.out("push \(p) was interrupted; the next push or pull finishes it") }
            Console.out("pending    \(report.pending) change\(report.pending == 1 ? "" : "s")")
            let rows = report.tables.map { t in [t.name, String(t.inserts), String(t.updates), String(t.deletes)] }
            Console.out(renderColumns(["table", "inserts", "updates", "deletes"], rows))
            if verbose {
                for t in report.tables { for k in t.keys ?? [] { Console.out("  \(t.name) \(k.kind.rawValue) \(k.key)") } }
            }
        }
    }

    /// `ferry push FILE.db`
    struct Push: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Apply a snapshot's pending local changes to its origin, in one origin transaction.",
            discussion: """
                Each update and delete applies only where the origin's row still equals the row the
                local change started from; otherwise it is a conflict, handled by --on-conflict:
                  fail    apply nothing, list every conflict (table, key, local, base and origin values)
                  local   the local row wins
                  origin  the origin's row wins and replaces the local one
                  merge   column by column; the same column changed on both sides is left as under fail
                Tables are applied parents first (deletes children first). Rows inserted offline into
                a serial table get the origin's next keys; the snapshot's row and every row referencing
                it are re-keyed. The push's id is committed at the origin with the changes
                (_ferry_sync_pushes), so a push interrupted at any point and run again applies every
                change exactly once. \(ExitStatus.table)

                Examples:
                  ferry push laptop.db
                  ferry push laptop.db --on-conflict merge --json
                  ferry push laptop.db --origin postgres://app@new-db/shop --password-file ~/.shop-pw
                """)

        @OptionGroup var arguments: SyncArguments

        func run() throws {
            let report = try arguments.run { try $0.push($1, origin: $2, policy: $3) }
            try SyncOutput.push(report, json: arguments.output.json)
            try SyncOutput.exit(unresolved: report.unresolved)
        }
    }

    /// `ferry pull FILE.db`
    struct Pull: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Bring the origin's inserts, updates and deletes into a snapshot.",
            discussion: """
                Finds what changed with digests of key ranges computed by each side (the origin in its
                own SQL), reading only ranges that differ; no trigger or replication is needed at the
                origin. Unchanged rows are not rewritten. A row deleted locally and not yet pushed is
                never brought back; a row changed on both sides is a conflict (--on-conflict as for push).
                A column added at the origin (nullable or with a default) is added to the snapshot; any
                other schema change stops the pull and keeps pending changes. \(ExitStatus.table)

                Examples:
                  ferry pull laptop.db
                  ferry pull laptop.db --on-conflict origin
                """)

        @OptionGroup var arguments: SyncArguments

        func run() throws {
            let report = try arguments.run { try $0.pull($1, origin: $2, policy: $3) }
            try SyncOutput.pull(report, json: arguments.output.json)
            try SyncOutput.exit(unresolved: report.unresolved)
        }
    }

    /// `ferry sync FILE.db`
    struct SyncCommand: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "sync",
            abstract: "Push a snapshot's local changes, then pull the origin's: one summary.",
            discussion: """
                The pull runs only when the push left no conflict open. \(ExitStatus.table)

                Examples:
                  ferry sync laptop.db
                  ferry sync laptop.db --on-conflict merge --json
                """)

        @OptionGroup var arguments: SyncArguments

        func run() throws {
            let report = try arguments.run { try $0.sync($1, origin: $2, policy: $3) }
            if arguments.output.json {
                try Console.json(report)
            } else {
                try SyncOutput.push(report.push, json: false)
                if let pull = report.pull { try SyncOutput.pull(pull, json: false) }
            }
            try SyncOutput.exit(unresolved: report.unresolved)
        }
    }
}

enum SyncOutput {
    static func conflicts(_ list: [SyncConflict]) {
        for c in list { (c.resolution == nil ? Console.error : Console.out)("conflict: " + c.line) }
    }

    static func push(_ r: PushReport, json: Bool) throws {
        if json { return try Console.json(r) }
        if let id = r.recovered { Console.out("finished the interrupted push \(id) (the origin had committed it)") }
        conflicts(r.conflicts)
        guard r.applied else { return }
        let total = r.tables.reduce(Int64(0)) { $0 + $1.inserted + $1.updated + $1.deleted }
        Console.out("push to \(r.origin): \(total) row\(total == 1 ? "" : "s") changed in \(String(format: "%.2f", r.seconds)) s")
        for t in r.tables { Console.out("  \(t.name): \(t.inserted) inserted, \(t.updated) updated, \(t.deleted) deleted") }
        for k in r.rekeyed { Console.out("  \(k.table): offline key \(k.old) is now \(k.new)") }
    }

    static func pull(_ r: PullReport, json: Bool) throws {
        if json { return try Console.json(r) }
        conflicts(r.conflicts)
        guard r.applied else { return }
        let total = r.tables.reduce(Int64(0)) { $0 + $1.inserted + $1.updated + $1.deleted }
        Console.out("pull from \(r.origin): \(total) row\(total == 1 ? "" : "s") changed in \(String(format: "%.2f", r.seconds)) s")
        for t in r.tables where t.inserted + t.updated + t.deleted > 0 || !t.columnsAdded.isEmpty {
            var line = "  \(t.name): \(t.inserted) inserted, \(t.updated) updated, \(t.deleted) deleted (\(t.rowsRead) origin rows read)"
            if !t.columnsAdded.isEmpty { line += ", columns added: " + t.columnsAdded.joined(separator: ", ") }
            Console.out(line)
        }
    }

    /// Conflicts left open: the error line and the "differences" exit code.
    static func exit(unresolved: Int) throws {
        guard unresolved > 0 else { return }
        Console.error("ferry: error: \(SyncError.conflicts(count: unresolved))")
        throw ExitCode(ExitStatus.differences.rawValue)
    }
}
