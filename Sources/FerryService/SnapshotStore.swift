import FerryCore
import Foundation

/// Read snapshots held for clients (`POST /v1/snapshots`), so that every page of a copy —
/// every table, every job — reads one state of the database. An engine that can share a
/// snapshot (PostgreSQL's exported snapshots) gives each request its own connection that
/// imports it; otherwise the requests take turns on the connection holding it (MySQL's
/// consistent snapshot, SQLite's read transaction).
///
/// A snapshot holds resources on the database (PostgreSQL keeps old row versions, SQLite
/// cannot checkpoint past it), so it ends when released, when idle for `idleSeconds`, or at
/// `lifetimeSeconds` whatever happens; at most `maxSnapshots` at once.
final class SnapshotStore: @unchecked Sendable {  // unchecked: every field is behind `lock`
    final class Entry: @unchecked Sendable {  // unchecked: `holder` is used only while `gate` is held
        let holder: any Connection
        let exported: String?
        /// One user of `holder` at a time (a semaphore: a streamed page takes it on one thread
        /// and gives it back on another).
        let gate = DispatchSemaphore(value: 1)
        let created = Date()
        var lastUsed = Date()
        /// Runs once the snapshot has ended (a change feed's start is let go).
        let onEnd: (@Sendable () -> Void)?
        /// Who holds it (the token's fingerprint or label): each may hold `maxPerOwner`.
        let owner: String
        init(holder: any Connection, exported: String?, owner: String, onEnd: (@Sendable () -> Void)? = nil) {
            self.holder = holder
            self.exported = exported
            self.owner = owner
            self.onEnd = onEnd
        }
    }

    /// A connection reading inside a snapshot, for one request; `release` when done.
    struct Lease {
        let connection: any Connection
        let release: () -> Void
    }

    let maxSnapshots: Int
    let idleSeconds: Double
    let lifetimeSeconds: Double
    private let lock = NSLock()
    private var entries: [String: Entry] = [:]
    /// Snapshots held now.
    var held: Int { lock.withLock { entries.count } }
    private var timer: DispatchSourceTimer?

    /// Sweeps every 30 s, so that a snapshot a client abandoned ends even when no other
    /// request comes.
    func startSweeping() {
        lock.withLock {
            guard timer == nil else { return }
            let t = DispatchSource.makeTimerSource(queue: DispatchQueue.global())
            t.schedule(deadline: .now() + 30, repeating: 30)
            t.setEventHandler { [weak self] in self?.sweep() }
            t.resume()
            timer = t
        }
    }

    /// Snapshots one token may hold at once: one client cannot take every snapshot there is.
    let maxPerOwner: Int
    /// Snapshots being begun (counted against the limits until they are held or failed).
    private var pending: [String: Int] = [:]

    init(maxSnapshots: Int = 16, maxPerOwner: Int = 8, idleSeconds: Double = 300, lifetimeSeconds: Double = 3_600) {
        self.maxSnapshots = maxSnapshots
        self.maxPerOwner = min(maxPerOwner, maxSnapshots)
        self.idleSeconds = idleSeconds
        self.lifetimeSeconds = lifetimeSeconds
    }

    /// Begins a snapshot on a connection `open` makes; returns its id.
    func create(owner: String, open: () throws -> any Connection) throws -> String {
        try create(owner: owner, open: open, begin: { c in
            try c.beginSnapshot()
            return try c.exportSnapshot()
        })
    }

    /// Begins a snapshot on a connection `open` makes with `begin` (which returns the id other
    /// connections import it with, if any); `onEnd` runs when it ends. Returns its id.
    func create(
        owner: String, open: () throws -> any Connection, begin: (any Connection) throws -> String?, onEnd: (@Sendable () -> Void)? = nil
    ) throws -> String {
        sweep()
        let refused = lock.withLock { () -> ServiceError? in
            let all = entries.count + pending.values.reduce(0, +)
            if all >= maxSnapshots {
                return ServiceError(status: 503, code: "busy", message: "\(maxSnapshots) snapshots are held already (--max-snapshots); release one (DELETE /v1/snapshots/ID) or try again later")
            }
            let mine = entries.values.filter { $0.owner == owner }.count + (pending[owner] ?? 0)
            if mine >= maxPerOwner {
                return ServiceError(status: 503, code: "busy", message: "this token holds \(maxPerOwner) snapshots already (--max-snapshots-per-token); release one (DELETE /v1/snapshots/ID) or try again later")
            }
            pending[owner, default: 0] += 1
            return nil
        }
        if let refused { throw refused }
        defer { lock.withLock { pending[owner, default: 1] -= 1 } }
        let c = try open()
        let exported: String?
        do {
            exported = try begin(c)
        } catch {
            try? c.rollback()
            c.close()
            throw error
        }
        var bytes = [UInt8](repeating: 0, count: 16)
        var generator = SystemRandomNumberGenerator()
        for i in bytes.indices { bytes[i] = generator.next() }
        let id = bytes.map { String(format: "%02x", $0) }.joined()
        lock.withLock { entries[id] = Entry(holder: c, exported: exported, owner: owner, onEnd: onEnd) }
        return id
    }

    /// A connection that reads inside snapshot `id`: a new one importing it where the engine
    /// shares snapshots, else the holder's, once the request before has given it back.
    func lease(_ id: String, open: () throws -> any Connection, close: @escaping @Sendable (any Connection) -> Void) throws -> Lease {
        sweep()
        guard let entry = lock.withLock({ () -> Entry? in
            let e = entries[id]
            e?.lastUsed = Date()
            return e
        }) else {
            throw ServiceError(
                status: 410, code: "gone",
                message: "snapshot \(id.prefix(8))… is unknown or has ended (idle for \(Int(idleSeconds)) s, or older than \(Int(lifetimeSeconds)) s); start the read again")
        }
        if let exported = entry.exported {
            let c = try open()
            do { try c.beginSnapshot(importing: exported) } catch {
                try? c.rollback()
                close(c)
                throw error
            }
            return Lease(connection: c, release: {
                try? c.rollback()
                close(c)
            })
        }
        guard entry.gate.wait(timeout: .now() + 120) == .success else {
            throw ServiceError(status: 503, code: "busy", message: "snapshot \(id.prefix(8))… was busy for 120 s; try again")
        }
        return Lease(connection: entry.holder, release: {
            self.lock.withLock { entry.lastUsed = Date() }
            entry.gate.signal()
        })
    }

    /// Ends snapshot `id`; false when there is none.
    func release(_ id: String) -> Bool {
        guard let entry = lock.withLock({ entries.removeValue(forKey: id) }) else { return false }
        end(entry)
        return true
    }

    /// Ends snapshots idle or old past their limits (not while a request is using one).
    func sweep() {
        let now = Date()
        let expired = lock.withLock { () -> [Entry] in
            let ids = entries.filter { now.timeIntervalSince($0.value.lastUsed) > idleSeconds || now.timeIntervalSince($0.value.created) > lifetimeSeconds }.map(\.key)
            return ids.compactMap { entries.removeValue(forKey: $0) }
        }
        for e in expired { end(e) }
    }

    /// Every snapshot, ended (the service stops).
    func releaseAll() {
        let all = lock.withLock { () -> [Entry] in
            defer { entries = [:] }
            return Array(entries.values)
        }
        for e in all { end(e) }
    }

    private func end(_ entry: Entry) {
        // Wait for a request still reading on the holder (it gives the gate back when done).
        DispatchQueue.global().async {
            _ = entry.gate.wait(timeout: .now() + 600)
            try? entry.holder.rollback()
            entry.holder.close()
            entry.onEnd?()
            entry.gate.signal()
        }
    }
}
