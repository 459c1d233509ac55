import FerryCore
import Foundation

/// A service's or a plugin's change feed (`change-feed`, docs/xml-protocol.md): the capture is
/// made at the served database (`POST /v1/feeds`), the initial copy reads the snapshot the
/// service holds where its stream begins, and the stream comes a page at a time
/// (`GET /v1/feeds/NAME`), each page whole transactions, the last applied position confirmed
/// with the next page.
final class HTTPChangeCapture: ChangeCapture {
    let client: ProtocolClient
    var endpoint: Endpoint { client.endpoint }
    /// Whether the served database's stream carries cascaded changes (learned from the service).
    private(set) var streamsCascadedChanges = true

    init(client: ProtocolClient) { self.client = client }

    /// `table=` of each table, `native=I:COLUMN` for each column of the I-th that travels in the
    /// served engine's stored form (a SQLite file's values between SQLite files), and `shape=`,
    /// a hash of every table's columns: the service continues a feed it keeps open only for the
    /// same shape (after a column was added, the feed is opened again with it).
    static func tableItems(_ tables: [TableSchema]) -> [(String, String)] {
        var h = StableHash()
        for t in tables {
            h.bytes(t.name.description.utf8)
            for c in t.columns { h.bytes((c.name + (c.travelsNatively ? "\u{1}" : "")).utf8) }
        }
        return tables.map { ("table", $0.name.description) }
            + tables.enumerated().flatMap { i, t in t.columns.filter(\.travelsNatively).map { ("native", "\(i):\($0.name)") } }
            + [("shape", String(h.value, radix: 16))]
    }

    func start(name: String, tables: [TableSchema]) throws -> any CaptureStart {
        HTTPCaptureStart(capture: self, name: name, tables: tables)
    }

    func follow(name: String, tables: [TableSchema], from position: ChangePosition) throws -> any ChangeFeed {
        // The served database's stream, and whether it carries cascades: asked once.
        let answer = try ChangeDocuments.decodeFeedPosition(try expect("GET", ProtocolRoute.feedPosition.target(id: name)))
        streamsCascadedChanges = answer.streamsCascades
        // Followed from what the target recorded, which it committed: confirmed with the first
        // page. A feed the service kept from a run that ended before its last confirm went out
        // would otherwise wait for one that never comes, and never report the goal reached.
        return HTTPChangeFeed(capture: self, name: name, tables: tables, after: position.text, confirmed: position.text)
    }

    func drop(name: String) throws -> [String] {
        try ChangeDocuments.decodeDropped(try expect("DELETE", ProtocolRoute.dropFeed.target(id: name)))
    }

    func currentPosition(name: String) throws -> ChangePosition {
        let answer = try ChangeDocuments.decodeFeedPosition(try expect("GET", ProtocolRoute.feedPosition.target(id: name)))
        streamsCascadedChanges = answer.streamsCascades
        return ChangePosition(answer.position)
    }

    func lag(name: String, from position: ChangePosition) throws -> ChangeLag {
        try ChangeDocuments.decodeLag(try expect("GET", ProtocolRoute.feedLag.target(id: name) + ProtocolRoute.query([("from", position.text)])))
    }

    func noteCascades(_ streamed: Bool) { streamsCascadedChanges = streamed }

    /// A request whose refusal is one line: a service's 400 (a capture it cannot make: a
    /// keyless table, a binlog setting, a lost position) as the service said it.
    func expect(_ method: String, _ target: String, body: Data? = nil) throws -> Data {
        let reply = try client.send(method, target, body: body)
        guard (200..<300).contains(reply.status) else { throw refusal(reply) }
        return reply.body
    }

    func refusal(_ reply: HTTPReply) -> any Error {
        let decoded = XMLDocuments.decodeError(reply.body)
        if reply.status == 409, decoded?.code == "columns_added", let t = decoded?.table { return ColumnsAdded(table: TableName(parsing: t)) }
        if [400, 403, 501].contains(reply.status), let message = decoded?.message {
            return FerryError.notReady("\(client.transport.peer) (\(endpoint.redacted)): \(message)")
        }
        return client.error(reply, table: nil)
    }
}

/// A capture just made at the service: its snapshot, held by the service, read by the copy.
final class HTTPCaptureStart: CaptureStart {
    let capture: HTTPChangeCapture
    let name: String
    let tables: [TableSchema]
    private var started: (position: String, snapshot: String)?
    private var done = false

    init(capture: HTTPChangeCapture, name: String, tables: [TableSchema]) {
        self.capture = capture
        self.name = name
        self.tables = tables
    }

    func beginSnapshot(on connection: any Connection) throws -> (position: ChangePosition, shared: String?) {
        let query = ProtocolRoute.query([("name", name)] + HTTPChangeCapture.tableItems(tables))
        let answer = try ChangeDocuments.decodeFeedStart(try capture.expect("POST", ProtocolRoute.startFeed.target() + query))
        started = (answer.position, answer.snapshot)
        capture.noteCascades(answer.streamsCascades)
        try connection.beginSnapshot(importing: answer.snapshot)
        return (ChangePosition(answer.position), answer.snapshot)
    }

    func follow() throws -> any ChangeFeed {
        guard let started, !done else { throw FerryError.notReady("a capture's start is followed once, after its snapshot began") }
        done = true
        // The snapshot's end lets the service follow the capture from its start.
        _ = try? capture.client.send("DELETE", ProtocolRoute.releaseSnapshot.target(id: started.snapshot))
        return HTTPChangeFeed(capture: capture, name: name, tables: tables, after: started.position)
    }

    func close() {
        guard !done else { return }
        done = true
        if let started { _ = try? capture.client.send("DELETE", ProtocolRoute.releaseSnapshot.target(id: started.snapshot)) }
    }
}

/// The stream of a service's capture, a page at a time.
final class HTTPChangeFeed: ChangeFeed {
    let capture: HTTPChangeCapture
    let name: String
    let columns: [TableName: [Column]]
    private let tableItems: [(String, String)]
    private var queue = ChangeQueue()
    /// The last commit received (the next page continues after it), the last the target
    /// applied (confirmed with the next page), and the goal asked about.
    private var after: String
    private var confirmed: String?
    private var goal: String?
    private var reachedGoal: String?

    init(capture: HTTPChangeCapture, name: String, tables: [TableSchema], after: String, confirmed: String? = nil) {
        self.capture = capture
        self.name = name
        var columns: [TableName: [Column]] = [:]
        for t in tables { columns[t.name] = t.columns }
        self.columns = columns
        tableItems = HTTPChangeCapture.tableItems(tables)
        self.after = after
        self.confirmed = confirmed
    }

    func next(timeout: TimeInterval) throws -> ChangeEvent? {
        if let e = queue.pop() { return e }
        try fetch(wait: timeout)
        return queue.pop()
    }

    private func fetch(wait: TimeInterval) throws {
        var items = tableItems + [("after", after), ("wait", String(format: "%.2f", max(0, min(wait, 30))))]
        if let confirmed { items.append(("confirm", confirmed)) }
        if let goal { items.append(("goal", goal)) }
        let reply = try capture.client.send("GET", ProtocolRoute.readFeed.target(id: name) + ProtocolRoute.query(items))
        guard (200..<300).contains(reply.status) else { throw capture.refusal(reply) }
        let page: (events: [ChangeEvent], reached: Bool)
        do {
            page = try ChangeDocuments.decodeFeed(reply.body, columns: { [columns] table, names in
                guard let all = columns[table] else {
                    throw FerryError.notReady("the service's feed sent changes of \(table), which this replica does not follow")
                }
                return try names.map { n in
                    guard let c = all.first(where: { $0.name == n }) else { throw ColumnsAdded(table: table) }
                    return c
                }
            }, layout: { [columns] table in columns[table]?.map(\.name) ?? [] })
        } catch let e as XMLWireError {
            throw FerryError.connectionFailed(endpoint: capture.endpoint.redacted, reason: "\(capture.client.transport.peer) sent a malformed change feed page (\(e))")
        }
        for e in page.events {
            if case .commit(let p, _) = e { after = p.text }
            queue.append(e)
        }
        if page.reached { reachedGoal = goal }
    }

    func confirm(_ position: ChangePosition) throws { confirmed = position.text }

    func reached(_ position: ChangePosition) throws -> Bool {
        if queue.isEmpty, reachedGoal == position.text { return true }
        goal = position.text
        return false
    }

    func close() {}
}
