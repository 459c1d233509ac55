import ArgumentParser
import FerryCore
import FerryKit
import Foundation

extension Ferry {
    /// `ferry plan SOURCE TARGET --shards N`: a copy cut into work units for schedulers.
    struct Plan: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Cut a copy into work units that schedulers run on many machines.",
            discussion: """
                Ferry runs no cluster of its own: it cuts a copy into N independent units (a
                table, or a key range of one, cut at the ranks of the table's keys so that gaps,
                hot ranges, text and composite keys still give units of about equal rows) and
                the scheduler you already run executes them — a Kubernetes Indexed Job, a Slurm
                array, an Airflow task map, GNU parallel. The plan (JSON) holds no password or
                token: each unit brings its own credentials.

                Steps, each an ordinary command:
                  ferry plan SRC DST --shards 4 --output plan.json     cut the units
                  ferry copy --plan plan.json --prepare                 create the target tables once
                  ferry copy --plan plan.json --shard I/4               run unit I (any order, any machine, again if it failed)
                  ferry copy --plan plan.json --finish                  indexes, foreign keys, serial counters

                Modes: create (the default: the tables must not exist) and upsert. Each unit
                writes its pieces in one target transaction each; a unit run again writes them
                again by key, so the target ends the same.

                One source state across processes: with --hold-snapshot (PostgreSQL, or a Ferry
                service as the source) this process exports a snapshot, writes the plan naming it,
                and keeps the snapshot open until it is stopped (Ctrl-C, SIGTERM): every unit reads
                in it, and a unit whose snapshot is gone fails rather than read a newer state. A
                long-held PostgreSQL snapshot holds back vacuum on the source. Without it each unit
                reads the source as of its own start.

                Examples:
                  ferry plan postgres://dba@db/shop postgres://dba@dw/shop --tables orders --shards 4 --output plan.json
                  ferry plan postgres://dba@db/shop mysql://app@dw/shop --shards 8 --hold-snapshot --output plan.json &
                  ferry plan sqlite:app.db postgres://dba@dw/app --shards 3 --json
                  ferry plan mysql://app@db/shop sqlite:shop.db --shards 4 --mode upsert --output plan.json
                """)

        @Argument(help: "The database to read from (URL).")
        var source: String

        @Argument(help: "The database to write to (URL).")
        var target: String

        @Option(name: .long, help: "Units to cut the copy into.")
        var shards: Int

        @Option(name: .long, help: ArgumentHelp("Write the plan to FILE (whole or not at all) and a summary on stderr.", valueName: "file"))
        var output: String?

        @Flag(name: .long, help: "Export the source's snapshot for every unit and hold it until this process is stopped (PostgreSQL, a Ferry service).")
        var holdSnapshot = false

        @Option(name: .long, help: ArgumentHelp(
            "Cut tables larger than this (the catalog's row estimate) at the quantiles of a random sample of their keys instead of reading every key (PostgreSQL TABLESAMPLE, MySQL and SQLite by a random condition); 0 samples every table.",
            valueName: "rows"))
        var sampleAbove: Int64 = CopyEngine.sampleAbove

        @Flag(name: .shortAndLong, help: "With --output: no summary on stderr.")
        var quiet = false

        @OptionGroup var what: CopyChoices

        @OptionGroup var driverSettings: DriverSettings

        @OptionGroup var passwordFiles: PasswordFiles

        @OptionGroup var json: OutputOptions

        func validate() throws {
            guard shards >= 1 && shards <= 100_000 else { throw ValidationError("--shards must be between 1 and 100000, not \(shards)") }
            guard sampleAbove >= 0 else { throw ValidationError("--sample-above is a number of rows, 0 or more") }
        }

        func run() throws {
            let registry = Ferry.registry
            let (sourceEndpoint, targetEndpoint) = try driverSettings.endpoints(source: source, target: target, registry: registry, passwords: passwordFiles)
            let session = try CopySession(source: sourceEndpoint, target: targetEndpoint, registry: registry)
            defer { session.close() }
            let options = try what.copyOptions()
            if !options.incremental.isEmpty {
                throw ValidationError("--incremental copies run as one unit (their watermark is one per table): leave out --shards, or --incremental")
            }
            var snapshot: String?
            if holdSnapshot {
                try session.source.beginSnapshot()
                guard let id = try session.source.exportSnapshot() else {
                    throw FerryError.invalidOption(
                        "\(session.source.endpoint.redacted) cannot share a snapshot between processes (PostgreSQL and a Ferry service can): leave out --hold-snapshot, and each unit reads the source as of its own start")
                }
                snapshot = id
            }
            let plan = try session.plan(options)
            let shard = try CopyEngine(registry: registry).shardPlan(
                plan, source: session.source, options: options, shards: shards, snapshot: snapshot, sampleAbove: sampleAbove)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            let data = try encoder.encode(shard)
            if let output {
                try Self.write(data, to: output)
                if !quiet { Console.error(Self.summary(shard, file: output)) }
            } else if json.json {
                Console.out(String(decoding: data, as: UTF8.self))
            } else {
                Console.out(Self.summary(shard, file: nil))
            }
            guard let snapshot else { return }
            Console.error("holding the source snapshot \(snapshot) for the units until this process is stopped (Ctrl-C or SIGTERM); a long-held PostgreSQL snapshot holds back vacuum on the source")
            try hold(session.source, first: plan.tables.first?.source)
        }

        /// Keeps the snapshot open until SIGINT or SIGTERM; touches it every minute (a service
        /// ends a snapshot idle for 300 s).
        func hold(_ source: any Connection, first: TableName?) throws {
            let stop = DispatchSemaphore(value: 0)
            let signals = StopSignals { stop.signal() }
            defer { signals.cancel() }
            while stop.wait(timeout: .now() + 60) == .timedOut {
                if let first { _ = try source.describe(first) }
            }
            Console.error("released the source snapshot")
        }

        /// Written to a file beside `path`, then renamed onto it (rename(2) replaces atomically):
        /// a reader sees the whole plan or none.
        static func write(_ data: Data, to path: String) throws {
            let directory = (path as NSString).deletingLastPathComponent
            let name = "." + (path as NSString).lastPathComponent + ".\(ProcessInfo.processInfo.processIdentifier).tmp"
            let temporary = directory.isEmpty ? name : directory + "/" + name
            do {
                try data.write(to: URL(fileURLWithPath: temporary))
                guard rename(temporary, path) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            } catch {
                try? FileManager.default.removeItem(atPath: temporary)
                throw FerryError.invalidOption("cannot write the plan to \(path): \((error as NSError).localizedDescription)")
            }
        }

        static func summary(_ plan: ShardPlan, file: String?) -> String {
            let total = plan.units.reduce(0) { $0 + $1.rows }
            var lines = ["plan \(plan.id): \(plan.units.count) units, \(total) rows, mode \(plan.mode.rawValue), from \(plan.source) to \(plan.target)"
                + (plan.snapshot.map { ", in source snapshot \($0)" } ?? "")]
            for u in plan.units {
                let pieces = u.pieces.map { "\($0.name) (\($0.estimated == true ? "~" : "")\($0.rows))" }.joined(separator: ", ")
                lines.append("  unit \(u.index): \(u.rows) rows" + (pieces.isEmpty ? " (nothing to do)" : ": " + pieces))
            }
            let f = file ?? "plan.json"
            lines.append("next: ferry copy --plan \(f) --prepare; then ferry copy --plan \(f) --shard I/\(plan.units.count) for each I (any order, any machine); then ferry copy --plan \(f) --finish")
            return lines.joined(separator: "\n")
        }
    }
}

extension Ferry.Copy {
    /// `ferry copy [SOURCE TARGET] --plan FILE --prepare | --shard I/N | --finish`.
    func runPlan() throws {
        guard let file = units.plan else { return }
        let shard = try ShardPlan.load(file)
        if let text = units.shard, let (_, count) = UnitOptions.shard(text), count != shard.units.count {
            throw FerryError.invalidOption("\(file) has \(shard.units.count) units: --shard I/\(shard.units.count), not \(text)")
        }
        // The plan's URLs have their passwords masked: those come from the usual places.
        let src = source ?? Self.unmasked(shard.source), tgt = target ?? Self.unmasked(shard.target)
        let registry = Ferry.registry
        let (sourceEndpoint, targetEndpoint) = try driverSettings.endpoints(source: src, target: tgt, registry: registry, passwords: passwordFiles)
        let session = try CopySession(source: sourceEndpoint, target: targetEndpoint, registry: registry)
        defer { session.close() }
        var options = try shard.copyOptions()
        options.jobs = 1
        // Planned against the target as it is: the prepared tables are there.
        var planning = options
        planning.mode = .append
        let plan = try session.plan(planning)
        let engine = CopyEngine(registry: registry)
        let progress = ProgressReporter(quiet: quiet || output.json && isatty(2) == 0)
        if units.prepare {
            let created = try engine.prepare(shard, plan: plan, target: session.target, progress: progress)
            if output.json {
                struct Out: Encodable { var ok: Bool; var plan: String; var created: [String] }
                try Console.json(Out(ok: true, plan: shard.id, created: created))
            } else if !quiet {
                Console.error("prepared \(created.count) of \(plan.tables.count) tables for plan \(shard.id) in \(session.target.endpoint)")
            }
            return
        }
        if let text = units.shard, let (index, count) = UnitOptions.shard(text) {
            let summary = try engine.runUnit(shard, index: index, plan: plan, source: session.source, target: session.target, options: options, progress: progress)
            try report(summary, what: "unit \(index)/\(count) of plan \(shard.id)")
            return
        }
        if units.finish {
            let (done, summary) = try engine.finish(shard, plan: plan, target: session.target, progress: progress)
            if !done {
                if !quiet && !output.json { Console.error("plan \(shard.id) was finished before: nothing to do") }
                if output.json { try Console.json(FinishOut(ok: true, finishedBefore: true, summary: summary)) }
                return
            }
            try report(summary, what: "finished plan \(shard.id)")
        }
    }

    struct FinishOut: Encodable {
        var ok: Bool
        var finishedBefore: Bool
        var summary: CopySummary
    }

    func report(_ summary: CopySummary, what: String) throws {
        if output.json {
            struct Out: Encodable { var ok: Bool; var rows: Int64; var summary: CopySummary }
            try Console.json(Out(ok: summary.ok, rows: summary.totalRows, summary: summary))
        } else if !quiet {
            let ok = summary.tables.filter { $0.status == .ok }
            let indexes = ok.reduce(0) { $0 + $1.indexes }, foreignKeys = ok.reduce(0) { $0 + $1.foreignKeys }
            Console.error("\(what): \(ok.count) of \(summary.tables.count) pieces, \(summary.totalRows) rows"
                + (indexes + foreignKeys > 0 ? ", \(indexes) indexes, \(foreignKeys) foreign keys" : "")
                + " in \(String(format: "%.2f", summary.seconds))s")
        }
        let failures = summary.tables.filter { $0.status != .ok }
        if !failures.isEmpty {
            try Ferry.Copy.fail(failures, of: summary.tables.count, quiet: quiet || output.json)
        }
    }

    /// A URL as a plan prints it, without the mask where its password was.
    static func unmasked(_ url: String) -> String {
        url.replacingOccurrences(of: ":****@", with: "@")
    }
}
