import FerryCore
import FerryDriverTestKit
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An origin of an offline snapshot, and the snapshot file taken of it: the sync runs edit
/// both (the file on even ids, the origin on odd ones, so nothing conflicts) and break a push,
/// pull or sync between them.
final class SyncOrigin {
    let label: String
    let kind: Side.Kind
    /// The server a kill takes down (pg, my), if any.
    let server: String?
    /// The origin's database, read and changed by the runner itself.
    let direct: Direct
    /// Where the broken commands reach the origin: through a relay (or a relay in front of the
    /// service) when there is one.
    let faultURL: String
    let relay: FaultRelay?
    let service: Served?
    /// The origin's URL without the relay (the service's current port), for the unbroken commands.
    let plainURL: () -> String
    let snapshot: String
    /// What both sides hold after the last sync.
    var model = Notes()
    var nextLocal = 0, nextOrigin = 0, round = 0
    /// Set when a run damaged a side: no more runs here.
    var broken = false

    init(label: String, kind: Side.Kind, server: String?, direct: Direct, faultURL: String, relay: FaultRelay?, service: Served?,
         plainURL: @escaping () -> String, snapshot: String) {
        self.label = label
        self.kind = kind
        self.server = server
        self.direct = direct
        self.faultURL = faultURL
        self.relay = relay
        self.service = service
        self.plainURL = plainURL
        self.snapshot = snapshot
    }
}

extension Chaos {
    /// Rows in each origin's `notes` at the start, and changes per side per run.
    var syncRows: Int { max(1000, options.rows / 2) }
    var syncBurst: Int { max(300, options.rows / 10) }

    /// The origins (PostgreSQL and MariaDB through relays, a SQLite file, `ferry serve` in front
    /// of PostgreSQL through a relay, a SQLite file through the sqlitekit plugin), each with
    /// `notes` and a snapshot taken of it.
    func setUpSync(postgres pg: (String) throws -> String, mysql my: (String) throws -> String, tokens: String) throws {
        let (initial, fill) = Notes.initial(syncRows)
        let seed = path("sync-seed.db")
        try Direct.sqlite(seed).run(Notes.schema + "\n" + fill)
        var origins: [SyncOrigin] = []
        for (name, kind) in [("postgres", Side.Kind.postgres), ("mysql", .mysql), ("sqlite", .sqlite), ("serve (postgres)", .served), ("plugin (sqlitekit)", .plugin)] {
            let folder = path("sync-\(kind.rawValue)")
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            let snapshot = folder + "/snapshot.db"
            let origin: SyncOrigin
            switch kind {
            case .postgres, .mysql:
                let url = kind == .postgres ? try pg("so") : try my("so")
                let direct: Direct = kind == .postgres ? .postgres(url) : .mysql(url)
                try direct.run(Notes.schema)
                let (r, through) = try relayed(url)
                origin = SyncOrigin(label: name, kind: kind, server: kind == .postgres ? "pg" : "my", direct: direct, faultURL: through,
                                    relay: r, service: nil, plainURL: { url }, snapshot: snapshot)
            case .served:
                let url = try pg("sso")
                let direct = Direct.postgres(url)
                try direct.run(Notes.schema)
                let s = try Served(ferry: ferry, database: url, args: ["--token-file", tokens], log: path("serve-sync.log"))
                services.append(s)
                let r = try FaultRelay(upstreamPort: s.port)
                relays.append(r)
                let token = self.token
                origin = SyncOrigin(label: name, kind: kind, server: "pg", direct: direct, faultURL: "http://:\(token)@127.0.0.1:\(r.port)/",
                                    relay: r, service: s, plainURL: { "http://:\(token)@127.0.0.1:\(s.port)/" }, snapshot: snapshot)
            case .sqlite, .plugin:
                // The origin file in a folder of its own (the snapshot's folder may be mounted read-only).
                let originFolder = path("sync-origin-\(kind.rawValue)")
                try FileManager.default.createDirectory(atPath: originFolder, withIntermediateDirectories: true)
                let file = originFolder + "/origin.db"
                try FileManager.default.copyItem(atPath: seed, toPath: file)
                let url = (kind == .sqlite ? "sqlite:" : "sqlitekit:") + file
                origin = SyncOrigin(label: name, kind: kind, server: nil, direct: .sqlite(file), faultURL: url, relay: nil, service: nil,
                                    plainURL: { url }, snapshot: snapshot)
            }
            if kind == .postgres || kind == .mysql || kind == .served {
                let r = try ferry(["copy", "sqlite:" + seed, origin.kind == .served ? (try pg("sso")) : origin.plainURL(), "--tables", "notes", "--mode", "append", "-q"])
                guard r.status == 0 else { throw ChaosFailure("filling the \(name) origin: \(r.err)") }
            }
            let r = try ferry(["snapshot", origin.plainURL(), snapshot, "--tables", "notes"])
            guard r.status == 0 else { throw ChaosFailure("the snapshot of the \(name) origin: \(r.err)") }
            origin.model = initial
            origin.nextLocal = syncRows + 1
            origin.nextOrigin = syncRows + 1
            origins.append(origin)
        }
        syncOrigins = origins
    }

    func syncFaults(_ o: SyncOrigin) -> [Fault] {
        var f: [Fault] = [.sigint, .sigterm, .sigkill]
        if o.server != nil { f.append(.originServer) }
        if o.relay != nil { f += [.originCut, .originStall] }
        if o.service != nil { f.append(.serveKilled) }
        if o.kind == .plugin { f.append(.pluginKilled) }
        f += [.fileLimit] + (options.namespaces ? [.diskFull, .readOnly] : [])
        return f
    }

    /// One sync run: edits on both sides, then a push, pull or sync broken by a fault; its
    /// outcome checked (each side as before or as the command leaves it, never half of it), then
    /// an unbroken `ferry sync` that must bring both sides to every edit, exactly once.
    @discardableResult
    func runSync(_ index: Int) throws -> Bool {
        let live = syncOrigins.filter { !$0.broken }
        guard !live.isEmpty else { throw ChaosFailure("every sync origin was damaged by an earlier run") }
        let o = live[rng.next(live.count)]
        let command = ["push", "pull", "sync"][rng.next(3)]
        let possible = syncFaults(o)
        let fault = possible[rng.next(possible.count)]
        o.round += 1

        // Edits: the snapshot's on even ids, the origin's on odd ones.
        let localChanges = o.model.plan(size: syncBurst, parity: 0, tag: "l\(o.round)", delta: o.round, next: &o.nextLocal, &rng)
        let originChanges = o.model.plan(size: syncBurst, parity: 1, tag: "o\(o.round)", delta: o.round, next: &o.nextOrigin, &rng)
        var local = o.model, origin = o.model
        let localSQL = local.transactions(localChanges)
        let originSQL = origin.transactions(originChanges)
        var full = local
        _ = full.transactions(originChanges)
        try Direct.sqlite(o.snapshot).run(localSQL.joined(separator: "\n"))
        try o.direct.run(originSQL.joined(separator: "\n"))

        let key = "sync \(o.label) \(command)"
        let known = durations.values.sorted()
        let estimate = durations[key] ?? (known.isEmpty ? 1 + Double(syncBurst) / 10_000 : known[known.count / 2])
        let delay = 0.02 + Double(rng.next(1000)) / 1000 * estimate * 1.1

        for r in relays { r.disarm() }
        var armed: FaultRelay?
        if fault == .originCut || fault == .originStall, let relay = o.relay {
            let direction: FaultRelay.Direction = rng.next(2) == 0 ? .toServer : .fromServer
            let volume = volumes["\(key) \(direction.rawValue)"] ?? Int64(syncBurst * 200)
            relay.arm(direction, at: Int64(Double(rng.next(10_000)) / 10_000 * Double(volume) * 1.1), stall: fault == .originStall)
            armed = relay
        }
        var confinement = Confinement.none
        var file = o.snapshot
        if [.fileLimit, .diskFull, .readOnly].contains(fault) {
            let size = ((try? FileManager.default.attributesOfItem(atPath: file))?[.size] as? NSNumber)?.intValue ?? 0
            let room = size / 1024 + 1 + rng.next(max(1, syncBurst * 300 / 1024))
            switch fault {
            case .fileLimit: confinement = .fileLimit(kilobytes: room)
            case .diskFull:
                let mount = path("full")
                confinement = .fullDisk(file: file, mount: mount, kilobytes: room + 64)
                file = mount + "/" + (file as NSString).lastPathComponent
            default: confinement = .readOnly(folder: (file as NSString).deletingLastPathComponent)
            }
        }
        let args = [command, file, "--origin", o.faultURL, "--json"] + (fault == .originStall ? ["--timeout", "6"] : [])
        let deadline = max(300, estimate * 20)
        let broken = try breakRun(args, confinement: confinement, fault: fault, delay: delay, server: fault == .originServer ? o.server : nil,
                                  service: o.service, armed: armed, deadline: deadline)
        let ended = broken.ended, didInject = broken.injected, endedText = broken.text
        var problems = broken.problems
        let succeeded = ended.status == 0 && !ended.signaled && !ended.hung
        if !didInject && succeeded {
            durations[key] = ended.seconds
            if let relay = o.relay {
                for d in FaultRelay.Direction.allCases { volumes["\(key) \(d.rawValue)"] = relay.counted(d) }
            }
        }

        // Each side as before, or as the command leaves it; nothing in between.
        let originSeen = try Notes.read(o.direct), snapshotSeen = try Notes.read(.sqlite(o.snapshot))
        var originState = "?", snapshotState = "?"
        if origin.difference(originSeen) == nil {
            originState = "origin as before"
        } else if full.difference(originSeen) == nil {
            originState = "pushed"
        } else {
            problems.append("the origin holds neither its rows before the run nor the pushed ones: \(full.difference(originSeen) ?? "")")
        }
        if local.difference(snapshotSeen) == nil {
            snapshotState = "snapshot as before"
        } else if full.difference(snapshotSeen) == nil {
            snapshotState = "pulled"
        } else {
            problems.append("the snapshot holds neither its rows before the run nor the pulled ones: \(full.difference(snapshotSeen) ?? "")")
        }
        if command == "pull" && originState == "pushed" { problems.append("a pull changed the origin") }
        if succeeded && command != "pull" && originState != "pushed" { problems.append("ferry \(command) reported success and the origin lacks the pushed rows") }
        if succeeded && command != "push" && snapshotState != "pulled" { problems.append("ferry \(command) reported success and the snapshot lacks the pulled rows") }
        if let check = try? Direct.sqlite(o.snapshot).integrity(), check != "ok" { problems.append("PRAGMA integrity_check of the snapshot: \(check.prefix(300))") }

        // Then an unbroken sync: every edit on both sides, once.
        let (recovered, tries) = try recover(["sync", o.snapshot, "--origin", o.plainURL(), "--json"])
        if recovered.status != 0 {
            problems.append("the next ferry sync failed \(tries) times: \(recovered.err.prefix(400))")
        } else {
            if let d = full.difference(try Notes.read(o.direct)) { problems.append("after the next sync the origin differs: \(d)") }
            if let d = full.difference(try Notes.read(.sqlite(o.snapshot))) { problems.append("after the next sync the snapshot differs: \(d)") }
            let status = (try? ExternalTool.run([ferry.path, "status", o.snapshot, "--json"], input: "", environment: environment)) ?? "ferry status failed"
            if !status.contains("\"pending\" : 0") { problems.append("changes still pending after the next sync: \(status.prefix(300))") }
        }
        problems += pluginsLeft()
        if recovered.status == 0 { problems += temporaryFilesLeft() }
        o.model = full
        if !problems.isEmpty { o.broken = true }

        let outcome = "\(endedText), \(originState), \(snapshotState)"
        let what = "\(command) of \(localChanges.count) local and \(originChanges.count) origin transactions (round \(o.round))"
        records.append(RunRecord(
            index: index, family: .sync, source: o.label, target: "snapshot (\(command))", mode: command, what: what,
            fault: fault, injected: didInject, delay: delay, ended: endedText, outcome: outcome, problems: problems))
        if options.verbose || !problems.isEmpty {
            say("run \(index): sync with \(o.label), \(what), \(fault.rawValue) at \(String(format: "%.2f", delay)) s\(didInject ? "" : " (missed)"): \(outcome)")
            for p in problems { say("  PROBLEM: \(p)") }
        }
        return didInject
    }
}
