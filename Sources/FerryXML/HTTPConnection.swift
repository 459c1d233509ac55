import FerryCore
import Foundation

/// A Ferry XML service used like a database. Every call is one request; a load is made safe
/// with the service's staging operations: a created table is dropped when the load fails, and
/// rows appended to an existing table go into a staging table first and are merged into it in
/// one server-side transaction at commit.
public final class HTTPConnection: Connection {
    public let endpoint: Endpoint
    public let dialect: any Dialect
    public var defaultSchema: String { "" }
    let client: ProtocolClient
    /// Tables created since `begin`, and appends waiting to be merged (staging → target).
    private var created: Set<TableName> = []
    private var pendingMerges: [(staging: TableName, target: TableName, columns: [Column])] = []
    /// Serial counters to move once the merges are in (a merge applies at commit).
    private var pendingSerials: [TableName] = []
    /// Keyed writes waiting for `commit`, by target table: staged upserts and deletes, applied
    /// by one `POST …/apply` each.
    private var pendingApplies: [TableName: PendingApply] = [:]
    private var inTransaction = false
    public private(set) var committedCounts: MergeCounts?
    /// Keyed writes in a transaction are staged and applied by `commit`.
    public var stagesKeyedWrites: Bool { true }
    /// The service records which token's loads made each staging table.
    public var keepsLoadState: Bool { false }
    /// The service's read snapshot this connection reads from (`POST /v1/snapshots`), and
    /// whether this connection began it (and ends it) or joined another's.
    private(set) var snapshotID: String?
    private var ownsSnapshot = false
    /// Set by `prepareToApplyChanges`: this connection applies a replica's changes, each
    /// transaction sent whole at commit (`POST /v1/replicas/NAME/transactions`).
    var replica: ReplicaTransaction?

    struct PendingApply {
        var upserts: TableName?
        /// The columns the upserts were staged in (what refused ones come back in).
        var upsertColumns: [Column] = []
        var deletes: TableName?
        var key: [String]
        var expect: Int64?
        var resetSerial = false
        var watermark: WatermarkMove?
    }
    /// Rows asked for per page when reading (the service caps it at its own maximum, and ends a
    /// page at its page size in bytes — 8 MiB for `ferry serve` — whatever the rows, which is what
    /// bounds memory). Each page is a request, and a reader opened on the service's side: pages
    /// of 50,000 rows of two integers cost a fifth of a copy's time through the service.
    public var pageRows = 1_000_000
    /// `--on-error reject`: the rows the service set aside for this connection's loads.
    private var refusals: RefusedRowsKept?
    /// The bytes of a page asked for (`bytes=`) where the transport pauses reading: the service
    /// ends a page there instead of at its own page size, which bounds a client that cannot pause.
    /// Every page is a request, a reader opened on the service's side and, worst, a pipeline
    /// drained on both sides (the service reads and encodes its first batch while the client's
    /// writer waits): 1,000,000 bench_orders rows from `ferry serve` into SQLite took 3.85-4.17 s
    /// in 8 MiB pages (42 of them), 3.08-3.31 s in two.
    public static let largePageBytes = 1 << 30
    /// `bytes=` of this connection's reads; nil: the service's page size.
    public var pageBytes: Int? { client.transport.pausesReading ? Self.largePageBytes : nil }
    /// The most rows a read of the largest keys first may ask for: such a read is one page.
    public var descendingPageRows: Int { min(pageRows, 50_000) }

    /// What the service or plugin declared (`GET /v1/capabilities`, or a plugin's handshake);
    /// a service that predates the endpoint can do everything.
    public let capabilities: Capabilities
    /// The largest rows load one streamed request may carry: the service's `max-load`, else
    /// its `max-body`, when it says.
    let loadLimit: Int?
    /// The largest document the service holds whole (`max-body`), where it said.
    let bodyLimit: Int?

    /// A connection to the service at `endpoint` (http or https).
    public convenience init(endpoint: Endpoint) throws {
        try self.init(transport: URLSessionTransport(endpoint: endpoint))
    }

    /// A connection over `transport`. `capabilities` when the transport knows them already
    /// (a plugin's handshake); else they are asked for.
    public init(transport: any ProtocolTransport, capabilities declared: Capabilities? = nil, storedForm declaredForm: Engine? = nil, maxBody declaredMaxBody: Int? = nil,
                maxLoad declaredMaxLoad: Int? = nil) throws {
        endpoint = transport.endpoint
        client = ProtocolClient(transport: transport)
        var storedForm = declaredForm
        var loadLimit = declaredMaxLoad ?? declaredMaxBody
        var bodyLimit = declaredMaxBody
        // A service that answered its capabilities with the token has shown it is a Ferry
        // service of this protocol that takes the token; others (a plugin's handshake, a
        // service older than the endpoint) list their tables once up front instead.
        var answered = false
        if let declared {
            capabilities = declared
        } else {
            // One request up front: a wrong URL or token fails here, with a clear message.
            let reply = try client.send("GET", ProtocolRoute.capabilities.target())
            if reply.status == 404 && XMLDocuments.decodeError(reply.body)?.message.hasPrefix("no such endpoint") == true {
                capabilities = Capabilities.all.subtracting([.changeFeed, .replicaApply, .sinceFilter, .applyWatermark, .rejects])
            } else {
                guard (200..<300).contains(reply.status) else { throw client.error(reply, table: nil) }
                let report = try XMLDocuments.decodeCapabilities(reply.body)
                guard report.protocolVersion == ProtocolRoute.version else {
                    throw FerryError.connectionFailed(
                        endpoint: endpoint.redacted,
                        reason: "the service speaks protocol version \(report.protocolVersion); this Ferry speaks \(ProtocolRoute.version): use a Ferry of the same version on both sides")
                }
                capabilities = report.capabilities
                storedForm = report.storedForm
                loadLimit = report.maxLoad ?? report.maxBody
                bodyLimit = report.maxBody
                answered = true
            }
        }
        dialect = HTTPDialect(storedForm: storedForm)
        self.loadLimit = loadLimit
        self.bodyLimit = bodyLimit
        // Not for a service that answered: its table list counts every table's rows (1,000,000
        // of bench_orders and 5,000,000 of bench_narrow in a served SQLite file: 84 ms), and a
        // copy lists them again when it chooses its tables.
        guard !answered else { return }
        do {
            _ = try XMLDocuments.decodeTables(client.expect("GET", ProtocolRoute.tables.target()))
        } catch let e as XMLWireError {
            throw FerryError.connectionFailed(endpoint: endpoint.redacted, reason: "\(transport.peer) answered with a malformed table list (\(e))")
        }
    }

    public func close() {
        endSnapshot()
        client.transport.release()
    }

    public func listTables() throws -> [TableInfo] {
        try XMLDocuments.decodeTables(client.expect("GET", ProtocolRoute.tables.target()))
    }

    /// `?rows=no`: the service lists the names without counting (a service or plugin that does
    /// not know the parameter counts, and the counts are dropped here).
    public func listTableNames() throws -> [TableName] {
        try XMLDocuments.decodeTables(client.expect("GET", ProtocolRoute.tables.target() + ProtocolRoute.query([("rows", "no")]))).map(\.name)
    }

    /// `?snapshot=ID` while this connection reads inside the service's snapshot.
    var snapshotQuery: String { snapshotID.map { ProtocolRoute.query([("snapshot", $0)]) } ?? "" }

    public func countRows(_ table: TableName) throws -> Int64 {
        try XMLDocuments.decodeCount(client.expect("GET", ProtocolRoute.count.target(table: table) + snapshotQuery, table: table))
    }

    public func describe(_ table: TableName) throws -> TableSchema {
        try XMLDocuments.decodeSchema(client.expect("GET", ProtocolRoute.schema.target(table: table) + snapshotQuery, table: table))
    }

    public func tableExists(_ table: TableName) throws -> Bool {
        let reply = try client.send("GET", ProtocolRoute.schema.target(table: table))
        if reply.status == 404 { return false }
        guard (200..<300).contains(reply.status) else { throw client.error(reply, table: table) }
        return true
    }

    public func reader(table: TableSchema, columns: [Column], keyRange: KeyRange?, batchSize: Int) throws -> any BatchReader {
        if keyRange?.filter != nil {
            throw FerryError.invalidOption(
                "--where is SQL, which the XML service does not take (it has no structured filter yet): copy \(table.name) without --where, or read from the database itself")
        }
        if keyRange?.keys != nil {
            throw FerryError.invalidOption("the XML service reads by key range or key-hash bucket, not by a list of keys")
        }
        if let since = keyRange?.since {
            // Structured parameters the service renders itself; travels with every page of the walk.
            try capabilities.require(.sinceFilter, for: "--incremental (rows above a watermark)", endpoint: endpoint.redacted)
            guard let column = table.column(named: since.column) else { throw FerryError.columnNotFound(table: table.name, column: since.column) }
            var plain = keyRange
            plain?.since = nil
            let items = [("sincecolumn", since.column), ("since", WireValue.keyText(since.value, type: column.logicalType))]
            return try reader(table: table, columns: columns, keyRange: plain, batchSize: batchSize, filters: items)
        }
        return try reader(table: table, columns: columns, keyRange: keyRange, batchSize: batchSize, filters: [])
    }

    /// `reader`, with `filters` (structured parameters) sent with every request of the read.
    func reader(table: TableSchema, columns: [Column], keyRange: KeyRange?, batchSize: Int, filters: [(String, String)]) throws -> any BatchReader {
        if let buckets = keyRange?.buckets, !capabilities.contains(.digests), var plain = keyRange {
            // A peer without the digests' second form hashes keys otherwise, or not at all: its
            // rows are read as they come (bounds and all, where it pages by key) and filtered here.
            plain.buckets = nil
            plain.limit = nil  // a limit counts the rows that pass the filter
            let inner = try reader(table: table, columns: columns, keyRange: plain.after == nil && plain.upTo == nil && !plain.descending ? nil : plain, batchSize: batchSize, filters: filters)
            return try BucketFilteringReader(inner, columns: columns, filter: buckets, table: table.name, limit: keyRange?.limit)
        }
        if let range = keyRange, !range.key.isEmpty, range.key != (table.preferredKey?.columns ?? []) {
            throw FerryError.invalidOption("the XML service pages by the table's key (\((table.preferredKey?.columns ?? []).joined(separator: ", "))), not by \(range.key.joined(separator: ", "))")
        }
        // Largest keys first: one page (the service never follows a descending page with another).
        if keyRange?.descending == true, keyRange?.limit.map({ $0 > descendingPageRows }) ?? true || keyRange?.buckets != nil {
            throw FerryError.invalidOption("the http driver reads largest keys first only a page at a time (a limit of at most \(descendingPageRows) rows)")
        }
        guard capabilities.contains(.keyedReads) else {
            // Rows come in the plugin's own order, all in one answer: no bounds, no paging.
            if let r = keyRange, r.after != nil || r.upTo != nil || r.limit != nil || r.descending || r.buckets != nil || r.keys != nil {
                try capabilities.require(.keyedReads, for: "reading \(table.name) by key range", endpoint: endpoint.redacted)
            }
            return try HTTPReader(connection: self, table: table, columns: columns, batchSize: batchSize, after: nil, upTo: nil, limit: nil, buckets: filters, keyed: false)
        }
        guard let buckets = keyRange?.buckets else {
            return try HTTPReader(connection: self, table: table, columns: columns, batchSize: batchSize,
                                  after: keyRange?.after, upTo: keyRange?.upTo, limit: keyRange?.limit, descending: keyRange?.descending ?? false, buckets: filters)
        }
        // Bucket filters travel as query parameters, a bounded number of buckets per walk: the
        // service filters next to its data, one walk after the other.
        let parts = Self.bucketParameters(buckets)
        if parts.count > 1 && (keyRange?.limit != nil || keyRange?.after != nil || keyRange?.upTo != nil) {
            throw FerryError.invalidOption("a bucket filter of more than \(Self.bucketsPerRequest) buckets reads whole walks one after the other: it takes no limit or key bounds")
        }
        var index = 0
        return ChainedReader {
            guard index < parts.count else { return nil }
            defer { index += 1 }
            return try HTTPReader(connection: self, table: table, columns: columns, batchSize: batchSize,
                                  after: keyRange?.after, upTo: keyRange?.upTo, limit: keyRange?.limit, buckets: parts[index] + filters)
        }
    }

    /// Buckets per request, so that a URL stays well under servers' request-line limits.
    static let bucketsPerRequest = 1_000

    /// `bucketkey=` and `buckets=MODULUS:r1,r2,…` parameters, split into requests of at most
    /// `bucketsPerRequest` buckets.
    static func bucketParameters(_ filter: BucketFilter) -> [[(String, String)]] {
        let key = filter.key.map { ("bucketkey", $0.name) } + [("keyhash", filter.hash.rawValue)]
        guard !filter.residues.isEmpty else { return [key + [("buckets", "\(filter.modulus):")]] }
        return stride(from: 0, to: filter.residues.count, by: bucketsPerRequest).map { start in
            let slice = filter.residues[start..<min(start + bucketsPerRequest, filter.residues.count)]
            return key + [("buckets", "\(filter.modulus):" + slice.map(String.init).joined(separator: ","))]
        }
    }

    /// Range digests computed by the service next to its data (`GET …/digests`).
    public func bucketDigests(_ table: TableSchema, request: DigestRequest) throws -> [BucketDigest] {
        // Not declared: read the rows and digest them here, as for any connection.
        guard capabilities.contains(.digests) else { return try DigestComputer.digests(self, table: table, request: request) }
        if request.filter != nil {
            throw FerryError.invalidOption(
                "--where is SQL, which the XML service does not take (it has no structured filter yet): mirror \(table.name) without --where, or from the database itself")
        }
        // Columns in the stored form are digested as stored on the service's side too.
        let native = (request.columns + request.key).filter(\.travelsNatively).map(\.name)
        let delimited = zip(request.columns, request.delimited).filter { $0.1 }.map { ("delimited", $0.0.name) }
        let base = [("modulus", String(request.modulus)), ("keyhash", request.keyHash.rawValue)] + request.columns.map { ("columns", $0.name) }
            + request.key.map { ("key", $0.name) } + delimited
            + Array(Set(native)).sorted().map { ("native", $0) }
            + (snapshotID.map { [("snapshot", $0)] } ?? [])
        let withins: [[(String, String)]] = request.within.map { w in
            Self.bucketParameters(w).map { $0.filter { $0.0 == "buckets" }.map { ("within", $0.1) } }
        } ?? [[]]
        var out: [BucketDigest] = []
        for within in withins {
            // Streamed into the list: a first level of 2^20 buckets is about 60 MB of XML.
            var decoder = DigestsStreamDecoder(expected: request.expectedBuckets)
            do {
                try client.receive(ProtocolRoute.digests.target(table: table.name) + ProtocolRoute.query(base + within), table: table.name,
                                   restart: { decoder = DigestsStreamDecoder(expected: request.expectedBuckets) }, piece: { try decoder.feed($0) })
                let answer = try decoder.finish()
                if out.isEmpty { out = answer } else { out += answer }
            } catch let e as XMLWireError {
                throw FerryError.copyFailed(table: table.name, endpoint: endpoint.redacted, reason: "\(client.transport.peer) sent a malformed digest: \(e)")
            }
        }
        return out
    }

    public func planTable(_ schema: TableSchema, named name: TableName) throws -> PlannedTable {
        var s = schema
        s.name = name
        return PlannedTable(schema: s, statements: ["POST /v1/tables\n" + String(decoding: XMLDocuments.schema(s), as: UTF8.self)])
    }

    /// Posts the planned schema (the service maps its types onto its own engine).
    public func createTable(_ table: PlannedTable) throws {
        _ = try client.expect("POST", ProtocolRoute.tables.target(), body: XMLDocuments.schema(table.schema), table: table.schema.name)
        if inTransaction { created.insert(table.schema.name) }
    }

    /// The service names and creates them on its own engine: the request carries column lists,
    /// uniqueness, order and actions only.
    public func planObjects(
        _ schema: TableSchema, on table: TableName, indexesOn: TableName, replacing: TableName?, avoiding: Set<String>
    ) throws -> PlannedObjects {
        var out = PlannedObjects(table: table, indexesOn: indexesOn)
        for index in schema.indexes {
            guard index.isStructured else {
                out.skipped.append(SkippedObject(
                    kind: "index", name: index.name, table: schema.name.description,
                    reason: "an index over expressions or with a WHERE clause is SQL text, which the XML service does not take"))
                continue
            }
            out.indexes.append(index)
        }
        out.foreignKeys = schema.foreignKeys
        if !out.indexes.isEmpty {
            out.indexStatements = ["POST /\(ProtocolRoute.indexes.target(table: indexesOn))\n" + String(decoding: XMLDocuments.objects(indexes: out.indexes, foreignKeys: []), as: UTF8.self)]
        }
        if !out.foreignKeys.isEmpty {
            out.foreignKeyStatements = ["POST /\(ProtocolRoute.foreignKeys.target(table: table))\n" + String(decoding: XMLDocuments.objects(indexes: [], foreignKeys: out.foreignKeys), as: UTF8.self)]
        }
        return out
    }

    /// The service plans them for its engine (names free there); what it declines comes back
    /// as `<skipped>` in its reply.
    public func createIndexes(_ objects: PlannedObjects) throws -> [SkippedObject] {
        guard !objects.indexes.isEmpty else { return [] }
        let reply = try client.expect(
            "POST", ProtocolRoute.indexes.target(table: objects.indexesOn), body: XMLDocuments.objects(indexes: objects.indexes, foreignKeys: []), table: objects.table)
        return try XMLDocuments.decodeSkipped(reply, table: objects.table)
    }

    public func createForeignKeys(_ objects: PlannedObjects) throws -> [SkippedObject] {
        guard !objects.foreignKeys.isEmpty else { return [] }
        let reply = try client.expect(
            "POST", ProtocolRoute.foreignKeys.target(table: objects.table), body: XMLDocuments.objects(indexes: [], foreignKeys: objects.foreignKeys), table: objects.table)
        return try XMLDocuments.decodeSkipped(reply, table: objects.table)
    }

    public func listOtherObjects() throws -> [OtherObject] {
        try XMLDocuments.decodeOtherObjects(client.expect("GET", ProtocolRoute.objects.target()))
    }

    public func dropTable(_ name: TableName) throws {
        let reply = try client.send("DELETE", ProtocolRoute.dropTable.target(table: name))
        guard (200..<300).contains(reply.status) || reply.status == 404 else { throw client.error(reply, table: name) }
        created.remove(name)
    }

    public func swapTable(_ staging: TableName, into target: TableName) throws {
        _ = try client.expect("POST", ProtocolRoute.swap.target(table: staging) + ProtocolRoute.query([("into", target.description)]), table: target)
        created.remove(staging)
    }

    public func writer(into target: TableSchema, columns: [Column]) throws -> any BatchWriter {
        let table = target.name
        var into = table
        if inTransaction && !created.contains(table) {
            // Appending to a table that was there: stage (shaped like the written columns of the
            // table as described), merge at commit.
            var schema = target
            let staging = try freeStaging(TableName(schema: table.schema, CopyEngine.internalPrefix + "append_" + table.name))
            for c in columns where schema.column(named: c.name) == nil {
                throw FerryError.columnNotFound(table: table, column: c.name)
            }
            schema.columns = schema.columns.filter { c in columns.contains { $0.name == c.name } }
            schema.primaryKey = []
            schema.uniqueKeys = []
            try createTable(schema, named: staging)
            pendingMerges.append((staging, table, columns))
            into = staging
        }
        return HTTPWriter(client: client, path: ProtocolRoute.insertRows.target(table: into) + ProtocolRoute.query(Self.columnItems(columns)),
                          table: into, columns: columns, key: target.preferredKey?.columns ?? [], loadLimit: loadLimit, refusals: refusals, for: table)
    }

    /// The service sets refused rows aside on its side where it declares `rejects`.
    public var setsRefusedRowsAside: Bool { capabilities.contains(.rejects) }

    public func setRefusedRowsAside(limit: Int) throws {
        try capabilities.require(.rejects, for: "--on-error reject (refused rows set aside on its side)", endpoint: endpoint.redacted)
        refusals = RefusedRowsKept(limit: limit)
    }

    public var refusedRows: [RefusedRow] { refusals?.rows ?? [] }

    /// `reject=` and `native=` for a merge or apply whose refused rows come back in `columns`.
    private func refusalItems(_ columns: [Column], path: String) -> String {
        guard let refusals else { return "" }
        let native = columns.filter(\.travelsNatively).map { ("native", $0.name) }
        return refusals.query(after: path) + (native.isEmpty ? "" : "&" + ProtocolRoute.query(native).dropFirst())
    }

    /// Keyed writes through the service: each request is its own transaction, so rows are
    /// staged (`_ferry_upsert_…`, shaped like the written columns) and applied to the table by
    /// one server-side request at `commit` (`POST …/apply`), which counts inserted, updated
    /// and unchanged rows. Until then they count as nothing (`committedCounts` has them).
    public func mergeRows(into table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws -> MergeCounts {
        guard !key.isEmpty else { throw FerryError.noKey(table: table.name) }
        guard !rows.isEmpty else { return MergeCounts() }
        guard inTransaction else {
            // Alone: staged and applied at once, still all or nothing.
            return try alone { _ = try mergeRows(into: table, columns: columns, key: key, rows: rows) } ?? MergeCounts()
        }
        try stageRows(rows, columns: columns, into: table, key: key, as: \.upserts, prefix: "upsert_")
        return MergeCounts()
    }

    /// `body` in a transaction of its own, committed (or rolled back on failure); returns what
    /// the commit applied.
    private func alone(_ body: () throws -> Void) throws -> MergeCounts? {
        try begin()
        do {
            try body()
            try commit()
        } catch {
            try? rollback()
            throw error
        }
        return committedCounts
    }

    /// Sent with the apply of `table`'s staged rows at `commit` (`watermark=`…): the service
    /// moves it in that transaction, only if it still holds `move.from`.
    public func stageWatermark(_ move: WatermarkMove, with table: TableSchema, key: [String]) throws {
        try capabilities.require(.applyWatermark, for: "--incremental into it (the watermark moves with the rows)", endpoint: endpoint.redacted)
        guard inTransaction else { throw FerryError.notReady("\(endpoint.redacted): a watermark moves inside the rows' transaction") }
        var pending = pendingApplies[table.name] ?? PendingApply(key: key)
        guard pending.key == key else { throw FerryError.notReady("one transaction writes \(table.name) by one key") }
        pending.watermark = move
        pendingApplies[table.name] = pending
    }

    /// The service moves the rows at `commit`, in one transaction, and drops the staging table
    /// there: `merge` for an append, `apply` (with its counts) for an upsert.
    public func moveRows(from staging: TableName, into table: TableSchema, columns: [Column], key: [String]?) throws -> MergeCounts? {
        guard inTransaction else { return try alone { _ = try moveRows(from: staging, into: table, columns: columns, key: key) } }
        guard let key else {
            pendingMerges.append((staging, table.name, columns))
            return nil
        }
        var pending = pendingApplies[table.name] ?? PendingApply(key: key)
        guard pending.key == key, pending.upserts == nil else { throw FerryError.notReady("one transaction writes \(table.name) by one key") }
        pending.upserts = staging
        pending.upsertColumns = columns
        pendingApplies[table.name] = pending
        return nil
    }

    /// Posts `rows` to the staging table of `table` that `slot` names (created on first use),
    /// for the commit's apply.
    private func stageRows(
        _ rows: RowBatch, columns: [Column], into table: TableSchema, key: [String],
        as slot: WritableKeyPath<PendingApply, TableName?>, prefix: String
    ) throws {
        var pending = pendingApplies[table.name] ?? PendingApply(key: key)
        guard pending.key == key else { throw FerryError.notReady("one transaction writes \(table.name) by one key") }
        let staging: TableName
        if let s = pending[keyPath: slot] {
            staging = s
        } else {
            staging = try freeStaging(TableName(schema: table.name.schema, CopyEngine.internalPrefix + prefix + table.name.name))
            try stage(staging, shapedLike: table, columns: columns)
            pending[keyPath: slot] = staging
            if slot == \PendingApply.upserts { pending.upsertColumns = columns }
            pendingApplies[table.name] = pending
        }
        // Upserts refused as they are staged (NOT NULL: the staging table has the target's
        // columns) are set aside then; the rest when the commit applies them.
        let writer = HTTPWriter(client: client, path: ProtocolRoute.insertRows.target(table: staging) + ProtocolRoute.query(Self.columnItems(columns)),
                                table: staging, columns: columns, key: key, loadLimit: loadLimit, refusals: slot == \PendingApply.upserts ? refusals : nil,
                                for: table.name)
        try writer.write(rows)
        try writer.finish()
    }

    /// A staging table name that is free: `base` with a random suffix.
    func freeStaging(_ base: TableName) throws -> TableName {
        // A name of this load's own: another load's staging table (a concurrent unit of a
        // plan, another client) is never taken or dropped.
        for _ in 0..<8 {
            let name = TableName(schema: base.schema, base.name + "_" + String(UInt32.random(in: 0...UInt32.max), radix: 16))
            if try !tableExists(name) { return name }
        }
        throw FerryError.copyFailed(table: base, endpoint: endpoint.redacted, reason: "no free staging table name next to \(base)")
    }

    /// A staging table of `columns` typed as in `table`, without keys (a failed load drops it).
    func stage(_ staging: TableName, shapedLike table: TableSchema, columns: [Column]) throws {
        try createStaging(staging, shapedLike: table, columns: columns)
    }

    public func expectRows(_ table: TableSchema, key: [Column], rows: Int64, filter: String?) throws {
        guard inTransaction, var pending = pendingApplies[table.name] else {
            let n = try countRows(table.name)
            guard n == rows else {
                throw FerryError.copyFailed(
                    table: table.name, endpoint: endpoint.redacted,
                    reason: "after the write \(table.name) would hold \(n) rows where the source has \(rows); the service's key comparison merges keys the source keeps apart (a case-insensitive collation?)")
            }
            return
        }
        pending.expect = rows
        pendingApplies[table.name] = pending
    }

    /// In a transaction staged like `mergeRows` (applied with the rest at commit); alone, one
    /// change set.
    public func upsertRows(into table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws -> Int {
        if inTransaction, replica?.body != nil {
            try replicaSection("upsert", table, columns: columns, key: key, rows: rows)
            return rows.count
        }
        if inTransaction {
            _ = try mergeRows(into: table, columns: columns, key: key, rows: rows)
            return rows.count
        }
        let keyColumns = columns.filter { key.contains($0.name) }
        return try changes(table.name, columns: columns, key: key, ChangeSet.encode(inserts: nil, upserts: rows, deletes: nil, columns: columns, key: keyColumns)).upserted
    }

    /// Deletes by key. In a transaction the keys are staged (`_ferry_delete_…`) and deleted by
    /// the commit's apply; alone, one change set.
    public func deleteRows(from table: TableSchema, key: [Column], keys: RowBatch) throws -> Int {
        guard !keys.isEmpty else { return 0 }
        if inTransaction, replica?.body != nil {
            try replicaSection("delete", table, columns: key, key: key.map(\.name), rows: keys)
            return keys.count
        }
        guard inTransaction else {
            return try changes(table.name, columns: key, key: key.map(\.name),
                               ChangeSet.encode(inserts: nil, upserts: nil, deletes: keys, columns: key, key: key)).deleted
        }
        try stageRows(keys, columns: key, into: table, key: key.map(\.name), as: \.deletes, prefix: "delete_")
        return 0
    }

    /// The `columns=` of a write, and `native=` for those that travel in the served engine's
    /// stored form (the service reads their values as stored, not by their types).
    static func columnItems(_ columns: [Column]) -> [(String, String)] {
        columns.map { ("columns", $0.name) } + columns.filter(\.travelsNatively).map { ("native", $0.name) }
    }

    /// Posts a change set; the service applies it in one transaction.
    func changes(_ table: TableName, columns: [Column], key: [String], _ body: Data) throws -> (inserted: Int, upserted: Int, deleted: Int) {
        let query = ProtocolRoute.query(Self.columnItems(columns) + key.map { ("key", $0) })
        let counts = try XMLDocuments.decodeApplied(client.expect("POST", ProtocolRoute.changes.target(table: table) + query, body: body, table: table))
        func n(_ k: String) -> Int { Int(counts[k] ?? 0) }
        return (n("inserted"), n("upserted"), n("deleted"))
    }

    /// Sent whole (`POST /v1/push`): the service applies it in one transaction of its database.
    public func applyGuardedPush(_ push: any GuardedPushRows) throws -> GuardedPushOutcome {
        let whole = try (push as? GuardedPush) ?? GuardedPush(collecting: push)
        return try PushDocument.decodeOutcome(client.expect("POST", ProtocolRoute.push.target(), body: try PushDocument.encode(whole)))
    }

    public func pushCommitted(_ id: String) throws -> Bool {
        try XMLDocuments.decodePushStatus(client.expect("GET", ProtocolRoute.pushStatus.target(id: id)))
    }

    /// A read snapshot held by the service for this copy (`POST /v1/snapshots`): every page,
    /// count and digest read until `commit`/`rollback` sees one state of the served database.
    public func beginSnapshot() throws {
        // Not declared: never asked for (reads then see the database as each request finds it).
        guard capabilities.contains(.snapshots) else { return }
        snapshotID = try XMLDocuments.decodeSnapshotID(client.expect("POST", ProtocolRoute.createSnapshot.target()))
        ownsSnapshot = true
    }

    /// The service's snapshot id: other connections to the same service read from it too.
    public func exportSnapshot() throws -> String? { snapshotID }

    public func beginSnapshot(importing id: String) throws {
        snapshotID = id
        ownsSnapshot = false
    }

    /// Ends this connection's use of the service's snapshot (released there if it began it).
    private func endSnapshot() {
        if let id = snapshotID, ownsSnapshot { _ = try? client.send("DELETE", ProtocolRoute.releaseSnapshot.target(id: id)) }
        snapshotID = nil
        ownsSnapshot = false
    }

    public func begin() throws {
        beginReplicaTransaction()
        inTransaction = true
        created = []
        pendingMerges = []
        pendingSerials = []
        pendingApplies = [:]
        committedCounts = nil
    }

    public func commit() throws {
        guard snapshotID == nil else { return endSnapshot() }
        if replica?.body != nil {
            try commitReplicaTransaction()
            inTransaction = false
            return
        }
        for merge in pendingMerges {
            do {
                let path = ProtocolRoute.merge.target(table: merge.staging) + ProtocolRoute.query([("into", merge.target.description)])
                // Sent whether or not refused rows are kept (not inside an optional chain).
                let answer = try client.expect("POST", path + refusalItems(merge.columns, path: path), table: merge.target)
                try refusals?.take(answer, columns: merge.columns)
            } catch let e as BatchRowError {
                // A row of the staging table the target refused (a key already there): its
                // number counts the staged rows, not the caller's batch.
                throw e.error
            } catch let e as RefusedRowsPastLimit {
                throw refusals?.named(e) ?? e
            }
        }
        pendingMerges = []
        for table in pendingSerials {
            _ = try client.expect("POST", ProtocolRoute.resetSerial.target(table: table), table: table)
        }
        pendingSerials = []
        var counts: MergeCounts?
        for (table, apply) in pendingApplies.sorted(by: { $0.key.description < $1.key.description }) {
            var query = apply.key.map { ("key", $0) }
            if let u = apply.upserts { query.append(("upserts", u.description)) }
            if let d = apply.deletes { query.append(("deletes", d.description)) }
            if let e = apply.expect { query.append(("expect", String(e))) }
            if apply.resetSerial { query.append(("reset-serial", "1")) }
            if let w = apply.watermark {
                query += [("watermark", w.name), ("watermark-to", w.to), ("watermark-rows", String(w.rows))]
                if let from = w.from { query.append(("watermark-from", from)) }
            }
            let path = ProtocolRoute.apply.target(table: table) + ProtocolRoute.query(query)
            let answer: Data
            do {
                answer = try client.expect("POST", path + (apply.upserts == nil ? "" : refusalItems(apply.upsertColumns, path: path)), table: table)
            } catch let e as RefusedRowsPastLimit {
                throw refusals?.named(e) ?? e
            }
            if apply.upserts != nil { try refusals?.take(answer, columns: apply.upsertColumns) }
            let applied = try XMLDocuments.decodeApplied(answer)
            func n(_ k: String) -> Int64 { applied[k] ?? 0 }
            counts = (counts ?? MergeCounts()) + MergeCounts(inserted: n("inserted"), updated: n("updated"), unchanged: n("unchanged"), deleted: n("deleted"))
            // Applied: the staging tables are gone.
            pendingApplies[table] = nil
        }
        committedCounts = counts
        created = []
        inTransaction = false
    }

    public func rollback() throws {
        guard snapshotID == nil else { return endSnapshot() }
        rollbackReplicaTransaction()
        for merge in pendingMerges { try? dropTable(merge.staging) }
        for apply in pendingApplies.values {
            if let u = apply.upserts { try? dropTable(u) }
            if let d = apply.deletes { try? dropTable(d) }
        }
        for t in created { try? dropTable(t) }
        pendingMerges = []
        pendingSerials = []
        pendingApplies = [:]
        created = []
        inTransaction = false
    }

    public func resetSerial(_ table: TableName, schema: TableSchema) throws {
        if inTransaction, pendingApplies[table] == nil, pendingMerges.contains(where: { $0.target == table }) {
            pendingSerials.append(table)
            return
        }
        if inTransaction, pendingApplies[table] != nil {
            // After the staged rows are in: the apply moves the counters in its transaction.
            pendingApplies[table]?.resetSerial = true
            return
        }
        _ = try client.expect("POST", ProtocolRoute.resetSerial.target(table: table), table: table)
    }
}

