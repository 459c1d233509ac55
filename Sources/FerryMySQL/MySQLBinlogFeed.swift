import CMariaDB
import FerryCore
import Foundation

/// A MariaDB binlog stream (`COM_BINLOG_DUMP` through Connector/C's replication API), decoded
/// into `ChangeEvent`s. A transaction is its GTID event up to its XID (or the COMMIT, or the one
/// statement of a standalone group); it is handed out only if it changed a followed table, but
/// every transaction moves the position. Row images are decoded by `BinlogTableMap`.
final class MySQLBinlogFeed: ChangeFeed {
    let endpoint: Endpoint
    let name: String
    let columns: [TableName: [Column]]
    private let connection: MySQLConnection
    private let rpl: UnsafeMutablePointer<MARIADB_RPL>
    /// The last event fetched: its memory is reused by the next fetch.
    private var event: UnsafeMutablePointer<MARIADB_RPL_EVENT>?
    /// Followed tables by database and name.
    private let tables: [String: TableSchema]
    /// What each table id of the stream is: a followed table's decoder, or nil (not followed).
    private var maps: [UInt64: Mapped?] = [:]
    private var batcher = ChangeBatcher(limit: 4096)
    /// Where the stream stands after the last transaction decoded.
    private var position: BinlogPosition
    /// Inside a transaction: its GTID, whether it is one statement alone (DDL), and whether a
    /// `begin` was handed out for it (only once it changed a followed table).
    private var transaction: (domain: UInt32, gtid: BinlogPosition.GTID, standalone: Bool)?
    private var begun = false
    private var lastPacket = Date()
    private var closed = false
    private var before: [BinlogTableMap.Field] = []
    private var after: [BinlogTableMap.Field] = []

    /// Seconds between the server's heartbeats on an idle stream, and how long a silent
    /// connection is trusted.
    static let heartbeatSeconds = 5
    static let silenceLimit: TimeInterval = 30

    struct Mapped {
        let decoder: BinlogRowDecoder
        /// The key's columns: their places in the table, and as columns.
        let keyAt: [Int]
        let keyColumns: [Column]
    }

    /// The names of a table's columns in the catalog now.
    let columnsNow: (TableName) throws -> [String]

    init(endpoint: Endpoint, name: String, tables: [TableSchema], from position: BinlogPosition, columnsNow: @escaping (TableName) throws -> [String]) throws {
        self.endpoint = endpoint
        self.columnsNow = columnsNow
        self.name = name
        self.position = position
        var own: UInt32 = 0
        connection = try MySQLConnection(endpoint: endpoint, role: .source, readTimeout: UInt32(Self.silenceLimit))
        var byName: [String: TableSchema] = [:]
        var cols: [TableName: [Column]] = [:]
        for t in tables {
            byName[Self.key(t.name.schema ?? connection.database, t.name.name)] = t
            cols[t.name] = t.columns
        }
        self.tables = byName
        columns = cols
        do {
            // Checksums as the server writes them, GTID events as a MariaDB replica gets them,
            // heartbeats on an idle stream, and where to start.
            try connection.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
            try connection.execute("SET @mariadb_slave_capability = 4")
            try connection.execute("SET @master_heartbeat_period = \(Self.heartbeatSeconds * 1_000_000_000)")
            if !position.gtids.isEmpty {
                try connection.execute("SET @slave_connect_state = \(connection.lit(position.gtidText))")
                try connection.execute("SET @slave_gtid_strict_mode = 0")
                try connection.execute("SET @slave_gtid_ignore_duplicates = 0")
            }
            own = try connection.query("SELECT @@server_id").first?.first.flatMap { $0.flatMap { UInt32($0) } } ?? 0
            guard let r = ferry_rpl_init(connection.mysql) else { throw connection.error(sql: nil) }
            rpl = r
        } catch {
            connection.close()
            throw error
        }
        ferry_rpl_set_server_id(rpl, Self.replicaID(name, avoiding: own))
        if position.gtids.isEmpty {
            _ = position.file.withCString { ferry_rpl_set_filename(rpl, $0, strlen($0)) }
            ferry_rpl_set_start(rpl, UInt(position.offset))
        } else {
            ferry_rpl_set_start(rpl, 4)
        }
        if mariadb_rpl_open(rpl) != 0 {
            let e = failure()
            // Once: the feed is whole now, so its deinit runs after this throw and would close
            // again (a second mariadb_rpl_close freed the handle twice: ferry died of SIGABRT
            // when the source's connection broke as the stream opened, found by scripts/chaos).
            close()
            throw e
        }
    }

    deinit { close() }

    func close() {
        guard !closed else { return }
        closed = true
        if let event { mariadb_free_rpl_event(event) }
        event = nil
        mariadb_rpl_close(rpl)
        connection.close()
    }

    static func key(_ database: String, _ table: String) -> String { database + "\u{0}" + table }

    /// The server id this replica gives the source: derived from the capture's name (a second
    /// follower of the same pair replaces the first's connection, as MariaDB does for replicas
    /// that share an id), never the source's own.
    static func replicaID(_ name: String, avoiding own: UInt32) -> UInt32 {
        var h: UInt32 = 0x811C_9DC5
        for b in name.utf8 { h = (h ^ UInt32(b)) &* 0x0100_0193 }
        let id = 0x4600_0000 | (h & 0x00FF_FFFF)
        return id == own ? id ^ 1 : id
    }

    /// The stream's failure, in one line; a position the server no longer holds says what to do.
    private func failure() -> FerryError {
        let code = mysql_errno(connection.mysql) != 0 ? mysql_errno(connection.mysql) : mariadb_rpl_errno(rpl)
        let message = mysql_errno(connection.mysql) != 0 ? String(cString: mysql_error(connection.mysql)) : String(cString: mariadb_rpl_error(rpl))
        let shown = endpoint.redacted
        switch code {
        case 1236:
            return .notReady(
                "\(shown) no longer holds the binlog position Ferry recorded (\(position)): \(message); the binlog was purged or reset: start again with --resync, or --drop and replicate anew")
        case 1227, 1045:
            return .notReady("\(endpoint.user ?? "the user") may not read the binlog at \(shown): GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO the user (\(message))")
        case 2006, 2013, 2026, 2055:
            return .connectionFailed(endpoint: shown, reason: "the binlog stream broke: \(message)")
        default:
            return .connectionFailed(endpoint: shown, reason: "reading the binlog failed: \(message) (error \(code))")
        }
    }

    // MARK: Reading

    /// True when a packet is already buffered by the client library or waits on the socket.
    private func waiting(_ seconds: TimeInterval) throws -> Bool {
        if ferry_mysql_buffered(connection.mysql) != 0 { return true }
        var fds = pollfd(fd: mysql_get_socket(connection.mysql), events: Int16(POLLIN), revents: 0)
        let rc = poll(&fds, 1, Int32(max(0, seconds) * 1000))
        if rc < 0 && errno != EINTR {
            throw FerryError.connectionFailed(endpoint: endpoint.redacted, reason: "waiting for the binlog stream failed (errno \(errno))")
        }
        return rc > 0
    }

    func next(timeout: TimeInterval) throws -> ChangeEvent? {
        let deadline = Date().addingTimeInterval(max(0, timeout))
        while true {
            if let e = batcher.pop() { return e }
            guard !closed else { throw FerryError.cancelled }
            if !(try waiting(min(1, max(0, deadline.timeIntervalSinceNow)))) {
                if Date().timeIntervalSince(lastPacket) > Self.silenceLimit {
                    throw FerryError.connectionFailed(
                        endpoint: endpoint.redacted, reason: "no binlog event or heartbeat for \(Int(Self.silenceLimit)) s: the connection is gone")
                }
                if deadline.timeIntervalSinceNow <= 0 { return nil }
                continue
            }
            guard let e = mariadb_rpl_fetch(rpl, event) else {
                event = nil  // freed by the library on failure
                throw failure()
            }
            event = e
            lastPacket = Date()
            try handle(e)
        }
    }

    /// Nothing to release: the server keeps its binlog by its own expiry, for every replica alike.
    func confirm(_ position: ChangePosition) throws {}

    func reached(_ goal: ChangePosition) throws -> Bool {
        guard let g = BinlogPosition(goal.text) else { throw FerryError.invalidOption("'\(goal)' is not a MariaDB binlog position") }
        return transaction == nil && batcher.isIdle && position.includes(g)
    }

    private func malformed(_ what: String) -> FerryError {
        .connectionFailed(endpoint: endpoint.redacted, reason: "malformed binlog event from the server (\(what))")
    }

    private static func string(_ s: MARIADB_STRING) -> String {
        guard let p = s.str, s.length > 0 else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: p, count: s.length), as: UTF8.self)
    }

    // MARK: Events

    private func handle(_ e: UnsafeMutablePointer<MARIADB_RPL_EVENT>) throws {
        let type = e.pointee.event_type
        switch type {
        case ROTATE_EVENT:
            position.file = Self.string(e.pointee.event.rotate.filename)
            position.offset = e.pointee.event.rotate.position
        case GTID_EVENT:
            let g = e.pointee.event.gtid
            transaction = (g.domain_id, BinlogPosition.GTID(server: e.pointee.server_id, sequence: g.sequence_nr), g.flags & 1 != 0)
            begun = false
        case TABLE_MAP_EVENT:
            try describe(e.pointee.event.table_map)
        case WRITE_ROWS_EVENT_V1, WRITE_ROWS_EVENT, WRITE_ROWS_COMPRESSED_EVENT_V1, WRITE_ROWS_COMPRESSED_EVENT:
            try rows(e.pointee, kind: 0)
        case UPDATE_ROWS_EVENT_V1, UPDATE_ROWS_EVENT, UPDATE_ROWS_COMPRESSED_EVENT_V1, UPDATE_ROWS_COMPRESSED_EVENT:
            try rows(e.pointee, kind: 1)
        case DELETE_ROWS_EVENT_V1, DELETE_ROWS_EVENT, DELETE_ROWS_COMPRESSED_EVENT_V1, DELETE_ROWS_COMPRESSED_EVENT:
            try rows(e.pointee, kind: 2)
        case XID_EVENT:
            commit(e.pointee)
        case QUERY_EVENT, QUERY_COMPRESSED_EVENT:
            let q = e.pointee.event.query
            let statement = Self.string(q.statement)
            let word = statement.prefix(16).uppercased()
            if word.hasPrefix("COMMIT") {
                commit(e.pointee)
            } else if word.hasPrefix("BEGIN") || word.hasPrefix("XA ") {
                break
            } else {
                if word.hasPrefix("TRUNCATE"), let t = truncated(statement, database: Self.string(q.database)) {
                    begin()
                    batcher.append(.truncate([t]))
                }
                // A statement that changed a table's definition: its table maps are read again.
                maps.removeAll()
                if transaction?.standalone ?? true { commit(e.pointee) }
            }
        case START_ENCRYPTION_EVENT:
            throw FerryError.notReady("\(endpoint.redacted) encrypts its binlog (encrypt_binlog): Ferry cannot read it; replicate from a server without binlog encryption")
        default:
            break  // format description, heartbeats, checkpoints, GTID lists, annotations, …
        }
    }

    /// Hands out `begin` once the transaction changes a followed table.
    private func begin() {
        guard !begun else { return }
        begun = true
        batcher.append(.begin)
    }

    private func commit(_ e: MARIADB_RPL_EVENT) {
        if let t = transaction { position.gtids[t.domain] = t.gtid }
        if e.next_event_pos > 0 { position.offset = UInt64(e.next_event_pos) }
        if begun {
            batcher.append(.commit(ChangePosition(position.description), at: Date(timeIntervalSince1970: TimeInterval(e.timestamp))))
        }
        transaction = nil
        begun = false
    }

    /// The followed table a `TRUNCATE [TABLE] name` statement empties, if any.
    private func truncated(_ statement: String, database: String) -> TableName? {
        var words = statement.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "\t" || $0 == "\r" }).dropFirst()
        if words.first?.uppercased() == "TABLE" { words = words.dropFirst() }
        guard let target = words.first else { return nil }
        // `db`.`t`, db.t, `t` or t (a backquote inside a name is doubled).
        var parts: [String] = []
        var cur = "", quoted = false
        var chars = Array(target)[...]
        while let c = chars.popFirst() {
            if quoted {
                if c == "`" {
                    if chars.first == "`" { cur.append("`"); chars.removeFirst() } else { quoted = false }
                } else { cur.append(c) }
            } else if c == "`" {
                quoted = true
            } else if c == "." {
                parts.append(cur)
                cur = ""
            } else if c == ";" {
                break
            } else {
                cur.append(c)
            }
        }
        parts.append(cur)
        let db = parts.count == 2 ? parts[0] : database
        guard let t = tables[Self.key(db, parts.last ?? "")] else { return nil }
        return t.name
    }

    /// A TABLE_MAP event: which table a table id is, and how its rows are laid out.
    private func describe(_ m: st_mariadb_rpl_table_map_event) throws {
        let database = Self.string(m.database), table = Self.string(m.table)
        guard let t = tables[Self.key(database, table)] else {
            maps[m.table_id] = .some(nil)
            return
        }
        let count = Int(m.column_count)
        guard let typePointer = m.column_types.str, m.column_types.length >= count else { throw malformed("table map of \(table) without its column types") }
        let types = (0..<count).map { UInt8(bitPattern: typePointer[$0]) }
        let metadata = UnsafeRawBufferPointer(start: m.metadata.str, count: m.metadata.str == nil ? 0 : m.metadata.length)
        guard let map = BinlogTableMap(database: database, table: table, types: types, metadata: metadata) else {
            throw malformed("table map of \(table) with short metadata")
        }
        // More columns than the feed knows: added at the source since it opened. Fewer: the
        // table as it was before columns were added at its end (its rows sent as partial),
        // unless the table lacks them now too (dropped).
        if count > t.columns.count { throw ColumnsAdded(table: t.name) }
        if count < t.columns.count {
            let now = try columnsNow(t.name)
            if let gone = t.columns.first(where: { !now.contains($0.name) }) {
                throw FerryError.notReady(
                    "the column \(gone.name) of \(t.name) was dropped or renamed at the source while Ferry followed it: replication stops here; change \(t.name) at the target alike, then run again with --resync")
            }
        }
        guard let key = t.preferredKey?.columns else { throw FerryError.noKey(table: t.name) }
        let keyAt = try key.map { k in
            guard let at = t.columns.firstIndex(where: { $0.name == k }), at < count else { throw FerryError.noKey(table: t.name) }
            return at
        }
        maps[m.table_id] = Mapped(
            decoder: BinlogRowDecoder(table: t, map: map, zeroDatesAsNull: connection.zeroDatesAsNull),
            keyAt: keyAt, keyColumns: keyAt.map { t.columns[$0] })
    }

    /// A rows event: `kind` 0 writes, 1 updates (before and after images), 2 deletes.
    private func rows(_ e: MARIADB_RPL_EVENT, kind: Int) throws {
        let r = e.event.rows
        guard let mapped = maps[r.table_id] else { throw malformed("rows of table id \(r.table_id) before its table map") }
        guard let m = mapped else { return }
        let d = m.decoder
        let count = Int(r.column_count)
        guard count == d.map.types.count, let bitmap = r.column_bitmap else { throw malformed("rows of \(d.table.name) with \(count) columns") }
        guard let base = r.row_data, r.row_data_size > 0 else { return }
        let data = UnsafeRawBufferPointer(start: base, count: r.row_data_size)
        let bitmapBytes = (count + 7) / 8
        let present = UnsafeRawBufferPointer(start: bitmap, count: bitmapBytes)
        var presentAfter = present
        var at = 0
        if kind == 1 {
            if let b = r.column_update_bitmap {
                presentAfter = UnsafeRawBufferPointer(start: b, count: bitmapBytes)
            } else {
                // Version 2 events keep the after image's bitmap with the rows.
                guard data.count >= bitmapBytes else { throw malformed("short update of \(d.table.name)") }
                presentAfter = UnsafeRawBufferPointer(rebasing: data[0..<bitmapBytes])
                at = bitmapBytes
            }
        }
        begin()
        do {
            while at < data.count {
                at = try d.map.scan(data, at: at, present: present, into: &before)
                switch kind {
                case 0:
                    try upsert(before, data, m)
                case 1:
                    at = try d.map.scan(data, at: at, present: presentAfter, into: &after)
                    if m.keyAt.contains(where: { !same(before[$0], after[$0], data) }) { try delete(before, data, m) }
                    try upsert(after, data, m)
                default:
                    try delete(before, data, m)
                }
            }
        } catch let f as BinlogTableMap.Failure {
            switch f {
            case .truncated: throw malformed("a row of \(d.table.name) past its event")
            case .unsupported(let i, let type): throw FerryError.invalidValue(table: d.table.name, column: d.table.columns[i].name, key: nil, message: "binlog type \(type) cannot be read")
            case .absent(let i):
                throw FerryError.notReady(
                    "the binlog left the column \(d.table.columns[i].name) of \(d.table.name) out of a row: the source writes binlog_row_image other than FULL (in this session?); set binlog_row_image = FULL")
            }
        }
    }

    private func same(_ a: BinlogTableMap.Field, _ b: BinlogTableMap.Field, _ data: UnsafeRawBufferPointer) -> Bool {
        guard a.isNull == b.isNull, a.count == b.count else { return false }
        if a.isNull { return true }
        return data[a.at..<(a.at + a.count)].elementsEqual(data[b.at..<(b.at + b.count)])
    }

    private func upsert(_ fields: [BinlogTableMap.Field], _ data: UnsafeRawBufferPointer, _ m: Mapped) throws {
        let t = m.decoder.table
        let n = m.decoder.map.types.count
        let kind: ChangeBatcher.Kind = n == t.columns.count ? .upserts : .partialUpserts(t.columns[..<n].map(\.name))
        var b = batcher.take(kind, t.name, columns: Array(t.columns[..<n]))
        for i in 0..<n { try m.decoder.decode(i, fields[i], data, into: &b.columns[i]) }
        batcher.put(b)
    }

    private func delete(_ fields: [BinlogTableMap.Field], _ data: UnsafeRawBufferPointer, _ m: Mapped) throws {
        var b = batcher.take(.deletes, m.decoder.table.name, columns: m.keyColumns)
        for (j, i) in m.keyAt.enumerated() { try m.decoder.decode(i, fields[i], data, into: &b.columns[j]) }
        batcher.put(b)
    }
}
