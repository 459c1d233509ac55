import Foundation

/// `--incremental COLUMN`: an upsert that reads only the rows whose COLUMN (a value that grows:
/// `updated_at`, a serial id) is above the watermark the last successful run left, less a
/// lookback window for rows that committed late. The watermark lives in `_ferry_watermarks` of
/// the target and moves in the transaction that upserts the rows, so it moves only when they
/// are in; two runs at once cannot both move it (the second fails, committing nothing).
public struct IncrementalColumn: Sendable, Hashable, Encodable {
    public var column: String
    /// Where the column is among the columns read.
    public var index: Int
    public var type: LogicalType
    /// The window read again below the watermark, in the column's own units (microseconds for
    /// timestamps, days for dates, the value itself for integers).
    public var lookback: Int64
    /// The lookback as the user gave it, or the default.
    public var lookbackText: String

    private enum CodingKeys: String, CodingKey { case column, lookback = "lookbackText" }
}

/// `--incremental-lookback`: how far below the watermark to read again.
public enum Lookback {
    /// For timestamps and dates: 5 minutes. A row's `updated_at` is set when its transaction
    /// writes it, but the row becomes visible at its commit: a transaction still open when a
    /// run reads (a batch job, a slow request) commits rows below the watermark that run
    /// leaves. Five minutes covers transactions shorter than that; longer ones need more.
    public static let defaultSeconds: Int64 = 300

    /// `0`, `90s`, `10m`, `2h`, `1d` (seconds when no unit) for timestamp and date columns; a
    /// plain number of values for integer columns.
    public static func units(_ text: String?, for type: LogicalType, column: String) throws -> (Int64, String) {
        let integer = type.integerRange != nil && type != .boolean
        guard let text else {
            if integer { return (0, "0") }
            return (try units("\(defaultSeconds)s", for: type, column: column).0, "5m")
        }
        let t = text.trimmingCharacters(in: .whitespaces).lowercased()
        if integer {
            guard let n = Int64(t), n >= 0 else {
                throw FerryError.invalidOption("--incremental-lookback '\(text)': \(column) is an integer column: give a number of values, such as 1000")
            }
            return (n, t)
        }
        let factor: [Character: Int64] = ["s": 1, "m": 60, "h": 3_600, "d": 86_400]
        var digits = Substring(t)
        var scale: Int64 = 1
        if let last = t.last, let f = factor[last] {
            digits = t.dropLast()
            scale = f
        }
        guard let n = Int64(digits), n >= 0, n <= 3_650 * 86_400 / scale else {
            throw FerryError.invalidOption("--incremental-lookback '\(text)' is not a duration such as 0, 90s, 10m, 2h or 1d")
        }
        let seconds = n * scale
        switch type {
        case .date: return ((seconds + 86_399) / 86_400, t)
        default: return (seconds * 1_000_000, t)
        }
    }

    /// True for the column types an incremental copy can follow.
    static func follows(_ type: LogicalType) -> Bool {
        if type.integerRange != nil && type != .boolean { return true }
        switch type {
        case .date, .timestamp: return true
        default: return false
        }
    }
}

/// A watermark to move with a table's rows (`Connection.stageWatermark`): `name` from `from`
/// (nil: no watermark yet) to `to`, both as stored (`KeyText`).
public struct WatermarkMove: Sendable, Equatable {
    public var name: String
    public var from: String?
    public var to: String
    public var rows: Int64

    public init(name: String, from: String?, to: String, rows: Int64) {
        self.name = name
        self.from = from
        self.to = to
        self.rows = rows
    }
}

/// The watermarks of incremental copies in the target: one row per target table, column and
/// source.
public enum Watermarks {
    static let table = TableName("_ferry_watermarks")
    static let columns: [Column] = [
        Column(name: "name", nativeType: "", logicalType: .text(maxLength: 500, fixed: false), isNullable: false),
        Column(name: "watermark", nativeType: "", logicalType: .text(maxLength: 200, fixed: false), isNullable: false),
        Column(name: "rows_read", nativeType: "", logicalType: .int64, isNullable: false),
        Column(name: "updated_at", nativeType: "", logicalType: .text(maxLength: 40, fixed: false), isNullable: false),
    ]

    public static func schema(_ c: any Connection) throws -> TableSchema {
        try StateTable.schema(c, table, columns: columns, key: ["name"])
    }

    static func name(source: String, table: TablePlan, column: String) -> String {
        "\(table.target) \(column) \(source)"
    }

    /// The watermark stored for `name` (as stored, and as a value), or nil before the first run.
    static func read(_ c: any Connection, _ schema: TableSchema, name: String) throws -> (text: String, value: Value)? {
        guard let row = try StateTable.row(c, schema, columns: columns, key: .text(name)) else { return nil }
        let text = row[1].textValue
        guard let value = KeyText.decode(text)?.first else {
            throw FerryError.notReady("the watermark of \(name) in \(c.endpoint.redacted) cannot be read back (\(text.prefix(60))): delete its row from \(table) to start over")
        }
        return (text, value)
    }

    /// Moves `name` from `old` to `new` in the caller's transaction, only if it still is `old`:
    /// the row as read is deleted (exactly one, or another run moved it) and the new one inserted
    /// (a second first run fails on the key). Where the target stages its keyed writes for
    /// `commit` (the service), the move goes with the staged rows of `rowsOf` instead, applied
    /// by the service in their transaction with the same check.
    static func advance(_ c: any Connection, _ schema: TableSchema, name: String, from old: String?, to new: Value, rows: Int64,
                        rowsOf table: TableSchema, key: [String]) throws {
        let move = WatermarkMove(name: name, from: old, to: KeyText.encode([new]), rows: rows)
        if c.stagesKeyedWrites { return try c.stageWatermark(move, with: table, key: key) }
        try apply(move, c, schema)
    }

    /// Moves the watermark as `move` says, in the caller's transaction (see `advance`).
    public static func apply(_ move: WatermarkMove, _ c: any Connection, _ schema: TableSchema) throws {
        let moved = FerryError.notReady(
            "another run moved the watermark of \(move.name) while this one read: nothing of this run was committed; run it again")
        if let old = move.from {
            let cols = try StateTable.described(schema, [columns[0], columns[1]])
            let exact = try RowBatch(rows: [[.text(move.name), .text(old)]], types: cols.map(\.logicalType))
            guard try c.deleteRows(from: schema, key: cols, keys: exact) == 1 else { throw moved }
        }
        do {
            try StateTable.write(c, schema, columns: columns, key: ["name"],
                                 values: [.text(move.name), .text(move.to), .int(move.rows), .text(ISO8601DateFormatter().string(from: Date()))], insert: true)
        } catch {
            if move.from == nil, (try? read(c, schema, name: move.name)) != nil { throw moved }
            throw error
        }
    }

    /// The value `lookback` units below `value`.
    static func lowered(_ value: Value, by lookback: Int64) -> Value {
        switch value {
        case .int(let n): return .int(n.subtractingReportingOverflow(lookback).overflow ? Int64.min : n - lookback)
        case .date(let n): return .date(n - lookback)
        case .timestamp(let n): return .timestamp(n.subtractingReportingOverflow(lookback).overflow ? Int64.min : n - lookback)
        default: return value
        }
    }
}

extension CopyEngine {
    /// `--incremental` values by table: `TABLE=COLUMN` for one table, or a COLUMN for every
    /// copied table; each a column the copy reads as it is, of an integer, date or timestamp type.
    static func resolveIncremental(
        _ values: [String], lookback: String?, table: TableName, columns: [Column], conversions: [ColumnConversion]
    ) throws -> IncrementalColumn? {
        var chosen: String?
        for value in values {
            if let eq = value.firstIndex(of: "="), table.matches(TableName(parsing: String(value[..<eq]))) {
                chosen = String(value[value.index(after: eq)...]).trimmingCharacters(in: .whitespaces)
            } else if !value.contains("=") {
                chosen = chosen ?? value.trimmingCharacters(in: .whitespaces)
            }
        }
        guard let column = chosen else { return nil }
        guard let index = columns.firstIndex(where: { $0.name == column }) else { throw FerryError.columnNotFound(table: table, column: column) }
        let type = columns[index].logicalType
        guard Lookback.follows(type), !conversions.contains(where: { $0.index == index }) else {
            throw FerryError.invalidOption(
                "--incremental \(column): \(table).\(column) is \(type), read \(conversions.contains(where: { $0.index == index }) ? "through a cast" : "as it is"); an incremental copy follows an integer, date or timestamp column read as it is")
        }
        let (units, text) = try Lookback.units(lookback, for: type, column: column)
        return IncrementalColumn(column: column, index: index, type: type, lookback: units, lookbackText: text)
    }

    /// The largest value of column `index` in `batch` above `current` (NULLs left out).
    static func largest(_ batch: RowBatch, index: Int, type: LogicalType, above current: Value?) -> Value? {
        let column = batch.columns[index]
        var best: Int64?
        if case .int(let n)? = current { best = n } else if case .date(let n)? = current { best = n } else if case .timestamp(let n)? = current { best = n }
        let ints = column.ints
        for r in 0..<batch.count where !column.isNull(r) && r < ints.count {
            if let b = best, ints[r] <= b { continue }
            best = ints[r]
        }
        guard let best else { return current }
        switch type {
        case .date: return .date(best)
        case .timestamp: return .timestamp(best)
        default: return .int(best)
        }
    }
}
