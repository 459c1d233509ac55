// ferry-chaos: the failure-injection suite (issue 32). Copies in every mode between every
// engine (SQLite, PostgreSQL, MariaDB, `ferry serve`, a driver plugin), each broken at a random
// moment in one of the ways of `Fault`, and each outcome checked: how ferry ended, what the
// target holds (as before, or the copy's result; never anything else), and that nothing is left
// behind. Run it through scripts/chaos, which starts the servers it kills.
import FerryCore
import FerryDriverTestKit
import Foundation
#if canImport(Glibc)
import Glibc
#endif

struct ChaosOptions {
    var runs = 30
    var seed = UInt64.random(in: 1...1_000_000)
    var rows = 200_000
    var products = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    var root = TestDatabases.packageRoot()
    var verbose = false
    var keep = false
    var report: String?
    var minutes: Double?
    var families: [Family] = Family.allCases
    /// Full and read-only file systems need a private mount namespace (unshare -m, as root).
    var namespaces = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare")

    static let usage = """
        usage: ferry-chaos [--runs N] [--seed S] [--rows N] [--families F,…] [--products DIR] [--report FILE] [--minutes M] [--verbose] [--keep]
          --runs N        runs whose fault landed while ferry ran (default 30; at most 3N runs in all)
          --families F,…  what to break, taken in turn: copy (every mode, every engine pair), sync
                          (push, pull and sync of offline snapshots), replicate (ferry replicate);
                          default all three
          --seed S        replay a run exactly (printed at the start)
          --rows N        rows in the copied table (default 200000)
          --products DIR  the folder of ferry and ferry-driver-sqlitekit (default: this program's)
          --report FILE   also write the table of cases and outcomes (Markdown) to FILE
          --minutes M     start no run after M minutes (the report covers the runs made)
          --no-namespaces leave out the full and read-only file systems (they need root and unshare -m)
          --verbose       one line per run
          --keep          keep the suite's folder (files, logs) after the run
        Needs FERRY_TEST_POSTGRES_URL, FERRY_TEST_MYSQL_URL and FERRY_TEST_STATE (scripts/chaos sets them).
        """

    init(_ args: [String]) throws {
        var i = 0
        func value() throws -> String {
            i += 1
            guard i < args.count else { throw ChaosFailure("\(args[i - 1]) needs a value\n\(Self.usage)") }
            return args[i]
        }
        while i < args.count {
            switch args[i] {
            case "--runs":
                guard let n = Int(try value()), n >= 1 else { throw ChaosFailure("--runs takes a number of runs, at least 1") }
                runs = n
            case "--seed":
                guard let n = UInt64(try value()) else { throw ChaosFailure("--seed takes a whole number") }
                seed = n
            case "--rows":
                guard let n = Int(try value()), n >= 1000 else { throw ChaosFailure("--rows takes a number of rows, at least 1000") }
                rows = n
            case "--families":
                var chosen: [Family] = []
                for name in try value().split(separator: ",") {
                    guard let f = Family(rawValue: String(name)) else { throw ChaosFailure("--families takes copy, sync and replicate, comma-separated; not \(name)") }
                    chosen.append(f)
                }
                guard !chosen.isEmpty else { throw ChaosFailure("--families takes copy, sync and replicate, comma-separated") }
                families = chosen
            case "--products": products = URL(fileURLWithPath: try value())
            case "--report": report = try value()
            case "--minutes":
                guard let m = Double(try value()), m > 0 else { throw ChaosFailure("--minutes takes a positive number") }
                minutes = m
            case "--verbose", "-v": verbose = true
            case "--keep": keep = true
            case "--no-namespaces": namespaces = false
            case "-h", "--help":
                say(Self.usage)
                exit(0)
            default: throw ChaosFailure("unknown option \(args[i])\n\(Self.usage)")
            }
            i += 1
        }
    }
}

/// The tables of cases × outcomes, one per family, and the paths the runs took.
func report(_ records: [RunRecord], options: ChaosOptions, seconds: Double) -> String {
    var lines = [
        "ferry-chaos: \(records.count) runs (\(records.filter(\.injected).count) with the fault injected while ferry ran), seed \(options.seed), \(options.rows) rows, \(Int(seconds)) s",
    ]
    let titles: [Family: String] = [
        .copy: "Copies (every mode; the target after: as before, or the copy's result)",
        .sync: "Offline snapshots: push, pull, sync (each side after: as before, or as the command leaves it; then an unbroken sync)",
        .replicate: "ferry replicate --until-caught-up (the target after: the source as of a whole transaction; then an unbroken run)",
    ]
    for family in Family.allCases {
        let mine = records.filter { $0.family == family }
        guard !mine.isEmpty else { continue }
        let outcomes = Array(Set(mine.map(\.outcome))).sorted()
        lines += [
            "", "\(titles[family] ?? family.rawValue): \(mine.count) runs, \(mine.filter(\.injected).count) injected", "",
            "| fault | runs | injected | " + outcomes.joined(separator: " | ") + " |",
            "|---|---:|---:|" + String(repeating: "---:|", count: outcomes.count),
        ]
        for fault in Fault.allCases {
            let rs = mine.filter { $0.fault == fault }
            guard !rs.isEmpty else { continue }
            let cells = outcomes.map { o in String(rs.filter { $0.outcome == o }.count) }
            lines.append("| \(fault.rawValue) | \(rs.count) | \(rs.filter(\.injected).count) | " + cells.joined(separator: " | ") + " |")
        }
        let targets = Array(Set(mine.map(\.target))).sorted()
        let sources = Array(Set(mine.map(\.source))).sorted()
        lines += ["", "Injected runs by path (\(family == .sync ? "origin → command" : "source → target")):", "",
                  "| \(family == .sync ? "origin" : "source") \\ \(family == .sync ? "command" : "target") | " + targets.joined(separator: " | ") + " |",
                  "|---|" + String(repeating: "---:|", count: targets.count)]
        for s in sources {
            lines.append("| \(s) | " + targets.map { t in String(mine.filter { $0.source == s && $0.target == t && $0.injected }.count) }.joined(separator: " | ") + " |")
        }
        if family == .copy {
            let modes = Array(Set(mine.map(\.mode))).sorted()
            lines += ["", "Runs by mode: " + modes.map { m in "\(m) \(mine.filter { $0.mode == m }.count)" }.joined(separator: ", ")]
        }
    }
    let bad = records.filter { !$0.problems.isEmpty }
    lines += ["", bad.isEmpty ? "No damaged target, lost or doubled row, bad exit, hang or leftover." : "\(bad.count) runs with problems:"]
    for r in bad {
        lines.append("- run \(r.index) (\(r.family.rawValue)): \(r.source) -> \(r.target), \(r.what), \(r.fault.rawValue) at \(String(format: "%.2f", r.delay)) s: \(r.problems.joined(separator: "; "))")
    }
    return lines.joined(separator: "\n")
}

/// Whether a private mount namespace can mount a tmpfs here (the full and read-only faults).
func namespacesWork() -> Bool {
    let dir = NSTemporaryDirectory() + "ferry-chaos-probe-\(getpid())"
    guard (try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)) != nil else { return false }
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
    p.arguments = ["-m", "/bin/sh", "-c", "mount -t tmpfs -o size=64k tmpfs \"$0\" && mount --bind \"$0\" \"$0\" && mount -o remount,bind,ro \"$0\"", dir]
    p.standardOutput = FileHandle.nullDevice
    p.standardError = FileHandle.nullDevice
    guard (try? p.run()) != nil else { return false }
    p.waitUntilExit()
    return p.terminationReason == .exit && p.terminationStatus == 0
}

/// A line on stdout, unbuffered (the runner's output goes to pipes and logs).
func say(_ text: String) { FileHandle.standardOutput.write(Data((text + "\n").utf8)) }

signal(SIGPIPE, SIG_IGN)
do {
    var options = try ChaosOptions(Array(CommandLine.arguments.dropFirst()))
    let started = Date()
    if options.namespaces && !namespacesWork() {
        say("ferry-chaos: unshare -m cannot mount here (not root, or no CAP_SYS_ADMIN): the full and read-only file systems are left out")
        options.namespaces = false
    }
    let chaos = try Chaos(options: options)
    say("ferry-chaos: seed \(options.seed), \(options.runs) runs, \(options.rows) rows; folder \(chaos.folder)")
    var failed = true
    defer { chaos.tearDown(keepFiles: options.keep || failed) }
    try chaos.setUp()
    say("ferry-chaos: set up in \(Int(Date().timeIntervalSince(started))) s")
    // Until `runs` faults landed while ferry ran (a fault aimed past the copy's end misses).
    var injected = 0
    var i = 0
    while injected < options.runs && i < options.runs * 3 {
        if let m = options.minutes, Date().timeIntervalSince(started) > m * 60 {
            say("ferry-chaos: \(Int(m)) minutes are up after \(i) runs (\(injected) injected)")
            break
        }
        let family = options.families[i % options.families.count]
        let n = i / options.families.count
        let landed: Bool
        switch family {
        case .copy: landed = try chaos.runOnce(i, turn: n)
        case .sync: landed = try chaos.runSync(i)
        case .replicate: landed = try chaos.runReplicate(i)
        }
        if landed { injected += 1 }
        i += 1
        if !options.verbose && i % 25 == 0 {
            say("ferry-chaos: \(i) runs, \(injected) injected, \(chaos.records.filter { !$0.problems.isEmpty }.count) with problems")
        }
    }
    let text = report(chaos.records, options: options, seconds: Date().timeIntervalSince(started))
    say(text)
    if let file = options.report { try Data((text + "\n").utf8).write(to: URL(fileURLWithPath: file)) }
    failed = chaos.records.contains { !$0.problems.isEmpty }
    if failed {
        say("ferry-chaos: FAILED (replay with --seed \(options.seed) --runs \(options.runs) --rows \(options.rows)); files kept in \(chaos.folder)")
        chaos.tearDown(keepFiles: true)
        exit(1)
    }
} catch {
    FileHandle.standardError.write(Data("ferry-chaos: error: \(error)\n".utf8))
    exit(2)
}
