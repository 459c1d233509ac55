import FerryCore
import FerryXML
import Foundation
import Logging

/// The protocol's handlers (docs/xml-protocol.md), free of any transport: each takes a parsed
/// request and returns a response over a connection the registry opens. `ferry serve` maps
/// HTTP onto them; a driver plugin built with FerryPluginKit maps its stdin and stdout onto
/// them. Each request opens its own connection; blocking database work runs off the caller's
/// threads (`Offload`). The handlers live in files by resource (`ServiceHandlers+Tables`, …).
public final class ServiceHandlers: Sendable {
    public let configuration: ServiceConfiguration
    /// Index and foreign key requests one at a time: each picks names free in the catalog, and
    /// two at once (a copy with --jobs) would pick the same one.
    let objectRequests = Locked(())
    /// Read snapshots held for clients (`POST /v1/snapshots`).
    let snapshots: SnapshotStore
    /// Staging tables created by write tokens, and by which.
    let staging = StagingOwners()
    /// Change feeds kept open between a client's pages.
    let feeds = FeedStore()
    /// Drops the transient staging tables of killed clients and services.
    let janitor = StagingJanitor()
    /// The database connections requests hold at once (`--max-connections`).
    public let slots: ConnectionSlots
    /// Bytes of whole request bodies held at once (`--max-bodies-mb`).
    let bodyBudget: Locked<Int>

    public init(configuration: ServiceConfiguration) {
        self.configuration = configuration
        bodyBudget = Locked(max(configuration.maxHeldBodyBytes, configuration.maxBodyBytes))
        slots = ConnectionSlots(limit: configuration.maxConnections, waitSeconds: configuration.connectionWaitSeconds)
        snapshots = SnapshotStore(
            maxSnapshots: configuration.maxSnapshots, maxPerOwner: configuration.maxSnapshotsPerToken, idleSeconds: configuration.snapshotIdleSeconds,
            lifetimeSeconds: configuration.snapshotLifetimeSeconds)
        guard configuration.writable else { return }
        janitor.handlers = self
        // Who owns a resumable load's staging table, kept in the served database.
        let open: @Sendable (Bool) throws -> any Connection = { [configuration] write in
            try configuration.registry.connect(configuration.database, role: write ? .target : .source)
        }
        staging.store.withLock {
            $0 = (load: { table in
                guard let c = try? open(false) else { return nil }
                defer { c.close() }
                return (try? StagingOwnerRecords.owner(c, staging: table)) ?? nil
            }, save: { table, owner in
                guard let c = try? open(true) else { return }
                defer { c.close() }
                try? StagingOwnerRecords.set(c, staging: table, owner: owner)
            })
        }
    }

    /// Starts ending snapshots that clients abandoned (every 30 s), and dropping the transient
    /// staging tables of loads whose client or service is gone (at once, then every minute).
    public func startSweeping() {
        snapshots.startSweeping()
        if configuration.writable { janitor.start() }
    }

    /// True when a connection to the served database opens now (a health check; outside the
    /// request slots, so that a full pool does not look like a dead database).
    public func databaseReachable() async -> Bool {
        (try? await Offload.run { [self] in try connect(write: false).close() }) != nil
    }

    /// Read snapshots clients hold now.
    public var snapshotsHeld: Int { snapshots.held }

    /// Ends every snapshot held (the service or the plugin is stopping).
    public func releaseAll() {
        snapshots.releaseAll()
        feeds.closeAll()
    }

    /// The answer to `request`: its handler's, or the error document for what it threw (the
    /// details a body never carries go to the request's logger).
    public func respond(_ request: ServiceRequest) async -> ServiceResponse {
        // The whole body it held (a short document) is given back once it is answered.
        defer {
            let n = request.held.takeAll()
            if n > 0 { bodyBudget.withLock { $0 += n } }
        }
        do {
            return try await handle(request)
        } catch {
            let e = ServiceError.from(error, table: nil)
            if let detail = e.detail { request.logger.error("\(request.route.method) \(request.route.pattern): \(detail)") }
            return .error(e)
        }
    }

    /// The route table: each endpoint's handler.
    func handle(_ r: ServiceRequest) async throws -> ServiceResponse {
        switch r.route {
        case .capabilities: return try await capabilities(r)
        case .tables: return try await tables(r)
        case .schema: return try await schema(r)
        case .createTable: return try await createTable(r)
        case .dropTable: return try await dropTable(r)
        case .count: return try await count(r)
        case .readRows: return try await readRows(r)
        case .insertRows: return try await insertRows(r)
        case .digests: return try await digests(r)
        case .createSnapshot: return try await createSnapshot(r)
        case .releaseSnapshot: return try releaseSnapshot(r)
        case .objects: return try await objects(r)
        case .indexes, .foreignKeys: return try await createObjects(r)
        case .merge: return try await merge(r)
        case .swap: return try await swap(r)
        case .apply: return try await apply(r)
        case .changes: return try await changes(r)
        case .resetSerial: return try await resetSerial(r)
        case .push: return try await push(r)
        case .pushStatus: return try await pushStatus(r)
        case .startFeed: return try await startFeed(r)
        case .readFeed: return try await readFeed(r)
        case .feedPosition: return try await feedPosition(r)
        case .feedLag: return try await feedLag(r)
        case .dropFeed: return try await dropFeed(r)
        case .replicaState: return try await replicaState(r)
        case .applyReplica: return try await applyReplica(r)
        case .dropReplica: return try await dropReplica(r)
        case .addColumn: return try await addColumn(r)
        }
    }

    // MARK: Shared by the handlers

    /// Opens a connection for one request, in one of the service's connection slots (waiting
    /// in line for one; `close` gives it back).
    func open(write: Bool) throws -> any Connection {
        try slots.acquire()
        do {
            return try connect(write: write)
        } catch {
            slots.release()
            throw error
        }
    }

    /// Closes a connection `open` made and gives its slot back.
    func close(_ c: any Connection) {
        c.close()
        slots.release()
    }

    /// Two connections for one request that reads staging tables on the second while the
    /// first writes, both slots taken at once (see `ConnectionSlots`) — or one, read and written
    /// on, where a reader holds a lock the writer needs to spill its cache or commit (a SQLite
    /// file in a rollback journal: the two would wait for each other for ever). `close` each;
    /// the reading one only when `separate`.
    func openTwo() throws -> (writing: any Connection, reading: any Connection, separate: Bool) {
        try slots.acquire(2)
        let c: any Connection
        do {
            c = try connect(write: true)
        } catch {
            slots.release(2)
            throw error
        }
        if c.heldSnapshotsBlockWriters {
            slots.release()
            return (c, c, false)
        }
        do {
            return (c, try connect(write: false), true)
        } catch {
            c.close()
            slots.release(2)
            throw error
        }
    }

    /// Opens a connection outside the request slots: for read snapshots and change feeds (held
    /// between requests, bounded by their own limits) and the service's own bookkeeping. A
    /// database served for writing is opened as a target even to read (a new SQLite file is
    /// then created by the first write, not refused).
    func connect(write: Bool) throws -> any Connection {
        try configuration.registry.connect(configuration.database, role: write || configuration.writable ? .target : .source)
    }

    /// A connection for one read: inside snapshot `id` when the request names one
    /// (`snapshot=ID`), else a new one. `release` it when done.
    func read(snapshot id: String?) throws -> SnapshotStore.Lease {
        if let id { return try snapshots.lease(id, open: { try open(write: false) }, close: { [self] in close($0) }) }
        let c = try open(write: false)
        return SnapshotStore.Lease(connection: c, release: { [self] in close(c) })
    }

    /// A foreign key may reference only a table the service would serve (it need not exist yet:
    /// a copy creates the tables one by one).
    func mayReference(_ name: TableName) throws {
        guard configuration.tables.isEmpty || configuration.tables.contains(where: { name.matches($0) }) else {
            throw ServiceError.notFound(name)
        }
    }

    /// The served table `name`, checked against the catalog before any query touches it.
    /// Ferry's own staging tables (the `_ferry_` prefix) are served when they exist, so that
    /// a client can load and swap or merge them.
    func served(_ name: TableName, in connection: any Connection) throws -> TableName {
        // No table's name holds a NUL, and a C library would read the name only up to it
        // (`Artist%00` passed the lookup as `Artist`, then failed in the engine).
        // Nor is longer than the engine keeps (PostgreSQL would look up the name cut short).
        let d = connection.dialect
        guard d.identifierProblem(name.name) == nil, name.schema.map({ d.identifierProblem($0) == nil }) ?? true else { throw ServiceError.notFound(name) }
        // A catalog lookup of the one name (listing every table would count every table's rows).
        guard try connection.tableExists(name) else { throw ServiceError.notFound(name) }
        if Self.isStaging(name) { return name }
        guard configuration.tables.isEmpty || configuration.tables.contains(where: { name.matches($0) }) else {
            throw ServiceError.notFound(name)
        }
        return name
    }

    /// The whole body of a request (a short document), refused beyond `maxBodyBytes`, and
    /// counted against the bytes all requests may hold at once (`maxHeldBodyBytes`): past those
    /// it is answered 503 busy (nothing done; clients with --retries ask again), so that many
    /// clients sending large documents at once cannot make the service hold them all.
    func body(_ request: ServiceRequest) async throws -> Data {
        var out = Data()
        try await collect(request) { out.append(contentsOf: $0) }
        return out
    }

    /// The whole body of a request in a temporary file, mapped when it is read: bounded and
    /// counted as `body` is, but not held in memory (a push, which is read more than once).
    func spooledBody(_ request: ServiceRequest) async throws -> SpooledBody {
        let out = try SpooledBody()
        try await collect(request) { try out.append($0) }
        return out
    }

    /// Reads a request's body piece by piece into `keep`, within `maxBodyBytes` and the bytes
    /// all requests may hold at once.
    private func collect(_ request: ServiceRequest, into keep: ([UInt8]) throws -> Void) async throws {
        // A body that says it is too large is refused before a byte of it is held.
        let declared = request.headers["content-length"].flatMap { Int($0) }
        if let declared, declared > configuration.maxBodyBytes {
            throw ServiceError.tooLarge(configuration.maxBodyBytes)
        }
        var reserved = 0
        func reserve(_ total: Int) throws {
            guard total > reserved else { return }
            let more = total - reserved
            let granted = bodyBudget.withLock { left in
                guard left >= more else { return false }
                left -= more
                return true
            }
            guard granted else {
                throw ServiceError(
                    status: 503, code: "busy",
                    message: "the service holds as many request documents at once as --max-bodies-mb allows; nothing was done; try again shortly")
            }
            request.held.add(more)
            reserved = total
        }
        try reserve(declared ?? 0)
        var count = 0
        while let piece = try await request.body.next() {
            guard count + piece.count <= configuration.maxBodyBytes else { throw ServiceError.tooLarge(configuration.maxBodyBytes) }
            // A body of no declared length is counted as it comes, in steps of at least 1 MiB.
            if count + piece.count > reserved { try reserve(min(configuration.maxBodyBytes, max(count + piece.count, reserved + (1 << 20)))) }
            try keep(piece)
            count += piece.count
        }
    }

    /// Refuses unless the caller may write into `table`: any served table for a write token,
    /// and of Ferry's staging tables only those its own loads created.
    func mayWrite(_ table: TableName, _ request: ServiceRequest, doing: String) throws {
        if Self.isStaging(table) { try staging.check(table, request.principal, doing: doing) }
    }

    /// `column` as a write request names it: in the served engine's stored form when the
    /// request lists it in `native=` (refused where the service keeps none).
    func requested(_ column: Column, native: [String], table: TableName) throws -> Column {
        guard native.contains(column.name) else { return column }
        guard configuration.storedForm != nil else {
            throw ServiceError.badRequest("native=\(column.name): this service reads and writes values in no stored form", table: table.description)
        }
        return column.storedForm
    }

    /// Columns moved inside the served database (staging table to target): in its stored form
    /// where it keeps one, so the move rewrites no value.
    func movedColumns(_ columns: [Column]) -> [Column] {
        configuration.storedForm == nil ? columns : columns.map { $0.generated ? $0 : $0.storedForm }
    }

    static func isStaging(_ table: TableName) -> Bool { table.name.hasPrefix(CopyEngine.internalPrefix) }

    /// Runs `body` in one transaction on `c`: committed when it returns, rolled back when it throws.
    static func transaction<T>(_ c: any Connection, _ body: () throws -> T) throws -> T {
        try c.begin()
        do {
            let result = try body()
            try c.commit()
            return result
        } catch {
            try? c.rollback()
            throw error
        }
    }

    /// The `?into=TABLE` of merge and swap.
    static func into(_ request: ServiceRequest, for action: String) throws -> TableName {
        guard let into = request.value("into").map({ TableName(parsing: $0) }) else {
            throw ServiceError.badRequest("\(action) needs ?into=TABLE")
        }
        return into
    }

    /// Parses `MODULUS:r1,r2,…` (a bucket filter; `key` names its key columns, or the table's
    /// key when empty). At most 10,000 buckets per request.
    /// How keys are hashed for `buckets=` and `within=` (`keyhash=integer|md5`), required with
    /// them: a client of the digests' first form (which sends none) hashed keys otherwise.
    static func keyHashParameter(_ text: String?, table: TableName) throws -> KeyHash {
        guard let text else {
            throw ServiceError.badRequest(
                "buckets and digests need keyhash=integer or keyhash=md5 (this service hashes keys as the digests' second form does: update the client)",
                table: table.description)
        }
        guard let hash = KeyHash(rawValue: text) else {
            throw ServiceError.badRequest("keyhash must be integer or md5, not '\(text.prefix(20))'", table: table.description)
        }
        return hash
    }

    static func bucketParameter(_ text: String?, key: [String], table: TableName) throws -> (key: [String], modulus: Int64, residues: [Int64])? {
        guard let text else { return nil }
        let parts = text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let modulus = Int64(parts[0]), modulus >= 1, modulus <= 1 << 31 else {
            throw ServiceError.badRequest("a bucket filter is MODULUS:r1,r2,… with a modulus from 1 to 2147483648", table: table.description)
        }
        let residues = try parts[1].split(separator: ",").map { r -> Int64 in
            guard let v = Int64(r), v >= 0, v < modulus else {
                throw ServiceError.badRequest("bucket '\(r.prefix(20))' is not a whole number below the modulus \(modulus)", table: table.description)
            }
            return v
        }
        guard residues.count <= 10_000 else {
            throw ServiceError.badRequest("at most 10000 buckets per request (\(residues.count) asked)", table: table.description)
        }
        return (key, modulus, residues)
    }
}

/// The staging tables created by write tokens' loads, and by which token: a write token may
/// drop, fill, merge or apply only its own. Kept in memory; a resumable load's staging table
/// (`_ferry_load_…`, which outlives a run) also in the served database
/// (`StagingOwnerRecords`, by the token's fingerprint), so that after a restart of the service
/// its token still owns it. Ferry's bookkeeping tables (`_ferry_loads`, …) any write token may
/// write (not drop).
final class StagingOwners: Sendable {
    private let owners = Locked<[TableName: String]>([:])
    /// Reads and writes the records in the served database (set by the service).
    let store: Locked<(load: @Sendable (TableName) -> String?, save: @Sendable (TableName, String?) -> Void)?> = Locked(nil)

    static let bookkeeping: Set<String> = ["_ferry_loads", "_ferry_watermarks", "_ferry_units", "_ferry_leases"]
    static func outlivesARun(_ table: TableName) -> Bool { table.name.hasPrefix(CopyEngine.internalPrefix + "load_") }
    /// A load's transient staging tables (the http driver's `_ferry_append_…`, `_ferry_upsert_…`,
    /// `_ferry_delete_…`, `_ferry_replica_…`), made and dropped within one of its transactions:
    /// leased by the service that made them (`StagingJanitor`).
    static func isTransient(_ table: TableName) -> Bool {
        ["append_", "upsert_", "delete_", "replica_"].contains { table.name.hasPrefix(CopyEngine.internalPrefix + $0) }
    }
    /// The staging tables the service leases and its janitor drops once abandoned: the transient
    /// ones, and a create's or replace's `_ferry_load_…` (kept while `_ferry_loads` records it:
    /// a resumable load waits for `--resume`).
    static func isSwept(_ table: TableName) -> Bool { isTransient(table) || outlivesARun(table) }

    /// When each transient staging table of this service was last used, and the requests
    /// writing into it now (a table being written is never idle, however long the request).
    private let used = Locked<[TableName: Date]>([:])
    private let writing = Locked<[TableName: Int]>([:])

    /// A request writes into `table` until `done` (touched at both ends).
    func writes(into table: TableName) -> @Sendable () -> Void {
        guard Self.isSwept(table) else { return {} }
        writing.withLock { $0[table, default: 0] += 1 }
        return { [self] in
            writing.withLock { w in
                w[table, default: 1] -= 1
                if w[table] == 0 { w[table] = nil }
            }
            used.withLock { if $0[table] != nil { $0[table] = Date() } }
        }
    }

    func record(_ table: TableName, _ principal: RequestPrincipal) {
        owners.withLock { $0[table] = principal.identity }
        if Self.isSwept(table) { used.withLock { $0[table] = Date() } }
        // Only a write token's: a manage token may use any staging table anyway.
        if Self.outlivesARun(table), principal.scope < .manage, let save = store.withLock({ $0?.save }) { save(table, principal.identity) }
    }

    func forget(_ table: TableName) {
        _ = owners.withLock { $0.removeValue(forKey: table) }
        _ = used.withLock { $0.removeValue(forKey: table) }
        if Self.outlivesARun(table), let save = store.withLock({ $0?.save }) { save(table, nil) }
    }

    /// The transient staging tables in use (made here, not yet merged, applied or dropped).
    var inUse: [TableName] { used.withLock { Array($0.keys) } }

    /// Takes out (and returns) the transient staging tables unused for `seconds`.
    func takeIdle(longerThan seconds: Double) -> [TableName] {
        let now = Date()
        let busy = writing.withLock { Set($0.keys) }
        let idle = used.withLock { u in u.filter { now.timeIntervalSince($0.value) > seconds && !busy.contains($0.key) }.map(\.key) }
        for t in idle { forget(t) }
        return idle
    }

    func owner(of table: TableName) -> String? {
        if let o = owners.withLock({ $0[table] }) { return o }
        guard Self.outlivesARun(table), let load = store.withLock({ $0?.load }), let o = load(table) else { return nil }
        owners.withLock { $0[table] = o }
        return o
    }

    /// Refuses unless `principal` may use staging table `table`: manage tokens any, write tokens
    /// their own (and Ferry's bookkeeping tables).
    func check(_ table: TableName, _ principal: RequestPrincipal, doing: String) throws {
        used.withLock { if $0[table] != nil { $0[table] = Date() } }
        if principal.scope >= .manage { return }
        if Self.bookkeeping.contains(table.name) && doing != "drop" && principal.scope >= .write { return }
        guard !principal.identity.isEmpty, owner(of: table) == principal.identity else {
            throw ServiceError(
                status: 403, code: "forbidden", table: table.description,
                message: "this token may \(doing) only the staging tables its own loads created, and \(table) is not one (a manage token, from the service's --token-file, may)")
        }
    }
}
