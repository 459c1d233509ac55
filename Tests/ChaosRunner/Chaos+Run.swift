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
    func runOnce(_ index: Int) throws -> Bool {
        let t = targets[index % targets.count]
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
        if [.sourceCut, .targetCut, .sourceStall, .targetStall].contains(fault) {
            let relay = onSource ? s.sourceRelays[dataset] : t.targetRelay
            let direction: FaultRelay.Direction = rng.next(2) == 0 ? .toServer : .fromServer
            let volumeKey = "\(key) \(onSource ? "source" : "target") \(direction.rawValue)"
            let volume = volumes[volumeKey] ?? Int64(options.rows * 120)
            relay?.arm(direction, at: Int64(Double(rng.next(10_000)) / 10_000 * Double(volume) * 1.1),
                       stall: fault == .sourceStall || fault == .targetStall)
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
        let args = ["copy", sourceURL, targetURL, "--mode", mode, "--tables", "items", "-q"]
            + (fault == .sourceStall || fault == .targetStall ? ["--timeout", "6"] : [])
        let launched = try launch(args, confinement: confinement)
        // The fault, from its own thread at `delay` seconds, while the copy runs.
        let injected = Locked(false)
        let faultError = Locked<String?>(nil)
        let server = fault == .sourceServer ? s.server : fault == .targetServer ? t.server : nil
        let servers = self.servers
        let injector = Thread {
            Thread.sleep(forTimeInterval: delay)
            guard launched.process.isRunning else { return }
            do {
                switch fault {
                case .sigint, .sigterm, .sigkill:
                    if let sig = fault.signal, launched.process.isRunning {
                        kill(launched.process.processIdentifier, sig)
                        injected.withLock { $0 = true }
                    }
                case .sourceServer, .targetServer:
                    if let server {
                        injected.withLock { $0 = true }
                        try servers.crash(server)
                    }
                case .serveKilled:
                    if let service = killedService {
                        injected.withLock { $0 = true }
                        try service.crash()
                    }
                case .pluginKilled:
                    for pid in Self.children(of: launched.process.processIdentifier, named: "ferry-driver-sq") {
                        kill(pid, SIGKILL)
                        injected.withLock { $0 = true }
                    }
                case .sourceCut, .targetCut, .sourceStall, .targetStall, .fileLimit, .diskFull, .readOnly:
                    break
                }
            } catch {
                faultError.withLock { $0 = "\(error)" }
            }
        }
        injector.start()
        let ended = wait(launched, deadline: max(300, estimate * 20))
        // The fault's thread is done before the checks read the servers.
        while injector.isExecuting || !injector.isFinished { usleep(10_000) }
        var didInject = injected.withLock { $0 }
        if let armed {
            didInject = armed.fired
            armed.disarm()
        }
        if [.fileLimit, .diskFull, .readOnly].contains(fault) { didInject = ended.status != 0 }
        if ended.status >= 90 && ended.status <= 92 && !ended.signaled && fault == .diskFull {
            throw ChaosFailure("the tmpfs for a full file system could not be set up (exit \(ended.status)): \(ended.err.prefix(300))")
        }

        var problems: [String] = []
        if let e = faultError.withLock({ $0 }) { problems.append("the fault itself failed: \(e)") }
        let endedText: String
        if ended.hung {
            endedText = "HUNG"
            problems.append("ferry did not end within \(Int(max(300, estimate * 20))) s")
        } else if ended.signaled {
            // SIGINT and SIGTERM: ferry rolls back, then ends by the signal (a shell sees 130, 143).
            let orderly = ended.err.contains(": stopping the copy")
            endedText = "signal \(ended.status)" + (orderly ? " (stopped itself)" : "")
            // (A signal before the copy began, while ferry starts, ends it by the default action.)
            if fault.signal != ended.status { problems.append("ferry died of signal \(ended.status)") }
        } else {
            endedText = "exit \(ended.status)"
            if ended.status != 0 {
                let wanted: Int32? = fault.signal.map { 128 + $0 }
                if let wanted, fault != .sigkill, ended.status != wanted {
                    problems.append("exit \(ended.status) after \(fault.rawValue), not \(wanted)")
                } else if fault.signal == nil && ended.status >= 128 {
                    problems.append("exit \(ended.status) (128 or more) for a fault not sent to ferry")
                }
                let errors = ended.err.split(separator: "\n").filter { $0.hasPrefix("ferry: error") }
                if errors.count != 1 { problems.append("\(errors.count) error lines, not one: \(ended.err.prefix(600))") }
            }
        }
        if ended.err.contains("Fatal error") || ended.err.contains("Stack dump") || ended.err.contains("Segmentation") {
            problems.append("a crash report: \(ended.err.prefix(600))")
        }
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
        let (after, state) = try observe(t, first: succeeded ? [expected, before] : [before, expected])
        var outcome: String
        switch state {
        case .some(let seen) where seen == expected && (before != expected || succeeded):
            outcome = succeeded ? "finished" : "copy committed, then \(endedText)"
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
        t.state = state ?? nil
        if state == nil {
            // Damaged: start the next run on this target from no table.
            try? direct.dropItems()
            t.state = nil
        }
        let outcomeCell = "\(endedText), \(outcome)"
        records.append(RunRecord(
            index: index, source: s.label, target: t.label, mode: mode, dataset: dataset, before: before, after: state ?? nil,
            fault: fault, injected: didInject, delay: delay, ended: endedText, outcome: outcomeCell, problems: problems))
        if options.verbose || !problems.isEmpty {
            say("run \(index): \(path), \(mode) \(dataset.rawValue) onto \(before.map(\.rawValue) ?? "no table"), \(fault.rawValue) at \(String(format: "%.2f", delay)) s\(didInject ? "" : " (missed)"): \(outcomeCell)")
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
        let bookkeeping: Set<String> = ["_ferry_loads", "_ferry_leases", "_ferry_watermarks", "_ferry_units", "_ferry_staging_owners"]
        if succeeded, let direct = t.direct {
            // The service's janitor drops a killed client's staging table after its idle limit (4 s here).
            var extra: [String] = []
            for attempt in 0..<(t.kind == .served ? 40 : 1) {
                extra = ((try? direct.ferryTables()) ?? []).filter { !bookkeeping.contains($0) }
                if extra.isEmpty { break }
                if attempt < 39 && t.kind == .served { usleep(250_000) }
            }
            if !extra.isEmpty { problems.append("left in the target after a successful copy: \(extra.joined(separator: ", "))") }
            if let open = try? direct.run("SELECT count(*) FROM _ferry_loads;").trimmed, !open.isEmpty, open != "0" {
                problems.append("\(open) open loads in _ferry_loads after a successful copy")
            }
        }
        // A plugin outlives the ferry that started it only briefly (it sees its stdin end).
        var plugins: [Int32] = []
        // (The plugin kit lets an answer under way end for up to 5 s.)
        for _ in 0..<80 {
            plugins = Self.processes(named: "ferry-driver-sq")
            if plugins.isEmpty { break }
            usleep(100_000)
        }
        if !plugins.isEmpty { problems.append("plugin processes left running: \(plugins)") }
        if succeeded {
            let files = (try? FileManager.default.contentsOfDirectory(atPath: path("tmp"))) ?? []
            if !files.isEmpty { problems.append("temporary files left: \(files.prefix(5).joined(separator: ", "))") }
        }
        return problems
    }

    /// Processes whose command name starts with `prefix` (`/proc/PID/comm`, 15 characters).
    static func processes(named prefix: String, parent: Int32? = nil) -> [Int32] {
        guard let pids = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
        return pids.compactMap { name -> Int32? in
            guard let pid = Int32(name),
                  let comm = try? String(contentsOfFile: "/proc/\(name)/comm", encoding: .utf8), comm.hasPrefix(prefix)
            else { return nil }
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
