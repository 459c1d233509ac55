import Foundation

/// A set of changes to several tables that applies all together or not at all, each guarded
/// by the image the writer last saw: an insert only where its key is free, an update or a
/// delete only where the row still equals `expected`. Recorded under `id` in the same
/// transaction (`PushLedger`), so that a writer that lost the answer can ask whether it
/// committed instead of applying it twice. Offline sync pushes through it; the XML service
/// exposes it as `POST /v1/push`.
public struct GuardedPush: Sendable {
    public var id: String
    /// Parents before children: rows are written in this order and deleted in the reverse.
    public var tables: [GuardedTableChanges]

    public init(id: String, tables: [GuardedTableChanges]) {
        self.id = id
        self.tables = tables
    }
}

/// The rows of a guarded push, handed out a part of a table at a time in batches: held
/// (`GuardedPush`), or decoded from a document where it lies each time they are asked for (the
/// service's `POST /v1/push`, which checks every row before it writes one and so reads them
/// twice, and does not hold a large push whole).
public protocol GuardedPushRows {
    var id: String { get }
    /// Parents first: each table's name, columns, key and `resetSerial` (its row lists may be
    /// empty here: `forEach` hands them out).
    var tables: [GuardedTableChanges] { get }
    /// True when table `index` has rows in any part.
    func hasRows(table index: Int) -> Bool
    /// Hands table `index`'s rows of `part` to `body` in order, in batches of at most `batchSize`
    /// rows laid out as the table's `columns`.
    func forEach(_ part: GuardedPart, ofTable index: Int, batchSize: Int, _ body: (RowBatch) throws -> Void) throws
}

/// A part of one table's changes in a guarded push.
public enum GuardedPart: Sendable {
    /// Rows whose keys must be free.
    case inserts
    /// The rows updates expect (the first of each pair).
    case expected
    /// The rows updates write (the second of each pair), in the order of `expected`.
    case updates
    /// The images of the rows to delete.
    case deletes
}

extension GuardedPush: GuardedPushRows {
    public func hasRows(table index: Int) -> Bool { !tables[index].isEmpty }

    public func forEach(_ part: GuardedPart, ofTable index: Int, batchSize: Int, _ body: (RowBatch) throws -> Void) throws {
        let t = tables[index]
        let rows: [[Value]]
        switch part {
        case .inserts: rows = t.inserts
        case .expected: rows = t.updates.map(\.expected)
        case .updates: rows = t.updates.map(\.row)
        case .deletes: rows = t.deletes
        }
        let types = t.columns.map(\.logicalType)
        for start in stride(from: 0, to: rows.count, by: max(batchSize, 1)) {
            try body(try RowBatch(rows: Array(rows[start..<min(start + max(batchSize, 1), rows.count)]), types: types))
        }
    }

    /// Every row of `rows`, held (a client that sends a push whole).
    public init(collecting rows: any GuardedPushRows) throws {
        self.init(id: rows.id, tables: [])
        for (i, header) in rows.tables.enumerated() {
            var t = GuardedTableChanges(table: header.table, columns: header.columns, key: header.key, resetSerial: header.resetSerial)
            let types = t.columns.map(\.logicalType)
            func all(_ part: GuardedPart) throws -> [[Value]] {
                var out: [[Value]] = []
                try rows.forEach(part, ofTable: i, batchSize: 10_000) { b in
                    for r in 0..<b.count { out.append(b.row(r, types: types)) }
                }
                return out
            }
            t.inserts = try all(.inserts)
            let expected = try all(.expected)
            let new = try all(.updates)
            guard expected.count == new.count else {
                throw FerryError.invalidOption("a guarded push's updates of \(t.table) have \(expected.count) expected rows and \(new.count) new ones")
            }
            t.updates = zip(expected, new).map { GuardedTableChanges.Update(expected: $0, row: $1) }
            t.deletes = try all(.deletes)
            tables.append(t)
        }
    }
}

/// One table's part of a guarded push. Every image holds `columns` in order, key included.
public struct GuardedTableChanges: Sendable {
    public struct Update: Sendable {
        public var expected: [Value]
        public var row: [Value]
        public init(expected: [Value], row: [Value]) {
            self.expected = expected
            self.row = row
        }
    }

    public var table: TableName
    public var columns: [Column]
    public var key: [String]
    /// Rows whose keys must not exist (written in this order: a row after the rows it references).
    public var inserts: [[Value]]
    public var updates: [Update]
    /// The images of the rows to delete (deleted in this order).
    public var deletes: [[Value]]
    /// Move the table's serial counter past its largest key once the rows are in.
    public var resetSerial: Bool

    public init(table: TableName, columns: [Column], key: [String], inserts: [[Value]] = [], updates: [Update] = [], deletes: [[Value]] = [], resetSerial: Bool = false) {
        self.table = table
        self.columns = columns
        self.key = key
        self.inserts = inserts
        self.updates = updates
        self.deletes = deletes
        self.resetSerial = resetSerial
    }

    public var isEmpty: Bool { inserts.isEmpty && updates.isEmpty && deletes.isEmpty }

    /// Positions of the key columns in `columns`.
    public func keyIndexes() throws -> [Int] {
        try key.map { k in
            guard let i = columns.firstIndex(where: { $0.name == k }) else { throw FerryError.columnNotFound(table: table, column: k) }
            return i
        }
    }
}

/// What a guarded push did.
public enum GuardedPushOutcome: Sendable, Equatable {
    /// Committed; counts per table, in the push's order.
    case applied([TableName: MergeCounts])
    /// A push with this id was committed before: nothing was applied again.
    case alreadyApplied
    /// Rows no longer as the writer saw them (key, or `table` alone when a write found out):
    /// nothing was applied. Read them again and decide again.
    case changed([ChangedRow])
}

/// A row that was not as a guarded push expected it.
public struct ChangedRow: Sendable, Hashable {
    public var table: TableName
    /// The key, as text (`id=7`, `a=x, b=2`).
    public var key: String
    public init(table: TableName, key: String) {
        self.table = table
        self.key = key
    }
}

/// Row comparisons by value (decimals by value: `12.50` = `12.5`).
public enum RowValues {
    public static func same(_ a: Value, _ b: Value) -> Bool {
        if case .decimal(let x) = a, case .decimal(let y) = b { return DecimalText.normalized(x) == DecimalText.normalized(y) }
        return a == b
    }
    public static func same(_ a: [Value], _ b: [Value]) -> Bool {
        a.count == b.count && zip(a, b).allSatisfy { same($0, $1) }
    }
    public static func same(_ a: [Value]?, _ b: [Value]?) -> Bool {
        switch (a, b) {
        case (nil, nil): return true
        case let (x?, y?): return same(x, y)
        default: return false
        }
    }

    /// `id=7` / `a=x, b=2` for messages.
    public static func keyText(_ names: [String], _ values: [Value]) -> String {
        zip(names, values).map { "\($0)=\($1)" }.joined(separator: ", ")
    }

    /// Keys per statement of a key-list read (bounded by the engines' limits on bound values).
    public static let keysPerRead = 500

    /// The rows of `table` whose keys are among `keys`: by key list (`k IN (…)`, index
    /// lookups) where the dialect selects that way, else by key-hash bucket (as finely as the
    /// 32-bit hash goes, so a handful of keys read a handful of rows on every engine); then
    /// matched by key. `lock`: inside a write transaction, lock the rows read (`FOR UPDATE`
    /// where the engine has it), so that they cannot change before the transaction ends.
    public static func rows(
        _ connection: any Connection, _ table: TableSchema, columns: [Column], keyIndexes: [Int], keys: [[Value]],
        filter: String? = nil, lock: Bool = false
    ) throws -> [[Value]: [Value]] {
        guard !keys.isEmpty else { return [:] }
        let keyCols = keyIndexes.map { columns[$0] }
        let want = Set(keys)
        let types = columns.map(\.logicalType)
        var out: [[Value]: [Value]] = [:]
        func collect(_ range: KeyRange) throws {
            let reader = try connection.reader(table: table, columns: columns, keyRange: range, batchSize: 2_000)
            defer { reader.close() }
            while let batch = try reader.next() {
                for r in 0..<batch.count {
                    let row = batch.row(r, types: types)
                    let k = keyIndexes.map { row[$0] }
                    if want.contains(k) { out[k] = row }
                }
            }
        }
        if connection.dialect.selectsByKeyList {
            // Index lookups, a bounded list per statement: reads (and locks) only these rows.
            let list = Array(want)
            for start in stride(from: 0, to: list.count, by: keysPerRead) {
                var range = KeyRange(key: [], filter: filter)
                range.keys = Array(list[start..<min(start + keysPerRead, list.count)])
                range.keyColumns = keyCols.map(\.name)
                range.lockRows = lock
                try collect(range)
            }
            return out
        }
        let modulus: Int64 = 1 << 31
        let hash = KeyHash.suited(to: keyCols)
        let residues = Set(try DigestComputer.keyHashes(keys, types: keyCols.map(\.logicalType), hash: hash).map { $0 % modulus }).sorted()
        for chunk in stride(from: 0, to: residues.count, by: RangeDiff.maxBuckets) {
            let part = Array(residues[chunk..<min(chunk + RangeDiff.maxBuckets, residues.count)])
            var range = KeyRange(key: [], filter: filter, buckets: BucketFilter(key: keyCols, modulus: modulus, residues: part, hash: hash))
            range.lockRows = lock
            try collect(range)
        }
        return out
    }
}

/// Where a database records the guarded pushes it committed: `_ferry_sync_pushes(push_id,
/// pushed_at)`, one row each, written in the push's own transaction.
public enum PushLedger {
    public static let table = TableName("_ferry_sync_pushes")

    /// The ledger's schema (created when `create` and missing; nil when missing). Created
    /// outside any transaction: on MySQL a CREATE TABLE commits.
    public static func schema(_ c: any Connection, create: Bool) throws -> TableSchema? {
        if try c.tableExists(table) { return try c.describe(table) }
        guard create else { return nil }
        let schema = TableSchema(
            name: table, engine: c.dialect.engine,
            columns: [
                Column(name: "push_id", nativeType: "", logicalType: .text(maxLength: 64, fixed: false), isNullable: false),
                Column(name: "pushed_at", nativeType: "", logicalType: .text(maxLength: 40, fixed: false), isNullable: false),
            ],
            primaryKey: ["push_id"])
        do {
            try c.createTable(schema, named: table)
        } catch {
            // Another push created it meanwhile.
            guard try c.tableExists(table) else { throw error }
        }
        return try c.describe(table)
    }

    /// True when the ledger `schema` holds push `id`.
    public static func contains(_ c: any Connection, _ schema: TableSchema, id: String, lock: Bool = false) throws -> Bool {
        guard let col = schema.column(named: "push_id") else { return false }
        return try RowValues.rows(c, schema, columns: [col], keyIndexes: [0], keys: [[.text(id)]], lock: lock)[[.text(id)]] != nil
    }

    static func record(_ c: any Connection, _ schema: TableSchema, id: String, at time: Date) throws {
        let stamp = ISOTime.string(time)
        let record = try RowBatch(rows: [[.text(id), .text(stamp)]], types: schema.columns.map(\.logicalType))
        try c.writer(into: schema, columns: schema.columns).writeWhole(record)
    }
}

/// Applies a guarded push through any SQL connection, in one transaction: the rows of every
/// key are read first and locked, and checked against what the push expects; then inserts
/// and updates (parents first), deletes (children first), the ledger row, and the serial
/// counters. A row that changed in between — even between the check and the write (a key
/// taken by a concurrent insert) — applies nothing. Rows are taken a batch at a time
/// (`GuardedPushRows`): the check and the writes each read them once.
public enum GuardedPushApplier {
    /// Rows checked, and written, per statement batch.
    static let batchRows = 1_000

    /// A write that found a row not as checked: nothing is applied.
    private struct Moved: Error {
        var row: ChangedRow
    }

    public static func apply(_ push: any GuardedPushRows, on c: any Connection) throws -> GuardedPushOutcome {
        guard let ledger = try PushLedger.schema(c, create: true) else { throw FerryError.tableNotFound(table: PushLedger.table, endpoint: c.endpoint.redacted) }
        var schemas: [TableSchema] = []
        for t in push.tables {
            let schema = try c.describe(t.table)
            for col in t.columns where schema.column(named: col.name) == nil { throw FerryError.columnNotFound(table: t.table, column: col.name) }
            schemas.append(schema)
        }
        let tables = Array(zip(push.tables, schemas).enumerated()).filter { push.hasRows(table: $0.offset) }
        var resets: [TableSchema] = []
        var counts: [TableName: MergeCounts] = [:]
        try c.begin()
        do {
            // The ledger row is locked too: two runs of one push cannot both pass this check.
            if try PushLedger.contains(c, ledger, id: push.id, lock: true) {
                try c.rollback()
                return .alreadyApplied
            }
            var changed: [ChangedRow] = []
            for (i, (t, schema)) in tables {
                let idx = try t.keyIndexes()
                let types = t.columns.map(\.logicalType)
                /// Reads and locks the rows of `batch`'s keys; notes each that is not as expected
                /// (absent for an insert, else equal to the batch's row).
                func check(_ batch: RowBatch, free: Bool) throws {
                    let rows = (0..<batch.count).map { batch.row($0, types: types) }
                    let keys = rows.map { row in idx.map { row[$0] } }
                    let now = try RowValues.rows(c, schema, columns: t.columns, keyIndexes: idx, keys: keys, lock: true)
                    for (key, row) in zip(keys, rows) where !RowValues.same(now[key], free ? nil : row) {
                        changed.append(ChangedRow(table: t.table, key: RowValues.keyText(t.key, key)))
                    }
                }
                try push.forEach(.inserts, ofTable: i, batchSize: batchRows) { try check($0, free: true) }
                try push.forEach(.expected, ofTable: i, batchSize: batchRows) { try check($0, free: false) }
                try push.forEach(.deletes, ofTable: i, batchSize: batchRows) { try check($0, free: false) }
            }
            if !changed.isEmpty {
                try c.rollback()
                return .changed(changed)
            }
            for (i, (t, schema)) in tables {
                var n = MergeCounts()
                try push.forEach(.inserts, ofTable: i, batchSize: batchRows) { batch in
                    let m = try c.mergeRows(into: schema, columns: t.columns, key: t.key, rows: batch)
                    // A key taken since the check (a concurrent insert): the write met a row.
                    guard m.inserted == Int64(batch.count) else { throw Moved(row: ChangedRow(table: t.table, key: "a key inserted meanwhile")) }
                    n.inserted += m.inserted
                }
                try push.forEach(.updates, ofTable: i, batchSize: batchRows) { batch in
                    let m = try c.mergeRows(into: schema, columns: t.columns, key: t.key, rows: batch)
                    guard m.inserted == 0 else { throw Moved(row: ChangedRow(table: t.table, key: "a row deleted meanwhile")) }
                    n.updated += m.updated + m.unchanged
                }
                counts[t.table] = n
                if t.resetSerial, schema.columns.contains(where: \.isSerial) { resets.append(schema) }
            }
            for (i, (t, schema)) in tables.reversed() {
                let idx = try t.keyIndexes()
                let keyCols = idx.map { t.columns[$0] }
                try push.forEach(.deletes, ofTable: i, batchSize: batchRows) { batch in
                    let d = try c.deleteRows(from: schema, key: keyCols, keys: RowBatch(columns: idx.map { batch.columns[$0] }))
                    guard d == batch.count else { throw Moved(row: ChangedRow(table: t.table, key: "a row deleted meanwhile")) }
                    counts[t.table, default: MergeCounts()].deleted += Int64(d)
                }
            }
            try PushLedger.record(c, ledger, id: push.id, at: Date())
            if c.dialect.supportsTransactionalDDL {
                for s in resets { try c.resetSerial(s.name, schema: s) }
            }
            try c.commit()
        } catch let moved as Moved {
            try c.rollback()
            return .changed([moved.row])
        } catch {
            try? c.rollback()
            throw error
        }
        // Committed: moving a counter that is DDL (MySQL) comes after.
        if !c.dialect.supportsTransactionalDDL {
            for s in resets { try? c.resetSerial(s.name, schema: s) }
        }
        return .applied(counts)
    }
}
