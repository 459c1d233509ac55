import FerryCore
import FerryXML
import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore
import NIOSSL

/// The XML-over-HTTP data service (protocol v1, docs/xml-protocol.md): any connection the
/// registry can open, exposed through a handful of endpoints that never take SQL text. Each
/// request opens its own connection; blocking database work runs off the event loops.
public struct XMLService: Sendable {
    public let configuration: ServerConfiguration
    /// Index and foreign key requests one at a time: each picks names free in the catalog, and
    /// two at once (a copy with --jobs) would pick the same one.
    let objectRequests = Locked(())
    /// Read snapshots held for clients (`POST /v1/snapshots`).
    let snapshots: SnapshotStore
    /// Staging tables created by write tokens, and by which.
    let staging = StagingOwners()
    private let inFlight = Locked(0)

    /// Requests being answered now (a request whose client went away still counts until the
    /// service has finished it: its transaction committed or rolled back).
    public var requestsInFlight: Int { inFlight.withLock { $0 } }

    public init(configuration: ServerConfiguration) {
        self.configuration = configuration
        snapshots = SnapshotStore(
            maxSnapshots: configuration.maxSnapshots, idleSeconds: configuration.snapshotIdleSeconds,
            lifetimeSeconds: configuration.snapshotLifetimeSeconds)
    }

    static let xmlHeaders: HTTPFields = [.contentType: "application/xml; charset=utf-8"]

    /// Builds the application; `onRunning` receives the bound port (useful with port 0).
    public func application(logger: Logger, onRunning: @escaping @Sendable (Int) async -> Void = { _ in }) throws -> some ApplicationProtocol {
        let router = Router(context: ServiceRequestContext.self)
        snapshots.startSweeping()
        router.add(middleware: ErrorAndLogMiddleware(inFlight: inFlight))
        router.add(middleware: AuthMiddleware(tokens: configuration.scopedTokens))
        addRoutes(router)
        var server: HTTPServerBuilder = .http1()
        if let cert = configuration.tlsCertificate, let key = configuration.tlsKey {
            let chain = try NIOSSLCertificate.fromPEMFile(cert).map { NIOSSLCertificateSource.certificate($0) }
            let tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .file(key))
            server = try .tls(.http1(), tlsConfiguration: tls)
        }
        return Application(
            router: router, server: server,
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "ferry"),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) },
            logger: logger)
    }

    // MARK: Helpers

    func xml(_ data: Data, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: Self.xmlHeaders, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    func tableParameter(_ context: ServiceRequestContext) throws -> TableName {
        guard let raw = context.parameters.get("table"), let name = raw.removingPercentEncoding, !name.isEmpty else {
            throw ServiceError.badRequest("no table in the path")
        }
        return TableName(parsing: name)
    }

    /// Opens a connection for one request. A database served for writing is opened as a
    /// target even to read (a new SQLite file is then created by the first write, not refused).
    func open(write: Bool) throws -> any Connection {
        let writable = write || !configuration.readWriteTokens.isEmpty || !configuration.writeTokens.isEmpty
        return try configuration.registry.connect(configuration.database, role: writable ? .target : .source)
    }

    /// A connection for one read: inside snapshot `id` when the request names one
    /// (`snapshot=ID`), else a new one. `release` it when done.
    func read(snapshot id: String?) throws -> SnapshotStore.Lease {
        if let id { return try snapshots.lease(id) { try open(write: false) } }
        let c = try open(write: false)
        return SnapshotStore.Lease(connection: c, release: { c.close() })
    }

    /// The served table `name`, checked against the catalog before any query touches it.
    /// Ferry's own staging tables (the `_ferry_` prefix) are served when they exist, so that
    /// a client can load and swap or merge them.
    /// A foreign key may reference only a table the service would serve (it need not exist yet:
    /// a copy creates the tables one by one).
    func mayReference(_ name: TableName) throws {
        guard configuration.tables.isEmpty || configuration.tables.contains(where: { name.matches($0) }) else {
            throw ServiceError.notFound(name)
        }
    }

    func served(_ name: TableName, in connection: any Connection) throws -> TableName {
        // A catalog lookup of the one name (listing every table would count every table's rows).
        guard try connection.tableExists(name) else {
            // Names are matched exactly; `schema.name` may also be written without the default schema.
            throw ServiceError.notFound(name)
        }
        if name.name.hasPrefix(CopyEngine.internalPrefix) { return name }
        guard configuration.tables.isEmpty || configuration.tables.contains(where: { name.matches($0) }) else {
            throw ServiceError.notFound(name)
        }
        return name
    }

    func body(_ request: Request) async throws -> Data {
        do {
            let buffer = try await request.body.collect(upTo: configuration.maxBodyBytes)
            return Data(buffer.readableBytesView)  // one copy
        } catch let e as HTTPError where e.status == .contentTooLarge {
            throw ServiceError.tooLarge(configuration.maxBodyBytes)
        } catch is NIOTooManyBytesError {
            throw ServiceError.tooLarge(configuration.maxBodyBytes)
        }
    }

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

    /// Decodes a `<rows>` body from `pipe` as it arrives and writes each batch as it fills.
    /// A refused value is reported by its row in the request (1-based in the answer), whichever
    /// batch of the request it was in.
    static func load(from pipe: BodyPipe, into writer: any BatchWriter, columns: [Column]) throws -> Int {
        let decoder = XMLRowsStreamDecoder(columns: columns, batchSize: 10_000)
        // Rows of the request before the batch being written, and before the one written before it.
        var current = 0
        var previous = 0
        func located(_ e: BatchRowError) -> BatchRowError {
            // A writer reports a row of the batch it was given, or of the one before (`batch` set).
            BatchRowError(row: (e.batch == nil ? current : previous) + e.row, error: e.error)
        }
        func write(_ batch: RowBatch) throws {
            do { try writer.write(batch) } catch let e as BatchRowError { throw located(e) }
            previous = current
            current += batch.count
        }
        while let piece = try pipe.take() {
            piece.withUnsafeReadableBytes { decoder.append($0) }
            while let batch = try decoder.next() { try write(batch) }
        }
        while let batch = try decoder.next(final: true) { try write(batch) }
        do { try writer.finish() } catch let e as BatchRowError {
            // Whatever the writer still held belongs to the last batch.
            throw BatchRowError(row: previous + e.row, error: e.error)
        }
        return decoder.rows
    }

    /// The `?into=TABLE` of merge and swap.
    static func into(_ request: Request, for action: String) throws -> TableName {
        guard let into = request.uri.queryParameters["into"].map({ TableName(parsing: String($0)) }) else {
            throw ServiceError.badRequest("\(action) needs ?into=TABLE")
        }
        return into
    }

    static func applied(_ counts: [(String, Int)]) -> Data {
        var out = Array("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<applied".utf8)
        for (k, v) in counts { out += Array(" \(k)=\"\(v)\"".utf8) }
        out += Array("/>\n".utf8)
        return Data(out)
    }

    /// Parses `MODULUS:r1,r2,…` (a bucket filter; `key` names its key columns, or the table's
    /// key when empty). At most 10,000 buckets per request.
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

    // MARK: Routes

    /// Refuses unless `context` may write into `table`: any served table for a write token,
    /// and of Ferry's staging tables only those its own loads created.
    func mayWrite(_ table: TableName, _ context: ServiceRequestContext, doing: String) throws {
        if Self.isStaging(table) { try staging.check(table, context, doing: doing) }
    }

    static func isStaging(_ table: TableName) -> Bool { table.name.hasPrefix(CopyEngine.internalPrefix) }

    func addRoutes(_ router: Router<ServiceRequestContext>) {
        let service = self

        router.get("/v1/tables") { _, _ -> Response in
            let data = try await Offload.run {
                let c = try service.open(write: false)
                defer { c.close() }
                let all = try c.listTables()
                let tables = service.configuration.tables.isEmpty ? all : all.filter { t in service.configuration.tables.contains { t.name.matches($0) } }
                return XMLDocuments.tables(tables)
            }
            return service.xml(data)
        }

        router.get("/v1/tables/:table") { request, context -> Response in
            let name = try service.tableParameter(context)
            let snapshot = request.uri.queryParameters["snapshot"].map(String.init)
            let data = try await Offload.run {
                let lease = try service.read(snapshot: snapshot)
                defer { lease.release() }
                let c = lease.connection
                return XMLDocuments.schema(try c.describe(try service.served(name, in: c)))
            }
            return service.xml(data)
        }

        // A read snapshot for a client's whole copy: every request naming it (`snapshot=ID` on
        // rows, count, digests and schema reads) sees one state of the database.
        router.post("/v1/snapshots") { _, _ -> Response in
            let id = try await Offload.run { try service.snapshots.create { try service.open(write: false) } }
            let s = service.snapshots
            return service.xml(
                Data("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<snapshot id=\"\(id)\" idle-seconds=\"\(Int(s.idleSeconds))\" lifetime-seconds=\"\(Int(s.lifetimeSeconds))\"/>\n".utf8),
                status: .created)
        }

        router.delete("/v1/snapshots/:id") { _, context -> Response in
            guard let id = context.parameters.get("id"), service.snapshots.release(id) else {
                throw ServiceError(status: 404, code: "not_found", message: "no such snapshot (it may have ended already)")
            }
            return service.xml(Self.applied([("released", 1)]))
        }

        router.get("/v1/tables/:table/count") { request, context -> Response in
            let name = try service.tableParameter(context)
            let snapshot = request.uri.queryParameters["snapshot"].map(String.init)
            let n = try await Offload.run {
                let lease = try service.read(snapshot: snapshot)
                defer { lease.release() }
                let c = lease.connection
                return try c.countRows(try service.served(name, in: c))
            }
            return service.xml(Data("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<count rows=\"\(n)\"/>\n".utf8))
        }

        router.get("/v1/tables/:table/rows") { request, context -> Response in
            let name = try service.tableParameter(context)
            let query = request.uri.queryParameters
            let limit = min(max(query["limit"].flatMap { Int($0) } ?? service.configuration.defaultPageRows, 1), service.configuration.maxPageRows)
            let after = query[values: "after"].map { String($0) }
            let upTo = query[values: "upto"].map { String($0) }
            let wanted = query[values: "columns"].map { String($0) }
            let buckets = try Self.bucketParameter(query["buckets"].map(String.init), key: query[values: "bucketkey"].map(String.init), table: name)
            var hints: [String: ReadHints] = [:]
            for (parameter, hint) in [("text", ReadHints.textForm), ("json", .jsonForm), ("zerodates", .zeroDatesAsNull), ("native", .nativeForm)] {
                for c in query[values: Substring(parameter)] { hints[String(c), default: []].insert(hint) }
            }
            let readHints = hints
            let descending: Bool
            switch query["order"].map(String.init) {
            case nil, "asc": descending = false
            case "desc": descending = true
            case let other?: throw ServiceError.badRequest("order must be asc or desc, not '\(other.prefix(20))'", table: name.description)
            }
            let snapshot = query["snapshot"].map(String.init)
            let stream = try await Offload.run {
                try RowStream(service: service, table: name, after: after, upTo: upTo, columns: wanted, hints: readHints, limit: limit, descending: descending,
                              buckets: buckets, snapshot: snapshot)
            }
            // gzip when the client asks for it (streamed, chunk by chunk).
            let gzip = request.headers[.acceptEncoding].map { $0.lowercased().contains("gzip") } ?? false
            var headers = Self.xmlHeaders
            if gzip { headers[.contentEncoding] = "gzip" }
            let logger = context.logger
            return Response(status: .ok, headers: headers, body: ResponseBody { writer in
                defer {
                    logger.info("streamed \(stream.sent) rows of \(stream.table)")
                    stream.close()
                }
                let compressor = gzip ? try GzipStream() : nil
                func send(_ bytes: [UInt8], last: Bool = false) async throws {
                    let out = try compressor.map { try $0.compress(bytes, finish: last) } ?? bytes
                    if !out.isEmpty { try await writer.write(ByteBuffer(bytes: out)) }
                }
                do {
                    try await send(stream.begin())
                    while let chunk = try await Offload.run({ try stream.nextChunk() }) {
                        try await send(chunk)
                    }
                    try await send(stream.end(), last: true)
                } catch {
                    // The status line is gone: say it inside the document, so the client fails too.
                    let e = ServiceError.from(error, table: name)
                    if let detail = e.detail { logger.error("rows of \(name): \(detail)") }
                    var out = Array("<error".utf8)
                    out += Array(" code=\"\(e.code)\">".utf8)
                    XMLText.appendEscaped(e.message, into: &out)
                    out += Array("</error></rows>\n".utf8)
                    try await send(out, last: true)
                }
                try await writer.finish(nil)
            })
        }

        // Range digests of key-hash buckets, computed here next to the data (see docs/xml-protocol.md).
        router.get("/v1/tables/:table/digests") { request, context -> Response in
            let name = try service.tableParameter(context)
            let query = request.uri.queryParameters
            guard let modulus = query["modulus"].flatMap({ Int64($0) }), modulus >= 1, modulus <= 1 << 31 else {
                throw ServiceError.badRequest("modulus must be a whole number from 1 to 2147483648", table: name.description)
            }
            let columnNames = query[values: "columns"].map(String.init)
            let keyNames = query[values: "key"].map(String.init)
            let within = try Self.bucketParameter(query["within"].map(String.init), key: keyNames, table: name)
            // One answer line per bucket: without `within`, at most 2^20 buckets.
            guard within != nil || modulus <= 1 << 20 else {
                throw ServiceError.badRequest("modulus above 1048576 needs within= (buckets of a coarser level)", table: name.description)
            }
            let snapshot = query["snapshot"].map(String.init)
            let data = try await Offload.run { () -> Data in
                let lease = try service.read(snapshot: snapshot)
                defer { lease.release() }
                let c = lease.connection
                let schema = try c.describe(try service.served(name, in: c))
                func columns(_ names: [String]) throws -> [Column] {
                    try names.map { n in
                        guard let col = schema.column(named: n), col.logicalType.isSupported else { throw FerryError.columnNotFound(table: schema.name, column: n) }
                        return col
                    }
                }
                let key = try columns(keyNames.isEmpty ? schema.preferredKey?.columns ?? [] : keyNames)
                guard !key.isEmpty else { throw ServiceError.badRequest("table \(schema.name) has no key: digests need one (key=…)", table: schema.name.description) }
                let request = DigestRequest(
                    key: key, columns: try columns(columnNames.isEmpty ? schema.columns.filter(\.logicalType.isSupported).map(\.name) : columnNames),
                    modulus: modulus, within: try within.map { BucketFilter(key: key, modulus: $0.modulus, residues: $0.residues) })
                var out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<digests modulus=\"\(modulus)\">\n"
                for d in try c.bucketDigests(schema, request: request) {
                    out += "<b n=\"\(d.bucket)\" rows=\"\(d.rows)\" s0=\"\(d.sum0)\" s1=\"\(d.sum1)\"/>\n"
                }
                return Data((out + "</digests>\n").utf8)
            }
            return service.xml(data)
        }

        router.post("/v1/tables") { request, context -> Response in
            let data = try await service.body(request)
            let result = try await Offload.run { () -> Data in
                let schema = RequestSchema.sanitized(try XMLDocuments.decodeSchema(data))
                // A write token creates only the staging tables of its loads.
                if !Self.isStaging(schema.name) { try context.require(.manage, "create tables") }
                let c = try service.open(write: true)
                defer { c.close() }
                // A foreign key (SQLite declares them in CREATE TABLE) may only reference a served table.
                for fk in schema.foreignKeys { try service.mayReference(fk.referencedTable) }
                if try c.tableExists(schema.name) {
                    throw FerryError.targetTableExists(table: schema.name, endpoint: "this service")
                }
                do {
                    try Self.transaction(c) { try c.createTable(schema, named: schema.name) }
                } catch {
                    if !c.dialect.supportsTransactionalDDL { try? c.dropTable(schema.name) }
                    throw error
                }
                if Self.isStaging(schema.name) { service.staging.record(schema.name, token: context.token) }
                return XMLDocuments.schema(try c.describe(schema.name))
            }
            return service.xml(result, status: .created)
        }

        router.get("/v1/objects") { _, _ -> Response in
            let data = try await Offload.run {
                let c = try service.open(write: false)
                defer { c.close() }
                // With --tables, only what belongs to a served table.
                let all = try c.listOtherObjects()
                let tables = service.configuration.tables
                return XMLDocuments.otherObjects(tables.isEmpty ? all : all.filter { o in
                    o.table.map { t in tables.contains { TableName(t).matches($0) } } ?? false
                })
            }
            return service.xml(data)
        }

        // Indexes and foreign keys, as column lists: the service's engine names and creates
        // them (one transaction), as its driver plans them for the table.
        for part in ["indexes", "foreign-keys"] {
            router.post("/v1/tables/:table/\(part)") { request, context -> Response in
                let name = try service.tableParameter(context)
                if Self.isStaging(name) { try service.staging.check(name, context, doing: "change") } else {
                    try context.require(.manage, "create indexes or foreign keys")
                }
                let data = try await service.body(request)
                let result = try await Offload.run { () -> Data in
                    let objects = try XMLDocuments.decodeObjects(data)
                    let c = try service.open(write: true)
                    defer { c.close() }
                    let t = try service.served(name, in: c)
                    // A foreign key may only reference a table this service serves.
                    for fk in objects.foreignKeys { try service.mayReference(fk.referencedTable) }
                    var schema = try c.describe(t)
                    schema.indexes = part == "indexes" ? objects.indexes : []
                    schema.foreignKeys = part == "foreign-keys" ? objects.foreignKeys : []
                    schema = RequestSchema.sanitized(schema)
                    let (skipped, count) = try service.objectRequests.withLock { _ -> ([SkippedObject], Int) in
                        let planned = try c.planObjects(schema, on: t, indexesOn: t, replacing: nil, avoiding: [])
                        var skipped = planned.skipped
                        try Self.transaction(c) {
                            skipped += part == "indexes" ? try c.createIndexes(planned) : try c.createForeignKeys(planned)
                        }
                        return (skipped, (part == "indexes" ? planned.indexes.count : planned.foreignKeys.count) - skipped.count + planned.skipped.count)
                    }
                    return XMLDocuments.applied([(part == "indexes" ? "indexes" : "foreignKeys", count)], skipped: skipped)
                }
                return service.xml(result)
            }
        }

        router.delete("/v1/tables/:table") { _, context -> Response in
            let name = try service.tableParameter(context)
            if Self.isStaging(name) { try service.staging.check(name, context, doing: "drop") } else {
                try context.require(.manage, "drop tables")
            }
            try await Offload.run {
                let c = try service.open(write: true)
                defer { c.close() }
                let t = try service.served(name, in: c)
                try Self.transaction(c) { try c.dropTable(t) }
                service.staging.forget(t)
            }
            return service.xml(Self.applied([("dropped", 1)]))
        }

        // The body is decoded as it arrives and written batch by batch in one transaction: memory
        // holds a batch and the pieces of the body in between, whatever the size of the request.
        router.post("/v1/tables/:table/rows") { request, context -> Response in
            let name = try service.tableParameter(context)
            try service.mayWrite(name, context, doing: "load into")
            let wanted = request.uri.queryParameters[values: "columns"].map { String($0) }
            let pipe = BodyPipe()
            async let inserted: Int = Offload.run { () -> Int in
                defer { pipe.close() }
                let c = try service.open(write: true)
                defer { c.close() }
                let t = try service.served(name, in: c)
                let schema = try c.describe(t)
                let columns = try wanted.isEmpty ? schema.columns : wanted.map { w in
                    guard let col = schema.column(named: w) else { throw FerryError.columnNotFound(table: t, column: w) }
                    return col
                }
                let writer = try c.writer(into: schema, columns: columns)
                return try Self.transaction(c) {
                    do {
                        return try Self.load(from: pipe, into: writer, columns: columns)
                    } catch {
                        writer.abort()
                        throw error
                    }
                }
            }
            // Feeds the pipe; it waits while the pipe is full, so the socket is read no faster
            // than the rows are written.
            let maxBody = service.configuration.maxBodyBytes
            var total = 0
            do {
                for try await piece in request.body {
                    total += piece.readableBytes
                    if total > maxBody {
                        pipe.finish(error: ServiceError.tooLarge(maxBody))
                        break
                    }
                    guard await pipe.put(piece) else { break }
                }
                pipe.finish()
            } catch {
                pipe.finish(error: error)
            }
            return service.xml(Self.applied([("inserted", try await inserted)]))
        }

        // Moves every row of a staging table into its target in one transaction, then drops
        // the staging table: how the http driver appends without leaving half a load behind.
        router.post("/v1/tables/:table/merge") { request, context -> Response in
            let staging = try service.tableParameter(context)
            let into = try Self.into(request, for: "merge")
            guard Self.isStaging(staging) else {
                throw ServiceError.badRequest("\(staging) is not a staging table (\(CopyEngine.internalPrefix)…): only those are merged", table: staging.description)
            }
            try service.staging.check(staging, context, doing: "merge")
            try service.mayWrite(into, context, doing: "merge into")
            let moved = try await Offload.run { () -> Int in
                let c = try service.open(write: true)
                defer { c.close() }
                // A second connection reads the (committed) staging table while the first writes:
                // batches stream through, memory stays flat whatever the size of the load.
                let r = try service.open(write: false)
                defer { r.close() }
                let from = try service.served(staging, in: c)
                let to = try service.served(into, in: c)
                let schema = try c.describe(from)
                let target = try c.describe(to)
                return try Self.transaction(c) {
                    let reader = try r.reader(table: schema, columns: schema.columns, keyRange: nil, batchSize: 10_000)
                    let writer = try c.writer(into: target, columns: schema.columns)
                    var n = 0
                    do {
                        while let b = try reader.next() {
                            try writer.write(b)
                            n += b.count
                        }
                        try writer.finish()
                    } catch {
                        reader.close()
                        writer.abort()
                        throw error
                    }
                    reader.close()
                    try c.dropTable(from)
                    service.staging.forget(from)
                    return n
                }
            }
            return service.xml(Self.applied([("inserted", moved)]))
        }

        // Keyed writes staged by the http driver, applied in one transaction: the keys of
        // `deletes` deleted, the rows of `upserts` inserted or (where they differ) updated by
        // `key`, serial counters moved, and the row count checked against `expect`; both
        // staging tables dropped. Any failure applies nothing.
        router.post("/v1/tables/:table/apply") { request, context -> Response in
            let name = try service.tableParameter(context)
            let params = request.uri.queryParameters
            let keyNames = params[values: "key"].map { String($0) }
            let upserts = params["upserts"].map { TableName(parsing: String($0)) }
            let deletes = params["deletes"].map { TableName(parsing: String($0)) }
            let expect = try params["expect"].map { text -> Int64 in
                guard let n = Int64(text), n >= 0 else { throw ServiceError.badRequest("expect= is a row count", table: name.description) }
                return n
            }
            let resetSerial = params["reset-serial"] == "1"
            let logger = context.logger
            try service.mayWrite(name, context, doing: "apply into")
            guard upserts != nil || deletes != nil else {
                throw ServiceError.badRequest("apply needs ?upserts=STAGING and/or ?deletes=STAGING", table: name.description)
            }
            let counts = try await Offload.run { () -> [(String, Int)] in
                let c = try service.open(write: true)
                defer { c.close() }
                // A second connection reads the (committed) staging tables while the first writes.
                let r = try service.open(write: false)
                defer { r.close() }
                let t = try service.served(name, in: c)
                let schema = try c.describe(t)
                let key = keyNames.isEmpty ? (schema.preferredKey?.columns ?? []) : keyNames
                guard !key.isEmpty else { throw FerryError.noKey(table: t) }
                for k in key where schema.column(named: k) == nil { throw FerryError.columnNotFound(table: t, column: k) }
                let staged = try [deletes, upserts].map { try $0.map { s -> TableSchema in
                    let staging = try service.served(s, in: c)
                    guard staging.name.hasPrefix(CopyEngine.internalPrefix) else {
                        throw ServiceError.badRequest("\(staging) is not a staging table (\(CopyEngine.internalPrefix)…)", table: name.description)
                    }
                    try service.staging.check(staging, context, doing: "apply")
                    return try c.describe(staging)
                } }
                /// Every batch of a staging table, read on `r`; a refused row named by its key.
                func each(_ staging: TableSchema, _ body: (RowBatch, [Column]) throws -> Void) throws {
                    let columns = try staging.columns.map { s in
                        guard let col = schema.column(named: s.name) else { throw FerryError.columnNotFound(table: t, column: s.name) }
                        return Column(name: col.name, nativeType: col.nativeType, logicalType: s.logicalType, isNullable: true)
                    }
                    let reader = try r.reader(table: staging, columns: staging.columns, keyRange: nil, batchSize: 10_000)
                    defer { reader.close() }
                    while let batch = try reader.next() {
                        do {
                            try body(batch, columns)
                        } catch let e as BatchRowError {
                            let b = e.batch ?? batch
                            let shown = key.compactMap { k -> String? in
                                guard let i = columns.firstIndex(where: { $0.name == k }), e.row < b.count else { return nil }
                                return "\(k)=\(Value(column: b.columns[i], row: e.row, type: columns[i].logicalType))"
                            }
                            // Named by its key: the client's row numbers are not the staging table's.
                            var refused = ServiceError.from(e, table: t)
                            refused.row = nil
                            refused.message += " (key (\(shown.joined(separator: ", "))))"
                            throw refused
                        }
                    }
                }
                let applied = try Self.transaction(c) { () -> MergeCounts in
                    var counts = MergeCounts()
                    // Deletes first: a row going away may free a unique value an upsert takes.
                    if let d = staged[0] {
                        try each(d) { batch, columns in
                            counts.deleted += Int64(try c.deleteRows(from: schema, key: columns, keys: batch))
                        }
                    }
                    if let u = staged[1] {
                        try each(u) { batch, columns in
                            counts = counts + (try c.mergeRows(into: schema, columns: columns, key: key, rows: batch))
                        }
                    }
                    if let expect {
                        let n = try c.countRows(t)
                        guard n == expect else {
                            throw ServiceError(
                                status: 409, code: "conflict", table: t.description,
                                message: "after applying, \(t) would hold \(n) rows where \(expect) were expected; this table's key comparison merges keys the source keeps apart (a case-insensitive collation?); nothing was applied")
                        }
                    }
                    // Last: on MySQL moving a counter is DDL, which commits.
                    if resetSerial, schema.columns.contains(where: \.isSerial) { try c.resetSerial(t, schema: schema) }
                    return counts
                }
                // Outside the transaction: dropping a table commits on MySQL. A staging table
                // left behind by a failure here is dropped by the next load that stages.
                for s in staged.compactMap({ $0 }) {
                    service.staging.forget(s.name)
                    do { try Self.transaction(c) { try c.dropTable(s.name) } } catch {
                        logger.warning("could not drop staging table \(s.name): \(error)")
                    }
                }
                return [("inserted", Int(applied.inserted)), ("updated", Int(applied.updated)),
                        ("unchanged", Int(applied.unchanged)), ("deleted", Int(applied.deleted))]
            }
            return service.xml(Self.applied(counts))
        }

        router.post("/v1/tables/:table/swap") { request, context -> Response in
            let staging = try service.tableParameter(context)
            let into = try Self.into(request, for: "swap")
            try context.require(.manage, "replace tables")
            try await Offload.run {
                let c = try service.open(write: true)
                defer { c.close() }
                let from = try service.served(staging, in: c)
                try Self.transaction(c) { try c.swapTable(from, into: into) }
            }
            return service.xml(Self.applied([("swapped", 1)]))
        }

        // Inserts, upserts by key and deletes by key, in one transaction, all or nothing.
        router.post("/v1/tables/:table/changes") { request, context -> Response in
            let name = try service.tableParameter(context)
            try service.mayWrite(name, context, doing: "change")
            let wanted = request.uri.queryParameters[values: "columns"].map { String($0) }
            let keyNames = request.uri.queryParameters[values: "key"].map { String($0) }
            let data = try await service.body(request)
            let counts = try await Offload.run { () -> [(String, Int)] in
                let c = try service.open(write: true)
                defer { c.close() }
                let t = try service.served(name, in: c)
                let schema = try c.describe(t)
                let columns = try wanted.isEmpty ? schema.columns.filter { $0.logicalType.isSupported && !$0.generated } : wanted.map { w in
                    guard let col = schema.column(named: w) else { throw FerryError.columnNotFound(table: t, column: w) }
                    return col
                }
                let key = keyNames.isEmpty ? (schema.preferredKey?.columns ?? []) : keyNames
                guard !key.isEmpty else { throw FerryError.noKey(table: t) }
                let keyColumns = try key.map { k in
                    guard let col = schema.column(named: k) else { throw FerryError.columnNotFound(table: t, column: k) }
                    return col
                }
                let set = try ChangeSet.decode(data, columns: columns, key: keyColumns)
                return try Self.transaction(c) {
                    if !set.inserts.isEmpty {
                        let w = try c.writer(into: schema, columns: columns)
                        do {
                            try w.write(set.inserts)
                            try w.finish()
                        } catch {
                            w.abort()
                            throw error
                        }
                    }
                    let upserted = set.upserts.isEmpty ? 0 : try c.upsertRows(into: schema, columns: columns, key: key, rows: set.upserts)
                    let deleted = set.deletes.isEmpty ? 0 : try c.deleteRows(from: schema, key: keyColumns, keys: set.deletes)
                    return [("inserted", set.inserts.count), ("upserted", upserted), ("deleted", deleted)]
                }
            }
            return service.xml(Self.applied(counts))
        }

        // A guarded push (offline sync): several tables' inserts, updates and deletes, each
        // guarded by the row it expects, applied in one transaction and recorded under its id.
        router.post("/v1/push") { request, context -> Response in
            let data = try await service.body(request)
            let answer = try await Offload.run { () -> Data in
                let c = try service.open(write: true)
                defer { c.close() }
                let push = try PushDocument.decode(data) { name, names in
                    let t = try service.served(name, in: c)
                    guard !Self.isStaging(t) else { throw ServiceError.notFound(t) }
                    let schema = try c.describe(t)
                    return try names.map { n in
                        guard let col = schema.column(named: n), col.logicalType.isSupported, !col.generated else {
                            throw FerryError.columnNotFound(table: t, column: n)
                        }
                        return col
                    }
                }
                let outcome = try push.tables.isEmpty ? .applied([:]) : c.applyGuardedPush(push)
                if case .applied = outcome { context.logger.info("push \(push.id) applied to \(push.tables.count) tables") }
                return PushDocument.outcome(outcome, id: push.id)
            }
            return service.xml(answer)
        }

        router.get("/v1/push/:id") { _, context -> Response in
            guard let id = context.parameters.get("id")?.removingPercentEncoding, !id.isEmpty, id.utf8.count <= 64 else {
                throw ServiceError.badRequest("a push id is 1 to 64 characters")
            }
            let committed = try await Offload.run { () -> Bool in
                let c = try service.open(write: false)
                defer { c.close() }
                return try c.pushCommitted(id)
            }
            var out = Array("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<push".utf8)
            out += Array(" id=\"".utf8)
            XMLText.appendAttribute(id, into: &out)
            out += Array("\" committed=\"\(committed)\"/>\n".utf8)
            return service.xml(Data(out))
        }

        router.post("/v1/tables/:table/reset-serial") { _, context -> Response in
            let name = try service.tableParameter(context)
            try service.mayWrite(name, context, doing: "change")
            try await Offload.run {
                let c = try service.open(write: true)
                defer { c.close() }
                let t = try service.served(name, in: c)
                try Self.transaction(c) { try c.resetSerial(t, schema: try c.describe(t)) }
            }
            return service.xml(Self.applied([("reset", 1)]))
        }
    }
}

/// One streamed page of rows: the connection and reader live across the blocking steps.
final class RowStream {
    let lease: SnapshotStore.Lease
    let reader: any BatchReader
    let writer: XMLDocuments.RowsWriter
    let table: TableName
    let keyIndexes: [Int]
    let limit: Int?
    /// Bytes of `<r>` elements after which the page ends early (with `<next>`), whatever its row
    /// limit: a page of 20 MB documents is a few rows, a page of integers `limit` rows.
    let pageBytes: Int
    var sent = 0
    var sentBytes = 0
    /// The page ended on `pageBytes` before the reader ran out.
    var cut = false
    /// No more batches: the reader ran out or the page is full.
    var exhausted = false
    var encoder: RowsEncoder
    /// The end of the page should it end after the batch being encoded: its last row's key
    /// in `<next>`, then `</rows>` (kept instead of the batch).
    var closing: [UInt8]?
    /// Largest key first: never followed by another page.
    var descending = false

    /// `hints`: columns a client's cast rule reads in the engine's own text or JSON form, or with
    /// zero dates as NULL (named columns only: the driver builds the expression, never the request).
    init(service: XMLService, table name: TableName, after: [String], upTo: [String] = [], columns wanted: [String], hints: [String: ReadHints] = [:],
         limit: Int, descending: Bool = false, buckets: (key: [String], modulus: Int64, residues: [Int64])? = nil, snapshot: String? = nil) throws {
        pageBytes = service.configuration.pageBytes
        let lease = try service.read(snapshot: snapshot)
        let c = lease.connection
        do {
            let table = try service.served(name, in: c)
            let schema = try c.describe(table)
            var columns = try wanted.isEmpty ? schema.columns : wanted.map { w in
                guard let col = schema.column(named: w) else { throw FerryError.columnNotFound(table: table, column: w) }
                return col
            }
            for (name, hint) in hints {
                guard let i = columns.firstIndex(where: { $0.name == name }) else {
                    throw FerryError.columnNotFound(table: table, column: name)
                }
                columns[i].readHints.formUnion(hint)
                if hint.contains(.nativeForm) {
                    columns[i].logicalType = .binary(maxLength: nil)
                } else if hint.contains(.jsonForm) {
                    columns[i].logicalType = .json
                } else if hint.contains(.textForm) {
                    columns[i].logicalType = .text
                }
            }
            columns.removeAll { !$0.logicalType.isSupported }
            var range: KeyRange?
            var keyIndexes: [Int] = []
            if let key = schema.preferredKey?.columns {
                // Keyset paging needs the key in the page, to say where the next one starts.
                for k in key where !columns.contains(where: { $0.name == k }) {
                    guard let col = schema.column(named: k) else { continue }
                    columns.append(col)
                }
                keyIndexes = key.compactMap { k in columns.firstIndex { $0.name == k } }
                // `after=` (exclusive) and `upto=` (inclusive) bounds, one value per key column.
                func bound(_ texts: [String], _ parameter: String) throws -> [Value]? {
                    guard !texts.isEmpty else { return nil }
                    guard texts.count == key.count else {
                        throw ServiceError.badRequest("\(parameter) needs \(key.count) values, one per key column (\(key.joined(separator: ", ")))", table: table.description)
                    }
                    return try zip(texts, keyIndexes).map { text, index in
                        var buf = ColumnBuffer(storage: columns[index].logicalType.storage)
                        do { try WireValue.appendKey(text, as: columns[index].logicalType, to: &buf) } catch {
                            throw ServiceError.badRequest("\(parameter): \(error)", table: table.description)
                        }
                        return Value(column: buf, row: 0, type: columns[index].logicalType)
                    }
                }
                range = KeyRange(key: key, after: try bound(after, "after"), upTo: try bound(upTo, "upto"), limit: limit, descending: descending)
                if let buckets {
                    let bucketKey = try (buckets.key.isEmpty ? key : buckets.key).map { n in
                        guard let col = schema.column(named: n) else { throw FerryError.columnNotFound(table: table, column: n) }
                        return col
                    }
                    range?.buckets = BucketFilter(key: bucketKey, modulus: buckets.modulus, residues: buckets.residues)
                }
            } else if !after.isEmpty || !upTo.isEmpty || descending || buckets != nil {
                throw ServiceError.badRequest("table \(table) has no key: after, upto, order=desc and buckets need one", table: table.description)
            }
            self.reader = try c.reader(table: schema, columns: columns, keyRange: range, batchSize: min(limit, 10_000))
            self.lease = lease
            self.writer = XMLDocuments.RowsWriter(types: columns.map(\.logicalType))
            self.encoder = RowsEncoder(types: columns.map(\.logicalType))
            self.table = table
            self.keyIndexes = keyIndexes
            self.limit = range == nil ? nil : limit
            self.descending = descending
        } catch {
            lease.release()
            throw error
        }
    }

    func begin() -> [UInt8] { writer.begin(table: table) }

    /// Bytes of the page per piece handed to the response: rows are encoded a piece at a time
    /// (a large value in slices), so the page is never held, only the batch being encoded.
    static let pieceBytes = 128 * 1024

    /// The next piece of `<r>` elements; nil when the page is done (the reader ran out, the row
    /// limit or the page's bytes were reached). A piece that ends a batch is handed over before
    /// the next batch is read, so a reading error comes between rows.
    func nextChunk() throws -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(Self.pieceBytes + 4096)
        while out.count < Self.pieceBytes {
            if encoder.isIdle {
                if !out.isEmpty || exhausted { break }
                if limit != nil && sent > 0 && sentBytes >= pageBytes {
                    cut = true
                    exhausted = true
                    break
                }
                guard let batch = try reader.next() else {
                    exhausted = true
                    break
                }
                sent += batch.count
                if !keyIndexes.isEmpty && !descending {
                    // `<next>` and `</rows>`, should the page end after this batch (pages go
                    // forward only: a descending read is one look at a range's last keys).
                    closing = writer.end(next: (batch, batch.count - 1, keyIndexes))
                }
                encoder.start(batch)
            }
            let before = out.count
            _ = encoder.fill(&out, limit: Self.pieceBytes)
            sentBytes += out.count - before
        }
        return out.isEmpty ? nil : out
    }

    /// `</rows>`, with `<next>` when the page is full by rows or bytes (more rows may follow).
    func end() -> [UInt8] {
        if let limit, sent >= limit || cut, let closing { return closing }
        return writer.end()
    }

    func close() {
        reader.close()
        lease.release()
    }
}

// unchecked: a page's stream (and its connection) is used by one request's steps, one at a time.
extension RowStream: @unchecked Sendable {}
