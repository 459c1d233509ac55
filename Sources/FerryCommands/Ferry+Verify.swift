import ArgumentParser
import FerryCore
import FerryKit
import Foundation

extension Ferry {
    /// `ferry verify SOURCE TARGET`: are the tables equal, value by value?
    struct Verify: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Compare tables in two databases value by value and name the keys that differ.",
            discussion: """
                Row counts and an order-independent digest per key bucket are compared in one pass
                over each side; buckets that differ are read again to name the differing keys and
                columns. Values are compared through the target's logical types (decimals by value);
                give the copy's cast rules (--cast, --casts) and source values are converted as the
                copy converted them before they are compared.
                Exit code 0 when every table is equal, 3 when any differs, 1 when a table could not be compared.

                Each side is read from one snapshot (PostgreSQL REPEATABLE READ, MySQL a consistent
                snapshot, SQLite one read transaction), so the tables of a live database are compared
                as of one moment — the moment verify starts, not the moment a copy read. To compare a
                live source with a copy of it, use `ferry copy --verify`, which compares against the
                snapshot the copy read.

                Examples:
                  ferry verify sqlite:samples/chinook.sqlite sqlite:/tmp/chinook.db
                  ferry verify mysql://app@db/shop sqlite:shop.db --zero-dates null
                  ferry verify postgres://dba@db/shop sqlite:shop.db --tables orders --json
                  ferry verify csv:samples/csv-music postgres://dba@db/music --jobs 2
                  ferry copy sqlite:app.db postgres://dba@db/app --verify
                  ferry verify mysql://app@db/shop postgres://dba@pg/shop --cast 'type tinyint to boolean using tinyint-to-boolean'
                """)

        @Argument(help: "The database copied from (URL).")
        var source: String

        @Argument(help: "The database copied to (URL).")
        var target: String

        @Option(name: .long, help: "Differences listed per table.")
        var max: Int = 20

        @Option(name: .long, help: "Tables compared at the same time, each job on its own connections inside the same snapshots (sides that cannot share one use 1).")
        var jobs: Int = 1

        @OptionGroup var tableOptions: TableOptions

        @OptionGroup var castOptions: CastOptions

        @OptionGroup var driverSettings: DriverSettings

        @OptionGroup var passwordFiles: PasswordFiles

        @OptionGroup var output: OutputOptions

        func validate() throws {
            guard jobs >= 1 && jobs <= 64 else { throw ValidationError("--jobs must be between 1 and 64, not \(jobs)") }
        }

        func run() throws {
            var options = Verifier.Options()
            options.tables = tableOptions.named
            options.exclude = tableOptions.excluded
            options.keys = tableOptions.keys
            options.maxReported = Swift.max(1, max)
            options.casts = try castOptions.rules()
            options.jobs = jobs
            let (s, t) = try driverSettings.endpoints(source: source, target: target, registry: Ferry.registry, passwords: passwordFiles)
            let report = try Verifier.compare(s, with: t, options: options, registry: Ferry.registry, say: { Console.error($0) })
            try Self.print(report, json: output.json)
            if report.tables.contains(where: { $0.status == .different }) && !output.json {
                Console.error(
                    "note: verify reads the source as it is now; if it changed since the copy, `ferry copy --verify` compares against the snapshot the copy read")
            }
            try Self.exit(for: report)
        }

        /// A table the check could not compare is a failure (1); tables that compared and differ
        /// are differences (3).
        static func exit(for report: Verifier.Report) throws {
            if report.tables.contains(where: { $0.status == .failed }) { throw ExitStatus.failed.exitCode }
            if !report.equal { throw ExitStatus.differences.exitCode }
        }

        static func print(_ report: Verifier.Report, json: Bool) throws {
            if json {
                struct Out: Encodable {
                    var equal: Bool
                    var report: Verifier.Report
                }
                try Console.json(Out(equal: report.equal, report: report))
                return
            }
            for t in report.tables {
                var line = "\(t.source): \(t.status)"
                if t.status != .failed { line += " (\(t.sourceRows) rows in the source, \(t.targetRows) in the target)" }
                if let e = t.error { line += ": \(e)" }
                Console.out(line)
                for d in t.differences {
                    Console.out("  \(d.kind) \(d.key)" + (d.columns.isEmpty ? "" : ": " + d.columns.joined(separator: ", ")))
                }
                if t.truncated { Console.out("  … more differences (raise --max to list them)") }
            }
            let bad = report.tables.filter { $0.status != .equal }.count
            Console.error(bad == 0 ? "all \(report.tables.count) tables are equal" : "\(bad) of \(report.tables.count) tables differ")
        }
    }
}

/// `a,b` and repeated options as table names.
func splitNames(_ list: [String]) -> [TableName] {
    list.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
        .filter { !$0.isEmpty }.map { TableName(parsing: $0) }
}

/// `TABLE=COL1,COL2`.
func parseKeyOption(_ text: String) -> (TableName, [String])? {
    guard let eq = text.lastIndex(of: "=") else { return nil }
    let table = String(text[..<eq]).trimmingCharacters(in: .whitespaces)
    let cols = text[text.index(after: eq)...].split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
    guard !table.isEmpty, !cols.isEmpty, !cols.contains(where: \.isEmpty) else { return nil }
    return (TableName(parsing: table), cols)
}
