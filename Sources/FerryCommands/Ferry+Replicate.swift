import ArgumentParser
import FerryCore
import FerryServer
import Foundation

extension Ferry {
    /// `ferry replicate SOURCE TARGET`: copy, then follow the source's changes.
    struct Replicate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Copy tables, then apply the source's changes to them as they are committed.",
            discussion: """
                The first run copies the tables from the snapshot where the source's change
                stream begins (no gap, no overlap), then follows the stream: each source
                transaction is applied whole, in commit order, and every target transaction
                also records the source's position in the target (_ferry_replication), so a
                later run with the same source and target resumes exactly there. A run stopped
                during the initial copy (Ctrl-C, SIGTERM) rolls it back and exits 0; the next run
                starts that copy again.

                Stop a follower with Ctrl-C or SIGTERM: it finishes the transaction it is
                applying, records the position and exits 0. --until-caught-up stops once
                everything the source had committed when following began is applied, and moves
                the target's serial counters past the replicated values: the cut-over step.

                Sources: PostgreSQL 14 or later with wal_level = logical and a role that may
                replicate (REPLICATION, or the owner of the tables with CREATE on the database
                for the publication). Ferry creates a publication and a logical replication
                slot named _ferry_r_…; --drop removes them and the target's record. A slot
                keeps the server's WAL until Ferry confirms it: drop a replica you no longer run.
                Every table needs a primary key (a table without one is refused before the
                source is touched).

                SQLite sources: Ferry adds capture triggers (_ferry_t_…) and a change log
                (_ferry_log_…) to the file; they record the keys every program's writes change,
                and Ferry applies the rows those keys have when it reads the log.

                MariaDB sources: the row binlog (log-bin, binlog_format = ROW, binlog_row_image =
                FULL) read as a replica reads it, from GTIDs, by a user with REPLICATION SLAVE and
                BINLOG MONITOR. Nothing is created at the source. Cascading foreign-key actions are
                not in the binlog: the target's own keys (created by the initial copy with their
                actions) repeat them.

                Through ferry serve (or a plugin that declares change-feed and replica-apply):
                the service makes the capture at the database it serves (a manage token, or any
                token with ferry serve --allow-feed) and sends its stream a page at a time; as a
                target it applies each transaction of every table, with the replica's record,
                in one transaction of its database (a write token; the initial copy's replace
                needs a manage token).

                A source that no longer holds the recorded position (binlog purged, slot dropped)
                stops with one line: --resync mirrors the target to a new snapshot of the source,
                moving only what differs, and follows on from there.

                Examples:
                  ferry replicate postgres://dba@db/shop sqlite:shop.db --until-caught-up
                  ferry replicate postgres://dba@db/shop mysql://app@replica/shop --tables orders,customers
                  ferry replicate postgres://dba@db/shop sqlite:shop.db --status
                  ferry replicate postgres://dba@db/shop sqlite:shop.db --drop
                  ferry replicate sqlite:app.db postgres://dba@db/app --until-caught-up
                  ferry replicate mysql://repl@db/shop postgres://dba@pg/shop --until-caught-up
                  ferry replicate mysql://repl@db/shop postgres://dba@pg/shop --resync
                  ferry replicate http://:$(cat tokens.txt)@db:8080/ sqlite:shop.db --until-caught-up
                  ferry replicate postgres://dba@db/shop http://:$(cat tokens.txt)@edge:8080/
                """)

        @Argument(help: "The database to follow (URL).")
        var source: String

        @Argument(help: "The database to keep up to date (URL); a SQLite file is created when missing.")
        var target: String

        @Option(name: .long, help: "Only tables in these schemas, comma-separated.")
        var schema: [String] = []

        @Option(name: .long, help: "Tables copied at the same time by the initial copy.")
        var jobs: Int = 2

        @OptionGroup var tableOptions: TableOptions

        @OptionGroup var castOptions: CastOptions

        @OptionGroup var driverSettings: DriverSettings

        @OptionGroup var passwordFiles: PasswordFiles

        @Flag(name: .long, help: "Exit once the target holds everything the source had committed when following began.")
        var untilCaughtUp = false

        enum SchemaChange: String, ExpressibleByArgument, CaseIterable {
            case add, fail
        }

        @Option(name: .long, help: "A column added to a followed table at the source: add it at the target and report it (add, the default), or stop with one line (fail). A dropped or retyped column always stops.")
        var onSchemaChange: SchemaChange = .add

        @Flag(name: .long, help: "Follow again from a new source position after the source lost the recorded one (binlog purged, slot dropped): the target is mirrored to the new snapshot (only what differs moves), then followed.")
        var resync = false

        @Flag(name: .long, help: "Show where this replica stands (its position, the source's, how far behind, what the source keeps for it), and change nothing.")
        var status = false

        @Option(name: .long, help: "With --status: warn when the source keeps more than this for the replica (a PostgreSQL slot's WAL), e.g. 512MB, 1GB (default 1GB).")
        var maxRetained: ByteSize = ByteSize(bytes: 1 << 30)

        @Flag(name: .long, help: "Remove what Ferry made at the source for this replica (slot, publication) and its record in the target.")
        var drop = false

        @Option(name: .long, help: ArgumentHelp(
            "Serve Prometheus metrics at http://HOST:PORT/metrics while it runs (lag, source transactions and rows applied, by table, errors), e.g. 127.0.0.1:9187; port 0 picks a free one.",
            valueName: "host:port"))
        var metrics: String?

        @Flag(name: .shortAndLong, help: "No progress on stderr.")
        var quiet = false

        @OptionGroup var output: OutputOptions

        func validate() throws {
            guard jobs >= 1 && jobs <= 64 else { throw ValidationError("--jobs must be between 1 and 64, not \(jobs)") }
            guard !(status && drop) else { throw ValidationError("--status and --drop are separate runs: give one") }
            guard !(resync && (status || drop)) else { throw ValidationError("--resync follows again: it goes without --status and --drop") }
            if let metrics, metricsAddress(metrics) == nil { throw ValidationError("--metrics must be HOST:PORT, e.g. 127.0.0.1:9187") }
        }

        func metricsAddress(_ text: String) -> (host: String, port: Int)? { Ferry.hostAndPort(text).map { ($0.0, $0.1) } }

        func run() throws {
            // SIGINT and SIGTERM stop the follower between source transactions (taken from the
            // start: a signal while connecting stops it the same way).
            let cancellation = Cancellation()
            let signals = StopSignals { cancellation.cancel() }
            defer { signals.cancel() }
            let registry = Ferry.registry
            let (sourceEndpoint, targetEndpoint) = try driverSettings.endpoints(source: source, target: target, registry: registry, passwords: passwordFiles)
            let name = Replicator.captureName(source: sourceEndpoint, target: targetEndpoint)
            let targetConnection = try registry.connect(targetEndpoint, role: .target)
            defer { targetConnection.close() }
            if status {
                // The source's side is shown where it can be reached; the target's record always.
                let source = Result { try registry.connect(sourceEndpoint, role: .source) }
                defer { if case .success(let s) = source { s.close() } }
                return try showStatus(name, targetConnection, source)
            }
            let sourceConnection = try registry.connect(sourceEndpoint, role: .source)
            defer { sourceConnection.close() }
            if drop { return try dropReplica(name, sourceConnection, targetConnection) }

            var options = Replicator.Options()
            options.copy.tables = tableOptions.named
            options.copy.exclude = tableOptions.excluded
            options.copy.schemas = schema.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
            options.copy.jobs = jobs
            options.copy.keys = tableOptions.keys
            options.copy.casts = try castOptions.rules()
            options.untilCaughtUp = untilCaughtUp
            options.resync = resync
            options.addColumns = onSchemaChange == .add

            // Metrics are bootstrapped before the reporter makes its counters.
            if let metrics, let (host, port) = metricsAddress(metrics) {
                do {
                    try FerryMetrics.bootstrap().serve(host: host, port: port) { bound in
                        if !quiet { Console.error("ferry: metrics on http://\(host):\(bound)/metrics") }
                    }
                } catch {
                    throw FerryError.invalidOption("--metrics \(metrics): cannot listen there (\(error)); give a free HOST:PORT")
                }
            }
            let reporter = ReplicateReporter(replica: name, json: output.json, metrics: metrics != nil)
            options.observe = { reporter.observe($0) }
            let progress = ProgressReporter(quiet: quiet || output.json && isatty(2) == 0)
            let outcome: Replicator.Outcome
            do {
                outcome = try Replicator(registry: registry).run(
                    source: sourceConnection, target: targetConnection, options: options, progress: progress, cancellation: cancellation)
            } catch {
                reporter.failed(error)
                throw error
            }
            if output.json {
                try reporter.finish(outcome)
            } else if outcome.stoppedInCopy {
                // Said even with -q: nothing was replicated, and the next run copies again.
                Console.error("stopped during the initial copy, which was rolled back; the next run starts it again: \(sourceEndpoint.redacted) -> \(targetEndpoint.redacted)")
            } else if !quiet {
                let how = outcome.caughtUp ? "caught up" : "stopped"
                Console.error(
                    "\(how): \(outcome.copied ? "copied \(outcome.copiedRows) rows, then " : "")applied \(outcome.transactions) transactions, \(outcome.rowsApplied) rows"
                        + " in \(String(format: "%.2f", outcome.seconds))s; \(sourceEndpoint.redacted) -> \(targetEndpoint.redacted) at \(outcome.position)")
            }
        }

        struct Status: Encodable {
            var replica: ReplicationState.Row
            var lag: ChangeLag?
            var lagSeconds: Double?
            var sourceError: String?
            var warning: String?
        }

        func showStatus(_ name: String, _ target: any Connection, _ source: Result<any Connection, any Error>) throws {
            guard let row = try target.replicaStates().read(name) else {
                if output.json { try Console.json(["replica": name, "state": "none"]) } else { Console.out("no replica of this source in this target (\(name))") }
                throw ExitCode(ExitStatus.failed.rawValue)
            }
            var status = Status(replica: row)
            do {
                let s = try source.get()
                guard let capture = try s.changeCapture() else { throw FerryError.invalidOption("\(s.endpoint.redacted) has no change capture") }
                if row.phase == "following" {
                    let lag = try capture.lag(name: name, from: ChangePosition(row.position))
                    status.lag = lag
                    // Behind: at most the time since the replica last applied a transaction.
                    status.lagSeconds = lag.behind == 0 ? 0 : ISOTime.date(row.updatedAt).map { max(0, Date().timeIntervalSince($0)) }
                    if let kept = lag.retainedBytes, kept > maxRetained.bytes {
                        status.warning = "the source keeps \(ByteSize.text(kept)) of WAL for this replica (more than --max-retained \(ByteSize.text(maxRetained.bytes))): "
                            + "run it to catch up, or remove it with --drop if it is no longer wanted"
                    }
                }
            } catch {
                status.sourceError = "\(error)"
            }
            if output.json { return try Console.json(status) }
            let behind = status.lag.map { "\($0.behind) \($0.unit)" + (status.lagSeconds.map { String(format: " (≤ %.0f s)", $0) } ?? "") } ?? "-"
            Console.out(renderColumns(
                ["replica", "phase", "position", "source at", "behind", "rows applied", "last applied", "source"],
                [[row.name, row.phase, row.position, status.lag?.sourcePosition ?? "-", behind, String(row.appliedRows), row.updatedAt, row.source]]))
            if let kept = status.lag?.retainedBytes { Console.out("the source keeps \(ByteSize.text(kept)) for this replica") }
            if let e = status.sourceError { Console.error("warning: the source could not be asked where it stands: \(e)") }
            if let w = status.warning { Console.error("warning: \(w)") }
        }

        func dropReplica(_ name: String, _ source: any Connection, _ target: any Connection) throws {
            var removed: [String] = []
            if let capture = try source.changeCapture() {
                removed += try capture.drop(name: name).map { "\($0) at \(source.endpoint.redacted)" }
            }
            if try target.replicaStates().remove(name) { removed.append("the record of \(name) in \(target.endpoint.redacted)") }
            if output.json { return try Console.json(["removed": removed]) }
            Console.out(removed.isEmpty ? "nothing to remove for \(name)" : "removed " + removed.joined(separator: ", "))
        }
    }
}
