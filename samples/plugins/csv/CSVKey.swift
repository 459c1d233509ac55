import FerryCore

/// A row's key, compared the way a keyed table's file is sorted: integers, booleans, dates,
/// times and timestamps by their Int64, floats numerically (NaN last), decimals numerically and
/// exactly (`1.5` = `1.50`), text, JSON, binary and UUIDs by their bytes; NULL first. Tuples
/// compare column by column.
struct CSVKey: Hashable, Sendable, Comparable {
    var parts: [Part]

    /// One key column's value.
    enum Part: Hashable, Sendable {
        case null
        case int(Int64)
        case double(Double)
        case decimal(CSVDecimalKey)
        case bytes([UInt8])

        static func compare(_ a: Part, _ b: Part) -> Int {
            switch (a, b) {
            case (.null, .null): return 0
            case (.null, _): return -1
            case (_, .null): return 1
            case let (.int(x), .int(y)): return x < y ? -1 : x == y ? 0 : 1
            case let (.double(x), .double(y)):
                if x.isNaN || y.isNaN { return x.isNaN && y.isNaN ? 0 : x.isNaN ? 1 : -1 }
                return x < y ? -1 : x == y ? 0 : 1
            case let (.decimal(x), .decimal(y)): return CSVDecimalKey.compare(x, y)
            case let (.bytes(x), .bytes(y)):
                for (p, q) in zip(x, y) where p != q { return p < q ? -1 : 1 }
                return x.count < y.count ? -1 : x.count == y.count ? 0 : 1
            default:
                // Parts of one column always have one kind; order kinds anyway.
                return a.rank < b.rank ? -1 : 1
            }
        }

        private var rank: Int {
            switch self {
            case .null: return 0
            case .int: return 1
            case .double: return 2
            case .decimal: return 3
            case .bytes: return 4
            }
        }

        static func == (a: Part, b: Part) -> Bool { compare(a, b) == 0 }

        func hash(into h: inout Hasher) {
            switch self {
            case .null: h.combine(0)
            case .int(let v): h.combine(v)
            // Equal doubles hash alike: -0.0 as 0.0, every NaN as one.
            case .double(let v): h.combine(v.isNaN ? Double.nan.bitPattern : v == 0 ? 0 : v.bitPattern)
            case .decimal(let d): h.combine(d)
            case .bytes(let b): h.combine(b)
            }
        }
    }

    init(parts: [Part]) { self.parts = parts }

    /// The key of row `row` of `columns` (one buffer per key column, typed `types`).
    init(columns: [ColumnBuffer], row: Int, types: [LogicalType]) {
        parts = zip(columns, types).map { Self.part($0, row: row, type: $1) }
    }

    static func part(_ column: ColumnBuffer, row: Int, type: LogicalType) -> Part {
        if column.isNull(row) { return .null }
        switch column.storage {
        case .int64: return .int(column.ints[row])
        case .double: return .double(column.doubles[row])
        case .bytes:
            if case .decimal = type { return .decimal(CSVDecimalKey(column.string(row))) }
            return .bytes(column.bytes(row))
        }
    }

    static func compare(_ a: CSVKey, _ b: CSVKey) -> Int {
        for (p, q) in zip(a.parts, b.parts) {
            let c = Part.compare(p, q)
            if c != 0 { return c }
        }
        return a.parts.count < b.parts.count ? -1 : a.parts.count == b.parts.count ? 0 : 1
    }

    static func < (a: CSVKey, b: CSVKey) -> Bool { compare(a, b) < 0 }
    static func == (a: CSVKey, b: CSVKey) -> Bool { compare(a, b) == 0 }

    /// The key from `Value`s typed `types` (a key range's bounds, a list of keys).
    init(values: [Value], types: [LogicalType]) throws {
        let batch = try RowBatch(rows: [values], types: types)
        self.init(columns: batch.columns, row: 0, types: types)
    }

    /// `(id=5, name='x')`, for messages.
    func description(names: [String], types: [LogicalType]) -> String {
        let shown = zip(zip(names, types), parts).map { pair, part -> String in
            let (name, type) = pair
            let value: Value
            switch (part, type) {
            case (.null, _): value = .null
            case (.int(let v), .boolean): value = .bool(v != 0)
            case (.int(let v), .date): value = .date(v)
            case (.int(let v), .time): value = .time(v)
            case (.int(let v), .timestamp): value = .timestamp(v)
            case (.int(let v), _): value = .int(v)
            case (.double(let v), _): value = .double(v)
            case (.decimal(let d), _): value = .decimal(d.text)
            case (.bytes(let b), .binary): value = .binary(b)
            case (.bytes(let b), .uuid): value = .uuid(b)
            case (.bytes(let b), _): value = .text(String(decoding: b, as: UTF8.self))
            }
            return "\(name)=\(value)"
        }
        return "(" + shown.joined(separator: ", ") + ")"
    }
}
