import FerryCore
import FerryDriverTestKit
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The ways the suite breaks a copy in flight.
enum Fault: String, CaseIterable {
    case sigint = "ferry sent SIGINT"
    case sigterm = "ferry sent SIGTERM"
    case sigkill = "ferry sent SIGKILL"
    case sourceServer = "source server killed (kill -9, restarted)"
    case targetServer = "target server killed (kill -9, restarted)"
    case sourceCut = "source connection cut (relay, random byte)"
    case targetCut = "target connection cut (relay, random byte)"
    case sourceStall = "source connection stalls (relay, --timeout 6)"
    case targetStall = "target connection stalls (relay, --timeout 6)"
    case originServer = "origin server killed (kill -9, restarted)"
    case originCut = "origin connection cut (relay, random byte)"
    case originStall = "origin connection stalls (relay, --timeout 6)"
    case serveKilled = "ferry serve killed (restarted)"
    case pluginKilled = "plugin process killed"
    case fileLimit = "SQLite file written cannot grow (ulimit -f)"
    case diskFull = "SQLite file written on a full file system (tmpfs)"
    case readOnly = "SQLite file written on a read-only mount"

    var signal: Int32? {
        switch self {
        case .sigint: return SIGINT
        case .sigterm: return SIGTERM
        case .sigkill: return SIGKILL
        default: return nil
        }
    }
}

/// What a run exercises: a copy, an offline snapshot's push/pull/sync, or `ferry replicate`.
enum Family: String, CaseIterable {
    case copy, sync, replicate
}

/// One run of the suite: what ran, what broke it, how it ended and what the target held after.
struct RunRecord {
    var index: Int
    var family: Family
    var source: String
    var target: String
    var mode: String
    /// The run in words: "replace A onto B", "push 5,000 local and 5,000 origin changes".
    var what: String
    var fault: Fault
    var injected: Bool
    var delay: Double
    var ended: String
    var outcome: String
    var problems: [String]
}

final class Chaos {
    let options: ChaosOptions
    var rng: SplitMix64
    let folder: String
    let ferry: URL
    let products: URL
    let servers: Servers
    let token = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
    var sources: [Side] = []
    var targets: [Side] = []
    var references: [Dataset: String] = [:]
    var services: [Served] = []
    var relays: [FaultRelay] = []
    var databases: [(Direct, String)] = []
    var syncOrigins: [SyncOrigin] = []
    var replicaPairs: [ReplicaPair] = []
    var records: [RunRecord] = []
    /// Seconds a copy of each path and mode took when no fault reached it, and the bytes each
    /// relay carried each way: where to aim the next fault.
    var durations: [String: Double] = [:]
    var volumes: [String: Int64] = [:]

    init(options: ChaosOptions) throws {
        self.options = options
        rng = SplitMix64(seed: options.seed)
        products = options.products
        ferry = products.appendingPathComponent("ferry")
        guard FileManager.default.isExecutableFile(atPath: ferry.path) else {
            throw ChaosFailure("no ferry at \(ferry.path): build it (swift build) or name its folder with --products")
        }
        guard FileManager.default.isExecutableFile(atPath: products.appendingPathComponent("ferry-driver-sqlitekit").path) else {
            throw ChaosFailure("no ferry-driver-sqlitekit beside ferry in \(products.path): build it (swift build --product ferry-driver-sqlitekit)")
        }
        let env = ProcessInfo.processInfo.environment
        guard let state = env["FERRY_TEST_STATE"], !state.isEmpty else {
            throw ChaosFailure("FERRY_TEST_STATE is not set: run through scripts/chaos (or scripts/test), which starts the servers the suite kills and restarts")
        }
        _ = state
        servers = Servers(script: options.root.appendingPathComponent("scripts/test-services").path)
        folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("ferry-chaos-\(options.seed)-\(token.prefix(6))").path
        try FileManager.default.createDirectory(atPath: folder + "/tmp", withIntermediateDirectories: true)
    }

    func path(_ name: String) -> String { folder + "/" + name }

    // MARK: Setting up

    /// The versions as SQLite files, then in PostgreSQL and MariaDB databases (copied by Ferry,
    /// unbroken), the services and relays, and every side.
    func setUp() throws {
        let pgAdmin = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        let myAdmin = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        let tag = String(token.prefix(8))
        func database(_ admin: String, _ name: String) -> String {
            guard let slash = admin.range(of: "/", options: .backwards) else { return admin }
            return admin[..<slash.lowerBound] + "/" + name
        }
        let rows = options.rows
        let quarter = rows * 3 / 4
        let generate = """
            CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, qty BIGINT NOT NULL, price REAL, note TEXT, payload BLOB);
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(rows))
            INSERT INTO items SELECT i, 'item-' || i, i * 7919 % 1000003, (i * 37 % 100000) / 100.0,
              CASE WHEN i % 7 = 0 THEN NULL ELSE 'ñote ' || i || ' ✓' END,
              CAST(printf('%08x-%08x', i * 2654435761 % 4294967296, i) AS BLOB) FROM n;
            """
        let changeB = "UPDATE items SET name = 'b-' || id, qty = qty + 1 WHERE id % 10 = 0 AND id <= \(quarter);"
        let versions: [Dataset: String] = [
            .a: generate,
            .b: generate + "\nDELETE FROM items WHERE id > \(quarter);\n" + changeB,
            .c: generate + "\n" + changeB,
            .d: generate + "\nDELETE FROM items WHERE id <= \(quarter);",
        ]
        let pgAdminDirect = Direct.postgres(pgAdmin), myAdminDirect = Direct.mysql(myAdmin)
        var pg: [String: String] = [:], my: [String: String] = [:]
        for name in ["a", "b", "c", "d", "t", "so", "sso", "r1s", "r2t", "r4s", "r5t", "r6s"] {
            let db = "ferry_chaos_\(tag)_\(name)"
            try pgAdminDirect.run("CREATE DATABASE \(db);")
            databases.append((pgAdminDirect, db))
            pg[name] = database(pgAdmin, db)
        }
        for name in ["a", "b", "d", "t", "st", "so", "r2s", "r3t", "r5s"] {
            let db = "ferry_chaos_\(tag)_\(name)"
            try myAdminDirect.run("CREATE DATABASE \(db) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;")
            databases.append((myAdminDirect, db))
            my[name] = database(myAdmin, db)
        }
        for (ds, sql) in versions {
            let file = path("\(ds.rawValue.lowercased()).db")
            try Direct.sqlite(file).run(sql)
            let name = ds.rawValue.lowercased()
            for target in [pg[name], my[name]].compactMap({ $0 }) {
                let r = try ferry(["copy", "sqlite:" + file, target, "--tables", "items", "-q"])
                guard r.status == 0 else { throw ChaosFailure("setting up \(ds): \(r.err)") }
            }
            if let url = pg[name] { references[ds] = url }
        }
        let tokens = path("tokens.txt")
        try Data((token + "\n").utf8).write(to: URL(fileURLWithPath: tokens))
        func served(_ url: String, _ name: String, _ extra: [String] = []) throws -> (Served, FaultRelay, String) {
            let s = try Served(ferry: ferry, database: url, args: ["--token-file", tokens] + extra, log: path("serve-\(name).log"))
            services.append(s)
            let r = try FaultRelay(upstreamPort: s.port)
            relays.append(r)
            return (s, r, "http://:\(token)@127.0.0.1:\(r.port)/")
        }

        // Sources.
        let lite = Side(kind: .sqlite, label: "sqlite", server: nil)
        let plugin = Side(kind: .plugin, label: "plugin (sqlitekit)", server: nil)
        let pgSource = Side(kind: .postgres, label: "postgres", server: "pg")
        let mySource = Side(kind: .mysql, label: "mysql", server: "my")
        let servedSource = Side(kind: .served, label: "serve (postgres)", server: "pg")
        for ds in Dataset.sources {
            let name = ds.rawValue.lowercased()
            lite.sources[ds] = "sqlite:" + path("\(name).db")
            plugin.sources[ds] = "sqlitekit:" + path("\(name).db")
            if let url = pg[name] { (pgSource.sourceRelays[ds], pgSource.sources[ds]) = try relayed(url) }
            if let url = my[name] { (mySource.sourceRelays[ds], mySource.sources[ds]) = try relayed(url) }
            if let url = pg[name] {
                let (s, r, u) = try served(url, "source-\(name)")
                servedSource.sourceServices[ds] = s
                servedSource.sourceRelays[ds] = r
                servedSource.sources[ds] = u
            }
        }
        sources = [lite, pgSource, mySource, servedSource, plugin]

        // Targets.
        let liteTarget = Side(kind: .sqlite, label: "sqlite", server: nil)
        // Each SQLite target in a folder of its own, which a run may mount read-only.
        for dir in ["lite", "kit", "full"] { try FileManager.default.createDirectory(atPath: path(dir), withIntermediateDirectories: true) }
        liteTarget.sqliteFile = path("lite/target.db")
        liteTarget.target = "sqlite:" + path("lite/target.db")
        let pluginTarget = Side(kind: .plugin, label: "plugin (sqlitekit)", server: nil)
        pluginTarget.sqliteFile = path("kit/target.db")
        pluginTarget.target = "sqlitekit:" + path("kit/target.db")
        for side in [liteTarget, pluginTarget] {
            guard let file = side.sqliteFile else { continue }
            try Direct.sqlite(file).run("PRAGMA user_version = 1;")
            side.direct = .sqlite(file)
            side.verifyURL = "sqlite:" + file
        }
        let pgTarget = Side(kind: .postgres, label: "postgres", server: "pg")
        let myTarget = Side(kind: .mysql, label: "mysql", server: "my")
        let servedTarget = Side(kind: .served, label: "serve (mysql)", server: "my")
        if let url = pg["t"] {
            (pgTarget.targetRelay, pgTarget.target) = try relayed(url)
            pgTarget.direct = .postgres(url)
            pgTarget.verifyURL = url
        }
        if let url = my["t"] {
            (myTarget.targetRelay, myTarget.target) = try relayed(url)
            myTarget.direct = .mysql(url)
            myTarget.verifyURL = url
        }
        if let url = my["st"] {
            let (s, r, u) = try served(url, "target", ["--staging-idle-limit", "4"])
            servedTarget.targetService = s
            servedTarget.targetRelay = r
            servedTarget.target = u
            servedTarget.direct = .mysql(url)
            servedTarget.verifyURL = url
        }
        // A SQLite file (rollback journal) written through `ferry serve`: its staging tables,
        // its janitor, its transactions on the service's side.
        let servedLite = Side(kind: .served, label: "serve (sqlite)", server: nil)
        try FileManager.default.createDirectory(atPath: path("served-lite"), withIntermediateDirectories: true)
        let servedFile = path("served-lite/target.db")
        try Direct.sqlite(servedFile).run("PRAGMA user_version = 1;")
        do {
            let (s, r, u) = try served("sqlite:" + servedFile, "target-sqlite", ["--staging-idle-limit", "4"])
            servedLite.targetService = s
            servedLite.targetRelay = r
            servedLite.target = u
            servedLite.direct = .sqlite(servedFile)
            servedLite.verifyURL = "sqlite:" + servedFile
        }
        targets = [liteTarget, pgTarget, myTarget, servedTarget, pluginTarget, servedLite]

        func named(_ urls: [String: String], _ name: String) throws -> String {
            guard let url = urls[name] else { throw ChaosFailure("no database \(name) was made") }
            return url
        }
        if options.families.contains(.sync) {
            try setUpSync(postgres: { try named(pg, $0) }, mysql: { try named(my, $0) }, tokens: tokens)
        }
        if options.families.contains(.replicate) {
            try setUpReplicate(postgres: { try named(pg, $0) }, mysql: { try named(my, $0) }, tokens: tokens)
        }
    }

    func tearDown(keepFiles: Bool) {
        dropReplicas()
        for s in services { s.stop() }
        for r in relays { r.stop() }
        for (admin, db) in databases {
            if case .postgres = admin {
                // A replica --drop could not remove (its server gone): its slot, or the database stays.
                _ = try? admin.run("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '\(db)' AND NOT active;")
                _ = try? admin.run("DROP DATABASE IF EXISTS \(db) WITH (FORCE);")
            } else { _ = try? admin.run("DROP DATABASE IF EXISTS \(db);") }
        }
        if !keepFiles { try? FileManager.default.removeItem(atPath: folder) }
    }

    // MARK: Running Ferry

    struct Ended {
        var status: Int32
        var signaled: Bool
        var err: String
        var seconds: Double
        var hung: Bool
    }

    var environment: [String: String] {
        var env = ProcessInfo.processInfo.environment
        env["FERRY_DRIVER_PATH"] = products.path
        env["TMPDIR"] = path("tmp")
        return env
    }

    /// Runs ferry to its end (the suite's own unbroken commands: setup, verify).
    func ferry(_ args: [String]) throws -> Ended {
        let p = try launch(args, confinement: .none)
        return wait(p, deadline: 600)
    }

    final class Launched: @unchecked Sendable {  // the process and the Locked buffer are safe to share
        let process: Process
        let err = Locked(Data())
        let reading = DispatchGroup()
        let started = Date()
        init(_ p: Process) { process = p }
    }

    /// How a run's ferry is started: as is, under `ulimit -f`, or in a private mount namespace
    /// where the target's folder is read-only, or the target file sits on a small full tmpfs.
    enum Confinement {
        case none
        case fileLimit(kilobytes: Int)
        case readOnly(folder: String)
        /// The target file `file` copied onto a tmpfs of `kilobytes` mounted at `mount`, written
        /// there, and copied back after (what the file system kept is what the next run sees).
        case fullDisk(file: String, mount: String, kilobytes: Int)
    }

    func launch(_ args: [String], confinement: Confinement) throws -> Launched {
        let p = Process()
        switch confinement {
        case .none:
            p.executableURL = ferry
            p.arguments = args
        case .fileLimit(let kb):
            // The shell's `ulimit -f` (1,024-byte blocks), then ferry in its place.
            p.executableURL = URL(fileURLWithPath: "/bin/sh")
            p.arguments = ["-c", "ulimit -f \(kb) && exec \"$0\" \"$@\"", ferry.path] + args
        case .readOnly(let folder):
            p.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
            p.arguments = ["-m", "/bin/sh", "-c", "mount --bind \"$1\" \"$1\" && mount -o remount,bind,ro \"$1\" && shift && exec \"$0\" \"$@\"",
                           ferry.path, folder] + args
        case .fullDisk(let file, let mount, let kb):
            let name = (file as NSString).lastPathComponent
            // What the full file system kept goes back as it is: the file and its journal (a hot
            // journal is what the next open rolls the file back with, as on a real disk).
            let script = """
                f=$1; m=$2; kb=$3; shift 3
                mount -t tmpfs -o size=${kb}k tmpfs "$m" || exit 90
                cp "$f" "$m/" || exit 91
                "$0" "$@"; rc=$?
                cp "$m/\(name)" "$f" || exit 92
                for x in journal wal shm; do
                  rm -f "$f-$x"
                  if [ -e "$m/\(name)-$x" ]; then cp "$m/\(name)-$x" "$f-$x" || exit 92; fi
                done
                exit $rc
                """
            p.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
            p.arguments = ["-m", "/bin/sh", "-c", script, ferry.path, file, mount, String(kb)] + args
        }
        p.environment = environment
        let errPipe = Pipe()
        p.standardError = errPipe
        p.standardOutput = FileHandle.nullDevice
        p.standardInput = FileHandle.nullDevice
        let l = Launched(p)
        try p.run()
        DispatchQueue.global().async(group: l.reading) {
            let d = errPipe.fileHandleForReading.readDataToEndOfFile()
            l.err.withLock { $0 = d }
        }
        return l
    }

    func wait(_ l: Launched, deadline: Double) -> Ended {
        var hung = false
        while l.process.isRunning {
            if Date().timeIntervalSince(l.started) > deadline {
                hung = true
                kill(l.process.processIdentifier, SIGKILL)
            }
            usleep(20_000)
        }
        l.process.waitUntilExit()
        l.reading.wait()
        return Ended(
            status: l.process.terminationStatus, signaled: l.process.terminationReason == .uncaughtSignal,
            err: String(decoding: l.err.withLock { $0 }, as: UTF8.self), seconds: Date().timeIntervalSince(l.started), hung: hung)
    }
}
