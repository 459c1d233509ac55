import FerryCore
import Foundation

/// What the protocol's handlers serve, whatever carries the requests: the database, whether
/// it may be written, which tables, and the limits.
public struct ServiceConfiguration: Sendable {
    /// The database served (any registered driver).
    public var database: Endpoint
    public var registry: DriverRegistry
    /// Connections are opened as targets (a new SQLite file is created by the first write).
    public var writable: Bool
    /// Tables served (empty: every table the catalog lists).
    public var tables: [TableName]
    /// Largest request body accepted (413 beyond) — of a document the service holds whole.
    public var maxBodyBytes: Int
    /// Bytes of whole request bodies (short documents: change sets, pushes, schemas) held at
    /// once by all requests together (`--max-bodies-mb`); past it a request is answered 503 busy.
    public var maxHeldBodyBytes: Int = 64 << 20
    /// Largest rows load one streamed `POST …/rows` may carry (413 beyond): decoded and
    /// written as it arrives, never held, so this bounds one transaction rather than memory.
    public var maxLoadBytes: Int
    /// Rows per page when the client does not ask, and the most it may ask for.
    public var defaultPageRows: Int
    public var maxPageRows: Int
    /// Bytes of rows after which a page ends early (with `<next>`), whatever its row limit,
    /// unless the request asks for another size (`bytes=`, at most `maxPageBytes`).
    public var pageBytes: Int
    /// The largest page in bytes a request may ask for. The answer streams with the client's
    /// pace (a piece at a time, never held), so a large page costs the service no memory; its
    /// bound is on a client that cannot pause, which asks for no size.
    public var maxPageBytes: Int
    /// Read snapshots held for clients at once, and when an unused or old one ends.
    public var maxSnapshots: Int
    public var snapshotIdleSeconds: Double
    public var snapshotLifetimeSeconds: Double
    /// A load's transient staging table (`_ferry_append_…`, `_ferry_upsert_…`, …) unused for this
    /// long is taken for abandoned (its client killed) and dropped.
    public var stagingIdleSeconds: Double = 1_800
    /// Database connections requests hold at once (0: no limit), and how long a request waits
    /// in line for one before it is answered 503 busy (see `ConnectionSlots`).
    public var maxConnections: Int = 16
    /// Read snapshots one token (one label) may hold at once.
    public var maxSnapshotsPerToken: Int = 8
    public var connectionWaitSeconds: Double = 30
    /// What `GET /v1/capabilities` announces (what the served driver can do; a transport that
    /// serves it read-only announces less).
    public var name: String
    public var version: String
    public var capabilities: Capabilities
    /// The engine whose stored form rows may be read and written in (`native=` columns): the
    /// served engine when its dialect keeps its own stored form (SQLite), else nil.
    public let storedForm: Engine?
    /// The transport keeps each answer's body within windows its client gives (a driver
    /// plugin's pipe: `flow-control="windows"`); HTTP has TCP's own.
    public var windows = false
    /// Any caller may start and remove a change feed (`ferry serve --allow-feed`); otherwise
    /// only a manage token: a feed keeps WAL or a log at the served database until removed.
    public var allowFeed: Bool

    public init(
        database: Endpoint, registry: DriverRegistry, writable: Bool, tables: [TableName] = [], maxBodyBytes: Int = 64 << 20, maxLoadBytes: Int = 1 << 30,
        defaultPageRows: Int = 50_000, maxPageRows: Int = 1_000_000, pageBytes: Int = 8 << 20, maxPageBytes: Int = 1 << 30, maxSnapshots: Int = 16,
        snapshotIdleSeconds: Double = 300, snapshotLifetimeSeconds: Double = 3_600, name: String = "ferry", version: String = "",
        capabilities: Capabilities = .all, allowFeed: Bool = false
    ) {
        self.allowFeed = allowFeed
        self.database = database
        self.registry = registry
        self.writable = writable
        self.tables = tables
        self.maxBodyBytes = maxBodyBytes
        self.maxLoadBytes = maxLoadBytes
        self.defaultPageRows = defaultPageRows
        self.maxPageRows = maxPageRows
        self.pageBytes = pageBytes
        self.maxPageBytes = max(maxPageBytes, pageBytes)
        self.maxSnapshots = maxSnapshots
        self.snapshotIdleSeconds = snapshotIdleSeconds
        self.snapshotLifetimeSeconds = snapshotLifetimeSeconds
        self.name = name
        self.version = version
        self.capabilities = capabilities
        let dialect = try? registry.driver(for: database).dialect
        storedForm = dialect.flatMap { $0.keepsStoredForm(fromEngine: $0.engine) ? $0.engine : nil }
    }
}
