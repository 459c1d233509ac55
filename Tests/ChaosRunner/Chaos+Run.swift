import FerryCore
import FerryDriverTestKit
import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension Chaos {
    /// The copies a target in `state` can take, each with the version it holds after:
    /// (mode, version read, version after).
    func moves(from state: Dataset?) -> [(String, Dataset, Dataset)] {
        guard let state else { return Dataset.sources.map { ("create", $0, $0) } }
        var m: [(String, Dataset, Dataset)] = []
        for ds in Dataset.sources {
            m.append(("replace", ds, ds))
            m.append(("mirror", ds, ds))
        }
        // Upserts: A holds every key; B changes a tenth of the first three quarters; D the rest.
        m.append(("upsert", .a, .a))
        m.append(("upsert", .b, state == .b ? .b : .c))
        m.append(("upsert", .d, state == .a || state == .c ? state : state == .d ? .d : .c))
        // Appends of the keys the target lacks.
        if state == .b { m.append(("append", .d, .c)) }
        if state == .d { m.append(("append", .b, .c)) }
        return m
    }

    func faults(_ s: Side, _ t: Side) -> [Fault] {
        var f: [Fault] = [.sigint, .sigterm, .sigkill]
        if s.server != nil { f.append(.sourceServer) }
        if t.server != nil { f.append(.targetServer) }
        if !s.sourceRelays.isEmpty { f += [.sourceCut, .sourceStall] }
        if t.targetRelay != nil { f += [.targetCut, .targetStall] }
        if s.kind == .served || t.kind == .served { f.append(.serveKilled) }
        if s.kind == .plugin || t.kind == .plugin { f.append(.pluginKilled) }
        if t.sqliteFile != nil { f += [.fileLimit] + (options.namespaces ? [.diskFull, .readOnly] : []) }
        return f
    }

    /// One injected run: a copy broken by `fault` at a random moment, then its outcome checked.
    @discardableResult
    func runOnce(_ index: Int, turn: Int) throws -> Bool {
        let t = targets[turn % targets.count]
        let s = sources[rng.next(sources.count)]
        guard let direct = t.direct else { throw ChaosFailure("target \(t.label) has no direct connection") }
        if t.state != nil && rng.next(100) < 12 {
            try direct.dropItems()
            t.state = nil
        }
        let choices = moves(from: t.state)
        let (mode, dataset, expected) = choices[rng.next(choices.count)]
        let possible = faults(s, t)
        let fault = possible[rng.next(possible.count)]
        guard let sourceURL = s.sources[dataset] else { throw ChaosFailure("source \(s.label) lacks \(dataset)") }
        let path = "\(s.label) -> \(t.label)"
        // Where to aim: how long this path took when nothing broke it (else the middle of all paths').
        let key = path
        let known = durations.values.sorted()
        let estimate = durations[key] ?? (known.isEmpty ? 0.5 + Double(options.rows) / 40_000 : known[known.count / 2])
        let delay = 0.02 + Double(rng.next(1000)) / 1000 * estimate * 1.1

        for r in relays { r.disarm() }
        var armed: FaultRelay?
        let onSource = fault == .sourceCut || fault == .sourceStall
        // Half the cuts of a PostgreSQL source take only the connection reading rows, with
        // --retries 2: the table is read again in the copy's snapshot (the "read again" outcome).
        let rereading = fault == .sourceCut && s.kind == .postgres && rng.next(2) == 0
        // A quarter of the copies that --resume can take load in committed chunks; one that
        // failed is run again with --resume, unbroken, and must finish (the target as before
        // until then: its staging table is swapped or merged in only when the load is complete).
        let resuming = ["create", "replace", "append", "upsert"].contains(mode) && rng.next(4) == 0
        let resumeArgs = ["--resume", "--chunk-rows", String(max(1000, options.rows / 8))]
        if [.sourceCut, .targetCut, .sourceStall, .targetStall].contains(fault) {
            let relay = onSource ? s.sourceRelays[dataset] : t.targetRelay
            let direction: FaultRelay.Direction = rng.next(2) == 0 ? .toServer : .fromServer
            let volumeKey = "\(key) \(onSource ? "source" : "target") \(direction.rawValue)"
            let volume = volumes[volumeKey] ?? Int64(options.rows * 120)
            relay?.arm(direction, at: Int64(Double(rng.next(10_000)) / 10_000 * Double(volume) * 1.1),
                       stall: fault == .sourceStall || fault == .targetStall, carrierOnly: rereading)
            armed = relay
        }
        // The file's confinement: a size limit, or a file system with room for part of the copy
        // (a SQLite file needs about its size again while a replace or create writes).
        var confinement = Confinement.none
        var targetURL = t.target
        if let file = t.sqliteFile, [.fileLimit, .diskFull, .readOnly].contains(fault) {
            let attributes = try? FileManager.default.attributesOfItem(atPath: file)
            let size = (attributes?[.size] as? NSNumber)?.intValue ?? 0
            let room = size / 1024 + 1 + rng.next(max(1, options.rows * 150 / 1024))
            switch fault {
            case .fileLimit: confinement = .fileLimit(kilobytes: room)
            case .diskFull:
                let mount = self.path("full")
                confinement = .fullDisk(file: file, mount: mount, kilobytes: room + 64)
                targetURL = t.target.replacingOccurrences(of: file, with: mount + "/" + (file as NSString).lastPathComponent)
            default: confinement = .readOnly(folder: (file as NSString).deletingLastPathComponent)
            }
        }

        let killedService = s.kind == .served && (t.kind != .served || rng.next(2) == 0) ? s.sourceServices[dataset] : t.targetService
        // A stalled connection fails by `--timeout` (the others run without one).
        let args = ["copy", sourceURL, targetURL, "--mode", mode, "--tables", "items", "-q"] + (rereading ? ["--retries", "2"] : [])
            + (resuming ? resumeArgs : [])
            + (fault == .sourceStall || fault == .targetStall ? ["--timeout", "6"] : [])
        // The fault, from its own thread at `delay` seconds, while the copy runs.
        let server = fault == .sourceServer ? s.server : fault == .targetServer ? t.server : nil
        let deadline = max(300, estimate * 20)
        let broken = try breakRun(args, confinement: confinement, fault: fault, delay: delay, server: server, service: killedService,
                                  armed: armed, deadline: deadline)
        let ended = broken.ended, didInject = broken.injected, endedText = broken.text
        var problems = broken.problems
        if !didInject && ended.status == 0, !ended.signaled {
            durations[key] = ended.seconds
            for (relay, side) in [(s.sourceRelays[dataset], "source"), (t.targetRelay, "target")] {
                guard let relay else { continue }
                for d in FaultRelay.Direction.allCases { volumes["\(key) \(side) \(d.rawValue)"] = relay.counted(d) }
            }
        }

        // What the target holds now: as before, or the copy's result; anything else is damage.
        let before = t.state
        let succeeded = ended.status == 0 && !ended.signaled && !ended.hung
        var (after, state) = try observe(t, first: succeeded ? [expected, before] : [before, expected])
        var outcome: String
        switch state {
        case .some(let seen) where seen == expected && (before != expected || succeeded):
            outcome = succeeded ? (ended.err.contains("reading the table again") ? "finished, read again" : "finished") : "copy committed, then \(endedText)"
        case .some(let seen) where seen == before:
            outcome = succeeded ? "DAMAGED: reported done, target unchanged" : "stopped, target as before"
        case .some:
            outcome = "DAMAGED"
            problems.append("the target holds \(after), neither \(before.map(\.rawValue) ?? "no table") (before) nor \(expected.rawValue) (the copy)")
        case .none:
            outcome = "DAMAGED"
            problems.append("the target holds \(after)")
        }
        if succeeded, case .some(let seen) = state, seen != expected {
            problems.append("ferry reported success and the target holds \(after), not \(expected.rawValue)")
        }
        if let check = try? direct.integrity(), check != "ok" { problems.append("PRAGMA integrity_check: \(check.prefix(300))") }
        problems += leftovers(t, after: succeeded)
        if resuming && !succeeded, state != nil {
            let again = ["copy", sourceURL, t.target, "--mode", mode, "--tables", "items", "-q"] + resumeArgs
            let (resumed, tries) = try recover(again)
            if resumed.status != 0 {
                problems.append("the copy run again with --resume failed \(tries) times: \(resumed.err.prefix(400))")
            } else {
                (after, state) = try observe(t, first: [expected])
                if state != .some(expected) { problems.append("after the copy ran again with --resume the target holds \(after), not \(expected.rawValue)") }
                problems += leftovers(t, after: true)
                outcome += ", then resumed"
            }
        }
        t.state = state ?? nil
        if state == nil {
            // Damaged: start the next run on this target from no table.
            try? direct.dropItems()
            t.state = nil
        }
        let outcomeCell = "\(endedText), \(outcome)"
        let what = "\(mode)\(resuming ? " --resume" : "") \(dataset.rawValue) onto \(before.map(\.rawValue) ?? "no table")"
        records.append(RunRecord(
            index: index, family: .copy, source: s.label, target: t.label, mode: mode, what: what,
            fault: fault, injected: didInject, delay: delay, ended: endedText, outcome: outcomeCell, problems: problems))
        if options.verbose || !problems.isEmpty {
            say("run \(index): \(path), \(what), \(fault.rawValue) at \(String(format: "%.2f", delay)) s\(didInject ? "" : " (missed)"): \(outcomeCell)")
            for p in problems { say("  PROBLEM: \(p)") }
        }
        return didInject
    }

    /// The version `t` holds: absent (nil), or equal to one of the versions (tried in the order
    /// given, then the rest). The outer optional is nil for a table equal to none of them.
    func observe(_ t: Side, first: [Dataset?]) throws -> (String, Dataset??) {
        guard let direct = t.direct else { return ("?", nil) }
        guard try direct.hasItems() else { return ("no table", .some(nil)) }
        var order = first.compactMap { $0 }
        for ds in Dataset.allCases where !order.contains(ds) { order.append(ds) }
        for ds in order {
            guard let ref = references[ds] else { continue }
            let r = try ferry(["verify", ref, t.verifyURL, "--tables", "items"])
            if r.status == 0 { return (ds.rawValue, .some(ds)) }
            if r.status != 3 { return ("a table ferry verify could not compare: \(r.err.prefix(300))", nil) }
        }
        return ("a table equal to none of A, B, C, D", nil)
    }

    /// After a copy that succeeded: no staging table, no open load, no plugin process, no
    /// temporary file left by it or by the broken runs before it.
    func leftovers(_ t: Side, after succeeded: Bool) -> [String] {
        var problems: [String] = []
        if succeeded, let direct = t.direct { problems += stagingLeft(direct, served: t.kind == .served, after: "a successful copy") }
        problems += pluginsLeft()
        if succeeded { problems += temporaryFilesLeft() }
        return problems
    }

    /// Ferry's tables in `direct` other than its bookkeeping (staging tables of loads), and
    /// loads still open, after a command that ended well.
    func stagingLeft(_ direct: Direct, served: Bool, after what: String) -> [String] {
        var problems: [String] = []
        let bookkeeping: Set<String> = ["_ferry_loads", "_ferry_leases", "_ferry_watermarks", "_ferry_units", "_ferry_staging_owners", "_ferry_replication"]
        // The service's janitor drops a killed client's staging table after its idle limit (4 s here).
        var extra: [String] = []
        for attempt in 0..<(served ? 40 : 1) {
            extra = ((try? direct.ferryTables()) ?? []).filter { !bookkeeping.contains($0) }
            if extra.isEmpty { break }
            if attempt < 39 && served { usleep(250_000) }
        }
        if !extra.isEmpty { problems.append("left in the target after \(what): \(extra.joined(separator: ", "))") }
        if let open = try? direct.run("SELECT count(*) FROM _ferry_loads;").trimmed, !open.isEmpty, open != "0" {
            problems.append("\(open) open loads in _ferry_loads after \(what)")
        }
        return problems
    }

    /// Processes whose command name starts with `prefix` (`/proc/PID/comm`, 15 characters).
    /// Processes whose name starts with `prefix`: children of `parent` where given, and run
    /// from the folder `under` where given (another suite's plugins, from another build, are
    /// not this one's leftovers).
    static func processes(named prefix: String, parent: Int32? = nil, under folder: URL? = nil) -> [Int32] {
        guard let pids = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
        let root = folder.map { $0.resolvingSymlinksInPath().path + "/" }
        return pids.compactMap { name -> Int32? in
            guard let pid = Int32(name),
                  let comm = try? String(contentsOfFile: "/proc/\(name)/comm", encoding: .utf8), comm.hasPrefix(prefix)
            else { return nil }
            if let root {
                guard let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(name)/exe"), exe.hasPrefix(root) else { return nil }
            }
            if let parent {
                // /proc/PID/stat: "pid (comm) state ppid …"; comm may hold spaces, so read after the last ')'.
                guard let stat = try? String(contentsOfFile: "/proc/\(name)/stat", encoding: .utf8),
                      let close = stat.lastIndex(of: ")") else { return nil }
                let fields = stat[stat.index(after: close)...].split(separator: " ")
                guard fields.count > 1, Int32(fields[1]) == parent else { return nil }
            }
            return pid
        }
    }

    static func children(of pid: Int32, named prefix: String) -> [Int32] { processes(named: prefix, parent: pid) }
}
