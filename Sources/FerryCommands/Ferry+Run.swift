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
                Tables with `shards: N` are cut into N work units (`ferry plan`), which this
                command prepares, runs one after another and finishes; --write-plans DIR writes
                those plans for a scheduler instead (Kubernetes, Slurm, GNU parallel) and says
                what to run. See docs/replication-files.md for every key.

                Examples:
                  ferry run nightly.yaml
                  ferry run nightly.yaml --dry-run
                  APP_PW=… ferry run shop.yaml --json --quiet
                  ferry run big.yaml --write-plans plans/
                """)

        @Argument(help: "The replication file (YAML).")
        var file: String

        @Flag(name: .long, help: "Print what each step would do (the copies' plans, the replicate job's command) and touch nothing.")
        var dryRun = false

        @Flag(name: .shortAndLong, help: "No progress on stderr.")
        var quiet = false

        @Option(name: .long, help: ArgumentHelp(
            "Write the plan of each step with shards: into DIR (as `ferry plan --output`) and print the commands that run its units; run nothing.",
            valueName: "dir"))
        var writePlans: String?

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
                if step.command == "shards" || writePlans != nil {
                    guard step.command == "shards" else {
                        if !quiet { Console.error("ferry run \(file): step \(i + 1) (\(step.command)) is not run with --write-plans") }
                        continue
                    }
                    do {
                        try runUnits(step, number: i + 1, of: job.steps.count, job: job)
                    } catch let e as FerryError {
                        if case .someTablesFailed = e {} else { Console.error("ferry: error: step \(i + 1) (units): \(e)") }
                        failed.append("step \(i + 1)")
                    }
                    continue
                }
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

        /// A step with shards: its plan cut (`ferry plan`), then — unless the plans are only
        /// written — the target prepared, every unit run in turn and the plan finished, each an
        /// ordinary `ferry copy --plan` step. A unit that fails leaves the plan in place and says
        /// how to run what is missing.
        func runUnits(_ step: ReplicationFile.Step, number: Int, of total: Int, job: ReplicationFile) throws {
            guard let at = step.arguments.firstIndex(of: "--shards"), at + 1 < step.arguments.count, let n = Int(step.arguments[at + 1]) else { return }
            let stem = ((file as NSString).lastPathComponent as NSString).deletingPathExtension
            if dryRun {
                if !quiet { Console.error("ferry run \(file): step \(number) of \(total): \(n) units of " + step.tables.joined(separator: ", ")) }
                try Ferry.Plan.parse(step.arguments + (output.json ? ["--json"] : [])).run()
                return
            }
            let directory: String
            if let writePlans {
                directory = writePlans
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            } else {
                directory = NSTemporaryDirectory()
            }
            let planFile = (directory as NSString).appendingPathComponent("\(stem)-step\(number)\(writePlans == nil ? "-\(getpid())" : "").plan.json")
            if !quiet && !output.json {
                Console.error("ferry run \(file): step \(number) of \(total): \(n) units of " + step.tables.joined(separator: ", "))
            }
            try Ferry.Plan.parse(step.arguments + ["--output", planFile] + (writePlans == nil || quiet ? ["--quiet"] : [])).run()
            if writePlans != nil {
                Console.out("step \(number): ferry copy --plan \(planFile) --prepare; ferry copy --plan \(planFile) --shard I/\(n) for I in 0…\(n - 1); ferry copy --plan \(planFile) --finish")
                return
            }
            // The units read and write with the file's URLs (the plan's are masked).
            let base = Array(step.arguments.prefix(2)) + (step.arguments.firstIndex(of: "--token-file").map { Array(step.arguments[$0...($0 + 1)]) } ?? [])
                + ["--plan", planFile] + (quiet ? ["--quiet"] : []) + (output.json ? ["--json"] : [])
            try Ferry.Copy.parse(base + ["--prepare"]).run()
            var missing: [Int] = []
            for i in 0..<n {
                do {
                    try Ferry.Copy.parse(base + ["--shard", "\(i)/\(n)"]).run()
                } catch let e as FerryError {
                    if case .someTablesFailed = e {} else { Console.error("ferry: error: unit \(i)/\(n): \(e)") }
                    missing.append(i)
                }
            }
            guard missing.isEmpty else {
                Console.error("ferry: error: step \(number): units \(missing.map(String.init).joined(separator: ", ")) of \(n) failed; the plan is kept in \(planFile): "
                    + "run each with `ferry copy --plan \(planFile) --shard I/\(n)` (a unit runs again idempotently), then `ferry copy --plan \(planFile) --finish`")
                throw FerryError.someTablesFailed(count: missing.count, total: n)
            }
            try Ferry.Copy.parse(base + ["--finish"]).run()
            try? FileManager.default.removeItem(atPath: planFile)
        }
    }
}
