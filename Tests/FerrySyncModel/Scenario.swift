import FerryCore
import FerryDriverTestKit
import FerrySQLite
import FerrySync
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The randomized sync model (issue 15), shared by `SyncModelTests` and the `ferry-sync-model`
/// runner: random interleavings of local and origin inserts, updates and deletes, pushes and
/// pulls under random policies, each step checked against a reference model that shares no
/// code with FerrySync (dictionaries of rows by identity, and the rules of the issue written
/// out again). No lost edit, no resurrected delete, no duplicated insert, every conflict
/// reported under `fail` and resolved as its policy says, and the snapshot equal to the origin
/// after a clean sync.

/// Where and how scenarios run.
struct ModelSetup {
    let origin: SyncOrigin
    let folder: TemporaryFolder
    /// The URL pushes and pulls use (the origin's, or a service in front of it).
    let syncURL: String
    /// Kills in one scenario out of this many (nil: none): a third of its pushes and pulls run
    /// as a `ferry` subprocess killed with SIGKILL at a random moment.
    let killEvery: Int?
    /// The `ferry` binary killed.
    let ferry: URL
    /// Runs after a kill, before the model reads what the killed process did (a service
    /// finishes the killed client's request first).
    let afterKill: (() -> Void)?

    init(origin: SyncOrigin, folder: TemporaryFolder, syncURL: String? = nil, killEvery: Int? = nil, ferry: URL? = nil, afterKill: (() -> Void)? = nil) {
        self.origin = origin
        self.folder = folder
        self.syncURL = syncURL ?? origin.url
        self.killEvery = killEvery
        self.ferry = ferry ?? Self.defaultFerry
        self.afterKill = afterKill
    }

    /// The package's debug build of `ferry` (what `swift build` and scripts/test make).
    static var defaultFerry: URL { TestDatabases.packageRoot().appendingPathComponent(".build/debug/ferry") }

    /// Runs `count` scenarios from seed `first` on; a failure names its seed and how to replay it.
    func run(count: Int, first: UInt64, replay: String) throws -> ModelStats {
        var stats = ModelStats()
        let started = Date()
        if killEvery != nil, !FileManager.default.isExecutableFile(atPath: ferry.path) {
            throw ModelFailure(description: "the kill steps need the ferry binary at \(ferry.path): build it with `swift build --product ferry`")
        }
        for i in 0..<count {
            let seed = first &+ UInt64(i)
            do {
                var scenario = Scenario(self, seed: seed)
                try scenario.run(&stats)
            } catch {
                throw ModelFailure(description: "\(origin.name) scenario with seed \(seed) (replay: \(replay.replacingOccurrences(of: "{seed}", with: String(seed)))): \(error)")
            }
        }
        stats.seconds = Date().timeIntervalSince(started)
        stats.scenarios = count
        return stats
    }
}

struct ModelStats: CustomStringConvertible {
    var scenarios = 0, steps = 0, pushes = 0, pulls = 0, conflicts = 0, unresolved = 0, rekeyed = 0, kills = 0, killsApplied = 0
    var seconds = 0.0
    /// How long a push or pull subprocess takes when the kill comes too late (a running
    /// mean): kills are spread over that time, on a fast machine and a slow one.
    var subprocessSeconds = 0.25

    static let names = ["scenarios", "steps", "pushes", "pulls", "conflicts", "unresolved", "rekeyed", "kills", "killsApplied"]
    var counts: [Int] {
        get { [scenarios, steps, pushes, pulls, conflicts, unresolved, rekeyed, kills, killsApplied] }
        set { (scenarios, steps, pushes, pulls, conflicts, unresolved, rekeyed, kills, killsApplied) = (newValue[0], newValue[1], newValue[2], newValue[3], newValue[4], newValue[5], newValue[6], newValue[7], newValue[8]) }
    }

    /// `counts: scenarios=… steps=… …`, as a worker prints it for the runner that started it.
    var fields: String { "counts: " + zip(Self.names, counts).map { "\($0)=\($1)" }.joined(separator: " ") }

    init() {}

    init?(fields line: String) {
        guard line.hasPrefix("counts: ") else { return nil }
        var values: [String: Int] = [:]
        for pair in line.dropFirst("counts: ".count).split(separator: " ") {
            let kv = pair.split(separator: "=")
            guard kv.count == 2, let n = Int(kv[1]) else { return nil }
            values[String(kv[0])] = n
        }
        let list = Self.names.compactMap { values[$0] }
        guard list.count == Self.names.count else { return nil }
        counts = list
    }

    mutating func add(_ other: ModelStats) { counts = zip(counts, other.counts).map { $0 + $1 } }

    var description: String {
        "\(scenarios) scenarios, \(kills) killed pushes/pulls (\(killsApplied) had committed), \(steps) steps, \(pushes) pushes, \(pulls) pulls, "
            + "\(conflicts) conflicts (\(unresolved) left open), \(rekeyed) rows re-keyed, " + String(format: "%.1f s", seconds)
    }
}

/// A row as the model sees it: its values, and for a child its parent's identity.
struct ModelRow: Equatable, CustomStringConvertible {
    var v: String?
    var n: Int64?
    var parent: String?
    var description: String { "(v: \(v ?? "NULL"), n: \(n.map(String.init) ?? "NULL"), parent: \(parent ?? "–"))" }
}

struct ModelFailure: Error, CustomStringConvertible {
    var description: String
}

/// One scenario: tables s (serial key), c (composite natural key), p (serial parent), ch
/// (serial child of p), u (UUID key); rows identified by `tag` (by (a, b) in c, by id in u).
/// Local edits go through the `sqlite3` shell, another program than Ferry.
struct Scenario {
    let origin: SyncOrigin
    let folder: TemporaryFolder
    var rng: SplitMix64
    let seed: UInt64
    typealias Tables = [String: [String: ModelRow]]
    var local: Tables = [:], remote: Tables = [:], synced: Tables = [:]
    var counter = 0
    static let tables = SyncOrigin.tables
    let setup: ModelSetup
    /// A killed push left its commit to be settled by the next push or pull.
    var unsettled = false

    init(_ setup: ModelSetup, seed: UInt64) {
        self.setup = setup
        self.origin = setup.origin
        self.folder = setup.folder
        self.seed = seed
        self.rng = SplitMix64(seed: seed)
    }

    var syncURL: String { setup.syncURL }

    mutating func run(_ stats: inout ModelStats) throws {
        let path = folder.path("model-\(seed).db")
        defer { for s in ["", "-journal", "-wal"] { try? FileManager.default.removeItem(atPath: path + s) } }
        let sync = Sync(registry: origin.registry)
        let endpoint = try Endpoint(parsing: syncURL)
        // A fresh origin and its fresh snapshot are the same every time: the snapshot (and a
        // SQLite origin's file) is made once, then copied for each scenario.
        try Self.template(origin: origin, folder: folder, sync: sync, endpoint: endpoint, to: path)
        let file = try SyncFile.open(path)
        defer { file.close() }
        // Local edits through a handle of the test's own, as another program would.
        let app = try SQLiteConnection(endpoint: try Endpoint(parsing: "sqlite:" + path), role: .target)
        defer { app.close() }
        let originConnection = try origin.connect()
        defer { originConnection.close() }
        remote = try state(originConnection)
        local = remote
        synced = remote
        try check(app, originConnection, "after the snapshot")

        // Kills in one scenario out of `killEvery` (a killed step costs a process start).
        let killing = setup.killEvery.map { seed % UInt64($0) == 0 } ?? false
        let steps = 6 + rng.next(8)
        for step in 0..<steps {
            stats.steps += 1
            let roll = rng.next(100)
            let policy = [ConflictPolicy.fail, .fail, .local, .origin, .merge][rng.next(5)]
            if killing && !unsettled && roll >= 70 && rng.next(3) == 0 {
                try flushLocalEdits()
                try killed(push: roll < 85, policy: policy, path: path, app: app, origin: originConnection, step: step, &stats)
            } else if roll < 40 && !unsettled {
                try edit(local: true, app: app, origin: originConnection)
            } else if roll < 70 && !unsettled {
                try edit(local: false, app: app, origin: originConnection)
            } else if roll < 85 {
                try flushLocalEdits()
                stats.pushes += 1
                let expected = expectPush(policy)
                let report = try sync.push(file, origin: endpoint, policy: policy)
                stats.conflicts += report.conflicts.count
                stats.unresolved += report.unresolved
                stats.rekeyed += report.rekeyed.count
                guard report.unresolved == expected.unresolved, report.applied == (expected.unresolved == 0) else {
                    throw ModelFailure(description: "step \(step) push \(policy): \(report.unresolved) open conflicts, model \(expected.unresolved): \(report.conflicts.map(\.line))")
                }
                if report.applied { (local, remote, synced) = (expected.local, expected.remote, expected.synced) }
                unsettled = false
                try check(app, originConnection, "step \(step), push \(policy)")
            } else {
                try flushLocalEdits()
                stats.pulls += 1
                let expected = expectPull(policy)
                let report = try sync.pull(file, origin: endpoint, policy: policy)
                stats.conflicts += report.conflicts.count
                stats.unresolved += report.unresolved
                guard report.unresolved == expected.unresolved, report.applied == (expected.unresolved == 0) else {
                    throw ModelFailure(description: "step \(step) pull \(policy): \(report.unresolved) open conflicts, model \(expected.unresolved): \(report.conflicts.map(\.line))")
                }
                if report.applied { (local, remote, synced) = (expected.local, expected.remote, expected.synced) }
                unsettled = false
                try check(app, originConnection, "step \(step), pull \(policy)")
            }
        }
        try flushLocalEdits()
        // A clean sync: local wins what is open; then nothing is pending and both sides agree.
        let push = try sync.push(file, origin: endpoint, policy: .local)
        guard push.unresolved == 0 else { throw ModelFailure(description: "final push left \(push.unresolved) conflicts") }
        stats.rekeyed += push.rekeyed.count
        let pull = try sync.pull(file, origin: endpoint, policy: .fail)
        guard pull.unresolved == 0 else { throw ModelFailure(description: "final pull found conflicts: \(pull.conflicts.map(\.line))") }
        let l = try state(app), r = try state(originConnection)
        guard l == r else { throw ModelFailure(description: "after a clean sync the snapshot differs from the origin:\n\(Self.diff(l, r))") }
        guard try sync.status(file).pending == 0 else { throw ModelFailure(description: "changes still pending after a clean sync") }
    }

    /// Resets the origin to 4 rows per table and writes its fresh snapshot to `path`, from the
    /// copies the first scenario in `folder` made (a SQLite origin is restored from its copy).
    static func template(origin: SyncOrigin, folder: TemporaryFolder, sync: Sync, endpoint: Endpoint, to path: String) throws {
        let sqlite: String? = { if case .sqlite = origin.dialect { return String(origin.url.dropFirst("sqlite:".count)) } else { return nil } }()
        let savedOrigin = folder.path("template-origin.db"), savedSnapshot = folder.path("template-snapshot.db")
        let files = FileManager.default
        if !files.fileExists(atPath: savedSnapshot) {
            try origin.reset(rows: 4)
            _ = try sync.snapshot(origin: endpoint, to: savedSnapshot, options: SyncOrigin.options, progress: ProgressReporter(style: .quiet) { _ in })
            if let sqlite { try files.copyItem(atPath: sqlite, toPath: savedOrigin) }
        } else if let sqlite {
            for suffix in ["-journal", "-wal", "-shm"] { try? files.removeItem(atPath: sqlite + suffix) }
            try? files.removeItem(atPath: sqlite)
            try files.copyItem(atPath: savedOrigin, toPath: sqlite)
        } else {
            try origin.refill(rows: 4)
        }
        try files.copyItem(atPath: savedSnapshot, toPath: path)
    }

    // MARK: Kills

    /// `ferry push` or `ferry pull` as a subprocess, killed with SIGKILL at a random moment of
    /// the time such a run takes. What
    /// it did is read from the facts it leaves: the snapshot's last push/pull time (written in
    /// the same local transaction as the push's settling or the pull), the push id it recorded
    /// as in flight, and the origin's ledger of committed pushes. Committed or not, origin and
    /// snapshot must then be exactly one of the model's two states.
    mutating func killed(push: Bool, policy: ConflictPolicy, path: String, app: SQLiteConnection, origin: any Connection, step: Int,
                         _ stats: inout ModelStats) throws {
        let expected = push ? expectPush(policy) : expectPull(policy)
        let before = try Self.meta(app)
        let started = Date()
        let p = try Subprocess(setup.ferry.path, [push ? "push" : "pull", path, "--on-conflict", policy.rawValue, "--origin", syncURL], captureErrors: false)
        usleep(useconds_t(rng.next(Int(max(stats.subprocessSeconds * 1.2, 0.01) * 1_000_000))))
        kill(p.pid, SIGKILL)
        if Subprocess.exitedNormally(p.wait().status) {
            stats.subprocessSeconds = 0.8 * stats.subprocessSeconds + 0.2 * Date().timeIntervalSince(started)
        }
        setup.afterKill?()
        let after = try Self.meta(app)
        var applied = push ? after["last_push"] != before["last_push"] : after["last_pull"] != before["last_pull"]
        if push, !applied, let id = after["push_inflight"], try origin.tableExists(TableName("_ferry_sync_pushes")) {
            applied = try SyncTestRows.read(origin, "_ferry_sync_pushes").contains { $0["push_id"] == .text(id) }
        }
        stats.kills += 1
        let what = "step \(step), \(push ? "push" : "pull") \(policy) killed (\(applied ? "it had committed" : "it had not committed"))"
        if applied {
            stats.killsApplied += 1
            guard expected.unresolved == 0 else { throw ModelFailure(description: "\(what), though the model has \(expected.unresolved) open conflicts") }
            (local, remote, synced) = (expected.local, expected.remote, expected.synced)
        }
        // Committed at the origin, not yet settled here: the next push or pull settles it.
        unsettled = after["push_inflight"] != nil
        try check(app, origin, what, local: !unsettled)
    }

    /// The snapshot's bookkeeping facts (`_ferry_sync_meta`: name → value).
    static func meta(_ app: SQLiteConnection) throws -> [String: String] {
        var out: [String: String] = [:]
        for row in try app.query("SELECT name, value FROM _ferry_sync_meta") {
            if case .text(let n) = row[0], case .text(let v) = row[1] { out[n] = v }
        }
        return out
    }

    // MARK: Edits

    var path: String { folder.path("model-\(seed).db") }
    /// Local edits not yet made: the edits between two pushes or pulls go to one `sqlite3`
    /// run, a statement each (each its own transaction, as separate runs would be).
    var localEdits: [String] = []

    mutating func flushLocalEdits() throws {
        guard !localEdits.isEmpty else { return }
        try SQLiteShell.run(path, localEdits.joined(separator: ";\n"))
        localEdits = []
    }

    mutating func edit(local isLocal: Bool, app: SQLiteConnection, origin: any Connection) throws {
        let table = Self.tables[rng.next(Self.tables.count)]
        let rows = isLocal ? local[table] ?? [:] : remote[table] ?? [:]
        let prefix = isLocal ? "L" : "O"
        counter += 1
        let value = rng.next(4) == 0 ? nil : "\(prefix)\(counter)"
        let number: Int64? = rng.next(4) == 0 ? nil : Int64(rng.next(1000))
        let lit = { (s: String?) in s.map { "'\($0)'" } ?? "NULL" }
        let num = { (n: Int64?) in n.map(String.init) ?? "NULL" }
        var sql: String
        var change: (String, ModelRow?)
        let kind = rows.isEmpty ? 0 : rng.next(3)
        switch (table, kind) {
        case ("c", 0):
            let a = "k\(rng.next(3))", b = rng.next(8)
            let id = "\(a)/\(b)"
            if rows[id] != nil { return }
            sql = "INSERT INTO c (a, b, v, n) VALUES ('\(a)', \(b), \(lit(value)), \(num(number)))"
            change = (id, ModelRow(v: value, n: number))
        case ("u", 0):
            let id = SyncOrigin.uuid(rng.next(), rng.next())
            sql = "INSERT INTO u (id, v, n) VALUES ('\(id)', \(lit(value)), \(num(number)))"
            change = (id, ModelRow(v: value, n: number))
        case ("ch", 0):
            let parents = (isLocal ? local["p"] : remote["p"]) ?? [:]
            guard let parent = parents.keys.sorted().randomElement(using: &rng) else { return }
            let tag = "\(prefix)t\(counter)"
            sql = "INSERT INTO ch (tag, p_id, v, n) VALUES ('\(tag)', (SELECT id FROM p WHERE tag = '\(parent)'), \(lit(value)), \(num(number)))"
            change = (tag, ModelRow(v: value, n: number, parent: parent))
        case (_, 0):
            let tag = "\(prefix)t\(counter)"
            sql = "INSERT INTO \(table) (tag, v, n) VALUES ('\(tag)', \(lit(value)), \(num(number)))"
            change = (tag, ModelRow(v: value, n: number))
        case (_, 1), ("p", _):
            guard let id = rows.keys.sorted().randomElement(using: &rng), var row = rows[id] else { return }
            let column = rng.next(2) == 0 ? "v" : "n"
            if column == "v" { row.v = value } else { row.n = number }
            sql = "UPDATE \(table) SET \(column) = \(column == "v" ? lit(value) : num(number)) WHERE " + Self.match(table, id)
            change = (id, row)
        default:
            guard let id = rows.keys.sorted().randomElement(using: &rng) else { return }
            sql = "DELETE FROM \(table) WHERE " + Self.match(table, id)
            change = (id, nil)
        }
        if isLocal {
            localEdits.append(sql)
            local[table, default: [:]][change.0] = change.1
        } else {
            try Self.run(origin, sql)
            remote[table, default: [:]][change.0] = change.1
        }
    }

    static func match(_ table: String, _ id: String) -> String {
        if table == "u" { return "id = '\(id)'" }
        if table == "c" {
            let parts = id.split(separator: "/")
            return "a = '\(parts[0])' AND b = \(parts[1])"
        }
        return "tag = '\(id)'"
    }

    static func run(_ c: any Connection, _ sql: String) throws {
        switch c {
        case let s as SQLiteConnection: try s.run(sql)
        default:
            // PostgreSQL and MySQL: the origin helper's connection types.
            if let p = c as? (any SQLRunner) { try p.runSQL(sql) } else { throw ModelFailure(description: "no SQL runner for \(c.endpoint)") }
        }
    }

    // MARK: The model's expectations

    struct Expected {
        var local: Tables, remote: Tables, synced: Tables
        var unresolved = 0
    }

    /// Push: each pending row (local ≠ synced) applies where the origin still has the synced
    /// row (or already the local one); else a conflict for the policy.
    func expectPush(_ policy: ConflictPolicy) -> Expected {
        var e = Expected(local: local, remote: remote, synced: synced)
        for t in Self.tables {
            for id in Set((local[t] ?? [:]).keys).union((synced[t] ?? [:]).keys) {
                let l = local[t]?[id], b = synced[t]?[id], o = remote[t]?[id]
                if l == b { continue }
                if o == b || o == l {
                    e.remote[t, default: [:]][id] = l
                    e.synced[t, default: [:]][id] = l
                    continue
                }
                switch policy {
                case .fail: e.unresolved += 1
                case .local:
                    e.remote[t, default: [:]][id] = l
                    e.synced[t, default: [:]][id] = l
                case .origin:
                    e.local[t, default: [:]][id] = o
                    e.synced[t, default: [:]][id] = o
                case .merge:
                    if let m = Self.merge(l, b, o) {
                        e.remote[t, default: [:]][id] = m
                        e.local[t, default: [:]][id] = m
                        e.synced[t, default: [:]][id] = m
                    } else {
                        e.unresolved += 1
                    }
                }
            }
        }
        return e
    }

    /// Pull: each row the origin changed (origin ≠ synced) comes in where it is not pending
    /// locally; a pending row is a conflict unless both sides agree.
    func expectPull(_ policy: ConflictPolicy) -> Expected {
        var e = Expected(local: local, remote: remote, synced: synced)
        for t in Self.tables {
            for id in Set((remote[t] ?? [:]).keys).union((synced[t] ?? [:]).keys) {
                let l = local[t]?[id], b = synced[t]?[id], o = remote[t]?[id]
                if o == b { continue }
                if l == b {
                    e.local[t, default: [:]][id] = o
                    e.synced[t, default: [:]][id] = o
                    continue
                }
                if l == o {
                    e.synced[t, default: [:]][id] = o
                    continue
                }
                switch policy {
                case .fail: e.unresolved += 1
                case .local: e.synced[t, default: [:]][id] = o
                case .origin:
                    e.local[t, default: [:]][id] = o
                    e.synced[t, default: [:]][id] = o
                case .merge:
                    if let m = Self.merge(l, b, o) {
                        e.local[t, default: [:]][id] = m
                        e.synced[t, default: [:]][id] = o
                    } else {
                        e.unresolved += 1
                    }
                }
            }
        }
        return e
    }

    /// Column by column; nil when a row is missing on a side or a column changed both ways.
    static func merge(_ l: ModelRow?, _ b: ModelRow?, _ o: ModelRow?) -> ModelRow? {
        guard let l, let b, let o else { return nil }
        func pick<T: Equatable>(_ lv: T, _ bv: T, _ ov: T) -> T? {
            if lv == bv { return .some(ov) }
            if ov == bv || ov == lv { return .some(lv) }
            return .none
        }
        guard let v = pick(l.v, b.v, o.v), let n = pick(l.n, b.n, o.n), let p = pick(l.parent, b.parent, o.parent) else { return nil }
        return ModelRow(v: v, n: n, parent: p)
    }

    // MARK: Reading the real state

    func check(_ app: SQLiteConnection, _ origin: any Connection, _ when: String, local checkLocal: Bool = true) throws {
        let l = try state(app), r = try state(origin)
        guard l == local || !checkLocal else { throw ModelFailure(description: "\(when): the snapshot is not as the model says:\n\(Self.diff(l, local))") }
        guard r == remote else { throw ModelFailure(description: "\(when): the origin is not as the model says:\n\(Self.diff(r, remote))") }
    }

    /// The tables' schemas by side, described once per scenario (no step changes a schema;
    /// a step that did would make the read fail).
    final class Schemas {
        var byTable: [String: TableSchema] = [:]
    }
    let schemas = Schemas()

    func state(_ c: any Connection) throws -> Tables {
        func read(_ table: String) throws -> [[String: Value]] {
            let key = "\(ObjectIdentifier(c as AnyObject)) \(table)"
            let schema = try schemas.byTable[key] ?? c.describe(TableName(table))
            schemas.byTable[key] = schema
            return try SyncTestRows.read(c, schema)
        }
        var out: Tables = [:]
        var tagOf: [Value: String] = [:]
        // Parents first: a child names its parent by tag.
        for t in ["p"] + Self.tables.filter({ $0 != "p" }) {
            let all = try read(t)
            if t == "p" {
                for p in all { if let id = p["id"], case .text(let tag)? = p["tag"] { tagOf[id] = tag } }
            }
            var rows: [String: ModelRow] = [:]
            for r in all {
                let v: String? = { if case .text(let s)? = r["v"] { return s } else { return nil } }()
                let n: Int64? = { if case .int(let i)? = r["n"] { return i } else { return nil } }()
                let id: String
                if t == "c", case .text(let a)? = r["a"], case .int(let b)? = r["b"] {
                    id = "\(a)/\(b)"
                } else if t == "u", let text = r["id"]?.canonicalText {
                    id = text.lowercased()
                } else if case .text(let tag)? = r["tag"] {
                    id = tag
                } else {
                    continue
                }
                if rows[id] != nil { throw ModelFailure(description: "table \(t) holds \(id) twice") }
                rows[id] = ModelRow(v: v, n: n, parent: t == "ch" ? r["p_id"].flatMap { tagOf[$0] } ?? "missing" : nil)
            }
            out[t] = rows
        }
        return out
    }

    static func diff(_ a: Tables, _ b: Tables) -> String {
        var lines: [String] = []
        for t in tables {
            for id in Set((a[t] ?? [:]).keys).union((b[t] ?? [:]).keys).sorted() where a[t]?[id] != b[t]?[id] {
                lines.append("  \(t) \(id): is \(a[t]?[id].map(\.description) ?? "absent"), expected \(b[t]?[id].map(\.description) ?? "absent")")
            }
        }
        return lines.prefix(20).joined(separator: "\n")
    }
}

/// PostgreSQL and MySQL connections run the model's SQL through this.
protocol SQLRunner { func runSQL(_ sql: String) throws }
