import Foundation

/// Ferry's state of each replica in its target: one row per followed source (by the capture's
/// name) in `_ferry_replication`, which the catalogs hide. Written in the same target
/// transaction as the changes it records, so that after any crash the target says exactly where
/// its source's stream must resume.
public enum ReplicationState {
    public static let table = TableName("_ferry_replication")

    /// Where a replica stands.
    public struct Row: Sendable, Equatable, Codable {
        /// The capture's name (the slot and publication at a PostgreSQL source).
        public var name: String
        /// `copying` while the initial copy runs (a rerun starts it again), then `following`.
        public var phase: String
        /// The source position after the last transaction applied (the stream's start while copying).
        public var position: String
        /// Rows applied since the initial copy, and when the last transaction was.
        public var appliedRows: Int64
        public var updatedAt: String
        /// The source, its password masked.
        public var source: String

        public init(name: String, phase: String, position: String, appliedRows: Int64, updatedAt: String, source: String) {
            self.name = name
            self.phase = phase
            self.position = position
            self.appliedRows = appliedRows
            self.updatedAt = updatedAt
            self.source = source
        }
    }

    static let columns: [Column] = [
        Column(name: "name", nativeType: "", logicalType: .text(maxLength: 63, fixed: false), isNullable: false),
        Column(name: "phase", nativeType: "", logicalType: .text(maxLength: 16, fixed: false), isNullable: false),
        Column(name: "position", nativeType: "", logicalType: .text(maxLength: 200, fixed: false), isNullable: false),
        Column(name: "applied_rows", nativeType: "", logicalType: .int64, isNullable: false),
        Column(name: "updated_at", nativeType: "", logicalType: .text(maxLength: 40, fixed: false), isNullable: false),
        Column(name: "source", nativeType: "", logicalType: .text(maxLength: 400, fixed: false), isNullable: false),
    ]

    /// The state table's schema (created when `create` and missing: outside any transaction, as
    /// on MySQL a CREATE TABLE commits); nil when missing.
    public static func schema(_ c: any Connection, create: Bool) throws -> TableSchema? {
        if try c.tableExists(table) { return try c.describe(table) }
        guard create else { return nil }
        let schema = TableSchema(name: table, engine: c.dialect.engine, columns: columns, primaryKey: ["name"])
        do {
            try c.createTable(schema, named: table)
        } catch {
            guard try c.tableExists(table) else { throw error }
        }
        return try c.describe(table)
    }

    /// The row of capture `name`, or nil.
    public static func read(_ c: any Connection, name: String) throws -> Row? {
        guard let schema = try schema(c, create: false) else { return nil }
        let cols = try columns.map { want in
            guard let col = schema.column(named: want.name) else { throw FerryError.columnNotFound(table: table, column: want.name) }
            return col
        }
        guard let v = try RowValues.rows(c, schema, columns: cols, keyIndexes: [0], keys: [[.text(name)]])[[.text(name)]] else { return nil }
        func text(_ i: Int) -> String {
            if case .text(let s) = v[i] { return s }
            return v[i].description
        }
        var applied: Int64 = 0
        if case .int(let n) = v[3] { applied = n }
        return Row(name: text(0), phase: text(1), position: text(2), appliedRows: applied, updatedAt: text(4), source: text(5))
    }

    /// Writes `row` (in the caller's transaction, where there is one).
    public static func write(_ c: any Connection, _ schema: TableSchema, _ row: Row) throws {
        let batch = try RowBatch(
            rows: [[.text(row.name), .text(row.phase), .text(row.position), .int(row.appliedRows), .text(row.updatedAt), .text(row.source)]],
            types: columns.map(\.logicalType))
        _ = try c.upsertRows(into: schema, columns: schema.columns, key: ["name"], rows: batch)
    }

    /// Removes the row of capture `name`; true when there was one.
    public static func remove(_ c: any Connection, name: String) throws -> Bool {
        guard let schema = try schema(c, create: false), let key = schema.column(named: "name") else { return false }
        let keys = try RowBatch(rows: [[.text(name)]], types: [key.logicalType])
        return try c.deleteRows(from: schema, key: [key], keys: keys) > 0
    }
}
