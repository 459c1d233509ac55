import FerryCore
import FerryDriverTestKit
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A source and a target `ferry replicate` follows between, and what the source holds.
final class ReplicaPair {
    struct End {
        var label: String
        var kind: Side.Kind
        /// The database itself, read (and, at the source, changed) by the runner.
        var direct: Direct
        /// What ferry is given: through a relay, or a relay in front of the service, when there
        /// is one. Every run of the pair uses the same URLs (the replica is named after them).
        var url: String
        var relay: FaultRelay?
        var service: Served?
        var server: String?
        /// A SQLite file the target writes (for the file faults).
        var file: String?
    }
    let source: End
    let target: End
    var label: String { "\(source.label) -> \(target.label)" }
    var model = Notes()
    var next = 0, round = 0
    /// The initial copy finished once (the target has `notes` since).
    var started = false
    var broken = false

    init(source: End, target: End) {
        self.source = source
        self.target = target
    }
}

extension Chaos {
    /// The pairs: PostgreSQL → SQLite, MariaDB → PostgreSQL, SQLite → MariaDB, `ferry serve`
    /// (PostgreSQL) → SQLite, MariaDB → `ferry serve` (PostgreSQL), PostgreSQL → the sqlitekit
    /// plugin; servers and services behind relays.
    func setUpReplicate(postgres pg: (String) throws -> String, mysql my: (String) throws -> String, tokens: String) throws {
        let (initial, fill) = Notes.initial(syncRows)
        let seed = path("replicate-seed.db")
        try Direct.sqlite(seed).run(Notes.schema + "\n" + fill)
        func server(_ kind: Side.Kind, _ url: String) throws -> ReplicaPair.End {
            let (r, through) = try relayed(url)
            return .init(label: kind.rawValue, kind: kind, direct: kind == .postgres ? .postgres(url) : .mysql(url), url: through,
                         relay: r, service: nil, server: kind == .postgres ? "pg" : "my", file: nil)
        }
        func served(_ url: String, _ name: String) throws -> ReplicaPair.End {
            let s = try Served(ferry: ferry, database: url, args: ["--token-file", tokens, "--staging-idle-limit", "4"], log: path("serve-\(name).log"))
            services.append(s)
            let r = try FaultRelay(upstreamPort: s.port)
            relays.append(r)
            return .init(label: "serve (postgres)", kind: .served, direct: .postgres(url), url: "http://:\(token)@127.0.0.1:\(r.port)/",
                         relay: r, service: s, server: "pg", file: nil)
        }
        func file(_ kind: Side.Kind, _ name: String) throws -> ReplicaPair.End {
            let folder = path("replicate-\(name)")
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            let f = folder + "/\(name).db"
            return .init(label: kind == .plugin ? "plugin (sqlitekit)" : "sqlite", kind: kind, direct: .sqlite(f),
                         url: (kind == .plugin ? "sqlitekit:" : "sqlite:") + f, relay: nil, service: nil, server: nil, file: f)
        }
        let made: [ReplicaPair] = [
            ReplicaPair(source: try server(.postgres, try pg("r1s")), target: try file(.sqlite, "r1t")),
            ReplicaPair(source: try server(.mysql, try my("r2s")), target: try server(.postgres, try pg("r2t"))),
            ReplicaPair(source: try file(.sqlite, "r3s"), target: try server(.mysql, try my("r3t"))),
            ReplicaPair(source: try served(try pg("r4s"), "replicate-source"), target: try file(.sqlite, "r4t")),
            ReplicaPair(source: try server(.mysql, try my("r5s")), target: try served(try pg("r5t"), "replicate-target")),
            ReplicaPair(source: try server(.postgres, try pg("r6s")), target: try file(.plugin, "r6t")),
        ]
        for p in made {
            try p.source.direct.run(Notes.schema)
            let fillURL: String
            switch p.source.direct {
            case .sqlite(let f): fillURL = "sqlite:" + f
            case .postgres(let u), .mysql(let u): fillURL = u
            }
            let r = try ferry(["copy", "sqlite:" + seed, fillURL, "--tables", "notes", "--mode", "append", "-q"])
            guard r.status == 0 else { throw ChaosFailure("filling the source of \(p.label): \(r.err)") }
            p.model = initial
            p.next = syncRows + 1
        }
        replicaPairs = made
    }

    func replicateFaults(_ p: ReplicaPair) -> [Fault] {
        var f: [Fault] = [.sigint, .sigterm, .sigkill]
        if p.source.server != nil { f.append(.sourceServer) }
        if p.target.server != nil { f.append(.targetServer) }
        if p.source.relay != nil { f += [.sourceCut, .sourceStall] }
        if p.target.relay != nil { f += [.targetCut, .targetStall] }
        if p.source.service != nil || p.target.service != nil { f.append(.serveKilled) }
        if p.target.kind == .plugin { f.append(.pluginKilled) }
        if p.target.file != nil { f += [.fileLimit] + (options.namespaces ? [.readOnly] : []) }
        return f
    }

    /// One replicate run: transactions at the source, then `ferry replicate --until-caught-up`
    /// broken by a fault; the target must hold the source as of some transaction (never half of
    /// one), and the next unbroken run must bring it to the source exactly.
    @discardableResult
    func runReplicate(_ index: Int) throws -> Bool {
        let live = replicaPairs.filter { !$0.broken }
        guard !live.isEmpty else { throw ChaosFailure("every replicate pair was damaged by an earlier run") }
        let p = live[rng.next(live.count)]
        let possible = replicateFaults(p)
        let fault = possible[rng.next(possible.count)]
        p.round += 1

        // The source's transactions, and the states the target may be seen in.
        let changes = p.model.plan(size: syncBurst, parity: nil, tag: "r\(p.round)", delta: p.round, next: &p.next, &rng)
        var states: [Notes] = [p.model]
        var sql: [String] = []
        var now = p.model
        for c in changes {
            sql += now.transactions([c])
            states.append(now)
        }
        try p.source.direct.run(sql.joined(separator: "\n"))
        let final = now
        if !p.started { states = [final] }

        let key = "replicate \(p.label)"
        let known = durations.values.sorted()
        let estimate = durations[key] ?? (known.isEmpty ? 2 + Double(syncBurst) / 10_000 : known[known.count / 2])
        let delay = 0.02 + Double(rng.next(1000)) / 1000 * estimate * 1.1

        for r in relays { r.disarm() }
        var armed: FaultRelay?
        if [.sourceCut, .targetCut, .sourceStall, .targetStall].contains(fault) {
            let onSource = fault == .sourceCut || fault == .sourceStall
            let direction: FaultRelay.Direction = rng.next(2) == 0 ? .toServer : .fromServer
            let volume = volumes["\(key) \(onSource ? "source" : "target") \(direction.rawValue)"] ?? Int64(syncBurst * 200)
            armed = onSource ? p.source.relay : p.target.relay
            armed?.arm(direction, at: Int64(Double(rng.next(10_000)) / 10_000 * Double(volume) * 1.1),
                       stall: fault == .sourceStall || fault == .targetStall)
        }
        var confinement = Confinement.none
        if let f = p.target.file, fault == .fileLimit || fault == .readOnly {
            let size = ((try? FileManager.default.attributesOfItem(atPath: f))?[.size] as? NSNumber)?.intValue ?? 0
            let room = size / 1024 + 1 + rng.next(max(1, syncBurst * 200 / 1024))
            confinement = fault == .fileLimit ? .fileLimit(kilobytes: room) : .readOnly(folder: (f as NSString).deletingLastPathComponent)
        }
        let stalls = fault == .sourceStall || fault == .targetStall
        let args = ["replicate", p.source.url, p.target.url, "--until-caught-up", "-q"] + (stalls ? ["--timeout", "6"] : [])
        let server = fault == .sourceServer ? p.source.server : fault == .targetServer ? p.target.server : nil
        let service = p.source.service != nil && (p.target.service == nil || rng.next(2) == 0) ? p.source.service : p.target.service
        let deadline = max(300, estimate * 20)
        let broken = try breakRun(args, confinement: confinement, fault: fault, delay: delay, server: server, service: service,
                                  armed: armed, deadline: deadline, stopsCleanly: true)
        let ended = broken.ended, didInject = broken.injected, endedText = broken.text
        var problems = broken.problems
        let caughtUp = ended.status == 0 && !ended.signaled && !ended.hung && !(fault.signal != nil && didInject)
        if !didInject && caughtUp {
            durations[key] = ended.seconds
            for (relay, side) in [(p.source.relay, "source"), (p.target.relay, "target")] {
                guard let relay else { continue }
                for d in FaultRelay.Direction.allCases { volumes["\(key) \(side) \(d.rawValue)"] = relay.counted(d) }
            }
        }

        // The target as of one of the source's transactions, never between two.
        let seen = try Notes.read(p.target.direct)
        var state: String
        if seen == nil && !p.started {
            state = "no table yet"
        } else if let i = states.firstIndex(where: { $0.difference(seen) == nil }) {
            state = i == states.count - 1 ? "caught up" : "behind, as of a whole transaction"
        } else {
            state = "DAMAGED"
            problems.append("the target is the source as of no transaction: \(final.difference(seen) ?? "")")
        }
        if caughtUp && state != "caught up" { problems.append("ferry replicate --until-caught-up exited 0 and the target is \(state)") }
        if let check = try? p.target.direct.integrity(), check != "ok" { problems.append("PRAGMA integrity_check of the target: \(check.prefix(300))") }

        // Then an unbroken run: every transaction, once.
        let (recovered, tries) = try recover(["replicate", p.source.url, p.target.url, "--until-caught-up", "-q"])
        if recovered.status != 0 {
            problems.append("the next ferry replicate failed \(tries) times: \(recovered.err.prefix(400))")
        } else {
            p.started = true
            if let d = final.difference(try Notes.read(p.target.direct)) { problems.append("after the next run the target differs from the source: \(d)") }
            problems += stagingLeft(p.target.direct, served: p.target.kind == .served, after: "the next ferry replicate")
        }
        problems += pluginsLeft()
        if recovered.status == 0 { problems += temporaryFilesLeft() }
        p.model = final
        if !problems.isEmpty { p.broken = true }

        let outcome = "\(endedText), \(state)"
        let what = "\(changes.count) source transactions (round \(p.round))"
        records.append(RunRecord(
            index: index, family: .replicate, source: p.source.label, target: p.target.label, mode: "replicate", what: what,
            fault: fault, injected: didInject, delay: delay, ended: endedText, outcome: outcome, problems: problems))
        if options.verbose || !problems.isEmpty {
            say("run \(index): replicate \(p.label), \(what), \(fault.rawValue) at \(String(format: "%.2f", delay)) s\(didInject ? "" : " (missed)"): \(outcome)")
            for q in problems { say("  PROBLEM: \(q)") }
        }
        return didInject
    }

    /// Drops every pair's replica (its PostgreSQL slot, its bookkeeping), before the databases go.
    func dropReplicas() {
        for p in replicaPairs {
            for _ in 0..<20 {
                guard let r = try? ferry(["replicate", p.source.url, p.target.url, "--drop"]), r.status != 0 else { break }
                Thread.sleep(forTimeInterval: 0.5)
            }
        }
    }
}
