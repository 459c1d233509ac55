import FerryCore
import FerryXML
import Foundation

/// Change feeds: the served database's change capture (`ferry replicate` from the service).
/// `POST /v1/feeds` starts a capture of some tables with the snapshot where its stream begins
/// (the client's initial copy reads it, `snapshot=ID`); `GET /v1/feeds/NAME` reads the stream
/// a page at a time, long-polled, each page whole transactions in commit order; the position
/// and lag of a capture; `DELETE` removes it and what it keeps at the database.
extension ServiceHandlers {
    /// Starting or removing a capture needs a manage token, or `ferry serve --allow-feed`: a
    /// capture keeps WAL or a log at the served database until it is removed.
    func mayManageFeeds(_ r: ServiceRequest, doing: String) throws {
        guard !configuration.allowFeed, r.principal.scope < .manage else { return }
        throw ServiceError(
            status: 403, code: "forbidden",
            message: "this token may not \(doing): a manage token (from the service's --token-file) may, or any token when the service runs with --allow-feed (a feed keeps WAL or a log at the served database until it is removed)")
    }

    /// The capture's name from the path or `name=`: Ferry's own (`_ferry_r_…`), letters,
    /// digits and `_`, at most 63 characters (a PostgreSQL slot name).
    static func feedName(_ text: String?) throws -> String {
        guard let name = text?.removingPercentEncoding, !name.isEmpty, name.utf8.count <= 63,
              name.hasPrefix(CopyEngine.internalPrefix), name.utf8.allSatisfy({ ($0 >= 97 && $0 <= 122) || ($0 >= 48 && $0 <= 57) || $0 == 95 })
        else {
            throw ServiceError.badRequest("a feed's name is \(CopyEngine.internalPrefix)… of at most 63 lower-case letters, digits and _")
        }
        return name
    }

    /// The served tables named by `table=`, described; the columns `native=I:COLUMN` names (of
    /// the I-th table) in the served engine's stored form.
    func feedTables(_ r: ServiceRequest, in c: any Connection) throws -> [TableSchema] {
        let names = r.values("table")
        guard !names.isEmpty, names.count <= 10_000 else { throw ServiceError.badRequest("a feed follows 1 to 10000 tables (table=NAME, repeated)") }
        var native: [Int: Set<String>] = [:]
        for item in r.values("native") {
            let parts = item.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, let i = Int(parts[0]), names.indices.contains(i) else {
                throw ServiceError.badRequest("native= is TABLE-INDEX:COLUMN, the index of a table= (from 0)")
            }
            native[i, default: []].insert(String(parts[1]))
        }
        return try names.enumerated().map { i, n in
            let t = try served(TableName(parsing: n), in: c)
            guard !Self.isStaging(t) else { throw ServiceError.notFound(t) }
            var schema = try c.describe(t, rowEstimate: false)
            if let wanted = native[i] {
                schema.columns = try schema.columns.map { try wanted.contains($0.name) ? requested($0, native: [$0.name], table: t) : $0 }
            }
            return schema
        }
    }

    /// Runs a feed's work with the served database's address kept out of its messages.
    func feedWork<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        let shown = configuration.database.redacted
        do {
            return try await Offload.run(body)
        } catch let e as FerryError {
            // A capture the database cannot make or follow (a setting, a lost position, a keyless
            // table) is the client's to act on: 400 with the line, the address left out.
            switch e {
            case .invalidOption(let message), .notReady(let message):
                throw ServiceError.badRequest(message.replacingOccurrences(of: shown, with: "the served database"))
            default: throw e
            }
        }
    }

    func capture(_ c: any Connection) throws -> any ChangeCapture {
        guard configuration.capabilities.contains(.changeFeed), let capture = try c.changeCapture() else {
            throw ServiceError(status: 501, code: "unsupported", message: "this service's database has no change feed (its capabilities do not list change-feed)")
        }
        return capture
    }

    func startFeed(_ r: ServiceRequest) async throws -> ServiceResponse {
        try mayManageFeeds(r, doing: "start a change feed")
        let name = try Self.feedName(r.value("name"))
        let answer = try await feedWork { [self] () -> Data in
            let c = try open(write: false)
            defer { close(c) }
            let capture = try capture(c)
            let tables = try feedTables(r, in: c)
            feeds.close(name)
            let start = try capture.start(name: name, tables: tables)
            var position = ""
            let id: String
            do {
                var pending: FeedStore.Pending?
                let box = PendingBox()
                id = try snapshots.create(
                    owner: r.principal.identity, open: { try connect(write: false) },
                    begin: { holder in
                        let (p, shared) = try start.beginSnapshot(on: holder)
                        position = p.text
                        pending = FeedStore.Pending(start: start, position: p.text)
                        box.pending = pending
                        return shared
                    },
                    onEnd: { [feeds] in if let p = box.pending { feeds.snapshotEnded(name, p) } })
                if let pending { feeds.addPending(name, pending) }
            } catch {
                start.close()
                throw error
            }
            r.logger.info("change feed \(name) started for \(tables.count) tables at \(position)")
            return ChangeDocuments.feedStart(position: position, snapshot: id, streamsCascades: capture.streamsCascadedChanges)
        }
        return .xml(answer, status: 201)
    }

    func readFeed(_ r: ServiceRequest) async throws -> ServiceResponse {
        // Reading moves what the capture keeps (`confirm=`): whoever may start a feed.
        try mayManageFeeds(r, doing: "read a change feed")
        let name = try Self.feedName(r.parameters["id"])
        guard let after = r.value("after"), !after.isEmpty, after.utf8.count <= 200 else {
            throw ServiceError.badRequest("a feed's page needs after=POSITION (the last commit the client has)")
        }
        let confirm = r.value("confirm").flatMap { $0.isEmpty ? nil : $0 }
        let goal = r.value("goal").flatMap { $0.isEmpty ? nil : $0 }
        let wait = min(max(Double(r.value("wait") ?? "5") ?? 5, 0), 30)
        let pageBytes = configuration.pageBytes
        let answer = try await feedWork { [self] () -> Data in
            let c = try open(write: false)
            defer { close(c) }
            let names = r.values("table").map { TableName(parsing: $0) }
            var entry = try feeds.take(name)
            var kept = false
            defer { if !kept { feeds.done(name) } }
            if let e = entry, e.position != after || e.tables != names || e.shape != r.value("shape") {
                e.feed.close()
                entry = nil
            }
            // A feed kept from the last page may have lost its database connection since (the
            // database restarted): it is followed again from `after`, once, rather than failing
            // the first page after every restart.
            var reused = entry != nil
            while true {
                let open = try entry ?? openFeed(name, names, after: after, shape: r.value("shape"), r, c)
                do {
                    if let confirm { try open.feed.confirm(ChangePosition(confirm)) }
                    let (page, position) = try Self.page(open, goal: goal, wait: wait, pageBytes: pageBytes)
                    open.position = position
                    feeds.put(name, open)
                    kept = true
                    return page
                } catch {
                    open.feed.close()
                    guard reused else { throw error }
                    r.logger.notice("change feed \(name): the feed kept from its last page failed (\("\(error)".split(whereSeparator: \.isNewline).joined(separator: " "))); following it again from \(after)")
                    reused = false
                    entry = nil
                }
            }
        }
        return .xml(answer)
    }

    /// A feed of `name` from `after` (the start a capture left pending there, or the capture
    /// followed anew).
    func openFeed(_ name: String, _ names: [TableName], after: String, shape: String?, _ r: ServiceRequest, _ c: any Connection) throws -> FeedStore.Open {
        let tables = try feedTables(r, in: c)
        let feed: any ChangeFeed
        if let start = feeds.takePending(name, at: after) {
            do { feed = try start.follow() } catch {
                start.close()
                throw error
            }
        } else {
            feed = try capture(c).follow(name: name, tables: tables, from: ChangePosition(after))
        }
        var keys: [TableName: [Column]] = [:]
        for t in tables { keys[t.name] = t.preferredKey?.columns.compactMap { t.column(named: $0) } ?? [] }
        let open = FeedStore.Open(feed: feed, position: after, tables: names, keys: keys)
        open.shape = shape
        return open
    }

    /// One page of `entry`'s feed: whole transactions, ended at a commit once nothing more is
    /// waiting, after `maxPageSeconds` or at about `pageBytes` (a busy source's page does not
    /// grow while the client waits for it); when nothing came, after `wait` seconds (a long
    /// poll). `<reached/>` once the source's `goal` has been handed out.
    static func page(_ entry: FeedStore.Open, goal: String?, wait: Double, pageBytes: Int) throws -> (Data, String) {
        var out = ChangeDocuments.beginFeed()
        let started = Date()
        let deadline = started.addingTimeInterval(wait)
        var inTransaction = false, committed = false, reached = false
        var position = entry.position
        let columns = entry.feed.columns
        while true {
            let left = deadline.timeIntervalSinceNow
            let timeout = inTransaction ? 1 : committed ? 0 : max(0, min(left, 0.25))
            guard let event = try entry.feed.next(timeout: timeout) else {
                if inTransaction { continue }
                if let goal, try entry.feed.reached(ChangePosition(goal)) {
                    reached = true
                    break
                }
                if committed || left <= 0 { break }
                continue
            }
            try ChangeDocuments.feedEvent(event, columns: columns, keys: entry.keys, into: &out)
            switch event {
            case .begin: inTransaction = true
            case .commit(let p, _):
                inTransaction = false
                committed = true
                position = p.text
                if out.count >= pageBytes || Date().timeIntervalSince(started) >= maxPageSeconds { return (Self.endPage(out, reached: false), position) }
            default: break
            }
        }
        return (Self.endPage(out, reached: reached), position)
    }

    /// A page of a busy feed ends at the first commit after this long.
    static let maxPageSeconds = 0.1

    static func endPage(_ page: [UInt8], reached: Bool) -> Data {
        var out = page
        ChangeDocuments.endFeed(reached: reached, into: &out)
        return Data(out)
    }

    func feedPosition(_ r: ServiceRequest) async throws -> ServiceResponse {
        let name = try Self.feedName(r.parameters["id"])
        let answer = try await feedWork { [self] () -> Data in
            let c = try open(write: false)
            defer { close(c) }
            let capture = try capture(c)
            return ChangeDocuments.feedPosition(try capture.currentPosition(name: name).text, streamsCascades: capture.streamsCascadedChanges)
        }
        return .xml(answer)
    }

    func feedLag(_ r: ServiceRequest) async throws -> ServiceResponse {
        let name = try Self.feedName(r.parameters["id"])
        guard let from = r.value("from"), !from.isEmpty else { throw ServiceError.badRequest("a feed's lag needs from=POSITION (the replica's)") }
        let answer = try await feedWork { [self] () -> Data in
            let c = try open(write: false)
            defer { close(c) }
            return ChangeDocuments.lag(try capture(c).lag(name: name, from: ChangePosition(from)))
        }
        return .xml(answer)
    }

    func dropFeed(_ r: ServiceRequest) async throws -> ServiceResponse {
        try mayManageFeeds(r, doing: "remove a change feed")
        let name = try Self.feedName(r.parameters["id"])
        let answer = try await feedWork { [self] () -> Data in
            let c = try open(write: false)
            defer { close(c) }
            feeds.close(name)
            let removed = try capture(c).drop(name: name)
            if !removed.isEmpty { r.logger.info("change feed \(name) removed: \(removed.joined(separator: ", "))") }
            return ChangeDocuments.dropped(removed)
        }
        return .xml(answer)
    }
}

/// The pending start a snapshot's end lets go of (set while the snapshot begins).
final class PendingBox: @unchecked Sendable {  // unchecked: set once, before the snapshot can end
    var pending: FeedStore.Pending?
}
