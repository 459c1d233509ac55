import ArgumentParser
import FerryCore
import FerryKit
import Foundation

extension WriteMode: ExpressibleByArgument {}

extension Ferry {
    /// `ferry copy SOURCE TARGET`: plan, then copy table by table.
    struct Copy: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Copy tables from one database to another.",
            discussion: """
                Each table is loaded in one transaction on the target: if anything fails, the
                target table is left exactly as it was. A new table is never seen half loaded:
                where the engine's DDL commits as it goes (MySQL, the XML service) rows load into
                a staging table renamed at the end. With --resume, rows load in key order in
                chunks that commit on their own into a staging table (renamed in for create,
                swapped in for replace, merged into the existing table in one transaction for
                append and upsert), and the same command with --resume continues an unfinished
                load after its last chunk. Types are mapped engine to engine;
                columns whose type Ferry cannot carry are skipped and reported.

                Modes:
                  create   (default) create each table; fail if it already exists
                  replace  load into a staging table, then swap it in (the old table survives any failure)
                  append   insert into the table, creating it when it is missing
                  upsert   by the table's key: insert new rows, update rows that differ, leave
                           equal rows alone (counts inserted / updated / unchanged); the table
                           needs a key (--key for one without), and the target's one transaction
                           per table (not yet into the XML service)
                  mirror   upsert, then delete the target rows whose key the source lacks, so
                           the target ends equal to the source; each side computes digests of
                           key-hash buckets next to its data and only buckets that differ are
                           read (counts inserted / updated / deleted / unchanged). Guards:
                           --max-delete N|P%, and an empty source table is refused unless
                           --allow-empty-source; with --where, the condition runs on both sides
                           and only rows inside it are deleted

                Schema: the primary key, unique keys, NOT NULL, defaults the target can
                express, and CHECKs (between databases of one engine) come with each table;
                secondary indexes are built after its rows are loaded, and foreign keys once
                every table is loaded (only those whose referenced table is copied too).
                What is left out is reported by name. --no-indexes, --no-foreign-keys leave
                them out; --dry-run shows every statement in the order it runs.

                Examples:
                  ferry copy sqlite:samples/chinook.sqlite sqlite:/tmp/chinook.db
                  ferry copy sqlite:samples/chinook.sqlite sqlite:/tmp/chinook.db --mode replace --tables Artist,Album
                  ferry copy sqlite:app.db sqlite:backup.db --exclude audit_log --dry-run
                  ferry copy sqlite:app.db sqlite:backup.db --json --quiet
                  ferry copy postgres://dba@db/shop sqlite:shop.db --mode upsert
                  ferry copy postgres://dba@db/shop mysql://app@replica/shop --mode mirror --max-delete 1%
                  ferry copy sqlite:app.db sqlite:recent.db --tables orders --where "created_at >= '2026-01-01'"
                  ferry copy sqlite:legacy.db postgres://dba@db/shop --mode append --on-error reject=refused.db
                  ferry copy postgres://dba@db/shop sqlite:eu.db --where "customer=country = 'DE'" --where "orders=total > 100"
                  ferry copy postgres://dba@db/shop sqlite:shop.db --schema public --jobs 4
                  ferry copy postgres://dba@db/shop mysql://app@dw/shop --tables orders --resume
                  ferry copy postgres://dba@db/shop sqlite:shop.db --mode upsert --incremental updated_at
                  ferry copy mysql://app@db/shop postgres://dba@pg/shop --zero-dates null
                  ferry copy http://127.0.0.1:8080/ sqlite:laptop.db --token-file token.txt
                  ferry copy postgres://dba@db/pagila sqlite:p.db \\
                    --cast 'type text[] to json' --cast 'column film.fulltext to skip'
                  ferry copy mysql://app@db/shop postgres://dba@pg/shop \\
                    --cast 'type tinyint to boolean using tinyint-to-boolean'

                Cast rules (--cast, repeatable; or one per line of --casts FILE).
                The first rule that matches a column decides it:
                  type NATIVE [when GUARD [and GUARD]] to TARGET [using TRANSFORM,…]
                  column TABLE.COLUMN to TARGET [using TRANSFORM,…]
                NATIVE: the source type as `ferry describe` prints it.
                GUARD: unsigned, signed, serial, not serial, nullable, not null,
                  width|length|precision|scale [= != < <= > >=] N
                TARGET: a logical type (boolean, int16, int32, int64, decimal(p,s),
                  float32, float64, text, text(n), char(n), binary, date, time(p),
                  timestamp(p) [with time zone], uuid, json), a native type of
                  the target (varchar(20), jsonb, mediumtext), or skip.
                Types with no logical type (arrays, ranges, geometry, …) cast to
                text or json travel in the source engine's own text or JSON form;
                other types are converted value by value (SQL CAST rules).
                TRANSFORM:
                \(CastTransform.allCases.map { "  \($0.rawValue): \($0.summary)" }.joined(separator: "\n"))
                --dry-run shows which rule (or which type map) decided each column.
                """)

        @Argument(help: "The database to read from (URL; with --plan, the plan's source when left out).")
        var source: String?

        @Argument(help: "The database to write to (URL; a SQLite file is created when missing; with --plan, the plan's target when left out).")
        var target: String?

        @OptionGroup var what: CopyChoices

        @Option(name: .long, help: "Tables copied at the same time (targets that take one writer at a time use 1).")
        var jobs: Int = 2

        @OptionGroup var driverSettings: DriverSettings

        @OptionGroup var passwordFiles: PasswordFiles

        @OptionGroup var units: UnitOptions

        @Option(name: .long, help: ArgumentHelp(
            "With --mode mirror: fail a table (changing nothing) whose mirror would delete more than N rows, or P percent of its rows.",
            valueName: "N|P%"))
        var maxDelete: String?

        @Flag(name: .long, help: "With --mode mirror: let an empty source table empty its target table.")
        var allowEmptySource = false

        @Flag(name: .long, help: ArgumentHelp(
            "Load each keyed table in key-ordered chunks that commit into its staging table; run again with --resume to continue an unfinished load.",
            discussion: "The target table appears (create, replace) or changes (append, upsert: the staging table is merged in one transaction) only when its load is complete. After a crash, a kill or a cut connection the same command with --resume re-reads at most one chunk."))
        var resume = false

        @Option(name: .long, help: "With --resume: rows per committed chunk (the most a resumed run reads again).")
        var chunkRows: Int = 100_000

        @Option(name: .long, help: ArgumentHelp(
            "What a row the target refuses does: fail (its table fails, nothing of it committed) or reject=FILE (set aside in the SQLite file FILE, the rest loaded; exit 3).",
            discussion: "A refused row is one the target will not store: a NOT NULL, CHECK, unique or foreign key it enforces, a value out of its range. FILE gets a table of the target table's name and columns holding the refused rows as they were copied, and _ferry_rejects with each row's reason. Fix the rows there, then load them: ferry copy sqlite:FILE TARGET --tables T --mode append. Refused rows are found by rolling a batch back to a savepoint and splitting it, so the rest loads at batch speed. Targets: SQLite, PostgreSQL, MySQL/MariaDB, a ferry serve (it sets the rows aside on its side, also those its merge refuses) and plugins that declare rejects; modes create, replace, append, upsert.",
            valueName: "fail|reject=FILE"))
        var onError: String = "fail"

        @Option(name: .long, help: "With --on-error reject: refused rows per table past which the table fails instead (the cause is then not in the rows).")
        var maxRejects: Int = 1_000

        @Flag(name: .long, help: "Print the plan (tables, keys, columns, skipped columns, DDL) and touch nothing.")
        var dryRun = false

        @Flag(name: .long, help: "After the copy, compare every copied table value by value (ferry verify).")
        var verify = false

        @Flag(name: .shortAndLong, help: "No progress on stderr.")
        var quiet = false

        @OptionGroup var output: OutputOptions

        func validate() throws {
            guard jobs >= 1 && jobs <= 64 else { throw ValidationError("--jobs must be between 1 and 64, not \(jobs)") }
            if verify && !what.where.isEmpty {
                throw ValidationError("--verify compares whole tables: run the copy with --where and without --verify")
            }
            if rejectPath != nil {
                guard maxRejects >= 1 else { throw ValidationError("--max-rejects must be at least 1, not \(maxRejects)") }
                if what.mode == .mirror { throw ValidationError("--on-error reject is for create, replace, append and upsert copies, not --mode mirror") }
                if resume { throw ValidationError("--on-error reject and --resume cannot be combined: load the rows, set aside, without --resume") }
                if units.plan != nil { throw ValidationError("--on-error reject is for a copy without --plan") }
            } else if onError != "fail" {
                throw ValidationError("--on-error takes fail or reject=FILE (a SQLite file for the refused rows), not '\(onError)'")
            }
            if units.plan == nil && (source == nil || target == nil) {
                throw ValidationError("copy needs a SOURCE and a TARGET (or --plan FILE, made by `ferry plan`)")
            }
        }

        /// The reject file of `--on-error reject=FILE`.
        var rejectPath: String? {
            guard onError.hasPrefix("reject=") else { return nil }
            let path = String(onError.dropFirst("reject=".count))
            return path.isEmpty ? nil : path
        }

        /// Opens the reject file (a SQLite file, created when missing) for a copy into `target`.
        func openRejects(_ path: String, target: any Connection, registry: DriverRegistry) throws -> (any Connection)? {
            guard target.supportsSavepoints || target.setsRefusedRowsAside else {
                throw FerryError.invalidOption(
                    "--on-error reject: \(target.endpoint.redacted) cannot set refused rows aside (a plugin or service that does not declare rejects); load it without --on-error reject, or into a database first")
            }
            if !target.supportsSavepoints && maxRejects > RejectFile.maxSentBack {
                throw FerryError.invalidOption(
                    "--max-rejects \(maxRejects): a service or plugin sends at most \(RejectFile.maxSentBack) refused rows back; give at most that, or load into a database first")
            }
            let endpoint = try Endpoint(parsing: "sqlite:" + path)
            let file = try registry.connect(endpoint, role: .target)
            if let mine = try? file.databaseIdentity(), let theirs = try? target.databaseIdentity(), mine == theirs {
                file.close()
                throw FerryError.invalidOption("--on-error reject=\(path) names the target itself: name another file for the refused rows")
            }
            return file
        }

        func run() throws {
            if units.plan != nil { return try runPlan() }
            guard let source, let target else { throw ValidationError("copy needs a SOURCE and a TARGET") }
            var options = try what.copyOptions()
            let mode = what.mode
            options.jobs = jobs
            options.sourceRetries = driverSettings.retries
            if let maxDelete {
                guard let limit = DeleteLimit(maxDelete) else {
                    throw ValidationError("--max-delete takes a number of rows or a percentage, as in 1000 or 0.5%; got '\(maxDelete)'")
                }
                options.maxDelete = limit
            }
            options.allowEmptySource = allowEmptySource
            options.keepSourceSnapshot = verify
            if mode != .mirror && (maxDelete != nil || allowEmptySource) {
                throw ValidationError("--max-delete and --allow-empty-source are for --mode mirror")
            }
            guard chunkRows >= 1 else { throw ValidationError("--chunk-rows must be at least 1, not \(chunkRows)") }
            if resume && mode == .mirror {
                throw ValidationError("--resume is for create, replace, append and upsert copies: a rerun of --mode mirror moves only what differs")
            }
            options.resume = resume
            options.chunkRows = chunkRows

            // SIGINT and SIGTERM from here on stop the copy in order (rolled back, then ended by the signal).
            let stop = SignalStop(doing: "the copy")
            defer { stop.finish() }
            let registry = Ferry.registry
            let (sourceEndpoint, targetEndpoint) = try driverSettings.endpoints(source: source, target: target, registry: registry, passwords: passwordFiles)
            let session = try CopySession(source: sourceEndpoint, target: targetEndpoint, registry: registry)
            defer { session.close() }
            var rejectConnection: (any Connection)?
            if let path = rejectPath, !dryRun {
                rejectConnection = try openRejects(path, target: session.target, registry: registry)
                options.rejects = rejectConnection.map { RejectFile(connection: $0, path: path, limit: maxRejects) }
            }
            defer { rejectConnection?.close() }
            let plan = try session.plan(options)
            if dryRun {
                if output.json { try Console.json(plan) } else { Console.out(render(plan)) }
                return
            }
            if plan.tables.isEmpty {
                Console.error("ferry: nothing to copy: no tables matched in \(session.source.endpoint)")
            }
            let progress = ProgressReporter(quiet: quiet || output.json && isatty(2) == 0)
            let summary = session.run(plan, options: options, progress: progress, cancellation: stop.cancellation)
            // Every table committed before a signal could stop it (and no foreign key was left
            // to add after them, which a stop skips): the copy stands.
            let foreignKeysLeft = plan.tables.contains { !($0.objects?.foreignKeys.isEmpty ?? true) }
            stop.finish(workDone: summary.ok && !foreignKeysLeft)
            if output.json {
                struct Out: Encodable {
                    var ok: Bool
                    var rows: Int64
                    var summary: CopySummary
                }
                try Console.json(Out(ok: summary.ok, rows: summary.totalRows, summary: summary))
            } else if !quiet {
                let rate = summary.seconds > 0 ? Double(summary.totalRows) / summary.seconds : 0
                let indexes = summary.tables.reduce(0) { $0 + $1.indexes }
                let foreignKeys = summary.tables.reduce(0) { $0 + $1.foreignKeys }
                var objects = indexes + foreignKeys > 0 ? ", \(indexes) indexes, \(foreignKeys) foreign keys" : ""
                if summary.mode.isKeyed {
                    let c = summary.tables.filter { $0.status == .ok }.compactMap(\.counts).reduce(MergeCounts(), +)
                    objects += summary.mode == .mirror
                        ? " (\(c.inserted) inserted, \(c.updated) updated, \(c.deleted) deleted, \(c.unchanged) unchanged)"
                        : " (\(c.inserted) inserted, \(c.updated) updated, \(c.unchanged) unchanged)"
                    for t in summary.tables {
                        guard let m = t.mirror else { continue }
                        if m.levels == 0 {
                            // Compared row by row as the source was read (CopyEngine.mirrorByStreaming).
                            let again = m.sourceRowsRead - m.sourceRows
                            Console.error(
                                "\(t.source): compared each row's hash (PostgreSQL's row hash) key by key as the source was read; read \(m.sourceRows) source rows"
                                    + (again > 0 ? " (\(again) of them again by key)" : "") + " and \(m.targetKeysRead) target keys")
                            continue
                        }
                        Console.error(
                            "\(t.source): compared \(m.levels) level\(m.levels == 1 ? "" : "s") of range digests (\(m.digests) buckets\(m.rowHash == .lookup3 ? ", PostgreSQL's row hash" : "")); read \(m.sourceRowsRead) of "
                                + "\(m.sourceRows) source rows and \(m.targetKeysRead) of \(m.targetRows) target keys")
                    }
                }
                for t in summary.tables where t.status == .ok {
                    if let w = t.watermark {
                        Console.error("\(t.source): read \(t.rowsRead ?? t.rows) rows since the last run's watermark; watermark now \(w)")
                    } else if let read = t.rowsRead, read != t.rows {
                        Console.error("\(t.source): resumed: read \(read) rows, \(t.rows - read) were loaded by an earlier run")
                    }
                }
                if summary.totalRejected > 0 { objects += ", \(summary.totalRejected) refused rows set aside" }
                Console.error(
                    "copied \(summary.tables.filter { $0.status == .ok }.count) of \(summary.tables.count) tables, "
                        + "\(summary.totalRows) rows\(objects) in \(String(format: "%.2f", summary.seconds))s "
                        + "(\(String(format: "%.0f", rate)) rows/s) from \(summary.source) to \(summary.target)")
            }
            let failures = summary.tables.filter { $0.status != .ok }
            if let path = rejectPath, !output.json {
                for t in summary.tables where t.status == .ok {
                    guard let n = t.rejected, let into = t.rejectedInto else { continue }
                    Console.error(
                        "\(t.source): \(n) row\(n == 1 ? "" : "s") refused by the target, set aside in \(path) (table \(into), reasons in \(RejectFile.reasons.name)); "
                            + "fix them, then: ferry copy sqlite:\(path) \(session.target.endpoint.redacted) --tables \(into) --mode append")
                }
            }
            if verify && summary.totalRejected > 0 {
                Console.error("note: --verify left out: the tables differ by the \(summary.totalRejected) rows set aside")
            }
            if verify && failures.isEmpty && !plan.tables.isEmpty && summary.totalRejected == 0 {
                // The source side reads the copy's own snapshot (kept open by keepSourceSnapshot).
                let report = try session.verify(plan, options: options)
                if !output.json { try Verify.print(report, json: false) }
                try Verify.exit(for: report)
            }
            if !failures.isEmpty {
                try Self.fail(failures, of: summary.tables.count, quiet: quiet || output.json)
            }
            if summary.totalRejected > 0 { throw ExitStatus.differences.exitCode }
        }

        /// Ends a copy whose tables failed: one line for the one table of a copy (quiet: its
        /// message is the error), else each table's line (quiet; the progress said them
        /// otherwise) and the count.
        static func fail(_ failures: [CopySummary.Table], of total: Int, quiet: Bool) throws {
            if total == 1, let only = failures.first, quiet { throw FerryError.tableFailed(only.error ?? "\(only.source) failed") }
            if quiet { for f in failures { Console.error("ferry: error: \(f.error ?? "failed")") } }
            throw FerryError.someTablesFailed(count: failures.count, total: total)
        }

        func render(_ plan: CopyPlan) -> String {
            var lines = ["plan: copy \(plan.source) -> \(plan.target), mode \(plan.mode.rawValue), \(plan.tables.count) tables"]
            for w in plan.warnings { lines.append("warning: \(w)") }
            for t in plan.tables {
                var head = "\n\(t.source) -> \(t.target)"
                if let n = t.sourceSchema.rowEstimate { head += " (\(n) rows)" }
                if t.targetExists {
                    switch plan.mode {
                    case .replace: head += " [replaces the existing table]"
                    case .upsert: head += " [upserts into the existing table by its key]"
                    case .mirror: head += " [mirrors into the existing table by its key: upserts, and deletes rows the source lacks]"
                    default: head += " [appends to the existing table]"
                    }
                }
                lines.append(head)
                lines.append("  key: " + (t.key?.description ?? "none"))
                if let f = t.filter { lines.append("  rows where: " + f) }
                for d in t.decisions {
                    let serial = t.targetSchema.column(named: d.column)?.serial.map { " [\($0.rawValue)]" } ?? ""
                    let using = d.transforms.isEmpty ? "" : " using " + d.transforms.map(\.rawValue).joined(separator: ",")
                    let via = d.targetType == d.logicalType.description ? "" : " -> \(d.targetType)"
                    let nullable = d.madeNullable.map { " [nullable: \($0)]" } ?? ""
                    lines.append("  column \(d.column): \(d.nativeType.isEmpty ? "(none)" : d.nativeType) -> \(d.logicalType)\(via)\(using)\(serial)\(nullable)  (\(d.decidedBy))")
                }
                for s in t.skipped { lines.append("  skip \(s.column): \(s.reason)") }
                for o in t.skippedObjects { lines.append("  skip \(o.kind) \(o.name): \(o.reason)") }
                for w in t.sourceSchema.readWarnings { lines.append("  warning: \(w)") }
                lines += Self.statements(t, mode: plan.mode)
            }
            lines += Self.foreignKeyStatements(plan)
            if !plan.otherObjects.isEmpty {
                lines.append("\nnot copied (Ferry copies tables):")
                for line in OtherObject.summary(plan.otherObjects) { lines.append("  " + line) }
            }
            return lines.joined(separator: "\n")
        }

        /// Exactly the statements a table's load runs, in order, indented.
        static func statements(_ t: TablePlan, mode: WriteMode) -> [String] {
            var lines: [String] = []
            func show(_ sql: String) { lines.append(sql.split(separator: "\n").map { "  " + $0 }.joined(separator: "\n")) }
            for sql in t.creates?.statements ?? [] { show(sql) }
            let indexes = t.objects?.indexStatements ?? []
            if !t.indexesAfterSwap { for sql in indexes { show(sql) } }
            if let staging = t.staging {
                lines.append(mode == .replace
                    ? "  (rows load into \(staging), which then replaces \(t.target) in the same transaction)"
                    : "  (rows load into \(staging), which is renamed \(t.target) once every row is in)")
            }
            if t.indexesAfterSwap { for sql in indexes { show(sql) } }
            return lines
        }

        /// The foreign keys added once every table is loaded.
        static func foreignKeyStatements(_ plan: CopyPlan) -> [String] {
            let foreignKeys = plan.foreignKeyStatements
            guard !foreignKeys.isEmpty else { return [] }
            return ["\nonce every table is loaded:"] + foreignKeys.map { sql in sql.split(separator: "\n").map { "  " + $0 }.joined(separator: "\n") }
        }
    }
}
