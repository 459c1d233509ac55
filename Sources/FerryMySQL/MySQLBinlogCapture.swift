import CMariaDB
import FerryCore
import Foundation

/// MariaDB's change capture: the row-based binary log, read as a replica reads it (Connector/C's
/// replication API, `COM_BINLOG_DUMP`) from a GTID position. Nothing is created at the source:
/// the server keeps its binlog for every replica alike (`expire_logs_days`,
/// `binlog_expire_logs_seconds`), so a capture is only a position, recorded at the target. The
/// initial copy reads in a consistent-snapshot transaction whose binlog position MariaDB reports
/// (`binlog_snapshot_file`, `binlog_snapshot_position`): the stream starts exactly there.
public final class MySQLBinlogCapture: ChangeCapture {
    let endpoint: Endpoint
    /// For the server's settings and positions.
    let admin: MySQLConnection

    init(endpoint: Endpoint) throws {
        self.endpoint = endpoint
        admin = try MySQLConnection(endpoint: endpoint, role: .source)
    }

    deinit { admin.close() }

    /// Refuses a server whose binlog cannot be followed, in one line saying what to set.
    func checkServer() throws {
        let shown = endpoint.redacted
        guard let row = try admin.query("SELECT @@log_bin, @@binlog_format, @@binlog_row_image, VERSION()").first, row.count == 4 else {
            throw FerryError.connectionFailed(endpoint: shown, reason: "the server did not report its binlog settings")
        }
        let version = row[3] ?? ""
        guard version.contains("MariaDB") else {
            throw FerryError.notReady(
                "\(shown) is MySQL \(version): Ferry follows MariaDB's binlog (GTIDs, snapshot positions); replicating from MySQL is not supported yet (copying from it is)")
        }
        guard row[0] == "1" else {
            throw FerryError.notReady(
                "\(shown) has no binary log (log_bin is OFF): start the server with log-bin, binlog_format = ROW, binlog_row_image = FULL and a server-id (docs/replication.md)")
        }
        guard row[1]?.uppercased() == "ROW" else {
            throw FerryError.notReady(
                "\(shown) has binlog_format = \(row[1] ?? "?"); replication needs ROW: SET GLOBAL binlog_format = 'ROW' and set it in the server's configuration")
        }
        guard row[2]?.uppercased() == "FULL" else {
            throw FerryError.notReady(
                "\(shown) has binlog_row_image = \(row[2] ?? "?"); replication needs FULL (every column of every changed row): SET GLOBAL binlog_row_image = 'FULL' and set it in the server's configuration")
        }
        _ = try masterStatus()
    }

    /// The binlog file and offset the server writes next (`SHOW MASTER STATUS`).
    func masterStatus() throws -> (file: String, offset: UInt64) {
        do {
            guard let row = try admin.query("SHOW MASTER STATUS").first, row.count >= 2, let file = row[0], let offset = row[1].flatMap({ UInt64($0) }) else {
                throw FerryError.notReady("\(endpoint.redacted) reports no binlog position (SHOW MASTER STATUS is empty): is log-bin on?")
            }
            return (file, offset)
        } catch let e as MySQLError where e.code == 1227 || e.code == 1045 {
            throw FerryError.notReady(
                "\(endpoint.user ?? "the user") may not read the binlog's position at \(endpoint.redacted): GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO the user (\(e.message))")
        }
    }

    /// Refuses tables whose changes could not be applied by key or whose columns the stream
    /// cannot carry. Nothing is created at a MariaDB source, so nothing is touched first.
    func checkTables(_ tables: [TableSchema]) throws {
        for t in tables {
            guard t.preferredKey != nil else {
                throw FerryError.notReady(
                    "\(t.name) has no primary key and no unique key on NOT NULL columns: its changes could not be applied by key; give it a primary key, or name one with --key")
            }
            for c in t.columns {
                let base = MySQLTypeMap.ColumnType(c.nativeType).base
                if base == "uuid" || base == "inet6" || base == "inet4" {
                    throw FerryError.notReady(
                        "\(t.name).\(c.name) is MariaDB's \(base.uppercased()) type, whose binlog form Ferry does not read yet: --exclude the table, or replicate it from a CHAR column")
                }
            }
        }
    }

    public func start(name: String, tables: [TableSchema]) throws -> any CaptureStart {
        try checkServer()
        try checkTables(tables)
        return MySQLCaptureStart(capture: self, name: name, tables: tables)
    }

    public func follow(name: String, tables: [TableSchema], from position: ChangePosition) throws -> any ChangeFeed {
        try checkServer()
        try checkTables(tables)
        guard let p = BinlogPosition(position.text) else {
            throw FerryError.invalidOption("'\(position)' is not a MariaDB binlog position (GTIDs@file:offset, such as 0-1-42@binlog.000001:1234)")
        }
        return try MySQLBinlogFeed(endpoint: endpoint, name: name, tables: tables, from: p, columnsNow: columnsNow)
    }

    /// The names of `table`'s columns in the catalog now.
    func columnsNow(_ table: TableName) throws -> [String] { try admin.describe(table).columns.map(\.name) }

    public func currentPosition(name: String) throws -> ChangePosition {
        let gtid = try admin.query("SELECT @@gtid_binlog_pos").first?.first ?? nil
        let (file, offset) = try masterStatus()
        guard let p = BinlogPosition(gtid: gtid ?? "", file: file, offset: offset) else {
            throw FerryError.notReady("\(endpoint.redacted) reported a GTID position Ferry cannot read: '\(gtid ?? "")'")
        }
        return ChangePosition(p.description)
    }

    /// Nothing was created at the source.
    public func drop(name: String) throws -> [String] { [] }

    /// Transactions the server has binlogged since (every database's: the binlog is the
    /// server's); the server keeps nothing for the replica of its own.
    public func lag(name: String, from position: ChangePosition) throws -> ChangeLag {
        guard let recorded = BinlogPosition(position.text), let now = BinlogPosition(try currentPosition(name: name).text) else {
            throw FerryError.invalidOption("'\(position)' is not a MariaDB binlog position")
        }
        let behind = now.gtids.reduce(Int64(0)) { sum, e in
            sum + Int64(clamping: e.value.sequence) - Int64(clamping: recorded.gtids[e.key]?.sequence ?? 0)
        }
        return ChangeLag(sourcePosition: now.description, behind: max(0, behind), unit: "transactions")
    }

    /// InnoDB runs foreign-key actions inside the engine: the binlog has no row of theirs.
    public var streamsCascadedChanges: Bool { false }
}

extension MySQLConnection {
    public func changeCapture() throws -> (any ChangeCapture)? { try MySQLBinlogCapture(endpoint: endpoint) }
}

/// Where a MariaDB binlog stream stands: the last GTID of each replication domain, and the
/// file and offset after it (`0-1-42,1-7-9@binlog.000003:1234`). A stream resumes from the
/// GTIDs (`@slave_connect_state`, what a MariaDB replica does); from the file and offset only
/// where the server has written no GTID yet.
struct BinlogPosition: CustomStringConvertible {
    struct GTID: Equatable {
        var server: UInt32
        var sequence: UInt64
    }
    var gtids: [UInt32: GTID]
    var file: String
    var offset: UInt64

    init?(gtid: String, file: String, offset: UInt64) {
        var g: [UInt32: GTID] = [:]
        for part in gtid.split(separator: ",") {
            let f = part.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "-")
            guard f.count == 3, let d = UInt32(f[0]), let s = UInt32(f[1]), let n = UInt64(f[2]) else { return nil }
            g[d] = GTID(server: s, sequence: n)
        }
        gtids = g
        self.file = file
        self.offset = offset
    }

    init?(_ text: String) {
        guard let at = text.lastIndex(of: "@") else { return nil }
        let rest = text[text.index(after: at)...]
        guard let colon = rest.lastIndex(of: ":"), let offset = UInt64(rest[rest.index(after: colon)...]) else { return nil }
        let file = String(rest[..<colon])
        guard !file.isEmpty else { return nil }
        self.init(gtid: String(text[..<at]), file: file, offset: offset)
    }

    /// The GTID list as MariaDB writes it (`@@gtid_binlog_pos`), by domain.
    var gtidText: String {
        gtids.sorted { $0.key < $1.key }.map { d, g in "\(d)-\(g.server)-\(g.sequence)" }.joined(separator: ",")
    }

    var description: String { "\(gtidText)@\(file):\(offset)" }

    /// True when every transaction up to `goal` is at or before this position.
    func includes(_ goal: BinlogPosition) -> Bool {
        if goal.gtids.isEmpty || gtids.isEmpty {
            return (file, offset) >= (goal.file, goal.offset)
        }
        return goal.gtids.allSatisfy { d, g in (gtids[d]?.sequence ?? 0) >= g.sequence }
    }
}

/// A capture just checked: the snapshot and the stream's start are taken together on the
/// initial copy's connection.
final class MySQLCaptureStart: CaptureStart {
    let capture: MySQLBinlogCapture
    let name: String
    let tables: [TableSchema]
    private var position: BinlogPosition?

    init(capture: MySQLBinlogCapture, name: String, tables: [TableSchema]) {
        self.capture = capture
        self.name = name
        self.tables = tables
    }

    func beginSnapshot(on connection: any Connection) throws -> (position: ChangePosition, shared: String?) {
        guard let c = connection as? MySQLConnection else {
            throw FerryError.notReady("a MariaDB capture's snapshot begins on a MariaDB connection")
        }
        try c.beginSnapshot()
        var file: String?, offset: UInt64?
        for row in try c.query("SHOW STATUS LIKE 'binlog_snapshot_%'") where row.count == 2 {
            if row[0] == "Binlog_snapshot_file" { file = row[1] }
            if row[0] == "Binlog_snapshot_position" { offset = row[1].flatMap { UInt64($0) } }
        }
        guard let file, !file.isEmpty, let offset else {
            throw FerryError.notReady("\(c.endpoint.redacted) did not report the snapshot's binlog position (binlog_snapshot_file): is log-bin on?")
        }
        let gtid = try c.query("SELECT BINLOG_GTID_POS(\(c.lit(file)), \(offset))").first?.first ?? nil
        guard let p = BinlogPosition(gtid: gtid ?? "", file: file, offset: offset) else {
            throw FerryError.notReady("\(c.endpoint.redacted) reported a GTID position Ferry cannot read: '\(gtid ?? "")'")
        }
        position = p
        // Other connections cannot join this snapshot: the copy reads with this one.
        return (ChangePosition(p.description), nil)
    }

    func follow() throws -> any ChangeFeed {
        guard let position else { throw FerryError.notReady("a capture's stream starts after its snapshot began") }
        return try MySQLBinlogFeed(endpoint: capture.endpoint, name: name, tables: tables, from: position, columnsNow: capture.columnsNow)
    }

    func close() {}
}
