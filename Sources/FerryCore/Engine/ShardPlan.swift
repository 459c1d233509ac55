import Foundation

/// A copy cut into independent, idempotent work units for the schedulers people already run
/// (`ferry plan --shards N`): each unit is a list of pieces (a table, or a key range of one),
/// the ranges cut once, from the key's real distribution, and never recomputed, so that every
/// process that runs a unit agrees on them. Holds no password or token: the URLs are masked,
/// and each unit's process brings its own credentials.
public struct ShardPlan: Codable, Sendable {
    public static let formatVersion = 1

    public var version = ShardPlan.formatVersion
    /// Names this plan in the target's records of finished units (a hash of its content).
    public var id = ""
    public var source: String
    public var target: String
    public var mode: WriteMode
    public var options: Options
    /// The exported source snapshot every unit reads in (PostgreSQL, the service), while the
    /// `ferry plan --hold-snapshot` process that holds it lives; nil: each unit reads its own.
    public var snapshot: String?
    public var units: [Unit]
    public var createdAt: String

    /// What decides each table's copy, as the plan's maker gave it.
    public struct Options: Codable, Sendable, Equatable {
        public var tables: [String]
        public var keys: [String: [String]]
        public var casts: [String]
        public var filters: [String]
        public var columns: [String]
        public var indexes: Bool
        public var foreignKeys: Bool
        public var batchSize: Int
    }

    public struct Unit: Codable, Sendable {
        public var index: Int
        public var pieces: [Piece]
        /// Rows of its pieces when the plan was made.
        public var rows: Int64
    }

    /// One table, or one key range of one: rows whose key is above `after` and at most `upTo`
    /// (in the source's order; either bound absent: open), each key value as `[type, text]`
    /// (`KeyText.items`: binary and uuid in base64, doubles by their bits, dates, times and
    /// timestamps as days and microseconds).
    public struct Piece: Codable, Sendable {
        public var table: String
        public var target: String
        public var key: [String]
        public var after: [[String]]?
        public var upTo: [[String]]?
        public var rows: Int64
        /// The piece's place among the pieces of its table.
        public var part: Int
        public var parts: Int
        /// True when `rows` is an estimate: the table was cut at the quantiles of a random sample
        /// of its keys (a large table), not counted.
        public var estimated: Bool? = nil

        public var name: String { parts > 1 ? "\(table) part \(part + 1)/\(parts)" : table }
    }

    /// The copy options this plan was made with (casts parsed again, tables named as chosen).
    public func copyOptions() throws -> CopyOptions {
        var o = CopyOptions()
        o.tables = options.tables.map { TableName(parsing: $0) }
        for (t, cols) in options.keys { o.keys[TableName(parsing: t)] = cols }
        o.casts = CastRuleSet(try options.casts.enumerated().map { try CastRule(parsing: $1, origin: "the plan's cast #\($0 + 1)") })
        o.filters = options.filters
        o.columns = options.columns
        o.indexes = options.indexes
        o.foreignKeys = options.foreignKeys
        o.batchSize = options.batchSize
        o.mode = mode
        return o
    }

    /// The hash of everything but the id.
    public func contentHash() -> String {
        var copy = self
        copy.id = ""
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var h = StableHash()
        h.bytes((try? encoder.encode(copy)) ?? Data())
        return String(h.value, radix: 16)
    }

    /// Reads a plan file; one line naming the file on anything else.
    public static func load(_ path: String) throws -> ShardPlan {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw FerryError.invalidOption("cannot read the plan \(path): \((error as NSError).localizedDescription)")
        }
        let plan: ShardPlan
        do {
            plan = try JSONDecoder().decode(ShardPlan.self, from: data)
        } catch {
            throw FerryError.invalidOption("\(path) is not a plan that `ferry plan --shards N --json` wrote (\(Self.describe(error)))")
        }
        guard plan.version == formatVersion else {
            throw FerryError.invalidOption("\(path) is a plan of format \(plan.version); this Ferry reads format \(formatVersion): make it again with this Ferry's `ferry plan`")
        }
        guard plan.id == plan.contentHash() else {
            throw FerryError.invalidOption("\(path) was changed after `ferry plan` wrote it (its id no longer matches its content): make it again")
        }
        return plan
    }

    static func describe(_ error: any Error) -> String {
        switch error as? DecodingError {
        case .keyNotFound(let k, let c)?: return "no \((c.codingPath + [k]).map(\.stringValue).joined(separator: "."))"
        case .typeMismatch(_, let c)?, .valueNotFound(_, let c)?: return "\(c.codingPath.map(\.stringValue).joined(separator: ".")): \(c.debugDescription)"
        case .dataCorrupted(let c)?: return c.debugDescription
        default: return "\(error)"
        }
    }
}

extension CopyEngine {
    /// Cuts `plan`'s tables into `shards` units of about equal rows: a table larger than its
    /// share is split into key ranges at the ranks of its keys, read once in key order from the
    /// source (only the key's columns, inside the source's snapshot when the caller began one),
    /// so that gaps, hot ranges, text keys and composite keys still give balanced, non-empty
    /// ranges; then the pieces go, largest first, to the unit with the fewest rows.
    public func shardPlan(
        _ plan: CopyPlan, source: any Connection, options: CopyOptions, shards: Int, snapshot: String?, sampleAbove: Int64 = CopyEngine.sampleAbove
    ) throws -> ShardPlan {
        guard shards >= 1 else { throw FerryError.invalidOption("--shards must be at least 1") }
        guard plan.mode == .create || plan.mode == .upsert else {
            throw FerryError.invalidOption(
                "--shards runs units by --mode create or upsert; --mode \(plan.mode.rawValue) \(plan.mode == .append ? "would add a unit's rows again each time it runs" : "is not cut into units") (refused)")
        }
        // Exact counts: the split needs them, and the units report them.
        var pieces: [ShardPlan.Piece] = []
        var total: Int64 = 0
        var rowsOf: [Int64] = []
        // A table above `sampleAbove` rows (by the catalog's estimate) is cut at the quantiles of
        // a random sample of its keys, where the engine samples; else its keys are read whole.
        var sampled: [Bool] = []
        for t in plan.tables {
            let estimate = t.sourceSchema.rowEstimate ?? 0
            let sample = source.dialect.samples && estimate > sampleAbove && t.key != nil && Self.resumeKey(t) != nil
            let n = sample ? estimate : try countSource(t, source: source)
            sampled.append(sample)
            rowsOf.append(n)
            total += n
        }
        let share = max(1, (total + Int64(shards) - 1) / Int64(shards))
        for (i, t) in plan.tables.enumerated() {
            let n = rowsOf[i]
            let key = t.key?.columns ?? []
            let parts = key.isEmpty || Self.resumeKey(t) == nil ? 1 : Int(min(Int64(shards), max(1, (n + share - 1) / share)))
            if parts <= 1 {
                pieces.append(ShardPlan.Piece(table: t.source.description, target: t.target.description, key: key, after: nil, upTo: nil, rows: n, part: 0, parts: 1))
                continue
            }
            let bounds = sampled[i] ? try sampledBoundaries(t, source: source, rows: n, parts: parts) : try keyBoundaries(t, source: source, rows: n, parts: parts)
            var after: [Value]?
            var taken: Int64 = 0
            for p in 0..<parts {
                let upTo = p < bounds.count ? bounds[p].key : nil
                let through = p < bounds.count ? bounds[p].rank : n
                var piece = ShardPlan.Piece(
                    table: t.source.description, target: t.target.description, key: key, after: after.map(KeyText.items), upTo: upTo.map(KeyText.items),
                    rows: through - taken, part: p, parts: parts)
                if sampled[i] { piece.estimated = true }
                pieces.append(piece)
                taken = through
                after = upTo
            }
        }
        var units = (0..<shards).map { ShardPlan.Unit(index: $0, pieces: [], rows: 0) }
        for piece in pieces.sorted(by: { $0.rows > $1.rows }) {
            guard let least = units.indices.min(by: { units[$0].rows < units[$1].rows || units[$0].rows == units[$1].rows && $0 < $1 }) else { break }
            units[least].pieces.append(piece)
            units[least].rows += piece.rows
        }
        var keys: [String: [String]] = [:]
        for (t, cols) in options.keys { keys[t.description] = cols }
        var out = ShardPlan(
            source: plan.source, target: plan.target, mode: plan.mode,
            options: .init(tables: plan.tables.map(\.source.description), keys: keys, casts: options.casts.rules.map(\.text), filters: options.filters, columns: options.columns,
                           indexes: options.indexes, foreignKeys: options.foreignKeys, batchSize: options.batchSize),
            snapshot: snapshot, units: units, createdAt: ISO8601DateFormatter().string(from: Date()))
        out.id = out.contentHash()
        return out
    }

    /// Tables above this many rows (the catalog's estimate) are cut from a sample of their keys.
    public static let sampleAbove: Int64 = 5_000_000
    /// Keys a sampled cut reads: enough for quantiles within a fraction of a percent.
    static let sampleKeys: Int64 = 50_000

    /// Boundaries at the quantiles of a random sample of about `sampleKeys` keys (read in key
    /// order, by the engine's sampling: PostgreSQL's TABLESAMPLE SYSTEM reads only the sampled
    /// pages), their ranks scaled to the table's `rows`.
    func sampledBoundaries(_ table: TablePlan, source: any Connection, rows: Int64, parts: Int) throws -> [(key: [Value], rank: Int64)] {
        guard let key = table.key?.columns else { return [] }
        let columns = try Self.keyColumns(table)
        let types = columns.map(\.logicalType)
        var range = KeyRange(key: key, filter: table.filter)
        range.sample = min(1, Double(Self.sampleKeys) / Double(max(rows, 1)))
        let reader = try source.reader(table: table.sourceSchema, columns: columns, keyRange: range, batchSize: 50_000)
        defer { reader.close() }
        var keys: [[Value]] = []
        while let batch = try reader.next() {
            for r in 0..<batch.count { keys.append(batch.row(r, types: types)) }
        }
        guard keys.count >= parts * 2 else {
            // Too few sampled (a tiny or filtered table): its keys are read whole.
            return try keyBoundaries(table, source: source, rows: try countSource(table, source: source), parts: parts)
        }
        var out: [(key: [Value], rank: Int64)] = []
        for i in 1..<parts {
            let at = keys.count * i / parts - 1
            if let last = out.last, last.key == keys[at] { continue }
            out.append((keys[at], rows * Int64(i) / Int64(parts)))
        }
        return out
    }

    /// The key's columns as the source table has them.
    static func keyColumns(_ table: TablePlan) throws -> [Column] {
        try (table.key?.columns ?? []).map { k in
            guard let c = table.sourceSchema.column(named: k) else { throw FerryError.columnNotFound(table: table.source, column: k) }
            return c
        }
    }

    /// The rows a piece of `table` (inside its filter) holds at the source.
    func countSource(_ table: TablePlan, source: any Connection) throws -> Int64 {
        guard table.filter != nil else { return try source.countRows(table.source) }
        let key = table.columns.prefix(1)
        let reader = try source.reader(table: table.sourceSchema, columns: Array(key), keyRange: KeyRange(key: [], filter: table.filter), batchSize: 50_000)
        defer { reader.close() }
        var n: Int64 = 0
        while let b = try reader.next() { n += Int64(b.count) }
        return n
    }

    /// The keys at ranks rows·i/parts (i = 1…parts−1), read in the source's key order: each the
    /// last key of a range, with the rows up to it.
    func keyBoundaries(_ table: TablePlan, source: any Connection, rows: Int64, parts: Int) throws -> [(key: [Value], rank: Int64)] {
        guard let key = table.key?.columns else { return [] }
        let columns = try Self.keyColumns(table)
        let types = columns.map(\.logicalType)
        let ranks = (1..<parts).map { rows * Int64($0) / Int64(parts) }
        let reader = try source.reader(table: table.sourceSchema, columns: columns, keyRange: KeyRange(key: key, filter: table.filter), batchSize: 50_000)
        defer { reader.close() }
        var out: [(key: [Value], rank: Int64)] = []
        var seen: Int64 = 0
        var next = 0
        while next < ranks.count, let batch = try reader.next() {
            let end = seen + Int64(batch.count)
            while next < ranks.count, ranks[next] <= end {
                let r = ranks[next]
                if r > seen, r > (out.last?.rank ?? 0) { out.append((batch.row(Int(r - seen - 1), types: types), r)) }
                next += 1
            }
            seen = end
        }
        return out
    }
}
