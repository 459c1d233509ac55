import Foundation

/// Where a source's change stream stands, in the engine's own terms (a PostgreSQL LSN, a
/// MariaDB GTID set, a SQLite change log's sequence number), as text: what a replica records
/// beside the rows it applied, and hands back to resume. Only the engine that made it reads it.
public struct ChangePosition: Hashable, Sendable, CustomStringConvertible {
    public var text: String
    public init(_ text: String) { self.text = text }
    public var description: String { text }
}

/// One thing a change stream says, in source commit order. Row changes come in batches of one
/// table and one kind, never across a transaction's end: `begin`, then any number of row
/// changes, then `commit`.
public enum ChangeEvent {
    /// A source transaction starts.
    case begin
    /// Rows inserted, or updated with every column sent: written whole, by key (an insert
    /// applied twice leaves the same row). The batch is laid out for the feed's columns of the
    /// table (`ChangeFeed.columns`).
    case upserts(TableName, RowBatch)
    /// Rows updated where some columns were not sent because they did not change (PostgreSQL's
    /// unchanged TOAST values): only `columns` (the key among them) are in the batch, and only
    /// they are written; the others keep the target's values.
    case updates(TableName, columns: [String], RowBatch)
    /// Rows inserted or updated as the table was when they were written, before columns the
    /// feed's table has were added at the source: only `columns` are in the batch and written;
    /// the others keep the target's value, or its default for a new row.
    case partialUpserts(TableName, columns: [String], RowBatch)
    /// Rows deleted: the batch holds their keys (the table's key columns, in key order), also
    /// the old key of an update that changed it (then an `upserts` of the new row follows).
    case deletes(TableName, RowBatch)
    /// Every row of these tables deleted.
    case truncate([TableName])
    /// The transaction committed at the source; after it the stream stands at `position`.
    case commit(ChangePosition, at: Date?)
}

/// A source's changes, as they are committed, from a position on. Used from one thread.
public protocol ChangeFeed: AnyObject {
    /// The columns each followed table's batches hold (its key among them), as the source
    /// described the table when the feed was opened.
    var columns: [TableName: [Column]] { get }
    /// The next event, or nil when none arrived within `timeout` seconds (the source is idle).
    func next(timeout: TimeInterval) throws -> ChangeEvent?
    /// Everything up to `position` (a commit's) is durably applied at the target: the source
    /// may release what it kept for it (PostgreSQL: the slot's confirmed position).
    func confirm(_ position: ChangePosition) throws
    /// True once every transaction the source committed up to `position`
    /// (`ChangeCapture.currentPosition`) has been handed out. Where it is not yet and the
    /// stream is idle, asks the source where it stands, so that a later call can tell.
    func reached(_ position: ChangePosition) throws -> Bool
    func close()
}

/// What a source keeps for a replica while it follows, made once (`ChangeCapture.start`) and
/// kept until dropped. Its stream begins where the initial copy's snapshot ends, so that the
/// copy and the stream neither overlap nor leave a gap.
public protocol CaptureStart: AnyObject {
    /// Begins, on `connection` (the initial copy's source connection, while this object is
    /// open), a read snapshot that sees exactly the data before the stream's start. Returns
    /// that start, and an id other connections import the snapshot with
    /// (`Connection.beginSnapshot(importing:)`), nil where they cannot (one connection reads).
    func beginSnapshot(on connection: any Connection) throws -> (position: ChangePosition, shared: String?)
    /// Starts following from the start (ends the snapshot's export: begin it first).
    func follow() throws -> any ChangeFeed
    /// Lets go without following (the capture stays; `ChangeCapture.drop` removes it).
    func close()
}

/// A source engine's change capture under a name of Ferry's (`_ferry_…`), behind the driver
/// seam: PostgreSQL logical decoding, later the MariaDB binlog and SQLite capture triggers.
public protocol ChangeCapture: AnyObject {
    /// Creates the capture of `tables` named `name` at the source, where its stream begins and
    /// a snapshot of the data before it. Refuses, before anything is created, a table whose
    /// changes could not be applied by key.
    func start(name: String, tables: [TableSchema]) throws -> any CaptureStart
    /// Follows the capture `name` from `position` (a commit's, as recorded at the target).
    func follow(name: String, tables: [TableSchema], from position: ChangePosition) throws -> any ChangeFeed
    /// Removes everything the capture `name` made at the source; says what it removed.
    func drop(name: String) throws -> [String]
    /// Where the source's changes for capture `name` stand now: what `--until-caught-up` waits for.
    func currentPosition(name: String) throws -> ChangePosition
    /// How far the source stands past `position` (what the replica recorded), and what the
    /// source keeps for the replica meanwhile: `ferry replicate --status`.
    func lag(name: String, from position: ChangePosition) throws -> ChangeLag
    /// False where rows that foreign-key actions (ON DELETE CASCADE, SET NULL) change at the
    /// source are not in the stream (MariaDB's binlog): the target's own keys must repeat them.
    var streamsCascadedChanges: Bool { get }
}

extension ChangeCapture {
    public var streamsCascadedChanges: Bool { true }
}

/// Thrown by a feed when a followed table gained columns at the source since the feed was
/// opened: the replicator adds them at the target and reads the stream again, from the last
/// position it recorded, with the table as it is now.
public struct ColumnsAdded: Error, CustomStringConvertible {
    public let table: TableName
    public init(table: TableName) { self.table = table }
    public var description: String { "columns were added to \(table) at the source" }
}

/// Where a source stands beside a replica's recorded position.
public struct ChangeLag: Codable, Sendable {
    /// The source's position now.
    public var sourcePosition: String
    /// How many changes the replica has still to apply, in the engine's unit, and that unit
    /// ("bytes of WAL", "transactions", "changes").
    public var behind: Int64
    public var unit: String
    /// Bytes the source keeps for this replica until it confirms them (a PostgreSQL slot's
    /// WAL); nil where it keeps nothing of its own for it.
    public var retainedBytes: Int64?
    public init(sourcePosition: String, behind: Int64, unit: String, retainedBytes: Int64? = nil) {
        self.sourcePosition = sourcePosition
        self.behind = behind
        self.unit = unit
        self.retainedBytes = retainedBytes
    }
}

/// Events a feed decoded and has not handed out yet, oldest first (a feed's buffer).
public struct ChangeQueue {
    private var events: [ChangeEvent] = []
    private var at = 0
    public init() {}

    public var isEmpty: Bool { at == events.count }

    public mutating func append(_ e: ChangeEvent) { events.append(e) }

    /// The oldest event, or nil.
    public mutating func pop() -> ChangeEvent? {
        guard at < events.count else { return nil }
        let e = events[at]
        at += 1
        if at == events.count {
            events.removeAll(keepingCapacity: true)
            at = 0
        }
        return e
    }
}

/// Row changes gathered into `ChangeEvent`s as a feed decodes them: consecutive rows of one
/// table and one kind in one batch, handed out (into `ready`) at a full batch, when the kind or
/// the table changes and before any other event, so that the order of the source's writes is
/// kept. A feed takes the batch for a row (`take`), appends the row's values and puts it back
/// (`put`).
public struct ChangeBatcher {
    public enum Kind: Equatable {
        case upserts, deletes
        case updates([String])
        case partialUpserts([String])
    }

    private struct Pending {
        let kind: Kind
        let table: TableName
        var rows = 0
    }

    /// Events handed out and not yet taken by the feed's reader, oldest first.
    public private(set) var ready = ChangeQueue()
    private var pending: Pending?
    /// The pending rows' batch; nil while a feed holds it (one owner: no copy on append).
    private var batch: RowBatch?
    /// Rows a batch holds at most (then it is handed out and another begun).
    public let limit: Int

    public init(limit: Int = 4096) { self.limit = limit }

    /// True when no rows are being gathered and nothing waits to be taken.
    public var isIdle: Bool { pending == nil && ready.isEmpty }

    /// The batch of `kind` for `table`, taken out of the batcher (its one owner while a row is
    /// appended): the one being gathered, or a new one laid out for `columns`.
    public mutating func take(_ kind: Kind, _ table: TableName, columns: [Column]) -> RowBatch {
        if let p = pending, p.kind == kind, p.table == table, let b = batch {
            batch = nil
            return b
        }
        flush()
        pending = Pending(kind: kind, table: table)
        return RowBatch(types: columns.map(\.logicalType), capacity: 64)
    }

    /// Puts the batch `take` gave back with one more row; hands it out once full.
    public mutating func put(_ b: RowBatch) {
        guard pending != nil else { return }
        pending!.rows += 1
        batch = b
        if b.isFull(rows: pending!.rows, limit: limit) { flush() }
    }

    /// Hands out the rows being gathered.
    public mutating func flush() {
        guard let p = pending else { return }
        pending = nil
        guard let b = batch, p.rows > 0 else {
            batch = nil
            return
        }
        batch = nil
        switch p.kind {
        case .upserts: ready.append(.upserts(p.table, b))
        case .deletes: ready.append(.deletes(p.table, b))
        case .updates(let names): ready.append(.updates(p.table, columns: names, b))
        case .partialUpserts(let names): ready.append(.partialUpserts(p.table, columns: names, b))
        }
    }

    /// Hands out `event` after the rows gathered before it.
    public mutating func append(_ event: ChangeEvent) {
        flush()
        ready.append(event)
    }

    /// The oldest event handed out, or nil.
    public mutating func pop() -> ChangeEvent? { ready.pop() }
}
