import CLibPQ
import FerryCore
import Foundation

/// PostgreSQL's change capture: logical decoding with the built-in `pgoutput` plugin over
/// libpq's replication protocol. A capture named N is a publication N of the followed tables and
/// a logical replication slot N; the slot's exported snapshot is the initial copy's, and its
/// consistent point where the stream begins. Values arrive in each type's binary form
/// (`binary 'true'`, PostgreSQL 14 or later) and are decoded as a binary COPY's are.
public final class PostgresLogicalCapture: ChangeCapture {
    let endpoint: Endpoint
    /// For the catalog and the publication (a source connection is read-only).
    let admin: PostgresConnection

    init(endpoint: Endpoint) throws {
        self.endpoint = endpoint
        admin = try PostgresConnection(endpoint: endpoint, role: .target)
    }

    deinit { admin.close() }

    /// Slot and publication names: what the replicator gives, checked here (a slot name is
    /// lowercase letters, digits and underscores, at most 63 of them).
    static func check(_ name: String) throws {
        guard !name.isEmpty, name.count <= 63, name.utf8.allSatisfy({ ($0 >= 97 && $0 <= 122) || ($0 >= 48 && $0 <= 57) || $0 == 95 }) else {
            throw FerryError.invalidOption("'\(name)' cannot name a replication slot: use lowercase letters, digits and underscores, at most 63")
        }
    }

    /// Refuses a server that cannot decode (version, `wal_level`), in one line saying what to set.
    func checkServer() throws {
        guard PQserverVersion(admin.conn) >= 140_000 else {
            throw FerryError.notReady(
                "\(endpoint.redacted): replication needs PostgreSQL 14 or later (its logical decoding sends values in binary from 14 on); this server is \(PQserverVersion(admin.conn) / 10000)")
        }
        let level = try admin.rows("SHOW wal_level").first?.first ?? nil
        guard level == "logical" else {
            throw FerryError.notReady(
                "\(endpoint.redacted) has wal_level = \(level ?? "?"); replication needs wal_level = logical: set it (ALTER SYSTEM SET wal_level = logical, or postgresql.conf) and restart the server")
        }
    }

    /// Refuses, before a publication makes them its own, tables whose changes could not be
    /// applied by key: a table in a publication that publishes updates and deletes needs a
    /// replica identity, or the application's own UPDATE and DELETE on it fail at the source.
    func checkKeys(_ tables: [TableSchema]) throws {
        for t in tables {
            let q = admin.pgDialect.quote(t.name)
            let r = try admin.query(
                "SELECT c.relreplident::text, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary) FROM pg_class c WHERE c.oid = $1::regclass",
                [q])
            guard r.count == 1 else { throw FerryError.tableNotFound(table: t.name, endpoint: endpoint.redacted) }
            let identity = r.string(0, 0), hasPrimaryKey = r.bool(0, 1)
            let keyed = t.preferredKey != nil
            switch identity {
            case "d" where hasPrimaryKey, "i" where keyed, "f" where keyed:
                continue
            case "f":
                throw FerryError.noKey(table: t.name)
            default:
                throw FerryError.notReady(
                    "\(t.name) has no primary key: replicating it would add it to a publication, where the application's own UPDATE and DELETE on it fail "
                        + "without a replica identity; give it a primary key (or REPLICA IDENTITY FULL and --key); nothing was created at the source")
            }
        }
    }

    public func start(name: String, tables: [TableSchema]) throws -> any CaptureStart {
        try Self.check(name)
        try checkServer()
        try checkKeys(tables)
        let d = admin.pgDialect
        // The publication first: the slot decodes with the catalog as of its consistent point.
        try admin.execute("CREATE PUBLICATION \(d.quote(name)) FOR TABLE " + tables.map { "ONLY " + d.quote($0.name) }.joined(separator: ", "))
        do {
            let replication = try PostgresReplicationConnection(endpoint: endpoint)
            do {
                let r = try replication.exec("CREATE_REPLICATION_SLOT \(d.quote(name)) LOGICAL pgoutput (SNAPSHOT 'export')")
                guard r.status == PGRES_TUPLES_OK, r.count == 1, let lsn = PostgresLSN(r.string(0, 1)) else {
                    throw replication.error(r.handle, sql: "CREATE_REPLICATION_SLOT")
                }
                guard let snapshot = r.value(0, 2) else { throw replication.error(r.handle, sql: "CREATE_REPLICATION_SLOT (no snapshot)") }
                return PostgresCaptureStart(capture: self, replication: replication, name: name, tables: tables, position: lsn, snapshot: snapshot)
            } catch {
                replication.close()
                throw error
            }
        } catch {
            try? admin.execute("DROP PUBLICATION IF EXISTS \(d.quote(name))")
            throw error
        }
    }

    public func follow(name: String, tables: [TableSchema], from position: ChangePosition) throws -> any ChangeFeed {
        try Self.check(name)
        try checkServer()
        guard let lsn = PostgresLSN(position.text) else {
            throw FerryError.invalidOption("'\(position)' is not a PostgreSQL position (an LSN such as 0/16B3748)")
        }
        let replication = try PostgresReplicationConnection(endpoint: endpoint)
        do {
            return try PostgresLogicalFeed(replication: replication, name: name, tables: tables, from: lsn, columnsNow: columnsNow)
        } catch {
            replication.close()
            throw error
        }
    }

    /// The names of `table`'s columns in the catalog now.
    func columnsNow(_ table: TableName) throws -> [String] { try admin.describe(table).columns.map(\.name) }

    public func currentPosition(name: String) throws -> ChangePosition {
        guard let lsn = try admin.rows("SELECT pg_current_wal_lsn()::text").first?.first ?? nil else {
            throw FerryError.notReady("\(endpoint.redacted) did not tell its WAL position")
        }
        return ChangePosition(lsn)
    }

    public func lag(name: String, from position: ChangePosition) throws -> ChangeLag {
        guard PostgresLSN(position.text) != nil else { throw FerryError.invalidOption("'\(position)' is not a PostgreSQL position") }
        let r = try admin.query(
            "SELECT pg_current_wal_lsn()::text, pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint, "
                + "(SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $2)",
            [position.text, name])
        guard r.count == 1 else { throw FerryError.notReady("\(endpoint.redacted) did not tell its WAL position") }
        return ChangeLag(sourcePosition: r.string(0, 0), behind: max(0, Int64(r.string(0, 1)) ?? 0), unit: "bytes of WAL",
                         retainedBytes: r.value(0, 2).flatMap { Int64($0) })
    }

    public func drop(name: String) throws -> [String] {
        try Self.check(name)
        var removed: [String] = []
        var slots = try admin.query("SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", [name])
        // A follower that has just stopped: its server process lets go of the slot a moment later.
        for _ in 0..<50 where slots.count == 1 && slots.value(0, 0) != nil {
            Thread.sleep(forTimeInterval: 0.1)
            slots = try admin.query("SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", [name])
        }
        if slots.count == 1 {
            if let pid = slots.value(0, 0) {
                throw FerryError.notReady(
                    "the replication slot \(name) is in use by the server process \(pid) (a `ferry replicate` still following?); stop it first")
            }
            try admin.query("SELECT pg_drop_replication_slot($1)", [name])
            removed.append("replication slot \(name)")
        }
        if try admin.query("SELECT 1 FROM pg_publication WHERE pubname = $1", [name]).count == 1 {
            try admin.execute("DROP PUBLICATION \(admin.pgDialect.quote(name))")
            removed.append("publication \(name)")
        }
        return removed
    }
}

extension PostgresConnection {
    public func changeCapture() throws -> (any ChangeCapture)? { try PostgresLogicalCapture(endpoint: endpoint) }
}

/// A log sequence number, `X/Y` in hex as PostgreSQL writes it.
struct PostgresLSN: Comparable, Hashable, CustomStringConvertible {
    var value: UInt64
    init(_ value: UInt64) { self.value = value }
    init?(_ text: String) {
        let parts = text.split(separator: "/")
        guard parts.count == 2, let hi = UInt32(parts[0], radix: 16), let lo = UInt32(parts[1], radix: 16) else { return nil }
        value = UInt64(hi) << 32 | UInt64(lo)
    }
    var description: String { String(value >> 32, radix: 16, uppercase: true) + "/" + String(value & 0xFFFF_FFFF, radix: 16, uppercase: true) }
    static func < (a: Self, b: Self) -> Bool { a.value < b.value }
}

/// A replication connection (`replication=database`): simple queries and the replication
/// commands only (no extended protocol), then a COPY BOTH stream.
final class PostgresReplicationConnection {
    let conn: OpaquePointer
    let endpoint: Endpoint
    /// `--timeout`: how long one wait for the answer to a replication command may last (the
    /// stream itself is read with its own deadline, `PostgresLogicalFeed`). Nil: as long as it takes.
    let waitLimit: Double?
    private var closed = false

    init(endpoint: Endpoint) throws {
        self.endpoint = endpoint
        waitLimit = endpoint.options["timeout"].flatMap(Double.init).flatMap { $0 > 0 ? $0 : nil }
        do {
            conn = try PostgresConnection.connect(endpoint, extra: [("replication", "database")])
        } catch FerryError.connectionFailed(let e, let reason) where reason.contains("replication") || reason.contains("walsender") {
            throw FerryError.connectionFailed(
                endpoint: e, reason: "\(reason); replication needs a role with the REPLICATION attribute (ALTER ROLE … REPLICATION) and a pg_hba.conf line that allows it")
        }
        PQsetNoticeProcessor(conn, { _, _ in }, nil)
    }

    deinit { close() }

    func close() {
        guard !closed else { return }
        closed = true
        PQfinish(conn)
    }

    /// Sends a command and returns its result (the first failed one, else the last; a COPY's as
    /// soon as it starts), each answer waited for at most `waitLimit`: PQexec would wait for ever
    /// on a server that stalls while its kernel still acknowledges (found by scripts/chaos: a
    /// follower whose source stalled as it asked for the stream never ended).
    func exec(_ sql: String) throws -> PostgresResult {
        guard let limit = waitLimit else {
            guard let raw = PQexec(conn, sql) else { throw error(nil, sql: sql) }
            return PostgresResult(raw)
        }
        guard PQsendQuery(conn, sql) == 1 else { throw error(nil, sql: sql) }
        let answer = try PostgresConnection.collect {
            let deadline = Date().addingTimeInterval(limit)
            while PQisBusy(conn) == 1 {
                let left = deadline.timeIntervalSinceNow
                guard left > 0 else {
                    throw FerryError.connectionLost(
                        endpoint: endpoint.redacted,
                        reason: "the server sent nothing for \(PostgresConnection.seconds(limit)) (--timeout): the connection stalled")
                }
                var p = pollfd(fd: PQsocket(conn), events: Int16(POLLIN), revents: 0)
                if poll(&p, 1, Int32(min(left, 3600) * 1000) + 1) < 0 && errno != EINTR { throw error(nil, sql: sql) }
                guard PQconsumeInput(conn) == 1 else { throw error(nil, sql: sql) }
            }
            return PQgetResult(conn).map(PostgresResult.init)
        }
        guard let answer else { throw error(nil, sql: sql) }
        return answer
    }

    func error(_ result: OpaquePointer?, sql: String?) -> PostgresError {
        PostgresError(result, connection: conn, sql: sql, endpoint: endpoint)
    }
}

/// A slot just made: its exported snapshot stays importable until `follow` (or `close`).
final class PostgresCaptureStart: CaptureStart {
    let capture: PostgresLogicalCapture
    let replication: PostgresReplicationConnection
    let name: String
    let tables: [TableSchema]
    let lsn: PostgresLSN
    let snapshot: String
    private var used = false

    init(capture: PostgresLogicalCapture, replication: PostgresReplicationConnection, name: String, tables: [TableSchema], position: PostgresLSN, snapshot: String) {
        self.capture = capture
        self.replication = replication
        self.name = name
        self.tables = tables
        self.lsn = position
        self.snapshot = snapshot
    }

    func beginSnapshot(on connection: any Connection) throws -> (position: ChangePosition, shared: String?) {
        try connection.beginSnapshot(importing: snapshot)
        return (ChangePosition(lsn.description), snapshot)
    }

    func follow() throws -> any ChangeFeed {
        guard !used else { throw FerryError.notReady("a capture's start can be followed once") }
        used = true
        return try PostgresLogicalFeed(replication: replication, name: name, tables: tables, from: lsn, columnsNow: capture.columnsNow)
    }

    func close() {
        if !used { replication.close() }
        used = true
    }
}
