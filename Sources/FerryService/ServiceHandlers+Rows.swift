import FerryCore
import FerryXML
import Foundation

/// Rows: read a page (streamed, keyset-paged, gzip on request) and insert a document of rows.
extension ServiceHandlers {
    func readRows(_ r: ServiceRequest) async throws -> ServiceResponse {
        let name = try r.table()
        let limit = min(max(r.value("limit").flatMap { Int($0) } ?? configuration.defaultPageRows, 1), configuration.maxPageRows)
        let pageBytes = try r.value("bytes").map { text -> Int in
            guard let n = Int(text), n > 0 else {
                throw ServiceError.badRequest("bytes must be a positive number of bytes, not '\(text.prefix(20))'", table: name.description)
            }
            return min(max(n, 64 << 10), configuration.maxPageBytes)
        } ?? configuration.pageBytes
        let after = r.values("after")
        let upTo = r.values("upto")
        let wanted = r.values("columns")
        let buckets = try Self.bucketParameter(r.value("buckets"), key: r.values("bucketkey"), table: name).map {
            (key: $0.key, modulus: $0.modulus, residues: $0.residues, hash: try Self.keyHashParameter(r.value("keyhash"), table: name))
        }
        var hints: [String: ReadHints] = [:]
        for (parameter, hint) in [("text", ReadHints.textForm), ("json", .jsonForm), ("zerodates", .zeroDatesAsNull), ("native", .nativeForm)] {
            for c in r.values(parameter) { hints[c, default: []].insert(hint) }
        }
        let readHints = hints
        let descending: Bool
        switch r.value("order") {
        case nil, "asc": descending = false
        case "desc": descending = true
        case let other?: throw ServiceError.badRequest("order must be asc or desc, not '\(other.prefix(20))'", table: name.description)
        }
        let snapshot = r.value("snapshot")
        let since = try r.value("since").map { value -> (column: String, value: String) in
            guard let column = r.value("sincecolumn") else { throw ServiceError.badRequest("since= needs sincecolumn=, the column it bounds", table: name.description) }
            return (column, value)
        }
        let stream = try await Offload.run { [self] in
            try RowStream(service: self, table: name, after: after, upTo: upTo, columns: wanted, hints: readHints, limit: limit, pageBytes: pageBytes,
                          descending: descending, buckets: buckets, since: since, snapshot: snapshot)
        }
        // gzip when the client asks for it (streamed, chunk by chunk).
        let gzip = r.headers["accept-encoding"].map { $0.lowercased().contains("gzip") } ?? false
        let logger = r.logger
        return ServiceResponse(headers: gzip ? [("Content-Encoding", "gzip")] : [], body: .stream { write in
            defer {
                logger.info("streamed \(stream.sent) rows of \(stream.table)")
                stream.close()
            }
            let compressor = gzip ? try GzipStream() : nil
            func send(_ bytes: Data, last: Bool = false) async throws {
                let out = try compressor.map { Data(try $0.compress([UInt8](bytes), finish: last)) } ?? bytes
                if !out.isEmpty {
                    do { try await write(out) } catch { throw ClientGone(error: error) }
                }
            }
            do {
                try await send(Data(stream.begin()))
                while let chunk = try await Offload.run({ try stream.nextChunk() }) {
                    try await send(chunk)
                }
                try await send(Data(stream.end()), last: true)
            } catch let cancelled as CancellationError {
                // The client stopped reading (a plugin's cancel): nothing to tell it.
                throw cancelled
            } catch let gone as ClientGone {
                // The client went away: no one reads an error document now.
                throw gone.error
            } catch {
                // The status line is gone: say it inside the document, so the client fails too.
                let e = ServiceError.from(error, table: name)
                if let detail = e.detail { logger.error("rows of \(name): \(detail)") }
                var out = Array("<error".utf8)
                out += Array(" code=\"\(e.code)\">".utf8)
                XMLText.appendEscaped(e.message, into: &out)
                out += Array("</error></rows>\n".utf8)
                try await send(Data(out), last: true)
            }
        })
    }

    /// The body is decoded as it arrives and written batch by batch in one transaction: memory
    /// holds a batch and the pieces of the body in between, whatever the size of the request.
    func insertRows(_ r: ServiceRequest) async throws -> ServiceResponse {
        let name = try r.table()
        try mayWrite(name, r, doing: "load into")
        let done = staging.writes(into: name)
        defer { done() }
        let wanted = r.values("columns")
        let native = r.values("native")
        let rejectLimit = try Self.rejectLimit(r, table: name)
        let pipe = BodyPipe()
        async let inserted: (rows: Int, refused: [RejectFile.Row], columns: [Column]) = Offload.run { [self] in
            defer { pipe.close() }
            let c = try open(write: true)
            defer { close(c) }
            let t = try served(name, in: c)
            let schema = try c.describe(t, rowEstimate: false)
            let columns = try (wanted.isEmpty ? schema.columns : wanted.map { w in
                guard let col = schema.column(named: w) else { throw FerryError.columnNotFound(table: t, column: w) }
                return col
            }).map { try requested($0, native: native, table: t) }
            if let rejectLimit {
                // Each batch in a savepoint, refused rows set aside and sent back.
                let writer = try Self.rejecting(c, table: t, limit: rejectLimit) { try c.writer(into: schema, columns: columns) }
                return try Self.transaction(c) {
                    let n = try Self.load(from: pipe, into: writer, columns: columns)
                    return (n - writer.rejected.count, writer.rejected, columns)
                }
            }
            // Written on a thread of its own: the next rows are decoded while these are written.
            let writer = PipelinedWriter(try c.writer(into: schema, columns: columns))
            return try Self.transaction(c) {
                do {
                    return (try Self.load(from: pipe, into: writer, columns: columns), [], columns)
                } catch {
                    writer.abort()
                    throw error
                }
            }
        }
        // Feeds the pipe; it waits while the pipe is full, so the transport is read no faster
        // than the rows are written. Never held whole, the body is bounded by the load limit.
        let maxLoad = configuration.maxLoadBytes
        var total = 0
        do {
            while let piece = try await r.body.next() {
                total += piece.count
                if total > maxLoad {
                    pipe.finish(error: ServiceError.tooLarge(maxLoad))
                    break
                }
                guard await pipe.put(piece) else { break }
            }
            pipe.finish()
        } catch {
            pipe.finish(error: error)
        }
        let loaded = try await inserted
        if rejectLimit != nil { return refusedAnswer([("inserted", loaded.rows)], refused: loaded.refused, columns: loaded.columns) }
        return .xml(XMLDocuments.applied([("inserted", loaded.rows)]))
    }

    /// Decodes a `<rows>` body from `pipe` as it arrives and writes each batch as it fills.
    /// A refused value is reported by its row in the request (1-based in the answer), whichever
    /// batch of the request it was in.
    static func load(from pipe: BodyPipe, into writer: any BatchWriter, columns: [Column]) throws -> Int {
        let decoder = XMLRowsStreamDecoder(columns: columns, batchSize: 10_000)
        var writes = LocatedWrites(writer)
        while let piece = try pipe.take() {
            piece.withUnsafeBytes { decoder.append($0) }
            while let batch = try decoder.next() { try writes.write(batch) }
        }
        while let batch = try decoder.next(final: true) { try writes.write(batch) }
        try writes.finish()
        return decoder.rows
    }
}

/// Batches of one request written in turn, a refused row reported by its place among all the
/// request's rows (whichever batch it was in).
struct LocatedWrites {
    let writer: any BatchWriter
    /// Rows of the request before the batch being written, and before the one written before it.
    private var current = 0
    private var previous = 0

    init(_ writer: any BatchWriter) { self.writer = writer }

    mutating func write(_ batch: RowBatch) throws {
        do { try writer.write(batch) } catch let e as BatchRowError {
            // Where the writer says, else a row of the batch it was given, or of the one before
            // (`batch` set).
            if let before = e.rowsBefore { throw BatchRowError(row: before + e.row, error: e.error) }
            throw BatchRowError(row: (e.batch == nil ? current : previous) + e.row, error: e.error)
        }
        previous = current
        current += batch.count
    }

    func finish() throws {
        do { try writer.finish() } catch let e as BatchRowError {
            // Where the writer says, else whatever it still held belongs to the last batch.
            throw BatchRowError(row: (e.rowsBefore ?? previous) + e.row, error: e.error)
        }
    }
}

/// A response body's write failed: the client is gone (not a failure of the rows to report).
private struct ClientGone: Error {
    var error: any Error
}
