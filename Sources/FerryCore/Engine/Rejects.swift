import Foundation

/// `--on-error reject=FILE`: rows a target refuses (a NOT NULL, CHECK, unique or foreign key
/// it enforces, a value out of its range) are set aside in a SQLite file instead of failing
/// their table; the rest of the table loads.
///
/// The file holds, per target table, a table of the same name and columns (every value as
/// the copy carried it, no constraint, so that any refused row fits) and Ferry's table
/// `_ferry_rejects`, which gives each refused row's reason. After fixing the rows, the user
/// loads the file again like any database (`ferry copy sqlite:FILE TARGET --mode append`);
/// copies leave `_ferry_` tables out.
///
/// A table's refused rows are written in one transaction of the file that commits only after
/// the target's transaction committed: a table that fails sets nothing aside, and a row is
/// either in the target or in the file.
public final class RejectFile: @unchecked Sendable {  // unchecked: the connection only under `lock`
    /// The file's database (opened by the caller, which closes it).
    let connection: any Connection
    /// The file as the user named it, for messages.
    public let path: String
    /// Refused rows per table past which the table fails instead (the cause is not in the rows).
    public let limit: Int
    private let lock = NSLock()

    public static let reasons = TableName("_ferry_rejects")
    /// The most refused rows a service or plugin sets aside for one request and sends back
    /// (`reject=N`): what bounds its memory for them.
    public static let maxSentBack = 10_000
    static let reasonColumns: [Column] = [
        Column(name: "table_name", nativeType: "", logicalType: .text(maxLength: 500, fixed: false), isNullable: false),
        Column(name: "row_number", nativeType: "", logicalType: .int64, isNullable: false),
        Column(name: "row_key", nativeType: "", logicalType: .text(maxLength: nil, fixed: false), isNullable: false),
        Column(name: "reason", nativeType: "", logicalType: .text(maxLength: nil, fixed: false), isNullable: false),
        Column(name: "target", nativeType: "", logicalType: .text(maxLength: nil, fixed: false), isNullable: false),
        Column(name: "rejected_at", nativeType: "", logicalType: .text(maxLength: 40, fixed: false), isNullable: false),
    ]

    public init(connection: any Connection, path: String, limit: Int) {
        self.connection = connection
        self.path = path
        self.limit = limit
    }

    /// A refused row: its values (laid out as the copy's target columns), its key as text, why.
    public struct Row: Sendable {
        public var batch: RowBatch
        public var key: String
        public var reason: String
        public init(batch: RowBatch, key: String, reason: String) {
            self.batch = batch
            self.key = key
            self.reason = reason
        }
    }

    /// Writes `rows` (refused by `target` for `table`, laid out for `columns`) into the file,
    /// then runs `commitTarget` — which returns the rows the target refused as it committed (a
    /// service merging or applying staged rows sets them aside on its side) — writes those too,
    /// then commits the file: if the target's commit fails, the file is rolled back. Returns
    /// the table the rows went to and how many, nil when none was refused.
    func keep(_ rows: [Row], of table: TableName, columns: [Column], target: String, commitTarget: () throws -> [Row]) throws -> (into: TableName, count: Int)? {
        try lock.withLock {
            let c = connection
            let name = TableName(table.name)
            try c.begin()
            do {
                try add(rows, to: name, columns: columns, target: target)
            } catch {
                try? c.rollback()
                throw FerryError.notReady("cannot set the refused rows of \(table) aside in \(path): \(error); nothing of \(table) was committed")
            }
            let late: [Row]
            do {
                late = try commitTarget()
            } catch {
                try? c.rollback()
                throw error
            }
            let count = rows.count + late.count
            do {
                try add(late, to: name, columns: columns, target: target)
                try c.commit()
            } catch {
                try? c.rollback()
                throw FerryError.notReady(
                    "\(table) was loaded but its \(count) refused rows could not be written to \(path) (\(error)): they are in the source only; "
                        + "free the file's disk and load them with --mode upsert")
            }
            return count == 0 ? nil : (name, count)
        }
    }

    /// Adds `rows` to the file's table `name` and their reasons to `_ferry_rejects`, in the
    /// file's open transaction.
    private func add(_ rows: [Row], to name: TableName, columns: [Column], target: String) throws {
        guard !rows.isEmpty else { return }
        let c = connection
        let schema = try rejectTable(name, columns: columns)
        let before = try c.countRows(name)
        var batch = RowBatch(types: columns.map(\.logicalType), capacity: rows.count)
        for r in rows { batch.append(contentsOf: r.batch) }
        // Written as the copy writes its target (a SQLite source's stored forms kept).
        try write(batch, into: schema, columns: columns)
        let reasons = try StateTable.schema(c, Self.reasons, columns: Self.reasonColumns, key: ["table_name", "row_number"])
        let at = ISO8601DateFormatter().string(from: Date())
        let values: [[Value]] = rows.enumerated().map { i, r in
            [.text(name.name), .int(before + Int64(i) + 1), .text(r.key), .text(r.reason), .text(target), .text(at)]
        }
        let reasonInto = try StateTable.described(reasons, Self.reasonColumns).enumerated().map { i, col in
            Column(name: col.name, nativeType: col.nativeType, logicalType: Self.reasonColumns[i].logicalType, isNullable: col.isNullable)
        }
        try write(try RowBatch(rows: values, types: Self.reasonColumns.map(\.logicalType)), into: reasons, columns: reasonInto)
    }

    /// The file's table for `name`: created (no key, every column nullable) when missing; one
    /// there already must have these columns.
    private func rejectTable(_ name: TableName, columns: [Column]) throws -> TableSchema {
        let c = connection
        if try c.tableExists(name) {
            let there = try c.describe(name, rowEstimate: false)
            guard there.columns.map(\.name) == columns.map(\.name) else {
                throw FerryError.invalidOption(
                    "\(path) already holds a table \(name.name) with other columns (\(there.columns.map(\.name).joined(separator: ", "))): name another reject file")
            }
            return there
        }
        // The copy's columns as they are (types, stored forms), without default, serial or NOT NULL.
        let schema = TableSchema(name: name, engine: c.dialect.engine, columns: columns.map(\.addable))
        return try c.createTable(schema, named: name)
    }

    private func write(_ batch: RowBatch, into schema: TableSchema, columns: [Column]) throws {
        try connection.writer(into: schema, columns: columns).writeWhole(batch)
    }
}

extension CopyEngine {
    /// The writer of a load with `--on-error reject`: each batch is written inside a savepoint
    /// by a writer of its own (`make`; a keyed load's one merge writer is given each time),
    /// and a batch the target refuses is rolled back to the savepoint and split — around the
    /// row the target named, else in halves — until each refused row stands alone; those are
    /// kept in `rejected` (at most `limit`: past it the table fails, the cause likely not in
    /// the rows). Errors that are not about rows (a lost connection, a busy or full database,
    /// a cancel) fail the table as without it.
    ///
    /// `ferry serve` uses it too, on its side of a load that asks for it (`reject=N`): there a
    /// request is the transaction, and the refused rows go back in the answer.
    public final class RejectingWriter: BatchWriter {
        let target: any Connection
        let table: TableName
        let make: () throws -> any BatchWriter
        let limit: Int
        let describeRow: (RowBatch, Int) -> String
        /// Told of each writer whose batch was kept (its savepoint released): what it counted
        /// counts; a rolled-back one's does not.
        let kept: ((any BatchWriter) -> Void)?
        /// A refused row's reason from the error (default `reason`).
        let explain: (any Error) -> String
        public private(set) var rejected: [RejectFile.Row] = []
        private(set) var attempts = 0
        private var stored: Int64? = 0

        public init(
            target: any Connection, table: TableName, limit: Int, describeRow: @escaping (RowBatch, Int) -> String,
            kept: ((any BatchWriter) -> Void)? = nil, explain: @escaping (any Error) -> String = RejectingWriter.reason,
            make: @escaping () throws -> any BatchWriter
        ) {
            self.explain = explain
            self.target = target
            self.table = table
            self.limit = limit
            self.describeRow = describeRow
            self.kept = kept
            self.make = make
        }

        public func write(_ batch: RowBatch) throws {
            guard !batch.isEmpty else { return }
            try attempt(batch)
        }

        /// Writes `batch` in a savepoint; if the target refuses a row of it, sets the refused
        /// rows aside and writes the others.
        private func attempt(_ batch: RowBatch) throws {
            attempts += 1
            try target.savepoint(.set)
            let failure: any Error
            do {
                let w = try make()
                try w.writeWhole(batch)
                stored = w.rowsStored.flatMap { n in stored.map { $0 + n } }
                try target.savepoint(.release)
                kept?(w)
                return
            } catch {
                guard Self.refusesRows(error) else { throw error }
                failure = error
            }
            // Rolled back to before the batch. Where the error ended the transaction or the
            // connection, this fails too: then the table fails with the error itself.
            do {
                try target.savepoint(.rollback)
                try target.savepoint(.release)
            } catch {
                throw failure
            }
            if batch.count == 1 {
                guard rejected.count < limit else { throw RefusedRowsPastLimit(table: table, limit: limit, last: explain(failure)) }
                rejected.append(RejectFile.Row(batch: batch, key: describeRow(batch, 0), reason: explain(failure)))
                return
            }
            // Around the row the target named, where it named one of this batch; else in halves.
            if let e = failure as? BatchRowError, e.batch == nil, (e.rowsBefore ?? 0) == 0, e.row >= 0, e.row < batch.count {
                if e.row > 0 { try attempt(batch.rows(0..<e.row)) }
                try attempt(batch.rows(e.row..<e.row + 1))
                if e.row + 1 < batch.count { try attempt(batch.rows(e.row + 1..<batch.count)) }
            } else {
                let half = batch.count / 2
                try attempt(batch.rows(0..<half))
                try attempt(batch.rows(half..<batch.count))
            }
        }

        public func finish() throws {}
        public func abort() {}
        /// Rows stored by the batches that were kept, where every writer said.
        public var rowsStored: Int64? { stored }

        /// False for errors that are not about the rows written.
        public static func refusesRows(_ error: any Error) -> Bool {
            if let e = error as? FerryError {
                switch e {
                case .connectionLost, .connectionFailed, .cancelled, .readOnlyTarget, .tableNotFound, .notReady: return false
                default: break
                }
            }
            if let e = error as? BatchRowError { return refusesRows(e.error) }
            if let e = error as? any DatabaseBusyError, e.isBusy { return false }
            if let e = error as? any DatabaseFullError, e.isFull { return false }
            return true
        }

        /// Why the target refused a row: in the database's own words where the driver gives
        /// them (`DatabaseRefusal`, without the statement or the endpoint).
        public static func reason(_ error: any Error) -> String {
            if let e = error as? BatchRowError { return e.error.description }
            if let e = error as? any DatabaseRefusal { return e.refusal }
            return "\(error)"
        }
    }
}

/// More rows refused than `--max-rejects` allows: the table fails whole (the cause is likely
/// not in the rows). A service answers it as `422 too_many_refused`, the client names its table
/// and the copy's limit again.
public struct RefusedRowsPastLimit: Error, CustomStringConvertible {
    public var table: TableName
    public var limit: Int
    /// Why the last row was refused.
    public var last: String
    public init(table: TableName, limit: Int, last: String) {
        self.table = table
        self.limit = limit
        self.last = last
    }
    public var description: String {
        "\(table): the target refused more than \(limit) rows (--max-rejects); the last: \(last); nothing of this table was committed"
    }
}

/// A row a target set aside on its side (`Connection.setRefusedRowsAside`): its values, laid
/// out as written, and the target's reason.
public struct RefusedRow: Sendable {
    public var row: RowBatch
    public var reason: String
    public init(row: RowBatch, reason: String) {
        self.row = row
        self.reason = reason
    }
}
