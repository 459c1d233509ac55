import CSQLite
import FerryCore
import Foundation

/// SQLite's change capture: capture triggers of their own names write the key of every row
/// inserted, updated or deleted — by any program that writes the file — into an ordered change
/// log (`_ferry_log_…`, an AUTOINCREMENT sequence, which the catalogs hide). SQLite has no
/// transaction id: a poll reads, in one read transaction, everything the log holds past what
/// was handed out — a window of entries at a time, the read transaction held open across them
/// — and the rows their keys have then, and hands them out as one transaction (rows present:
/// upserts; keys gone: deletes), ordered in each window by each key's first entry so that a
/// parent comes before the children that reference it. The target then holds the source's
/// state as of that read, committed in one target transaction (never a source transaction in
/// part, however many windows it spans); the entries are pruned from the log only after that
/// commit (`confirm`). In a rollback-journal file, writers wait while a read spanning windows is
/// applied (WAL files let them go on).
public final class SQLiteChangeCapture: ChangeCapture {
    let endpoint: Endpoint
    /// Creates and drops the triggers and the log.
    let db: SQLiteConnection
    /// Key columns a log entry holds at most.
    static let maxKeyColumns = 4

    init(endpoint: Endpoint) throws {
        self.endpoint = endpoint
        db = try SQLiteConnection(endpoint: endpoint, role: .target)
    }

    deinit { db.close() }

    /// The log table and the trigger prefix of capture `name` (`_ferry_r_…`).
    static func names(_ name: String) throws -> (log: String, trigger: String) {
        guard name.hasPrefix("_ferry_"), name.count <= 60,
            name.utf8.allSatisfy({ ($0 >= 97 && $0 <= 122) || ($0 >= 48 && $0 <= 57) || $0 == 95 })
        else { throw FerryError.invalidOption("'\(name)' cannot name a change capture") }
        let rest = name.dropFirst("_ferry_".count)
        return ("_ferry_log_" + rest, "_ferry_t_" + rest + "_")
    }

    func key(_ t: TableSchema) throws -> [String] {
        guard t.name.schema == nil || t.name.schema == "main" else {
            throw FerryError.notReady("\(t.name) is in an attached database; replication follows the tables of the main database")
        }
        guard let key = t.preferredKey?.columns else { throw FerryError.noKey(table: t.name) }
        guard key.count <= Self.maxKeyColumns else {
            throw FerryError.notReady("\(t.name)'s key has \(key.count) columns; replication follows keys of at most \(Self.maxKeyColumns)")
        }
        return key
    }

    public func start(name: String, tables: [TableSchema]) throws -> any CaptureStart {
        let (log, prefix) = try Self.names(name)
        let keys = try tables.map(key)
        let d = db.dialect
        let q = { (s: String) in d.quote(s) }
        let k = (1...Self.maxKeyColumns).map { "k\($0)" }
        var sql = ["CREATE TABLE \(q(log)) (seq INTEGER PRIMARY KEY AUTOINCREMENT, tbl TEXT NOT NULL, " + k.joined(separator: ", ") + ")"]
        for (i, (t, key)) in zip(tables, keys).enumerated() {
            let table = q(t.name.name), name = d.literal(t.name.name)
            let into = "INSERT INTO \(q(log)) (tbl, " + k.prefix(key.count).joined(separator: ", ") + ") "
            func values(_ row: String) -> String { "VALUES (\(name), " + key.map { "\(row).\(q($0))" }.joined(separator: ", ") + ")" }
            let trigger = { (kind: String) in q(prefix + "\(i)_" + kind) }
            sql.append("CREATE TRIGGER \(trigger("ai")) AFTER INSERT ON \(table) BEGIN \(into)\(values("NEW")); END")
            sql.append("CREATE TRIGGER \(trigger("ad")) AFTER DELETE ON \(table) BEGIN \(into)\(values("OLD")); END")
            let changed = key.map { "NEW.\(q($0)) IS NOT OLD.\(q($0))" }.joined(separator: " OR ")
            sql.append(
                "CREATE TRIGGER \(trigger("au")) AFTER UPDATE ON \(table) BEGIN \(into)\(values("OLD")); "
                    + "\(into)SELECT \(name), " + key.map { "NEW.\(q($0))" }.joined(separator: ", ") + " WHERE \(changed); END")
            // INSERT OR REPLACE (and UPDATE OR REPLACE) deleting rows through another UNIQUE
            // index fires no delete trigger (without recursive_triggers): log those rows first.
            let others = t.uniqueKeys.filter { $0 != key }
            if !others.isEmpty {
                let conflict = others.map { u in "(" + u.map { "\(q($0)) = NEW.\(q($0))" }.joined(separator: " AND ") + ")" }.joined(separator: " OR ")
                let select = "\(into)SELECT \(name), " + key.map(q).joined(separator: ", ") + " FROM \(table) WHERE \(conflict)"
                sql.append("CREATE TRIGGER \(trigger("bi")) BEFORE INSERT ON \(table) BEGIN \(select); END")
                sql.append("CREATE TRIGGER \(trigger("bu")) BEFORE UPDATE ON \(table) BEGIN \(select); END")
            }
        }
        try db.begin()
        do {
            for s in sql { try db.run(s) }
            try db.commit()
        } catch {
            try? db.rollback()
            throw error
        }
        return SQLiteCaptureStart(capture: self, name: name, log: log, tables: tables)
    }

    public func follow(name: String, tables: [TableSchema], from position: ChangePosition) throws -> any ChangeFeed {
        let (log, _) = try Self.names(name)
        guard let seq = Int64(position.text) else {
            throw FerryError.invalidOption("'\(position)' is not a SQLite change log position (a sequence number)")
        }
        guard try db.tableExists(TableName(log)) else {
            throw FerryError.notReady("\(endpoint.redacted) has no change log \(log) any more: the position Ferry recorded cannot be followed; start again with --resync")
        }
        return try SQLiteChangeFeed(endpoint: endpoint, log: log, tables: tables, keys: tables.map(key), from: seq)
    }

    public func drop(name: String) throws -> [String] {
        let (log, prefix) = try Self.names(name)
        var removed: [String] = []
        let triggers = try db.query("SELECT name FROM sqlite_schema WHERE type = 'trigger' AND substr(name, 1, ?1) = ?2", [.int(Int64(prefix.utf8.count)), .text(prefix)])
        try db.begin()
        do {
            for case let .text(t) in triggers.compactMap(\.first) { try db.run("DROP TRIGGER \(db.dialect.quote(t))") }
            if try db.tableExists(TableName(log)) {
                try db.run("DROP TABLE \(db.dialect.quote(log))")
                removed.append("change log \(log)")
            }
            try db.commit()
        } catch {
            try? db.rollback()
            throw error
        }
        if !triggers.isEmpty { removed.insert("\(triggers.count) capture triggers \(prefix)…", at: 0) }
        return removed
    }

    /// Log entries past the recorded one (the log holds them, and those not yet pruned).
    public func lag(name: String, from position: ChangePosition) throws -> ChangeLag {
        guard let seq = Int64(position.text) else { throw FerryError.invalidOption("'\(position)' is not a SQLite change log position") }
        let log = try Self.names(name).log
        let q = db.dialect.quote(log)
        guard try db.tableExists(TableName(log)) else {
            throw FerryError.notReady("\(endpoint.redacted) has no change log \(log) any more: the position Ferry recorded cannot be followed; start again with --resync")
        }
        var behind: Int64 = 0
        if case .int(let n) = try db.query("SELECT count(*) FROM \(q) WHERE seq > ?1", [.int(seq)]).first?.first ?? .null { behind = n }
        return ChangeLag(sourcePosition: String(try Self.last(db, log: log)), behind: behind, unit: "changes")
    }

    public func currentPosition(name: String) throws -> ChangePosition {
        ChangePosition(String(try Self.last(db, log: try Self.names(name).log)))
    }

    /// The last entry's sequence number in `log`, read by `connection` (in its transaction).
    static func last(_ connection: SQLiteConnection, log: String) throws -> Int64 {
        if case .int(let n) = try connection.query("SELECT seq FROM sqlite_sequence WHERE name = ?1", [.text(log)]).first?.first { return n }
        return 0
    }
}

extension SQLiteConnection {
    public func changeCapture() throws -> (any ChangeCapture)? { try SQLiteChangeCapture(endpoint: endpoint) }
}

/// A capture just made: the copy's snapshot is a read transaction, its position the log's end then.
final class SQLiteCaptureStart: CaptureStart {
    let capture: SQLiteChangeCapture
    let name: String
    let log: String
    let tables: [TableSchema]
    private var position: Int64?

    init(capture: SQLiteChangeCapture, name: String, log: String, tables: [TableSchema]) {
        self.capture = capture
        self.name = name
        self.log = log
        self.tables = tables
    }

    func beginSnapshot(on connection: any Connection) throws -> (position: ChangePosition, shared: String?) {
        guard let c = connection as? SQLiteConnection else {
            throw FerryError.notReady("a SQLite capture's snapshot is read through a SQLite connection")
        }
        try c.beginSnapshot()
        let seq = try SQLiteChangeCapture.last(c, log: log)
        position = seq
        return (ChangePosition(String(seq)), nil)
    }

    func follow() throws -> any ChangeFeed {
        guard let position else { throw FerryError.notReady("a capture is followed after its snapshot began") }
        return try SQLiteChangeFeed(endpoint: capture.endpoint, log: log, tables: tables, keys: tables.map(capture.key), from: position)
    }

    func close() {}
}

/// Polls a change log (see `SQLiteChangeCapture`).
final class SQLiteChangeFeed: ChangeFeed {
    let db: SQLiteConnection
    let log: String
    let columns: [TableName: [Column]]
    private let tables: [TableSchema]
    private let keys: [[String]]
    private var ready = ChangeQueue()
    /// The log's last entry handed out, and the last one confirmed (and pruned).
    private var delivered: Int64
    private var confirmed: Int64
    /// Log entries one window reads at most.
    static let window = 20_000
    /// While a delivery spans windows: the log's last entry as of its read transaction (still
    /// open), and the last entry of the windows handed out.
    private var reading: (last: Int64, through: Int64)?
    /// The file's schema version when its followed tables were last compared with the feed's.
    private var schemaVersion: Int64?

    init(endpoint: Endpoint, log: String, tables: [TableSchema], keys: [[String]], from seq: Int64) throws {
        db = try SQLiteConnection(endpoint: endpoint, role: .target)
        self.log = log
        self.tables = tables
        self.keys = keys
        var cols: [TableName: [Column]] = [:]
        for t in tables { cols[t.name] = t.columns }
        columns = cols
        delivered = seq
        confirmed = seq
    }

    deinit { close() }
    func close() {
        if reading != nil { try? db.rollback() }
        reading = nil
        db.close()
    }

    func next(timeout: TimeInterval) throws -> ChangeEvent? {
        let deadline = Date().addingTimeInterval(max(0, timeout))
        while true {
            if let e = ready.pop() {
                if case .commit(let p, _) = e, let n = Int64(p.text) { delivered = n }
                return e
            }
            if try poll() { continue }
            let left = deadline.timeIntervalSinceNow
            if left <= 0 { return nil }
            Thread.sleep(forTimeInterval: min(left, 0.05))
        }
    }

    /// Hands out what the log holds past `delivered` as one transaction: the log's end and the
    /// rows its keys have as of one read transaction, read a window at a time while that read
    /// transaction stays open (a source transaction larger than a window is never split: the
    /// target gets the source's state as of that read, whole); false when there is nothing new.
    private func poll() throws -> Bool {
        let q = { (s: String) in self.db.dialect.quote(s) }
        if reading == nil {
            try db.beginSnapshot()
            do {
                try checkColumns()
                guard case .int(let end) = try db.query("SELECT max(seq) FROM \(q(log)) WHERE seq > ?1", [.int(delivered)]).first?.first ?? .null else {
                    try? db.rollback()
                    return false
                }
                reading = (end, delivered)
                ready.append(.begin)
            } catch {
                try? db.rollback()
                throw error
            }
        }
        guard let (last, from) = reading else { return false }
        do {
            try readWindow(after: from, through: last)
        } catch {
            reading = nil
            try? db.rollback()
            throw error
        }
        return true
    }

    /// The next window of the log after `from` (at most `window` entries, up to `last`) and the
    /// rows its keys have, in the read transaction `poll` holds; after the last window, the
    /// transaction's commit, and the read transaction ended.
    private func readWindow(after from: Int64, through last: Int64) throws {
        let q = { (s: String) in self.db.dialect.quote(s) }
        guard case .int(let end) = try db.query(
            "SELECT max(seq) FROM (SELECT seq FROM \(q(log)) WHERE seq > ?1 AND seq <= ?2 ORDER BY seq LIMIT \(Self.window))", [.int(from), .int(last)]
        ).first?.first ?? .null
        else {
            throw FerryError.notReady("the change log \(log) lost entries \(from)…\(last) while Ferry read them in one read transaction: run again")
        }
        // Per table: each key's first entry in the window, whether its row is there, the key,
        // and the row.
        struct Part { let table: Int; let batch: RowBatch; let seqs: [Int64]; let present: [Bool] }
        var parts: [Part] = []
        for (i, t) in tables.enumerated() {
            let key = keys[i]
            let keyColumns = try key.map { k in
                guard let c = t.column(named: k) else { throw FerryError.columnNotFound(table: t.name, column: k) }
                return c
            }
            let k = (1...key.count).map { "k\($0)" }
            let join = zip(key, k).map { "t.\(q($0)) = l.\($1)" }.joined(separator: " AND ")
            let sql = "SELECT l.seq, t.\(q(key[0])) IS NOT NULL, " + k.map { "l." + $0 }.joined(separator: ", ") + ", "
                + t.columns.map { "t." + q($0.name) }.joined(separator: ", ")
                + " FROM (SELECT min(seq) AS seq, " + k.joined(separator: ", ") + " FROM \(q(log)) WHERE seq > ?1 AND seq <= ?2 AND tbl = "
                + db.dialect.literal(t.name.name) + " GROUP BY " + k.joined(separator: ", ") + ") l LEFT JOIN \(q(t.name.name)) t ON \(join) ORDER BY l.seq"
            let head = [Column(name: "seq", nativeType: "", logicalType: .int64), Column(name: "present", nativeType: "", logicalType: .int64)]
            let reader = try SQLiteReader(connection: db, sql: sql, binds: [from, end], columns: head + keyColumns + t.columns, table: t.name, batchSize: Self.window)
            defer { reader.close() }
            while let b = try reader.next() {
                parts.append(Part(table: i, batch: b, seqs: b.columns[0].ints, present: b.columns[1].ints.map { $0 != 0 }))
            }
        }
        // Every key in the order of its first entry: runs of one table and one kind.
        var order: [(seq: Int64, part: Int, row: Int)] = []
        for (p, part) in parts.enumerated() { for r in 0..<part.seqs.count { order.append((part.seqs[r], p, r)) } }
        order.sort { $0.seq < $1.seq }
        var run: (part: Int, present: Bool, rows: [Int])?
        func flush() {
            guard let r = run else { return }
            run = nil
            let part = parts[r.part], t = tables[part.table], n = keys[part.table].count
            let picked = part.batch.selecting(r.rows)
            if r.present {
                ready.append(.upserts(t.name, RowBatch(columns: Array(picked.columns[(2 + n)...]))))
            } else {
                ready.append(.deletes(t.name, RowBatch(columns: Array(picked.columns[2..<(2 + n)]))))
            }
        }
        for o in order {
            let present = parts[o.part].present[o.row]
            if let r = run, r.part == o.part, r.present == present, r.rows.count < 4096 {
                run?.rows.append(o.row)
            } else {
                flush()
                run = (o.part, present, [o.row])
            }
        }
        flush()
        if end >= last {
            reading = nil
            try? db.rollback()
            ready.append(.commit(ChangePosition(String(last)), at: nil))
        } else {
            reading = (last, end)
        }
    }

    /// Where the file's schema changed since the last look: a followed table that gained
    /// columns is `ColumnsAdded`; one that lost a column stops replication in one line.
    private func checkColumns() throws {
        guard case .int(let version) = try db.query("PRAGMA schema_version").first?.first ?? .null else { return }
        guard version != schemaVersion else { return }
        do {
            for t in tables {
                let now = try db.query("SELECT name FROM pragma_table_info(?1)", [.text(t.name.name)]).compactMap { row -> String? in
                    if case .text(let n) = row.first ?? .null { return n }
                    return nil
                }
                if let gone = t.columns.first(where: { !now.contains($0.name) }) {
                    throw FerryError.notReady(
                        "the column \(gone.name) of \(t.name) was dropped or renamed at the source while Ferry followed it: replication stops here; change \(t.name) at the target alike, then run again with --resync")
                }
                if now.count > t.columns.count { throw ColumnsAdded(table: t.name) }
            }
        }
        schemaVersion = version
    }

    func confirm(_ position: ChangePosition) throws {
        guard let n = Int64(position.text) else { throw FerryError.invalidOption("'\(position)' is not a SQLite change log position") }
        guard n > confirmed else { return }
        // Pruned only once the target committed what it held.
        try db.query("DELETE FROM \(db.dialect.quote(log)) WHERE seq <= ?1", [.int(n)])
        confirmed = n
    }

    func reached(_ position: ChangePosition) throws -> Bool {
        guard let n = Int64(position.text) else { throw FerryError.invalidOption("'\(position)' is not a SQLite change log position") }
        if delivered >= n { return true }
        // Entries of other captures in the same file may lie before it: what this log holds
        // past `delivered` is what is still to come.
        try db.beginSnapshot()
        defer { try? db.rollback() }
        let pending = try db.query("SELECT count(*) FROM \(db.dialect.quote(log)) WHERE seq > ?1 AND seq <= ?2", [.int(delivered), .int(n)]).first?.first
        if case .int(0) = pending ?? .null { delivered = max(delivered, n) }
        return delivered >= n
    }
}
