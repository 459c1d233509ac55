import Foundation

/// Where a target keeps the records of the replicas it holds (`ReplicationState.Row`, one per
/// followed source): what `Connection.replicaStates` gives. A record written inside a target
/// transaction commits with the changes it records.
public protocol ReplicaStates: AnyObject {
    /// The record of replica `name`, or nil.
    func read(_ name: String) throws -> ReplicationState.Row?
    /// Writes `row` (in the transaction under way, where there is one).
    func write(_ row: ReplicationState.Row) throws
    /// Removes the record of replica `name`; true when there was one.
    func remove(_ name: String) throws -> Bool
}

/// The records as rows of `_ferry_replication` in the target's database (created by the
/// first write), its schema read once.
public final class TableReplicaStates: ReplicaStates {
    let connection: any Connection
    private var schema: TableSchema?

    public init(_ connection: any Connection) { self.connection = connection }

    public func read(_ name: String) throws -> ReplicationState.Row? { try ReplicationState.read(connection, name: name) }

    public func write(_ row: ReplicationState.Row) throws {
        if schema == nil {
            guard let s = try ReplicationState.schema(connection, create: true) else {
                throw FerryError.tableNotFound(table: ReplicationState.table, endpoint: connection.endpoint.redacted)
            }
            schema = s
        }
        guard let schema else { return }
        try ReplicationState.write(connection, schema, row)
    }

    public func remove(_ name: String) throws -> Bool { try ReplicationState.remove(connection, name: name) }
}

/// The default `Connection.updateColumns`: the rows read by key in the transaction under way,
/// the sent columns set in them, and the rows written whole.
public enum ReplicaUpdate {
    public static func apply(_ c: any Connection, _ table: TableSchema, columns: [Column], key: [String], rows batch: RowBatch) throws {
        guard !batch.isEmpty else { return }
        let all = table.columns.filter { $0.logicalType.isSupported && !$0.generated }
        let sentAt = try columns.map { s in
            guard let i = all.firstIndex(where: { $0.name == s.name }) else { throw FerryError.columnNotFound(table: table.name, column: s.name) }
            return i
        }
        let keyAt = try key.map { k in
            guard let i = all.firstIndex(where: { $0.name == k }) else { throw FerryError.columnNotFound(table: table.name, column: k) }
            return i
        }
        let sentTypes = columns.map(\.logicalType)
        var rows: [[Value]] = []
        var keys: [[Value]] = []
        for r in 0..<batch.count {
            var row = [Value](repeating: .null, count: all.count)
            for (j, v) in batch.row(r, types: sentTypes).enumerated() { row[sentAt[j]] = v }
            rows.append(row)
            keys.append(keyAt.map { row[$0] })
        }
        let current = try RowValues.rows(c, table, columns: all, keyIndexes: keyAt, keys: keys)
        var merged: [[Value]] = []
        for (r, row) in rows.enumerated() {
            guard var existing = current[keys[r]] else {
                throw FerryError.copyFailed(
                    table: table.name, endpoint: c.endpoint.redacted,
                    reason: "an update at the source of the row (\(keys[r].map(\.description).joined(separator: ", "))) found no such row in the target: the replica differs from its source (run ferry verify)")
            }
            for i in sentAt { existing[i] = row[i] }
            merged.append(existing)
        }
        // Each sent column as the caller typed it; the others as the target's table has them.
        var types = all.map(\.logicalType)
        var written = all
        for (j, i) in sentAt.enumerated() {
            types[i] = sentTypes[j]
            written[i] = columns[j]
        }
        _ = try c.upsertRows(into: table, columns: written, key: key, rows: try RowBatch(rows: merged, types: types))
    }
}
