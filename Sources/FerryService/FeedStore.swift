import FerryCore
import Foundation

/// The change feeds the service keeps open between a client's requests (`GET /v1/feeds/NAME`),
/// so that each page continues the source's stream where the last ended instead of reopening
/// it; and captures just started (`POST /v1/feeds`), whose stream the first page follows.
/// A feed unused for `idleSeconds` is closed (the next page reopens it from its position).
final class FeedStore: @unchecked Sendable {  // unchecked: every field is behind `lock`
    /// A feed between two pages: where the last page ended, and for which tables.
    final class Open {
        let feed: any ChangeFeed
        var position: String
        let tables: [TableName]
        /// The client's `shape=` when it was opened: continued only for the same.
        var shape: String?
        let keys: [TableName: [Column]]
        var lastUsed = Date()
        init(feed: any ChangeFeed, position: String, tables: [TableName], keys: [TableName: [Column]]) {
            self.feed = feed
            self.position = position
            self.tables = tables
            self.keys = keys
        }
    }

    /// A capture just started, whose snapshot a client is copying: followed by the first page
    /// asked from its position, or let go when its snapshot ends unfollowed.
    final class Pending: @unchecked Sendable {  // unchecked: `start` is used only by whoever takes it under the store's lock
        let start: any CaptureStart
        let position: String
        init(start: any CaptureStart, position: String) {
            self.start = start
            self.position = position
        }
    }

    let idleSeconds: Double
    private let lock = NSCondition()
    private var open: [String: Open] = [:]
    private var pending: [String: Pending] = [:]
    /// Feeds a request is reading a page of: another request for one waits its turn (a client
    /// killed mid-page, then started again, must not open a second reader of one slot).
    private var busy: Set<String> = []

    init(idleSeconds: Double = 300) { self.idleSeconds = idleSeconds }

    /// The feed of `name` for one page, once no other request is reading it (at most `wait`
    /// seconds): the open one, or nil (open it). Give it back with `put` or `done`.
    func take(_ name: String, wait: Double = 40) throws -> Open? {
        sweep()
        lock.lock()
        defer { lock.unlock() }
        let deadline = Date().addingTimeInterval(wait)
        while busy.contains(name) {
            guard lock.wait(until: deadline) else {
                throw ServiceError(status: 503, code: "busy", message: "another request has been reading this change feed for \(Int(wait)) s; try again")
            }
        }
        busy.insert(name)
        return open.removeValue(forKey: name)
    }

    /// Puts a feed back after a page.
    func put(_ name: String, _ feed: Open) {
        feed.lastUsed = Date()
        let replaced = lock.withLock { () -> Open? in
            let old = open[name]
            open[name] = feed
            busy.remove(name)
            lock.broadcast()
            return old
        }
        replaced?.feed.close()
    }

    /// The page of `name` ended without a feed to keep (it failed, and its feed was closed).
    func done(_ name: String) {
        lock.withLock {
            busy.remove(name)
            lock.broadcast()
        }
    }

    func addPending(_ name: String, _ p: Pending) {
        let old = lock.withLock { () -> Pending? in
            let old = pending[name]
            pending[name] = p
            return old
        }
        old?.start.close()
    }

    /// The capture just started under `name` when its stream begins at `position`: taken.
    func takePending(_ name: String, at position: String) -> (any CaptureStart)? {
        lock.withLock { () -> (any CaptureStart)? in
            guard let p = pending[name], p.position == position else { return nil }
            pending[name] = nil
            return p.start
        }
    }

    /// The snapshot of `p` ended: let go of its start unless a page followed it.
    func snapshotEnded(_ name: String, _ p: Pending) {
        let mine = lock.withLock { () -> Bool in
            guard pending[name] === p else { return false }
            pending[name] = nil
            return true
        }
        if mine { p.start.close() }
    }

    /// Closes whatever is kept for `name` (its capture is being removed).
    func close(_ name: String) {
        let (o, p) = lock.withLock { (open.removeValue(forKey: name), pending.removeValue(forKey: name)) }
        o?.feed.close()
        p?.start.close()
    }

    /// Closes feeds unused for `idleSeconds`.
    func sweep() {
        let now = Date()
        let idle = lock.withLock { () -> [Open] in
            let names = open.filter { now.timeIntervalSince($0.value.lastUsed) > idleSeconds }.map(\.key)
            return names.compactMap { open.removeValue(forKey: $0) }
        }
        for o in idle { o.feed.close() }
    }

    /// Everything closed (the service stops).
    func closeAll() {
        let (o, p) = lock.withLock { () -> ([Open], [Pending]) in
            defer {
                open = [:]
                pending = [:]
            }
            return (Array(open.values), Array(pending.values))
        }
        for f in o { f.feed.close() }
        for s in p { s.start.close() }
    }
}
