/// What a copy will do, table by table; printable with `--dry-run` before anything is touched.
public struct CopyPlan: Sendable, Encodable {
    public var source: String
    public var target: String
    public var mode: WriteMode
    public var tables: [TablePlan]
    /// Tables named with --tables that do not exist, and other notes for the user.
    public var warnings: [String]
    /// Views, triggers and other objects of the source a copy of tables does not carry.
    public var otherObjects: [OtherObject] = []
    /// The foreign keys added once every table is loaded, in order (exactly as they run).
    public var foreignKeyStatements: [String] { tables.flatMap { $0.objects?.foreignKeyStatements ?? [] } }
}

/// One table's part of a plan.
public struct TablePlan: Sendable, Encodable {
    /// The source table as its catalog describes it.
    public var sourceSchema: TableSchema
    /// The table to create or fill on the target: the source's carried columns, its keys.
    public var targetSchema: TableSchema
    /// Source columns that are read, in the order they are written.
    public var columns: [Column]
    /// Columns left out, each with its reason.
    public var skipped: [SkippedColumn]
    /// Every source column's fate and who decided it (type map or cast rule).
    public var decisions: [ColumnDecision] = []
    /// Columns whose values a cast converts between reader and writer.
    public var conversions: [ColumnConversion] = []
    /// The key keyed work and error messages use; nil when the table has none.
    public var key: TableKey?
    /// DDL the target runs, exactly as planned: the table created (in replace mode the staging
    /// table swapped in at the end; in append mode only when the target is missing).
    public var ddl: [String] { (creates?.statements ?? []) + (objects?.indexStatements ?? []) }
    /// The table the load creates (the target, or in replace mode its staging table); nil when
    /// rows are appended to a table that exists.
    public var creates: PlannedTable?
    /// The target table as its catalog described it when planning: in append mode, when it exists.
    public var existingTarget: TableSchema?
    /// True when the target table exists already (append writes into it; replace swaps it).
    public var targetExists = false
    /// The indexes and foreign keys the target creates (nil when no table is created).
    public var objects: PlannedObjects?
    /// True when the indexes are created after a replace's swap (engines whose index names are
    /// schema-wide; their DDL is transactional, so the swap stays atomic); else on the loaded
    /// table before it is swapped in.
    public var indexesAfterSwap = false
    /// Schema objects of the source this table's copy leaves out, each with its reason.
    public var skippedObjects: [SkippedObject] = []
    /// `--where`: the condition rows are read with, in the source engine's SQL; nil for every row.
    public var filter: String?
    /// The staging table the load fills before it is made visible (renamed or swapped in);
    /// nil when the load writes into the target's own name in one transaction.
    public var staging: TableName?
    /// `--incremental`: the column whose watermark limits the rows read; nil for every row.
    public var incremental: IncrementalColumn?
    /// True when a staging table is merged into the existing target at the end (a resumable
    /// append or upsert) rather than renamed or swapped in.
    public var mergesStaging: Bool { staging != nil && creates == nil }
    /// The table rows are written into, as the writer is given it: the created table (as
    /// planned), else the existing target (as described).
    public var writesInto: TableSchema { creates?.schema ?? existingTarget ?? targetSchema }

    public var source: TableName { sourceSchema.name }
    public var target: TableName { targetSchema.name }

    private enum CodingKeys: String, CodingKey {
        case sourceSchema, targetSchema, columns, skipped, decisions, conversions, key, creates, existingTarget, ddl, targetExists
        case objects, indexesAfterSwap, skippedObjects, filter, staging, incremental
    }

    /// Every stored property, and the DDL and whether the target exists spelled out for readers of `--json`.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(sourceSchema, forKey: .sourceSchema)
        try c.encode(targetSchema, forKey: .targetSchema)
        try c.encode(columns, forKey: .columns)
        try c.encode(skipped, forKey: .skipped)
        try c.encode(decisions, forKey: .decisions)
        try c.encode(conversions, forKey: .conversions)
        try c.encodeIfPresent(key, forKey: .key)
        try c.encodeIfPresent(creates, forKey: .creates)
        try c.encodeIfPresent(existingTarget, forKey: .existingTarget)
        try c.encode(ddl, forKey: .ddl)
        try c.encode(targetExists, forKey: .targetExists)
        try c.encodeIfPresent(objects, forKey: .objects)
        try c.encode(indexesAfterSwap, forKey: .indexesAfterSwap)
        try c.encode(skippedObjects, forKey: .skippedObjects)
        try c.encodeIfPresent(filter, forKey: .filter)
        try c.encodeIfPresent(staging, forKey: .staging)
        try c.encodeIfPresent(incremental, forKey: .incremental)
    }
}

/// Options that shape a copy.
public struct CopyOptions: Sendable {
    /// Create the source's secondary indexes on tables the copy creates.
    public var indexes = true
    /// Add the source's foreign keys between tables the copy creates (each whose referenced
    /// table is part of the copy).
    public var foreignKeys = true
    /// `--where`: `TABLE=CONDITION` for one copied table, or a CONDITION for every table named
    /// in `tables` — SQL of the source engine, which reads only the matching rows.
    public var filters: [String] = []
    /// Tables to copy (empty: all). Each entry is `name` or `schema.name`.
    public var tables: [TableName] = []
    public var exclude: [TableName] = []
    /// Only tables in these schemas (empty: all). The connection's default schema matches its name.
    public var schemas: [String] = []
    public var mode: WriteMode = .create
    /// `--key table=col1,col2` choices, for tables without a primary or unique key.
    public var keys: [TableName: [String]] = [:]
    /// Tables copied at once.
    public var jobs: Int = 1
    /// Rows per batch at most; a batch also ends at `RowBatch.byteLimit` bytes.
    public var batchSize: Int = 10_000
    /// Batches buffered between each table's reader and writer, at most.
    public var queueDepth: Int = 4
    /// Bytes of batches buffered between each table's reader and writer, at most (one batch
    /// always fits, however large).
    public var queueBytes: Int = 2 * RowBatch.byteLimit
    /// `--cast` / `--casts FILE` rules, first match wins.
    public var casts = CastRuleSet()
    /// `--max-delete`: a mirror that would delete more rows from a table fails it, changing nothing.
    public var maxDelete: DeleteLimit?
    /// `--retries`: times a table whose source connection was lost is read again, on a new
    /// connection in the copy's exported snapshot (PostgreSQL: while the connection that
    /// exported it lives, which then reads nothing itself), its target work rolled back first.
    public var sourceRetries = 0
    /// Leave the source connection's read snapshot open after `run` (ended by the caller with
    /// `rollback`), so that `copy --verify` compares against the rows the copy read.
    public var keepSourceSnapshot = false
    /// `--allow-empty-source`: let a mirror empty a target table whose source table is empty.
    public var allowEmptySource = false
    /// The source connection is already inside this exported snapshot (the caller began it with
    /// `Connection.beginSnapshot(importing:)`): the copy reads in it, and extra jobs import it,
    /// instead of a snapshot of the copy's own — a replica's initial copy reads exactly the data
    /// before its change stream begins.
    public var sourceSnapshot: String?
    /// `--resume`: load each table with a key in key-ordered chunks that commit on their own
    /// into its staging table, recording the last key in the target; a rerun with it continues
    /// an unfinished load from there.
    public var resume = false
    /// Rows per committed chunk of a resumable load: the most a resumed run reads again.
    public var chunkRows = 100_000
    /// `--incremental`: `TABLE=COLUMN` for one table or a COLUMN for every table; with
    /// `--mode upsert`, only rows above the column's watermark (less the lookback) are read.
    public var incremental: [String] = []
    /// `--incremental-lookback`: a duration (timestamps, dates) or a number (integers); nil: the default.
    public var incrementalLookback: String?
    /// `--columns TABLE=COL,COL` (or `COL,COL` for the tables named): only these columns are copied.
    public var columns: [String] = []
    /// `--on-error reject=FILE`: rows the target refuses are set aside there (with savepoints:
    /// targets whose `supportsSavepoints`); nil fails a table at its first refused row.
    public var rejects: RejectFile?

    public init() {}
}

/// `--max-delete N` or `--max-delete P%`: at most N rows, or P percent of the target table's rows.
public enum DeleteLimit: Sendable, Hashable, CustomStringConvertible {
    case rows(Int64)
    case percent(Double)

    /// Parses `1000` or `0.5%`; nil for anything else.
    public init?(_ text: String) {
        if text.hasSuffix("%") {
            guard let p = Double(text.dropLast()), p >= 0, p <= 100 else { return nil }
            self = .percent(p)
        } else {
            guard let n = Int64(text), n >= 0 else { return nil }
            self = .rows(n)
        }
    }

    /// The number of rows allowed out of a table of `total` rows.
    public func allowed(of total: Int64) -> Int64 {
        switch self {
        case .rows(let n): return n
        case .percent(let p): return Int64((Double(total) * p / 100).rounded(.down))
        }
    }

    public var description: String {
        switch self {
        case .rows(let n): return String(n)
        case .percent(let p): return (p == p.rounded() ? String(Int64(p)) : String(p)) + "%"
        }
    }
}
