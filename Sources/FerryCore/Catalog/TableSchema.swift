/// Everything Ferry knows about one table: its columns, keys and size.
public struct TableSchema: Hashable, Sendable, Codable {
    public var name: TableName
    /// The engine that described it. A driver may keep native details (defaults, exact type
    /// text) when the target is the same engine.
    public var engine: Engine
    public var columns: [Column]
    /// Primary key column names in key order; empty when the table has none.
    public var primaryKey: [String]
    /// Unique keys (constraints and full, non-partial unique indexes on plain columns), in key order.
    public var uniqueKeys: [[String]]
    /// Rows, exact or estimated by the engine; nil when unknown.
    public var rowEstimate: Int64?
    /// Secondary indexes (not the primary key or the unique keys above).
    public var indexes: [IndexInfo] = []
    public var foreignKeys: [ForeignKey] = []
    public var checks: [CheckConstraint] = []
    /// Parts of the table's schema the describing side knows it does not deliver (the XML
    /// service never sends SQL text), each with its reason.
    public var withheld: [SkippedObject] = []
    /// What reading the table cannot promise, in a line each (a MySQL MyISAM table has no
    /// transactions: it is read as it is at each moment, not from the copy's snapshot).
    public var readWarnings: [String] = []

    public init(
        name: TableName, engine: Engine, columns: [Column], primaryKey: [String] = [],
        uniqueKeys: [[String]] = [], rowEstimate: Int64? = nil
    ) {
        self.name = name
        self.engine = engine
        self.columns = columns
        self.primaryKey = primaryKey
        self.uniqueKeys = uniqueKeys
        self.rowEstimate = rowEstimate
    }

    public func column(named name: String) -> Column? {
        columns.first { $0.name == name }
    }

    /// The key keyed work uses: the primary key, else the first unique key whose columns are
    /// all NOT NULL, else nil (the user may name one with `--key`).
    public var preferredKey: TableKey? {
        if !primaryKey.isEmpty { return TableKey(columns: primaryKey, origin: .primaryKey) }
        for key in uniqueKeys where key.allSatisfy({ column(named: $0)?.isNullable == false }) {
            return TableKey(columns: key, origin: .uniqueKey)
        }
        return nil
    }

    /// Columns Ferry cannot carry, with the reason each is skipped.
    public var unsupportedColumns: [SkippedColumn] {
        columns.compactMap { col in
            if case .unsupported(let native) = col.logicalType {
                return SkippedColumn(column: col.name, reason: SkippedColumn.unsupportedReason(native))
            }
            return nil
        }
    }
}

/// The columns that identify a row, and where they came from.
public struct TableKey: Hashable, Sendable, Codable, CustomStringConvertible {
    public enum Origin: String, Sendable, Codable {
        case primaryKey = "primary key"
        case uniqueKey = "unique key"
        case user = "--key"
    }
    public var columns: [String]
    public var origin: Origin

    public init(columns: [String], origin: Origin) {
        self.columns = columns
        self.origin = origin
    }

    public var description: String { "\(origin.rawValue) (\(columns.joined(separator: ", ")))" }
}

/// A column the copy leaves out, and why.
public struct SkippedColumn: Hashable, Sendable, Codable {
    public var column: String
    public var reason: String
    public init(column: String, reason: String) {
        self.column = column
        self.reason = reason
    }

    static func unsupportedReason(_ native: String) -> String { "type \(native) has no portable form" }
    static let generatedReason = "generated column: the source computes it"
}

/// A table as `listTables()` returns it.
public struct TableInfo: Hashable, Sendable, Codable {
    public var name: TableName
    public var rowEstimate: Int64?
    public init(name: TableName, rowEstimate: Int64?) {
        self.name = name
        self.rowEstimate = rowEstimate
    }
}

/// A table Ferry is about to create: the statements that create it — run exactly as planned,
/// and what `--dry-run` shows — and the table as the target will then hold it (its native
/// types and the logical types its catalog will report), which is what writers are given.
public struct PlannedTable: Hashable, Sendable, Codable {
    /// The table as created: `name` is the name created, columns carry the target's types.
    public var schema: TableSchema
    /// The statements, in order (for the XML service, the request that creates it).
    public var statements: [String]
    /// Parts of the schema the CREATE TABLE leaves out (defaults, checks, foreign keys the
    /// target cannot express), each with its reason.
    public var skipped: [SkippedObject]

    /// Where the engine builds a table's keys faster after its rows are in (PostgreSQL: an
    /// index built by sorting the loaded rows beats one grown row by row): the statements that
    /// create the table without its keys, and those that then add them. A load into the new
    /// table with plain inserts runs `create`, the load, then `keys`; the table ends as
    /// `statements` make it. nil where keys are created with the table.
    public var deferredKeys: DeferredKeys?

    public struct DeferredKeys: Hashable, Sendable, Codable {
        public var create: [String]
        public var keys: [String]
        public init(create: [String], keys: [String]) {
            self.create = create
            self.keys = keys
        }
    }

    public init(schema: TableSchema, statements: [String], skipped: [SkippedObject] = [], deferredKeys: DeferredKeys? = nil) {
        self.schema = schema
        self.statements = statements
        self.skipped = skipped
        self.deferredKeys = deferredKeys
    }
}
