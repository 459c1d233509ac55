import FerryCore
import Foundation

/// A replica applied through the service (`replica-apply`): each target transaction is one
/// request, its changes of every table in the source's order and the replica's record together
/// (`POST /v1/replicas/NAME/transactions`), applied by the service in one transaction of its
/// database. A section too large for one document goes into a staging table first and is
/// named in the document instead of carried.
struct ReplicaTransaction {
    var repeatingCascades: Bool
    /// The document being built, nil between transactions.
    var body: [UInt8]?
    var state: ReplicationState.Row?
    /// Staging tables holding sections of this transaction.
    var staged: [TableName] = []
    /// The replica the transactions record (from the first record written).
    var name: String?
}

extension HTTPConnection {
    public func prepareToApplyChanges(repeatingCascades: Bool) throws {
        try capabilities.require(.replicaApply, for: "ferry replicate into it", endpoint: endpoint.redacted)
        replica = ReplicaTransaction(repeatingCascades: repeatingCascades, name: replica?.name)
    }

    public func changeCapture() throws -> (any ChangeCapture)? {
        guard capabilities.contains(.changeFeed) else { return nil }
        return HTTPChangeCapture(client: client)
    }

    public func replicaStates() throws -> any ReplicaStates { HTTPReplicaStates(self) }

    /// `POST /v1/tables/T/columns` (a manage token): the service types the column for its engine.
    public func addColumn(_ column: Column, default value: ColumnDefault?, to table: TableName) throws {
        var c = column
        c.defaultValue = value
        let schema = TableSchema(name: table, engine: dialect.engine, columns: [c], primaryKey: [])
        _ = try client.expect("POST", ProtocolRoute.addColumn.target(table: table), body: XMLDocuments.schema(schema), table: table)
    }

    public func updateColumns(of table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws {
        guard inReplicaTransaction else {
            throw FerryError.notReady("\(endpoint.redacted): a replica's update of some columns is applied inside its transaction")
        }
        try replicaSection("update", table, columns: columns, key: key, rows: rows)
    }

    var inReplicaTransaction: Bool { replica?.body != nil }

    func beginReplicaTransaction() {
        guard var r = replica else { return }
        r.body = ChangeDocuments.beginTransaction(repeatingCascades: r.repeatingCascades)
        r.state = nil
        r.staged = []
        replica = r
    }

    /// Adds a section to the transaction: carried in the document, or, when large, staged.
    func replicaSection(_ tag: String, _ table: TableSchema, columns: [Column], key: [String], rows: RowBatch) throws {
        guard !rows.isEmpty, var r = replica, var body = r.body else { return }
        replica?.body = nil
        defer {
            r.body = body
            replica = r
        }
        let limit = bodyLimit ?? (64 << 20)
        // Encoded in place; taken back out when it makes the document too large.
        let mark = body.count
        ChangeDocuments.section(tag, table: table.name, columns: columns, key: key, rows: rows, into: &body)
        if body.count <= limit / 2 { return }
        body.removeSubrange(mark...)
        // Too large for the document: into a staging table (streamed, in pieces the service
        // takes), named by the section.
        // One staging table per staged section (a table's rows often come in several).
        let staging = try freeStaging(TableName(schema: table.name.schema, CopyEngine.internalPrefix + "replica_\(r.staged.count)_" + table.name.name))
        r.staged.append(staging)
        try stage(staging, shapedLike: table, columns: columns)
        let writer = HTTPWriter(client: client, path: ProtocolRoute.insertRows.target(table: staging) + ProtocolRoute.query(Self.columnItems(columns)),
                                table: staging, columns: columns, key: key, loadLimit: loadLimit)
        try writer.write(rows)
        try writer.finish()
        ChangeDocuments.section(tag, table: table.name, columns: columns, key: key, rows: nil, staged: staging, into: &body)
    }

    /// Sends the transaction; the service applies it whole or not at all.
    func commitReplicaTransaction() throws {
        guard var r = replica, var body = r.body else { return }
        r.body = nil
        replica = r
        guard body.count > ChangeDocuments.beginTransaction(repeatingCascades: r.repeatingCascades).count || r.state != nil else { return }
        guard let name = r.state?.name ?? r.name else {
            throw FerryError.notReady("\(endpoint.redacted): a replica's transaction names no replica (its record is written with it)")
        }
        ChangeDocuments.endTransaction(state: r.state, into: &body)
        do {
            _ = try client.expect("POST", ProtocolRoute.applyReplica.target(id: name), body: Data(body))
        } catch {
            for s in r.staged { try? dropTable(s) }
            throw error
        }
    }

    func rollbackReplicaTransaction() {
        guard let r = replica, r.body != nil else { return }
        for s in r.staged { try? dropTable(s) }
        replica?.body = nil
        replica?.staged = []
    }

    /// Records `row`: with the transaction under way, or alone.
    func recordReplica(_ row: ReplicationState.Row) throws {
        if replica != nil { replica?.name = row.name }
        if inReplicaTransaction {
            replica?.state = row
            return
        }
        var body = ChangeDocuments.beginTransaction(repeatingCascades: false)
        ChangeDocuments.endTransaction(state: row, into: &body)
        _ = try client.expect("POST", ProtocolRoute.applyReplica.target(id: row.name), body: Data(body))
    }
}

/// The records of replicas the service's database holds (`/v1/replicas/NAME`).
final class HTTPReplicaStates: ReplicaStates {
    let connection: HTTPConnection
    init(_ connection: HTTPConnection) { self.connection = connection }

    func read(_ name: String) throws -> ReplicationState.Row? {
        try connection.capabilities.require(.replicaApply, for: "a replica's record", endpoint: connection.endpoint.redacted)
        let reply = try connection.client.send("GET", ProtocolRoute.replicaState.target(id: name))
        if reply.status == 404 { return nil }
        guard (200..<300).contains(reply.status) else { throw connection.client.error(reply, table: nil) }
        return try ChangeDocuments.decodeReplica(reply.body)
    }

    func write(_ row: ReplicationState.Row) throws {
        try connection.capabilities.require(.replicaApply, for: "ferry replicate into it", endpoint: connection.endpoint.redacted)
        try connection.recordReplica(row)
    }

    func remove(_ name: String) throws -> Bool {
        let applied = try XMLDocuments.decodeApplied(connection.client.expect("DELETE", ProtocolRoute.dropReplica.target(id: name)))
        return (applied["removed"] ?? 0) > 0
    }
}
