import CLibPQ
import FerryCore
import Foundation

/// The stream of a logical replication slot, decoded from `pgoutput`'s messages (protocol
/// version 1, values in binary) into `ChangeEvent`s: consecutive rows of one table and one kind
/// in one batch, flushed at the transaction's end, at a full batch and when the kind or the
/// table changes, so that the order of the source's writes is kept.
final class PostgresLogicalFeed: ChangeFeed {
    let replication: PostgresReplicationConnection
    let name: String
    let columns: [TableName: [Column]]
    private let tables: [String: TableSchema]
    private var relations: [UInt32: Relation] = [:]
    /// Events decoded and not yet handed out, oldest first, and the rows being gathered.
    private var batcher = ChangeBatcher(limit: 4096)
    /// Inside a transaction (between Begin and Commit).
    private var inTransaction = false
    /// The end of the last commit handed out, and of the last one the replica confirmed.
    private var delivered: PostgresLSN
    private var confirmed: PostgresLSN
    private var lastStatus = Date()
    private var closed = false
    /// `--timeout`: the stream may stay silent this long. Past half of it Ferry asks the server
    /// for an answer (a status update with reply requested: its keepalive comes at once on a
    /// live connection); past all of it the connection is taken as stalled. Nil: no limit.
    private let waitLimit: Double?
    /// Seconds spent waiting on the socket with nothing arriving since the server last sent
    /// anything (time the replica spends elsewhere does not count), and whether it was asked
    /// for an answer since.
    private var quietFor: TimeInterval = 0
    private var pinged = false
    /// A relation as the stream described it, mapped onto the followed table.
    struct Relation {
        let table: TableSchema
        /// Per column of the relation, in its order: the index among the feed's columns.
        let slots: [Int]
        /// Per column of the relation: its decoder.
        let kinds: [PostgresBinaryField.Kind]
        /// The relation's positions of the key's columns, in key order.
        let keyAt: [Int]
    }

    /// The names of a table's columns in the catalog now.
    let columnsNow: (TableName) throws -> [String]

    init(
        replication: PostgresReplicationConnection, name: String, tables: [TableSchema], from lsn: PostgresLSN,
        columnsNow: @escaping (TableName) throws -> [String]
    ) throws {
        self.replication = replication
        self.columnsNow = columnsNow
        self.name = name
        var byName: [String: TableSchema] = [:]
        var cols: [TableName: [Column]] = [:]
        for t in tables {
            byName[Self.key(t.name.schema ?? "public", t.name.name)] = t
            cols[t.name] = t.columns
        }
        self.tables = byName
        self.columns = cols
        delivered = lsn
        confirmed = lsn
        waitLimit = replication.endpoint.options["timeout"].flatMap(Double.init).flatMap { $0 > 0 ? $0 : nil }
        let q = { (s: String) in PostgresDialect(serverEncodingIsUTF8: true).quote(s) }
        let sql = "START_REPLICATION SLOT \(q(name)) LOGICAL \(lsn) (proto_version '1', publication_names '\(q(name))', binary 'true')"
        let r = try replication.exec(sql)
        guard r.status == PGRES_COPY_BOTH else {
            let e = replication.error(r.handle, sql: sql)
            if e.sqlState == "42704" {
                throw FerryError.notReady(
                    "\(replication.endpoint.redacted) has no replication slot \(name) any more (dropped?): the position Ferry recorded cannot be followed; start again with --resync")
            }
            throw e
        }
    }

    deinit { close() }

    func close() {
        guard !closed else { return }
        closed = true
        replication.close()
    }

    static func key(_ schema: String, _ table: String) -> String { schema + "\u{0}" + table }

    // MARK: Reading

    func next(timeout: TimeInterval) throws -> ChangeEvent? {
        let deadline = Date().addingTimeInterval(max(0, timeout))
        while true {
            if let e = batcher.pop() {
                if case .commit(let p, _) = e, let lsn = PostgresLSN(p.text) { delivered = lsn }
                return e
            }
            guard !closed else { throw FerryError.cancelled }
            var buf: UnsafeMutablePointer<CChar>?
            let len = PQgetCopyData(replication.conn, &buf, 1)
            if len > 0, let buf {
                defer { PQfreemem(buf) }
                quietFor = 0
                pinged = false
                try message(UnsafeRawPointer(buf), Int(len))
                continue
            }
            if len == -1 {
                // The server ended the stream.
                var why = "the server ended the replication stream"
                while let raw = PQgetResult(replication.conn) {
                    let r = PostgresResult(raw)
                    if r.status != PGRES_COMMAND_OK { why = replication.error(r.handle, sql: nil).description }
                }
                throw FerryError.connectionFailed(endpoint: replication.endpoint.redacted, reason: why)
            }
            if len < -1 { throw FerryError.connectionFailed(endpoint: replication.endpoint.redacted, reason: replication.error(nil, sql: nil).description) }
            // Nothing buffered: status now and then (the server ends a silent stream after
            // wal_sender_timeout), then wait for the socket until the deadline.
            if Date().timeIntervalSince(lastStatus) >= 10 { try sendStatus() }
            if let limit = waitLimit {
                if quietFor >= limit {
                    throw FerryError.connectionLost(
                        endpoint: replication.endpoint.redacted,
                        reason: "the replication stream sent nothing for \(Int(limit.rounded())) s, not even an answer to Ferry's keepalive (--timeout): the connection stalled")
                }
                if quietFor >= limit / 2 && !pinged {
                    try sendStatus(replyRequested: true)
                    pinged = true
                }
            }
            let left = min(deadline.timeIntervalSinceNow, waitLimit.map { $0 / 4 } ?? .infinity)
            if deadline.timeIntervalSinceNow <= 0 { return nil }
            var fds = pollfd(fd: PQsocket(replication.conn), events: Int16(POLLIN), revents: 0)
            let ms = Int32(min(max(left, 0), 10) * 1000)
            let waited = Date()
            let ready = poll(&fds, 1, max(ms, 1))
            if ready < 0 && errno != EINTR {
                throw FerryError.connectionFailed(endpoint: replication.endpoint.redacted, reason: "waiting for the replication stream failed (errno \(errno))")
            }
            if ready == 0 { quietFor += Date().timeIntervalSince(waited) }
            guard PQconsumeInput(replication.conn) == 1 else {
                throw FerryError.connectionFailed(endpoint: replication.endpoint.redacted, reason: replication.error(nil, sql: nil).description)
            }
        }
    }

    func confirm(_ position: ChangePosition) throws {
        guard let lsn = PostgresLSN(position.text) else { throw FerryError.invalidOption("'\(position)' is not a PostgreSQL position") }
        if lsn > confirmed { confirmed = lsn }
        try sendStatus()
    }

    func reached(_ position: ChangePosition) throws -> Bool {
        guard let goal = PostgresLSN(position.text) else { throw FerryError.invalidOption("'\(position)' is not a PostgreSQL position") }
        if delivered >= goal { return true }
        // Idle, everything confirmed: the server's keepalive answer moves `delivered` to its end.
        if !inTransaction && batcher.isIdle && confirmed >= delivered { try sendStatus(replyRequested: true) }
        return false
    }

    /// A standby status update: written, flushed and applied all at what the replica confirmed.
    private func sendStatus(replyRequested: Bool = false) throws {
        var out: [UInt8] = [UInt8(ascii: "r")]
        for v in [confirmed.value, confirmed.value, confirmed.value] { PostgresValueCodec.put64(Int64(bitPattern: v), &out) }
        PostgresValueCodec.put64(Int64(Date().timeIntervalSince1970 * 1_000_000) - PostgresValueCodec.epochMicros, &out)
        out.append(replyRequested ? 1 : 0)
        let sent = out.withUnsafeBufferPointer { b in
            b.withMemoryRebound(to: CChar.self) { PQputCopyData(replication.conn, $0.baseAddress, Int32($0.count)) }
        }
        guard sent == 1, PQflush(replication.conn) == 0 else {
            throw FerryError.connectionFailed(endpoint: replication.endpoint.redacted, reason: replication.error(nil, sql: nil).description)
        }
        lastStatus = Date()
    }

    private func malformed(_ what: String) -> FerryError {
        .connectionFailed(endpoint: replication.endpoint.redacted, reason: "malformed replication message from the server (\(what))")
    }

    /// One CopyData message of the stream: WAL data or a keepalive.
    private func message(_ p: UnsafeRawPointer, _ n: Int) throws {
        switch p.load(as: UInt8.self) {
        case UInt8(ascii: "w"):
            guard n >= 25 else { throw malformed("short XLogData") }
            var r = Cursor(p + 25, n - 25, feed: self)
            try decode(&r)
        case UInt8(ascii: "k"):
            guard n >= 18 else { throw malformed("short keepalive") }
            let walEnd = PostgresLSN(UInt64(bitPattern: PostgresValueCodec.int64(p + 1)))
            // Idle, and everything handed out confirmed: nothing of the followed tables lies
            // before the server's end, so the slot may let go of the WAL up to it.
            if !inTransaction && batcher.isIdle && confirmed >= delivered && walEnd > confirmed {
                confirmed = walEnd
                delivered = walEnd
            }
            if p.load(fromByteOffset: 17, as: UInt8.self) == 1 { try sendStatus() }
        default:
            throw malformed("message type \(p.load(as: UInt8.self))")
        }
    }

    /// Reads a message's fields, bounds-checked.
    struct Cursor {
        let p: UnsafeRawPointer
        let n: Int
        var o = 0
        unowned let feed: PostgresLogicalFeed
        init(_ p: UnsafeRawPointer, _ n: Int, feed: PostgresLogicalFeed) {
            self.p = p
            self.n = n
            self.feed = feed
        }
        mutating func byte() throws -> UInt8 {
            guard o + 1 <= n else { throw feed.malformed("truncated") }
            defer { o += 1 }
            return p.load(fromByteOffset: o, as: UInt8.self)
        }
        mutating func int16() throws -> Int {
            guard o + 2 <= n else { throw feed.malformed("truncated") }
            defer { o += 2 }
            return Int(PostgresValueCodec.int16(p + o))
        }
        mutating func int32() throws -> Int32 {
            guard o + 4 <= n else { throw feed.malformed("truncated") }
            defer { o += 4 }
            return PostgresValueCodec.int32(p + o)
        }
        mutating func int64() throws -> Int64 {
            guard o + 8 <= n else { throw feed.malformed("truncated") }
            defer { o += 8 }
            return PostgresValueCodec.int64(p + o)
        }
        mutating func string() throws -> String {
            var end = o
            while end < n && p.load(fromByteOffset: end, as: UInt8.self) != 0 { end += 1 }
            guard end < n else { throw feed.malformed("unterminated name") }
            defer { o = end + 1 }
            return String(decoding: UnsafeRawBufferPointer(start: p + o, count: end - o), as: UTF8.self)
        }
        /// A tuple's columns: kind (n, u, t, b) and, for t and b, the field's place.
        mutating func tuple() throws -> [(kind: UInt8, at: Int, count: Int)] {
            let count = try int16()
            var out: [(kind: UInt8, at: Int, count: Int)] = []
            out.reserveCapacity(max(0, count))
            for _ in 0..<max(0, count) {
                let k = try byte()
                switch k {
                case UInt8(ascii: "n"), UInt8(ascii: "u"):
                    out.append((k, o, 0))
                case UInt8(ascii: "t"), UInt8(ascii: "b"):
                    let len = Int(try int32())
                    guard len >= 0, o + len <= n else { throw feed.malformed("a value past the message") }
                    out.append((k, o, len))
                    o += len
                default:
                    throw feed.malformed("tuple column kind \(k)")
                }
            }
            return out
        }
    }

    private func relation(_ id: UInt32) throws -> Relation {
        guard let r = relations[id] else { throw malformed("a change of relation \(id) before its description") }
        return r
    }

    /// One pgoutput message.
    private func decode(_ r: inout Cursor) throws {
        let type = try r.byte()
        switch type {
        case UInt8(ascii: "B"):
            inTransaction = true
            batcher.append(.begin)
        case UInt8(ascii: "C"):
            _ = try r.byte()
            _ = try r.int64()
            let end = PostgresLSN(UInt64(bitPattern: try r.int64()))
            let time = try r.int64()
            inTransaction = false
            let at = Date(timeIntervalSince1970: Double(time + PostgresValueCodec.epochMicros) / 1_000_000)
            batcher.append(.commit(ChangePosition(end.description), at: at))
        case UInt8(ascii: "R"):
            try describe(&r)
        case UInt8(ascii: "I"):
            let id = UInt32(bitPattern: try r.int32())
            let rel = try relation(id)
            guard try r.byte() == UInt8(ascii: "N") else { throw malformed("insert without a new tuple") }
            try row(try r.tuple(), of: rel, id: id, r)
        case UInt8(ascii: "U"):
            let id = UInt32(bitPattern: try r.int32())
            let rel = try relation(id)
            var k = try r.byte()
            var old: [(kind: UInt8, at: Int, count: Int)]?
            if k == UInt8(ascii: "K") || k == UInt8(ascii: "O") {
                old = try r.tuple()
                k = try r.byte()
            }
            guard k == UInt8(ascii: "N") else { throw malformed("update without a new tuple") }
            let new = try r.tuple()
            // The key changed: the old row goes, the new one comes (a key sent again unchanged,
            // as with a TOASTed key, is not a delete: that could cascade at the target).
            if let old, !sameKey(old, new, rel, r) {
                try key(old, of: rel, id: id, r)
            }
            try row(new, of: rel, id: id, r)
        case UInt8(ascii: "D"):
            let id = UInt32(bitPattern: try r.int32())
            let rel = try relation(id)
            let k = try r.byte()
            guard k == UInt8(ascii: "K") || k == UInt8(ascii: "O") else { throw malformed("delete without its key") }
            try key(try r.tuple(), of: rel, id: id, r)
        case UInt8(ascii: "T"):
            let count = Int(try r.int32())
            _ = try r.byte()
            var names: [TableName] = []
            for _ in 0..<max(0, count) { names.append(try relation(UInt32(bitPattern: try r.int32())).table.name) }
            batcher.append(.truncate(names))
        case UInt8(ascii: "Y"), UInt8(ascii: "O"), UInt8(ascii: "M"):
            break  // types, origins, logical messages: nothing to apply
        default:
            throw malformed("pgoutput message \(type)")
        }
    }

    /// A Relation message: the table's columns now, mapped onto the feed's.
    private func describe(_ r: inout Cursor) throws {
        let id = UInt32(bitPattern: try r.int32())
        let schema = try r.string(), table = try r.string()
        _ = try r.byte()
        let count = try r.int16()
        var names: [String] = []
        for _ in 0..<max(0, count) {
            _ = try r.byte()
            names.append(try r.string())
            _ = try r.int32()
            _ = try r.int32()
        }
        guard let t = tables[Self.key(schema, table)] else {
            throw FerryError.notReady("the replication stream describes \(schema).\(table), which this replica does not follow (was the publication \(name) changed?)")
        }
        var slots: [Int] = []
        var kinds: [PostgresBinaryField.Kind] = []
        // Columns the feed does not know: added at the source since it opened.
        if names.contains(where: { n in !t.columns.contains { $0.name == n } }) { throw ColumnsAdded(table: t.name) }
        // Columns the feed knows and the relation lacks: the table as it was before they were
        // added (rows sent as partial), unless the table lacks them now too (dropped).
        let missing = t.columns.filter { !names.contains($0.name) }
        if !missing.isEmpty {
            let now = try columnsNow(t.name)
            if let gone = missing.first(where: { !now.contains($0.name) }) {
                throw FerryError.notReady(
                    "the column \(gone.name) of \(t.name) was dropped or renamed at the source while Ferry followed it: replication stops here; change \(t.name) at the target alike, then run again with --resync")
            }
        }
        for n in names {
            guard let i = t.columns.firstIndex(where: { $0.name == n }) else { throw ColumnsAdded(table: t.name) }
            guard let kind = PostgresBinaryField.Kind(sent: t.columns[i]) else {
                throw FerryError.invalidValue(table: t.name, column: n, key: nil, message: "type \(t.columns[i].nativeType) cannot be read")
            }
            slots.append(i)
            kinds.append(kind)
        }
        guard let key = t.preferredKey?.columns else { throw FerryError.noKey(table: t.name) }
        let keyAt = try key.map { k in
            guard let at = names.firstIndex(of: k) else { throw FerryError.noKey(table: t.name) }
            return at
        }
        batcher.flush()
        relations[id] = Relation(table: t, slots: slots, kinds: kinds, keyAt: keyAt)
    }

    /// Whether two tuples carry the same key bytes.
    private func sameKey(_ a: [(kind: UInt8, at: Int, count: Int)], _ b: [(kind: UInt8, at: Int, count: Int)], _ rel: Relation, _ r: Cursor) -> Bool {
        for i in rel.keyAt {
            guard i < a.count, i < b.count else { return false }
            let x = a[i], y = b[i]
            // The new tuple leaves an unchanged TOASTed key out: the old one tells it.
            if y.kind == UInt8(ascii: "u") { continue }
            guard x.kind == y.kind, x.count == y.count, memcmp(r.p + x.at, r.p + y.at, x.count) == 0 else { return false }
        }
        return true
    }

    private func decodeValue(_ c: (kind: UInt8, at: Int, count: Int), _ kind: PostgresBinaryField.Kind, _ r: Cursor, into col: inout ColumnBuffer, table: TableName, column: String) throws {
        switch c.kind {
        case UInt8(ascii: "n"):
            col.appendNull()
        case UInt8(ascii: "b"):
            do {
                try PostgresBinaryField.decode(kind, r.p + c.at, c.count, into: &col)
            } catch .value(let message) {
                throw FerryError.invalidValue(table: table, column: column, key: nil, message: message)
            } catch {
                throw malformed("column \(column) of \(table)")
            }
        default:
            throw FerryError.invalidValue(table: table, column: column, key: nil, message: "the server sent the value as text, not in its binary form")
        }
    }

    /// A new row (insert, update): whole, or only the columns sent where some were not.
    private func row(_ t: [(kind: UInt8, at: Int, count: Int)], of rel: Relation, id: UInt32, _ r: Cursor) throws {
        guard t.count == rel.slots.count else { throw malformed("a tuple of \(t.count) columns for \(rel.slots.count)") }
        let columns = rel.table.columns
        let unchanged = t.contains(where: { $0.kind == UInt8(ascii: "u") })
        if unchanged || rel.slots.count < columns.count {
            // In the table's column order, the unchanged (and those the table gained since) left out.
            let sent = rel.slots.indices.filter { t[$0].kind != UInt8(ascii: "u") }.sorted { rel.slots[$0] < rel.slots[$1] }
            for k in rel.keyAt where t[k].kind == UInt8(ascii: "u") {
                throw FerryError.invalidValue(
                    table: rel.table.name, column: columns[rel.slots[k]].name, key: nil,
                    message: "an update left this key column out of the stream (an unchanged TOASTed key); give the table REPLICA IDENTITY FULL")
            }
            let sentColumns = sent.map { columns[rel.slots[$0]] }
            let names = sentColumns.map(\.name)
            var b = batcher.take(unchanged ? .updates(names) : .partialUpserts(names), rel.table.name, columns: sentColumns)
            for (j, i) in sent.enumerated() {
                try decodeValue(t[i], rel.kinds[i], r, into: &b.columns[j], table: rel.table.name, column: columns[rel.slots[i]].name)
            }
            batcher.put(b)
        } else {
            var b = batcher.take(.upserts, rel.table.name, columns: columns)
            for i in t.indices {
                try decodeValue(t[i], rel.kinds[i], r, into: &b.columns[rel.slots[i]], table: rel.table.name, column: columns[rel.slots[i]].name)
            }
            batcher.put(b)
        }
    }

    /// An old key (delete, or an update that changed it): the key's columns, in key order.
    private func key(_ t: [(kind: UInt8, at: Int, count: Int)], of rel: Relation, id: UInt32, _ r: Cursor) throws {
        guard t.count == rel.slots.count else { throw malformed("a key tuple of \(t.count) columns for \(rel.slots.count)") }
        let keyColumns = rel.keyAt.map { rel.table.columns[rel.slots[$0]] }
        var b = batcher.take(.deletes, rel.table.name, columns: keyColumns)
        for (j, i) in rel.keyAt.enumerated() {
            guard t[i].kind == UInt8(ascii: "b") else {
                throw FerryError.invalidValue(table: rel.table.name, column: keyColumns[j].name, key: nil, message: "the stream sent no old value of this key column")
            }
            try decodeValue(t[i], rel.kinds[i], r, into: &b.columns[j], table: rel.table.name, column: keyColumns[j].name)
        }
        batcher.put(b)
    }
}
