import FerryCore
import Foundation

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
    private var page: (exchange: any ProtocolExchange, decoder: XMLRowsStreamDecoder)?
    private var pageDelivered = false
    /// Attempts at the current page (a GET that broke off before any of it was used is retried).
    private var pageAttempts = 0

    /// `bucketkey=`/`buckets=` parameters of a bucket-filtered walk, on every request.
    let buckets: [(String, String)]
    /// The service's read snapshot every page is read from (`snapshot=`), when one is held.
    let snapshot: String?
    /// Largest key first (one page).
    let descending: Bool
    /// Pages by key (the connection declared keyed reads); else one answer, no `limit`.
    let keyed: Bool

    init(
        connection: HTTPConnection, table: TableSchema, columns: [Column], batchSize: Int, after: [Value]?, upTo: [Value]?, limit: Int?,
        descending: Bool = false, buckets: [(String, String)] = [], keyed: Bool = true
    ) throws {
        self.keyed = keyed
        self.descending = descending
        self.connection = connection
        self.buckets = buckets
        self.table = table.name
        var requested = columns
        // Without keyed reads the table is read whole, in one answer, whatever its key.
        let key = keyed ? table.preferredKey?.columns ?? [] : []
        for k in key where !requested.contains(where: { $0.name == k }) {
            if let c = table.column(named: k) { requested.append(c) }
        }
        self.requested = requested
        self.wanted = columns.count
        self.batchSize = batchSize
        // As the key is read: one read in its stored form travels (and bounds) as binary.
        self.keyTypes = key.map { k in (requested.first { $0.name == k } ?? table.column(named: k))?.logicalType ?? .text }
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
    private static func nextBatch(_ exchange: any ProtocolExchange, _ decoder: XMLRowsStreamDecoder) throws -> RowBatch? {
        while true {
            if let b = try decoder.next() { return b }
            guard let piece = try exchange.next() else { return try decoder.next(final: true) }
            decoder.append(piece)
        }
    }

    private func pagePath(after: [String]?) -> String {
        let page = min(max(connection.pageRows, 1), remaining ?? Int.max)
        var items: [(String, String)] = keyed ? [("limit", String(page))] : []
        if keyed, let bytes = connection.pageBytes { items.append(("bytes", String(bytes))) }
        items += Self.columnItems(requested)
        items += (after ?? []).map { ("after", $0) }
        items += (upTo ?? []).map { ("upto", $0) }
        items += buckets
        if descending { items.append(("order", "desc")) }
        if let snapshot { items.append(("snapshot", snapshot)) }
        return ProtocolRoute.readRows.target(table: table) + ProtocolRoute.query(items)
    }

    /// `columns=` of a read, and the hints the service carries out on its side: cast rules that
    /// read a column in the engine's own text or JSON form (or zero dates as NULL), and columns
    /// read in the engine's stored form (`native=`).
    static func columnItems(_ columns: [Column]) -> [(String, String)] {
        var items = columns.map { ("columns", $0.name) }
        for (parameter, hint) in [("text", ReadHints.textForm), ("json", .jsonForm), ("zerodates", .zeroDatesAsNull), ("native", .nativeForm)] {
            items += columns.filter { $0.readHints.contains(hint) }.map { (parameter, $0.name) }
        }
        return items
    }

    /// Asks for the next page and waits for its status (retrying a GET that got no answer).
    private func openPage() throws {
        let path = pagePath(after: after)
        var lastError: HTTPTransportError?
        let client = connection.client
        var retried = 0
        while pageAttempts < 4 {
            if pageAttempts > 0 && lastError != nil { Thread.sleep(forTimeInterval: 0.25 * Double(1 << (pageAttempts - 1))) }
            pageAttempts += 1
            do {
                let exchange = try client.start("GET", path)
                let status = exchange.status ?? 0
                guard (200..<300).contains(status) else {
                    let reply = HTTPReply(status: status, body: try exchange.collect(upTo: 1 << 20))
                    exchange.cancel()
                    // The same page of the same snapshot, after the last key read: asked again.
                    if status == 503 { retried += 1 }
                    if client.retrying(status: status, body: reply.body, retry: retried, doing: "reading \(table)") {
                        pageAttempts -= 1
                        continue
                    }
                    throw client.error(reply, table: table)
                }
                page = (exchange, XMLRowsStreamDecoder(columns: requested, batchSize: batchSize))
                pageDelivered = false
                return
            } catch let e as HTTPTransportError {
                lastError = e
            }
        }
        throw client.transport.unanswered(lastError)
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
        let path = ProtocolRoute.readRows.target(table: table) + ProtocolRoute.query(
            [("limit", "1"), ("order", "desc")] + Self.columnItems(keyColumns)
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
