/// The outcome of a copy, printed at the end and as JSON with `--json`.
public struct CopySummary: Sendable, Codable {
    public struct Table: Sendable, Codable {
        public var source: String
        public var target: String
        public var rows: Int64
        /// Rows this run read, where a resumed load had committed others before (`rows` counts both).
        public var rowsRead: Int64?
        /// An incremental copy's watermark after this run (the largest value of its column read so far).
        public var watermark: String?
        public var seconds: Double
        public var rowsPerSecond: Double
        public var skippedColumns: [SkippedColumn]
        public var status: Status
        public var error: String?
        /// What a keyed mode did (nil for create, replace and append).
        public var counts: MergeCounts?
        /// How a mirror found what differs (nil for other modes).
        public var mirror: MirrorStats?
        /// Secondary indexes and foreign keys created on the target.
        public var indexes: Int = 0
        public var foreignKeys: Int = 0
        /// Schema objects of the source left out, each with its reason.
        public var skippedObjects: [SkippedObject] = []
        /// `--on-error reject`: rows the target refused, set aside in the reject file's table
        /// `rejectedInto` (nil without the option, or when none was refused). `rows` leaves them out.
        public var rejected: Int64?
        public var rejectedInto: String?
        /// Times the table was read again after its source connection was lost (`--retries`).
        public var sourceRetries: Int?
    }

    /// What a mirror read to find the differences: digest levels compared, buckets whose
    /// digests came back (both sides), and the rows and keys read.
    public struct MirrorStats: Sendable, Codable, Hashable {
        public var levels = 0
        public var digests = 0
        /// Rows of the source that were read (in buckets that differ).
        public var sourceRowsRead: Int64 = 0
        /// Keys of the target that were read (in buckets that differ).
        public var targetKeysRead: Int64 = 0
        public var sourceRows: Int64 = 0
        public var targetRows: Int64 = 0
        /// How both sides hashed each row (`md5`, or PostgreSQL's `lookup3` where both compute it).
        public var rowHash: RowHash?
        public init() {}
    }

    /// How a table's copy ended (`"ok"`, `"failed"`, `"cancelled"` in JSON).
    public enum Status: String, Sendable, Codable {
        /// Every row read arrived, in one committed transaction.
        case ok
        /// Nothing of this table was committed; `error` says why.
        case failed
        /// Stopped by the caller before or while it was copied; nothing of it was committed.
        case cancelled
    }

    public var source: String
    public var target: String
    public var mode: WriteMode
    public var tables: [Table]
    public var seconds: Double
    public var warnings: [String]
    /// Tables copied at once (`--jobs`, limited by the tables and by what the target takes).
    public var jobs: Int = 1

    public var ok: Bool { tables.allSatisfy { $0.status == .ok } }
    /// Rows of the tables that were copied: a failed or cancelled table committed none, whatever
    /// it had sent before it failed (through the service, a table can fail at its commit).
    public var totalRows: Int64 { tables.filter { $0.status == .ok }.reduce(0) { $0 + $1.rows } }
    /// Rows set aside by `--on-error reject` in the tables that were copied.
    public var totalRejected: Int64 { tables.filter { $0.status == .ok }.reduce(0) { $0 + ($1.rejected ?? 0) } }
}

/// A problem at one row of a batch, raised by a writer; the engine names the row by its key.
public struct BatchRowError: Error, Sendable {
    public var row: Int
    public var error: FerryError
    /// The batch the row is in, when it is not the one just passed to `write` (a conversion
    /// failure reports the batch as read, before conversion).
    public var batch: RowBatch?
    /// Rows the writer was given before that batch, when the writer knows (a writer that
    /// reports rows of earlier batches sets it): the row's place among all the writer's rows.
    public var rowsBefore: Int?
    public init(row: Int, error: FerryError, batch: RowBatch? = nil, rowsBefore: Int? = nil) {
        self.row = row
        self.error = error
        self.batch = batch
        self.rowsBefore = rowsBefore
    }
}
