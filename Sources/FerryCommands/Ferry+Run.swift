import ArgumentParser
import FerryCore
import Foundation

extension Ferry {
    /// `ferry run FILE.yaml`: a replication file's copies, then its replicate job.
    struct Run: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run the copies (and the replicate job) a replication file describes.",
            discussion: """
                A replication file keeps a job in a file rather than in shell history: the source,
                the target, defaults and each table's options, and a replicate: job. Every key is
                an option of `ferry copy` (or `ferry replicate`) and is checked as the command
                line checks it. `${NAME}` takes an environment variable — percent-encoded where it
                lands inside a URL — so secrets stay out of the file; they are never printed.

                  source: postgres://app:${APP_PW}@db.example.com/shop
                  target: sqlite:shop.db
                  defaults:
                    mode: upsert
                  tables:
                    - name: orders
                      key: [order_id]
                      incremental: updated_at
                    - name: customers
                      where: "country = 'DE'"

                Tables that share their run-wide options (mode, casts, resume, …) run in one copy;
                the copies run in the order of their first table, then the replicate job. A URL in
                the file counts as given on the command line (a driver plugin it names may run).
                See docs/replication-files.md for every key.

                Examples:
                  ferry run nightly.yaml
                  ferry run nightly.yaml --dry-run
                  APP_PW=… ferry run shop.yaml --json --quiet
                """)

        @Argument(help: "The replication file (YAML).")
        var file: String

        @Flag(name: .long, help: "Print what each step would do (the copies' plans, the replicate job's command) and touch nothing.")
        var dryRun = false

        @Flag(name: .shortAndLong, help: "No progress on stderr.")
        var quiet = false

        @OptionGroup var output: OutputOptions

        func run() throws {
            let job: ReplicationFile
            do {
                job = try ReplicationFile(path: file)
            } catch let m as ReplicationFile.Mistake {
                throw FerryError.invalidOption(m.description)
            }
            // The file is the user's own configuration: the plugins its URLs name may run.
            Ferry.enablePlugins(arguments: CommandLine.arguments + [job.source, job.target])
            var failed: [String] = []
            for (i, step) in job.steps.enumerated() {
                var arguments = step.arguments
                if quiet { arguments.append("--quiet") }
                if output.json { arguments.append("--json") }
                if !quiet && !output.json {
                    Console.error("ferry run \(file): step \(i + 1) of \(job.steps.count): \(step.command)"
                        + (step.tables.isEmpty ? "" : " " + step.tables.joined(separator: ", ")))
                }
                do {
                    if step.command == "copy" {
                        let copy = try Ferry.Copy.parse(arguments + (dryRun ? ["--dry-run"] : []))
                        try copy.run()
                    } else if dryRun {
                        let shown = try Endpoint(parsing: job.source).redacted + " " + (try Endpoint(parsing: job.target).redacted)
                        Console.out("replicate \(shown) " + arguments.dropFirst(2).joined(separator: " "))
                    } else {
                        let replicate = try Ferry.Replicate.parse(arguments)
                        try replicate.run()
                    }
                } catch let e as FerryError {
                    if case .someTablesFailed = e { failed.append("step \(i + 1)") } else {
                        Console.error("ferry: error: step \(i + 1) (\(step.command)): \(e)")
                        failed.append("step \(i + 1)")
                    }
                }
            }
            if !failed.isEmpty {
                throw FerryError.notReady("\(failed.count) of \(job.steps.count) steps of \(file) failed (\(failed.joined(separator: ", "))): see the messages above")
            }
        }
    }
}
