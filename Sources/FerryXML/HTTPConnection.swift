import FerryCore
import Foundation

/// A Ferry XML service used like a database. Every call is one request; a load is made safe
/// with the service's staging operations: a created table is dropped when the load fails, and
/// rows appended to an existing table go into a staging table first and are merged into it in
/// one server-side transaction at commit.
public final class HTTPConnection: Connection {
    public let endpoint: Endpoint
    public let dialect: any Dialect = HTTPDialect()
    public var defaultSchema: String { "" }
    let client: HTTPClient
    /// Tables created since `begin`, and appends waiting to be merged (staging → target).
    private var created: Set<TableName> = []
    private var pendingMerges: [(staging: TableName, target: TableName)] = []
    /// Keyed writes waiting for `commit`, by target table: staged upserts and deletes, applied
    /// by one `POST …/apply` each.
    private var pendingApplies: [TableName: PendingApply] = [:]
    private var inTransaction = false
    public private(set) var committedCounts: MergeCounts?
    /// The service's read snapshot this connection reads from (`POST /v1/snapshots`), and
    /// whether this connection began it (and ends it) or joined another's.
    private(set) var snapshotID: String?
    private var ownsSnapshot = false

    struct PendingApply {
        var upserts: TableName?
        var deletes: TableName?
        var key: [String]
        var expect: Int64?
        var resetSerial = false
    }
    /// Rows asked for per page when reading (the service may cap it at its own maximum).
    public var pageRows = 50_000

    public init(endpoint: Endpoint) throws {
        self.endpoint = endpoint
        client = try HTTPClient(endpoint: endpoint)
        // One request up front: a wrong URL or token fails here, with a clear message.
        _ = try client.expect("GET", "v1/tables")
    }

    public func close() { endSnapshot() }

    func path(_ table: TableName, _ rest: String = "") -> String {
        "v1/tables/" + HTTPClient.escape(table.description) + rest
    }

    public func listTables() throws -> [TableInfo] {
        try XMLDocuments.decodeTables(client.expect("GET", "v1/tables"))
    }

    /// `?snapshot=ID` while this connection reads inside the service's snapshot.
    var snapshotQuery: String { snapshotID.map { HTTPClient.query([("snapshot", $0)]) } ?? "" }

    public func countRows(_ table: TableName) throws -> Int64 {
        let root = try XMLTree.parse(client.expect("GET", path(table, "/count") + snapshotQuery, table: table))
        guard let n = root.attributes["rows"].flatMap({ Int64($0) }) else { throw XMLWireError.unexpected("<count> without rows") }
        return n
    }

    public func describe(_ table: TableName) throws -> TableSchema {
        try XMLDocuments.decodeSchema(client.expect("GET", path(table) + snapshotQuery, table: table))
    }

    public func tableExists(_ table: TableName) throws -> Bool {
        let reply = try client.send("GET", path(table))
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
        if let range = keyRange, !range.key.isEmpty, range.key != (table.preferredKey?.columns ?? []) {
            throw FerryError.invalidOption("the XML service pages by the table's key (\((table.preferredKey?.columns ?? []).joined(separator: ", "))), not by \(range.key.joined(separator: ", "))")
        }
        // Largest keys first: one page (the service never follows a descending page with another).
        if keyRange?.descending == true, keyRange?.limit.map({ $0 > pageRows }) ?? true || keyRange?.buckets != nil {
            throw FerryError.invalidOption("the http driver reads largest keys first only a page at a time (a limit of at most \(pageRows) rows)")
        }
        guard let buckets = keyRange?.buckets else {
            return try HTTPReader(connection: self, table: table, columns: columns, batchSize: batchSize,
                                  after: keyRange?.after, upTo: keyRange?.upTo, limit: keyRange?.limit, descending: keyRange?.descending ?? false)
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
                                  after: keyRange?.after, upTo: keyRange?.upTo, limit: keyRange?.limit, buckets: parts[index])
        }
    }

    /// Buckets per request, so that a URL stays well under servers' request-line limits.
    static let bucketsPerRequest = 1_000

    /// `bucketkey=` and `buckets=MODULUS:r1,r2,…` parameters, split into requests of at most
    /// `bucketsPerRequest` buckets.
    static func bucketParameters(_ filter: BucketFilter) -> [[(String, String)]] {
        let key = filter.key.map { ("bucketkey", $0.name) }
        guard !filter.residues.isEmpty else { return [key + [("buckets", "\(filter.modulus):")]] }
        return stride(from: 0, to: filter.residues.count, by: bucketsPerRequest).map { start in
            let slice = filter.residues[start..<min(start + bucketsPerRequest, filter.residues.count)]
            return key + [("buckets", "\(filter.modulus):" + slice.map(String.init).joined(separator: ","))]
        }
    }

    /// Range digests computed by the service next to its data (`GET …/digests`).
    public func bucketDigests(_ table: TableSchema, request: DigestRequest) throws -> [BucketDigest] {
        if request.filter != nil {
            throw FerryError.invalidOption(
                "--where is SQL, which the XML service does not take (it has no structured filter yet): mirror \(table.name) without --where, or from the database itself")
        }
        let base = [("modulus", String(request.modulus))] + request.columns.map { ("columns", $0.name) } + request.key.map { ("key", $0.name) }
            + (snapshotID.map { [("snapshot", $0)] } ?? [])
        let withins: [[(String, String)]] = request.within.map { w in
            Self.bucketParameters(w).map { $0.filter { $0.0 == "buckets" }.map { ("within", $0.1) } }
        } ?? [[]]
        var out: [BucketDigest] = []
        for within in withins {
            let root = try XMLTree.parse(client.expect("GET", path(table.name, "/digests") + HTTPClient.query(base + within), table: table.name))
            for b in root.children where b.name == "b" {
                guard let n = b.attributes["n"].flatMap({ Int64($0) }), let rows = b.attributes["rows"].flatMap({ Int64($0) }),
                    let s0 = b.attributes["s0"].flatMap({ Int64($0) }), let s1 = b.attributes["s1"].flatMap({ Int64($0) })
                else { throw FerryError.copyFailed(table: table.name, endpoint: endpoint.redacted, reason: "the service sent a malformed digest") }
                out.append(BucketDigest(bucket: n, rows: rows, sum0: s0, sum1: s1))
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
        _ = try client.expect("POST", "v1/tables", body: XMLDocuments.schema(table.schema), table: table.schema.name)
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
            out.indexStatements = ["POST /\(path(indexesOn, "/indexes"))\n" + String(decoding: XMLDocuments.objects(indexes: out.indexes, foreignKeys: []), as: UTF8.self)]
        }
        if !out.foreignKeys.isEmpty {
            out.foreignKeyStatements = ["POST /\(path(table, "/foreign-keys"))\n" + String(decoding: XMLDocuments.objects(indexes: [], foreignKeys: out.foreignKeys), as: UTF8.self)]
        }
        return out
    }

    /// The service plans them for its engine (names free there); what it declines comes back
    /// as `<skipped>` in its reply.
    public func createIndexes(_ objects: PlannedObjects) throws -> [SkippedObject] {
        guard !objects.indexes.isEmpty else { return [] }
        let reply = try client.expect(
            "POST", path(objects.indexesOn, "/indexes"), body: XMLDocuments.objects(indexes: objects.indexes, foreignKeys: []), table: objects.table)
        return try XMLDocuments.decodeSkipped(reply, table: objects.table)
    }

    public func createForeignKeys(_ objects: PlannedObjects) throws -> [SkippedObject] {
        guard !objects.foreignKeys.isEmpty else { return [] }
        let reply = try client.expect(
            "POST", path(objects.table, "/foreign-keys"), body: XMLDocuments.objects(indexes: [], foreignKeys: objects.foreignKeys), table: objects.table)
        return try XMLDocuments.decodeSkipped(reply, table: objects.table)
    }

    public func listOtherObjects() throws -> [OtherObject] {
        try XMLDocuments.decodeOtherObjects(client.expect("GET", "v1/objects"))
    }

    public func dropTable(_ name: TableName) throws {
        let reply = try client.send("DELETE", path(name))
        guard (200..<300).contains(reply.status) || reply.status == 404 else { throw client.error(reply, table: name) }
        created.remove(name)
    }

    public func swapTable(_ staging: TableName, into target: TableName) throws {
        _ = try client.expect("POST", path(staging, "/swap") + HTTPClient.query([("into", target.description)]), table: target)
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
            pendingMerges.append((staging, table))
            into = staging
        }
        return HTTPWriter(client: client, path: path(into, "/rows") + HTTPClient.query(columns.map { ("columns", $0.name) }),
                          table: into, columns: columns)
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
            try begin()
            do {
                _ = try mergeRows(into: table, columns: columns, key: key, rows: rows)
                try commit()
            } catch {
                try? rollback()
                throw error
            }
            return committedCounts ?? MergeCounts()
        }
        try stageRows(rows, columns: columns, into: table, key: key, as: \.upserts, prefix: "upsert_")
        return MergeCounts()
    }

    /// Posts `rows` to the staging table of `table` that `slot` names (created on first use),
    /// for the commit's apply.
    private func stageRows(
        _ rows: RowBatch, columns: [Column], into table: TableSchema, key: [String],
        as slot: WritableKeyPath<PendingApply, TableName?>, prefix: String
    ) throws {
        var pending = pendingApplies[table.name] ?? PendingApply(key: key)
        guard pending.key == key else { throw FerryError.invalidOption("one transaction writes \(table.name) by one key") }
        let staging: TableName
        if let s = pending[keyPath: slot] {
            staging = s
        } else {
            staging = try freeStaging(TableName(schema: table.name.schema, CopyEngine.internalPrefix + prefix + table.name.name))
            try stage(staging, shapedLike: table, columns: columns)
            pending[keyPath: slot] = staging
            pendingApplies[table.name] = pending
        }
        try HTTPWriter(client: client, path: path(staging, "/rows") + HTTPClient.query(columns.map { ("columns", $0.name) }),
                       table: staging, columns: columns).write(rows)
    }

    /// A staging table name that is free: `base` (a table of that name left by a failed load
    /// is dropped first), or — when this token may not drop it (another token's load, running
    /// or left behind) — `base` with a random suffix.
    private func freeStaging(_ base: TableName) throws -> TableName {
        guard try tableExists(base) else { return base }
        let reply = try client.send("DELETE", path(base))
        if (200..<300).contains(reply.status) || reply.status == 404 {
            created.remove(base)
            return base
        }
        guard reply.status == 403 else { throw client.error(reply, table: base) }
        for _ in 0..<8 {
            let name = TableName(schema: base.schema, base.name + "_" + String(UInt32.random(in: 0...UInt32.max), radix: 16))
            if try !tableExists(name) { return name }
        }
        throw FerryError.copyFailed(table: base, endpoint: endpoint.redacted, reason: "no free staging table name next to \(base)")
    }

    /// A staging table of `columns` typed as in `table`, without keys (a failed load drops it).
    private func stage(_ staging: TableName, shapedLike table: TableSchema, columns: [Column]) throws {
        var schema = table
        for c in columns where schema.column(named: c.name) == nil {
            throw FerryError.columnNotFound(table: table.name, column: c.name)
        }
        schema.columns = columns.compactMap { c in table.column(named: c.name) }.map { c in
            var c = c
            c.serial = nil
            c.defaultValue = nil
            c.defaultExpression = nil
            c.updateExpression = nil
            return c
        }
        schema.primaryKey = []
        schema.uniqueKeys = []
        schema.indexes = []
        schema.foreignKeys = []
        schema.checks = []
        try createTable(schema, named: staging)
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
        guard inTransaction else {
            return try changes(table.name, columns: key, key: key.map(\.name),
                               ChangeSet.encode(inserts: nil, upserts: nil, deletes: keys, columns: key, key: key)).deleted
        }
        try stageRows(keys, columns: key, into: table, key: key.map(\.name), as: \.deletes, prefix: "delete_")
        return 0
    }

    /// Posts a change set; the service applies it in one transaction.
    func changes(_ table: TableName, columns: [Column], key: [String], _ body: Data) throws -> (inserted: Int, upserted: Int, deleted: Int) {
        let query = HTTPClient.query(columns.map { ("columns", $0.name) } + key.map { ("key", $0) })
        let root = try XMLTree.parse(client.expect("POST", path(table, "/changes") + query, body: body, table: table))
        func n(_ k: String) -> Int { root.attributes[k].flatMap { Int($0) } ?? 0 }
        return (n("inserted"), n("upserted"), n("deleted"))
    }

    /// Sent whole (`POST /v1/push`): the service applies it in one transaction of its database.
    public func applyGuardedPush(_ push: GuardedPush) throws -> GuardedPushOutcome {
        try PushDocument.decodeOutcome(client.expect("POST", "v1/push", body: try PushDocument.encode(push)))
    }

    public func pushCommitted(_ id: String) throws -> Bool {
        let root = try XMLTree.parse(client.expect("GET", "v1/push/" + HTTPClient.escape(id)))
        return root.attributes["committed"] == "true"
    }

    /// A read snapshot held by the service for this copy (`POST /v1/snapshots`): every page,
    /// count and digest read until `commit`/`rollback` sees one state of the served database.
    public func beginSnapshot() throws {
        let root = try XMLTree.parse(client.expect("POST", "v1/snapshots"))
        guard let id = root.attributes["id"], !id.isEmpty else { throw XMLWireError.unexpected("<snapshot> without id") }
        snapshotID = id
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
        if let id = snapshotID, ownsSnapshot { _ = try? client.send("DELETE", "v1/snapshots/" + HTTPClient.escape(id)) }
        snapshotID = nil
        ownsSnapshot = false
    }

    public func begin() throws {
        inTransaction = true
        created = []
        pendingMerges = []
        pendingApplies = [:]
        committedCounts = nil
    }

    public func commit() throws {
        guard snapshotID == nil else { return endSnapshot() }
        for merge in pendingMerges {
            _ = try client.expect("POST", path(merge.staging, "/merge") + HTTPClient.query([("into", merge.target.description)]), table: merge.target)
        }
        pendingMerges = []
        var counts: MergeCounts?
        for (table, apply) in pendingApplies.sorted(by: { $0.key.description < $1.key.description }) {
            var query = apply.key.map { ("key", $0) }
            if let u = apply.upserts { query.append(("upserts", u.description)) }
            if let d = apply.deletes { query.append(("deletes", d.description)) }
            if let e = apply.expect { query.append(("expect", String(e))) }
            if apply.resetSerial { query.append(("reset-serial", "1")) }
            let root = try XMLTree.parse(client.expect("POST", path(table, "/apply") + HTTPClient.query(query), table: table))
            func n(_ k: String) -> Int64 { root.attributes[k].flatMap { Int64($0) } ?? 0 }
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
        for merge in pendingMerges { try? dropTable(merge.staging) }
        for apply in pendingApplies.values {
            if let u = apply.upserts { try? dropTable(u) }
            if let d = apply.deletes { try? dropTable(d) }
        }
        for t in created { try? dropTable(t) }
        pendingMerges = []
        pendingApplies = [:]
        created = []
        inTransaction = false
    }

    public func resetSerial(_ table: TableName, schema: TableSchema) throws {
        if inTransaction, pendingApplies[table] != nil {
            // After the staged rows are in: the apply moves the counters in its transaction.
            pendingApplies[table]?.resetSerial = true
            return
        }
        _ = try client.expect("POST", path(table, "/reset-serial"), table: table)
    }
}

/// Reads a table page by page (keyset paging with `<next>`). Each page is decoded as it
/// arrives: the answer's pieces go into the incremental rows decoder, and a batch is handed to
/// the caller as soon as it is full, so memory holds the batch being filled and the pieces not
/// decoded yet — never a page. The reader is sequential (the engine reads on its own thread).
final class HTTPReader: BatchReader {
    let connection: HTTPConnection
    let table: TableName
    /// The columns asked for, then the key columns (the service needs them to page).
    let requested: [Column]
    let wanted: Int
    let batchSize: Int
    /// The key's logical types, in key order (binary keys travel as base64 in `after`).
    let keyTypes: [LogicalType]
    var after: [String]?
    /// The range's bounds as asked (wire text): `after` moves page by page, these do not.
    let rangeAfter: [String]?
    let upTo: [String]?
    /// Rows still to read when the caller asked for at most `limit` rows.
    var remaining: Int?
    var finished = false
    /// Positions of the key columns in `requested`, and the key of the last row read (wire text).
    let keyIndexes: [Int]
    var lastKey: [String]?
    /// The page being read, and whether any of its rows reached the caller (then it cannot be
    /// asked for again).
    private var page: (exchange: HTTPExchange, decoder: XMLRowsStreamDecoder)?
    private var pageDelivered = false
    /// Attempts at the current page (a GET that broke off before any of it was used is retried).
    private var pageAttempts = 0

    /// `bucketkey=`/`buckets=` parameters of a bucket-filtered walk, on every request.
    let buckets: [(String, String)]
    /// The service's read snapshot every page is read from (`snapshot=`), when one is held.
    let snapshot: String?
    /// Largest key first (one page).
    let descending: Bool

    init(
        connection: HTTPConnection, table: TableSchema, columns: [Column], batchSize: Int, after: [Value]?, upTo: [Value]?, limit: Int?,
        descending: Bool = false, buckets: [(String, String)] = []
    ) throws {
        self.descending = descending
        self.connection = connection
        self.buckets = buckets
        self.table = table.name
        var requested = columns
        let key = table.preferredKey?.columns ?? []
        for k in key where !requested.contains(where: { $0.name == k }) {
            if let c = table.column(named: k) { requested.append(c) }
        }
        self.requested = requested
        self.wanted = columns.count
        self.batchSize = batchSize
        self.keyTypes = key.map { k in table.column(named: k)?.logicalType ?? .text }
        self.keyIndexes = key.compactMap { k in requested.firstIndex { $0.name == k } }
        let keyTypes = self.keyTypes
        let wire = { (bound: [Value]?) throws -> [String]? in
            guard let bound else { return nil }
            guard bound.count == keyTypes.count else {
                throw FerryError.invalidOption("a key range bound of \(bound.count) values on \(table.name), whose key has \(keyTypes.count) columns")
            }
            return zip(bound, keyTypes).map { WireValue.keyText($0, type: $1) }
        }
        self.after = try wire(after)
        self.rangeAfter = self.after
        self.upTo = try wire(upTo)
        self.remaining = limit.map { max($0, 0) }
        finished = remaining == 0
        snapshot = connection.snapshotID
    }

    deinit { page?.exchange.cancel() }

    func close() {
        page?.exchange.cancel()
        page = nil
        finished = true
    }

    func next() throws -> RowBatch? {
        while true {
            if page == nil {
                if finished { return nil }
                try openPage()
            }
            guard let (exchange, decoder) = page else { continue }
            let batch: RowBatch?
            do {
                batch = try Self.nextBatch(exchange, decoder)
            } catch let e as HTTPTransportError {
                exchange.cancel()
                page = nil
                if !pageDelivered && pageAttempts < 4 {
                    // Nothing of this page reached the caller: asking for it again is safe.
                    Thread.sleep(forTimeInterval: 0.25 * Double(1 << (pageAttempts - 1)))
                    continue
                }
                throw FerryError.copyFailed(
                    table: table, endpoint: connection.endpoint.redacted,
                    reason: "the service's answer broke off after \(decoder.rows) rows of a page: \(e.reason)")
            } catch {
                exchange.cancel()
                page = nil
                throw error
            }
            if let batch {
                pageDelivered = true
                if batch.count > 0, keyIndexes.count == keyTypes.count {
                    lastKey = zip(keyIndexes, keyTypes).map { i, type in
                        WireValue.keyText(Value(column: batch.columns[i], row: batch.count - 1, type: type), type: type)
                    }
                }
                return RowBatch(columns: Array(batch.columns.prefix(wanted)))
            }
            page = nil
            try endPage(decoder)
        }
    }

    /// The next batch of a page: decodes the pieces of the answer as they come. Nil once the
    /// document is complete (it must end with `</rows>`: a page cut short is an error).
    private static func nextBatch(_ exchange: HTTPExchange, _ decoder: XMLRowsStreamDecoder) throws -> RowBatch? {
        while true {
            if let b = try decoder.next() { return b }
            guard let piece = try exchange.next() else { return try decoder.next(final: true) }
            decoder.append(piece)
        }
    }

    private func pagePath(after: [String]?) -> String {
        let page = min(max(connection.pageRows, 1), remaining ?? Int.max)
        var items: [(String, String)] = [("limit", String(page))]
        items += requested.map { ("columns", $0.name) }
        // Cast rules that read a column in the engine's own text or JSON form (or zero dates as NULL)
        // are carried out by the service, on its side.
        items += requested.filter { $0.readHints.contains(.textForm) }.map { ("text", $0.name) }
        items += requested.filter { $0.readHints.contains(.jsonForm) }.map { ("json", $0.name) }
        items += requested.filter { $0.readHints.contains(.zeroDatesAsNull) }.map { ("zerodates", $0.name) }
        items += requested.filter { $0.readHints.contains(.nativeForm) }.map { ("native", $0.name) }
        items += (after ?? []).map { ("after", $0) }
        items += (upTo ?? []).map { ("upto", $0) }
        items += buckets
        if descending { items.append(("order", "desc")) }
        if let snapshot { items.append(("snapshot", snapshot)) }
        return connection.path(table, "/rows") + HTTPClient.query(items)
    }

    /// Asks for the next page and waits for its status (retrying a GET that got no answer).
    private func openPage() throws {
        let path = pagePath(after: after)
        var lastError: HTTPTransportError?
        let client = connection.client
        while pageAttempts < 4 {
            if pageAttempts > 0 && lastError != nil { Thread.sleep(forTimeInterval: 0.25 * Double(1 << (pageAttempts - 1))) }
            pageAttempts += 1
            do {
                let exchange = try client.start("GET", path)
                let status = exchange.status ?? 0
                guard (200..<300).contains(status) else {
                    defer { exchange.cancel() }
                    throw client.error(HTTPReply(status: status, body: try exchange.collect(upTo: 1 << 20)), table: table)
                }
                page = (exchange, XMLRowsStreamDecoder(columns: requested, batchSize: batchSize))
                pageDelivered = false
                return
            } catch let e as HTTPTransportError {
                lastError = e
            }
        }
        throw FerryError.connectionFailed(
            endpoint: connection.endpoint.redacted,
            reason: "the service did not answer: \(lastError?.reason ?? "no response"); check the URL and that `ferry serve` runs")
    }

    /// A page was read to its `</rows>`: where the next one starts, with the checks that no row
    /// is repeated or lost.
    private func endPage(_ decoder: XMLRowsStreamDecoder) throws {
        pageAttempts = 0
        let rows = decoder.rows
        var next = decoder.next.map { cells in zip(cells, keyTypes).map { WireValue.keyText(cell: $0, type: $1) } }
        if let n = next, n == after {
            // The same page again: the service's key comparison disagrees with its key order.
            // (Its rows reached the caller already; failing the read fails the copy.)
            throw FerryError.copyFailed(table: table, endpoint: connection.endpoint.redacted,
                                        reason: "the service returned a page that does not advance the key (after \(n.joined(separator: ", "))); stopping rather than repeating or losing rows")
        }
        if next != nil && rows == 0 {
            throw FerryError.copyFailed(table: table, endpoint: connection.endpoint.redacted,
                                        reason: "the service returned an empty page that says more rows follow; stopping rather than losing rows")
        }
        if let r = remaining {
            // A page ends early when it is full by bytes: what is left of the caller's limit.
            remaining = r - rows
            if remaining ?? 0 <= 0 { next = nil }
        }
        after = next
        finished = next == nil
        if finished && remaining == nil && !keyTypes.isEmpty { try checkReachedTheEnd() }
    }

    /// A walk of the whole table (or range) must end at its last key: the service reports it
    /// with one descending read of the same range (an index lookup), compared here as text, so a
    /// key comparison that disagrees with the key order on the service's side fails the read
    /// instead of cutting it short.
    private func checkReachedTheEnd() throws {
        let keyColumns = keyIndexes.map { requested[$0] }
        let path = connection.path(table, "/rows") + HTTPClient.query(
            [("limit", "1"), ("order", "desc")] + keyColumns.map { ("columns", $0.name) }
                + (rangeAfter ?? []).map { ("after", $0) } + (upTo ?? []).map { ("upto", $0) } + buckets
                + (snapshot.map { [("snapshot", $0)] } ?? []))
        let body = try connection.client.expect("GET", path, table: table)
        var last: [String]?
        let types = keyTypes
        _ = try XMLRowsDecoder(columns: keyColumns, batchSize: 1).decode(body) { b in
            guard b.count > 0 else { return }
            last = zip(keyColumns.indices, types).map { i, type in
                WireValue.keyText(Value(column: b.columns[i], row: 0, type: type), type: type)
            }
        }
        guard last == lastKey else {
            func show(_ k: [String]?) -> String { k.map { "(" + $0.joined(separator: ", ") + ")" } ?? "no row" }
            throw FerryError.copyFailed(
                table: table, endpoint: connection.endpoint.redacted,
                reason: "the read through the service ended at key \(show(lastKey)) but the \(rangeAfter == nil && upTo == nil ? "table" : "range")'s last key is \(show(last)): rows would be missing; nothing is reported as copied")
        }
    }
}

/// Posts each batch as one `<rows>` document (one server-side transaction per request). The
/// body is encoded as it is sent (chunked): the batch is held, its document never is.
final class HTTPWriter: BatchWriter {
    let client: HTTPClient
    let path: String
    let table: TableName
    let types: [LogicalType]

    init(client: HTTPClient, path: String, table: TableName, columns: [Column]) {
        self.client = client
        self.path = path
        self.table = table
        types = columns.map(\.logicalType)
    }

    func write(_ batch: RowBatch) throws {
        let (table, types) = (table, types)
        _ = try client.expect("POST", path, upload: { RowsDocumentSource(table: table, types: types, batch: batch) }, table: table)
    }

    func finish() throws {}

    /// Each request has been answered before `write` returns: nothing is in flight.
    func abort() {}
}


/// Reads the readers `next` hands out, one after the other.
final class ChainedReader: BatchReader {
    let make: () throws -> (any BatchReader)?
    var current: (any BatchReader)?
    init(_ make: @escaping () throws -> (any BatchReader)?) { self.make = make }

    func next() throws -> RowBatch? {
        while true {
            if current == nil {
                guard let r = try make() else { return nil }
                current = r
            }
            if let b = try current?.next() { return b }
            current?.close()
            current = nil
        }
    }

    func close() {
        current?.close()
        current = nil
    }
}
