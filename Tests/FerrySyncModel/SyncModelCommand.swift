import FerryDriverTestKit
import Foundation

/// `ferry-sync-model`: runs the sync model's scenarios against one origin and prints what they
/// did; exit 0 when every scenario held, 1 (naming the seed) when one did not, 2 on bad usage.
public enum SyncModelCommand {
    static let usage = """
        usage: ferry-sync-model --origin sqlite|postgres|mysql [--scenarios N] [--seed S] [--kill-every K] [--ferry PATH] [--jobs J]

        Runs N randomized sync scenarios (default 10000) against a fresh origin: a SQLite file in
        a temporary folder, or the PostgreSQL / MariaDB server in FERRY_TEST_POSTGRES_URL /
        FERRY_TEST_MYSQL_URL (scripts/test-services starts them). Scenario i uses seed S+i; a
        failure prints the seed that replays it with --scenarios 1. With --kill-every K, one
        scenario in K runs a third of its pushes and pulls as a `ferry` subprocess (--ferry,
        default .build/debug/ferry) killed with SIGKILL at a random moment. With a SQLite origin,
        --jobs J (default: the number of cores) runs J worker processes, each with its own origin
        file and its own share of the seeds. Files go to /dev/shm where it exists (TMPDIR
        otherwise): the model checks what survives a killed process, not a power cut.

        Examples:
          ferry-sync-model --origin sqlite --scenarios 10000 --kill-every 10
          ferry-sync-model --origin postgres --scenarios 1 --seed 1000020
        """

    public static func main(_ arguments: [String]) -> Int32 {
        var origin: String?, scenarios = 10_000, seed: UInt64?, killEvery: Int?, ferry: URL?
        var jobs = ProcessInfo.processInfo.activeProcessorCount, worker = false
        var rest = arguments[...]
        func value(_ name: String) -> String? {
            guard let v = rest.popFirst() else {
                FileHandle.standardError.write(Data("ferry-sync-model: error: \(name) needs a value\n".utf8))
                return nil
            }
            return v
        }
        while let a = rest.popFirst() {
            switch a {
            case "-h", "--help": print(usage); return 0
            case "--origin": guard let v = value(a) else { return 2 }; origin = v
            case "--scenarios":
                guard let v = value(a), let n = Int(v), n > 0 else { return fail("--scenarios takes a positive number") }
                scenarios = n
            case "--seed":
                guard let v = value(a), let n = UInt64(v) else { return fail("--seed takes a number") }
                seed = n
            case "--kill-every":
                guard let v = value(a), let n = Int(v), n > 0 else { return fail("--kill-every takes a positive number") }
                killEvery = n
            case "--ferry": guard let v = value(a) else { return 2 }; ferry = URL(fileURLWithPath: v)
            case "--jobs":
                guard let v = value(a), let n = Int(v), n > 0 else { return fail("--jobs takes a positive number") }
                jobs = n
            case "--worker": worker = true
            default: return fail("unknown argument \(a) (see --help)")
            }
        }
        let index: Int
        switch origin {
        case "sqlite": index = 0
        case "postgres": index = 1
        case "mysql": index = 2
        default: return fail("--origin takes sqlite, postgres or mysql (see --help)")
        }
        let first = seed ?? UInt64(index * 1_000_003 + 17)
        if killEvery != nil, !worker, !FileManager.default.isExecutableFile(atPath: (ferry ?? ModelSetup.defaultFerry).path) {
            return fail("the kill steps need the ferry binary at \((ferry ?? ModelSetup.defaultFerry).path): build it with `swift build --product ferry`")
        }
        // Servers hold one set of tables: their scenarios run one after the other.
        if index == 0, jobs > 1, scenarios > 1, !worker {
            return parallel(arguments: arguments, first: first, scenarios: scenarios, jobs: min(jobs, scenarios))
        }
        do {
            let shm = "/dev/shm"
            if setenv("TMPDIR", FileManager.default.isWritableFile(atPath: shm) ? shm : NSTemporaryDirectory(), 1) != 0 {
                return fail("could not set TMPDIR")
            }
            let folder = try TemporaryFolder()
            let o = try SyncOrigin.one(index, folder: folder)
            let setup = ModelSetup(origin: o, folder: folder, killEvery: killEvery, ferry: ferry)
            let replay = "ferry-sync-model --origin \(o.name) --scenarios 1 --seed {seed}" + (killEvery.map { " --kill-every \($0)" } ?? "")
            let stats = try setup.run(count: scenarios, first: first, replay: replay)
            if worker { print(stats.fields) } else { print("sync model \(o.name) (seeds \(first)…\(first &+ UInt64(scenarios - 1))): \(stats)") }
            return 0
        } catch {
            FileHandle.standardError.write(Data("ferry-sync-model: error: \(error)\n".utf8))
            return 1
        }
    }

    /// `jobs` copies of this program, each with its own share of the seeds (and its own origin
    /// file); their counts summed. The first failure's message is the worker's, with its seed.
    static func parallel(arguments: [String], first: UInt64, scenarios: Int, jobs: Int) -> Int32 {
        let me = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL.path
        var base: [String] = []
        var rest = arguments[...]
        while let a = rest.popFirst() {
            if ["--scenarios", "--seed", "--jobs"].contains(a) { _ = rest.popFirst() } else { base.append(a) }
        }
        let started = Date()
        var workers: [(Subprocess, String)] = []
        var start = first
        for j in 0..<jobs {
            let count = scenarios / jobs + (j < scenarios % jobs ? 1 : 0)
            do {
                let w = try Subprocess(me, base + ["--worker", "--scenarios", String(count), "--seed", String(start)],
                                       captureErrors: false, captureOutput: true, inheritErrors: true)
                workers.append((w, "seeds \(start)…\(start &+ UInt64(count - 1))"))
            } catch {
                return fail("could not start a worker: \(error)")
            }
            start &+= UInt64(count)
        }
        var total = ModelStats(), failed = false
        for (w, seeds) in workers {
            let (status, _, output) = w.wait()
            if status > 128 {
                FileHandle.standardError.write(Data("ferry-sync-model: error: the worker for \(seeds) died of signal \(status - 128) (replay them with --jobs 1)\n".utf8))
            }
            if status != 0 { failed = true; continue }
            guard let line = output.split(separator: "\n").last, let stats = ModelStats(fields: String(line)) else {
                FileHandle.standardError.write(Data("ferry-sync-model: error: a worker printed no counts: \(output)\n".utf8))
                failed = true
                continue
            }
            total.add(stats)
        }
        total.seconds = Date().timeIntervalSince(started)
        if failed { return 1 }
        print("sync model sqlite (seeds \(first)…\(first &+ UInt64(scenarios - 1)), \(jobs) workers): \(total)")
        return 0
    }

    static func fail(_ message: String) -> Int32 {
        FileHandle.standardError.write(Data("ferry-sync-model: error: \(message)\n".utf8))
        return 2
    }
}
