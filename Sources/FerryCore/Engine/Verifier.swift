import Foundation

/// Compares tables in two databases value by value, through each side's logical types:
/// row counts, then an order-independent digest per key bucket (one streamed pass per side,
/// memory independent of the table's size), then, only for the buckets that differ, a second
/// pass that names the differing keys and columns.
public struct Verifier: Sendable {
    public struct Options: Sendable {
        public var tables: [TableName] = []
        public var exclude: [TableName] = []
        public var keys: [TableName: [String]] = [:]
        /// The copy's cast rules: source values are converted as the copy converted them, then compared.
        public var casts = CastRuleSet()
        /// Key buckets of the first pass; more buckets make the second pass read less.
        public var buckets: Int = 4096
        /// Differences listed per table.
        public var maxReported: Int = 20
        public var batchSize: Int = 10_000
        /// Tables compared at once, each job on connections of its own that read the snapshot
        /// the given connections hold (sides that cannot share one are compared by one job).
        public var jobs: Int = 1
        public init() {}
    }

    /// One difference between the two sides.
    public struct Difference: Sendable, Codable, Equatable {
        /// `changed`, `missing in target` or `extra in target`.
        public var kind: String
        /// `(id=5)`.
        public var key: String
        /// For `changed`: the columns whose values differ.
        public var columns: [String]

        public init(kind: String, key: String, columns: [String]) {
            self.kind = kind
            self.key = key
            self.columns = columns
        }
    }

    public struct TableReport: Sendable, Codable {
        public var source: String
        public var target: String
        public var sourceRows: Int64
        public var targetRows: Int64
        public var status: Status
        public var differences: [Difference]
        /// True when there were more differences than `maxReported`.
        public var truncated: Bool
        public var error: String?
        public var seconds: Double
    }

    /// How a table's comparison ended (`"equal"`, `"different"`, `"failed"` in JSON).
    public enum Status: String, Sendable, Codable {
        case equal
        /// Both sides were read whole and some rows differ (listed in `differences`).
        case different
        /// The comparison could not be made; `error` says why.
        case failed
    }

    public struct Report: Sendable, Codable {
        public var source: String
        public var target: String
        public var tables: [TableReport]
        public var equal: Bool { tables.allSatisfy { $0.status == .equal } }
    }

    public init() {}

    /// Compares each chosen table. With `cancellation`, a cancel stops before the next table
    /// and throws `FerryError.cancelled`.
    ///
    /// With `options.jobs` above 1 and `connect` (which opens another connection to an endpoint),
    /// tables are compared by that many jobs; each extra job reads inside the snapshots `source`
    /// and `target` hold (`exportSnapshot`). When a side cannot share its snapshot, `note` says so
    /// and one job compares every table, so that all see one moment of each side.
    public func verify(
        source: any Connection, target: any Connection, options: Options, cancellation: Cancellation? = nil,
        connect: ((Endpoint) throws -> any Connection)? = nil, note: (String) -> Void = { _ in }
    ) throws -> Report {
        let chosen = try CopyEngine.selectTables(in: source, tables: options.tables, exclude: options.exclude).chosen
        var jobs = connect == nil ? 1 : max(1, min(options.jobs, chosen.count))
        var shared: [String?] = [nil, nil]
        if jobs > 1 {
            shared = [try? source.exportSnapshot(), try? target.exportSnapshot()]
            if let i = shared.firstIndex(where: { $0 == nil }) {
                note("one job: \([source, target][i].endpoint.redacted) cannot share its read snapshot between connections, so one connection compares every table")
                jobs = 1
            }
        }
        let results = Locked<[TableReport?]>(Array(repeating: nil, count: chosen.count))
        let next = Locked(0)
        let failure = Locked<(any Error)?>(nil)
        /// Compares tables until none is left, on its own pair of connections.
        func work(_ s: any Connection, _ t: any Connection) {
            while true {
                if cancellation?.isCancelled == true {
                    failure.withLock { $0 = $0 ?? FerryError.cancelled }
                    return
                }
                let i = next.withLock { n -> Int in
                    defer { n += 1 }
                    return n
                }
                guard i < chosen.count, failure.withLock({ $0 == nil }) else { return }
                let table = chosen[i]
                let started = Date()
                var r: TableReport
                do {
                    r = try verifyTable(table, source: s, target: t, options: options)
                } catch {
                    r = TableReport(
                        source: table.description, target: table.unqualified.description, sourceRows: 0, targetRows: 0, status: .failed,
                        differences: [], truncated: false, error: "\(error)", seconds: 0)
                }
                r.seconds = Date().timeIntervalSince(started)
                let report = r
                results.withLock { $0[i] = report }
            }
        }
        /// Another pair of connections, reading inside the snapshots the given pair holds.
        func openJob(_ connect: (Endpoint) throws -> any Connection) throws -> (any Connection, any Connection) {
            let s = try connect(source.endpoint)
            do {
                let t = try connect(target.endpoint)
                do {
                    try shared[0].map { try s.beginSnapshot(importing: $0) }
                    try shared[1].map { try t.beginSnapshot(importing: $0) }
                    return (s, t)
                } catch {
                    t.close()
                    throw error
                }
            } catch {
                s.close()
                throw error
            }
        }
        let group = DispatchGroup()
        for _ in 1..<max(jobs, 1) {
            guard let connect else { break }
            let job: (work: (any Connection, any Connection) -> Void, s: any Connection, t: any Connection)
            do {
                let (s, t) = try openJob(connect)
                job = (work, s, t)
            } catch {
                note("one job fewer: \(error)")
                continue
            }
            // The job's body and connections, handed to its thread: each connection is used by
            // that thread alone, and `work` shares only locked state with the others.
            let handoff = Handoff(job)
            group.enter()
            Thread {
                defer { group.leave() }
                let (body, s, t) = handoff.value
                body(s, t)
                try? s.rollback()
                try? t.rollback()
                s.close()
                t.close()
            }.start()
        }
        work(source, target)
        group.wait()
        if let e = failure.withLock({ $0 }) { throw e }
        return Report(source: source.endpoint.redacted, target: target.endpoint.redacted, tables: results.withLock { $0.compactMap { $0 } })
    }

    /// What one pass over one side yields.
    private struct Digest {
        var rows: Int64 = 0
        var sums: [UInt64]
        var counts: [UInt32]
        init(buckets: Int) {
            sums = Array(repeating: 0, count: buckets)
            counts = Array(repeating: 0, count: buckets)
        }
    }

    private func verifyTable(_ table: TableName, source: any Connection, target: any Connection, options: Options) throws -> TableReport {
        let sourceSchema = try source.describe(table)
        let targetName = table.unqualified
        guard try target.tableExists(targetName) else {
            throw FerryError.tableNotFound(table: targetName, endpoint: target.endpoint.redacted)
        }
        let targetSchema = try target.describe(targetName)
        // The carried columns: the source read as the copy reads it (casts included), values
        // converted as the copy converts them, both sides compared under the target's logical types.
        let resolved = try options.casts.resolve(sourceSchema, target: target.dialect) { c in
            !c.generated && targetSchema.column(named: c.name) != nil
        }
        let columns = resolved.read
        let conversions = resolved.conversions
        let types = resolved.write.map(\.logicalType)
        let targetColumns = resolved.write.compactMap { w -> Column? in
            // Native and stored forms are compared as such (SQLite to SQLite: the stored text is the value).
            guard var t = targetSchema.column(named: w.name)?.carried(like: w) else { return nil }
            t.logicalType = w.logicalType
            return t
        }
        func batches(_ reader: any BatchReader, converting: Bool) throws -> RowBatch? {
            guard let batch = try reader.next() else { return nil }
            return converting ? try CopyEngine.convert(batch, conversions, columns: columns) : batch
        }
        var key = sourceSchema.preferredKey?.columns ?? []
        if let user = options.keys.first(where: { table.matches($0.key) })?.value { key = user }
        let keyIndexes = key.compactMap { k in columns.firstIndex { $0.name == k } }
        let keyed = !key.isEmpty && keyIndexes.count == key.count
        let buckets = max(1, options.buckets)

        // Pass 1: both sides at once, on two threads.
        func digest(_ c: any Connection, _ schema: TableSchema, _ cols: [Column], converting: Bool) throws -> Digest {
            var d = Digest(buckets: buckets)
            let reader = try c.reader(table: schema, columns: cols, keyRange: nil, batchSize: options.batchSize)
            defer { reader.close() }
            while let batch = try batches(reader, converting: converting) {
                for r in 0..<batch.count {
                    let row = Self.canonical(batch.row(r, types: types))
                    let b = keyed ? Self.bucket(row, keyIndexes, buckets) : 0
                    d.sums[b] &+= Self.rowHash(row)
                    d.counts[b] &+= 1
                }
                d.rows += Int64(batch.count)
            }
            return d
        }
        let (a, b) = try Worker.both(
            { try digest(source, sourceSchema, columns, converting: true) }, { try digest(target, targetSchema, targetColumns, converting: false) })
        let differing = Set((0..<buckets).filter { a.sums[$0] != b.sums[$0] || a.counts[$0] != b.counts[$0] })
        var report = TableReport(
            source: table.description, target: targetName.description, sourceRows: a.rows, targetRows: b.rows,
            status: differing.isEmpty ? .equal : .different, differences: [], truncated: false, error: nil, seconds: 0)
        guard !differing.isEmpty else { return report }
        guard keyed else {
            report.error = "the table has no key: differences cannot be narrowed to rows (name one with --key)"
            return report
        }

        // Pass 2: only the rows of differing buckets, by key.
        func collect(_ c: any Connection, _ schema: TableSchema, _ cols: [Column], converting: Bool) throws -> [[Value]: [Value]] {
            var rows: [[Value]: [Value]] = [:]
            let reader = try c.reader(table: schema, columns: cols, keyRange: nil, batchSize: options.batchSize)
            defer { reader.close() }
            while let batch = try batches(reader, converting: converting) {
                for r in 0..<batch.count {
                    let row = Self.canonical(batch.row(r, types: types))
                    guard differing.contains(Self.bucket(row, keyIndexes, buckets)) else { continue }
                    rows[keyIndexes.map { row[$0] }] = row
                }
            }
            return rows
        }
        let (left, right) = try Worker.both(
            { try collect(source, sourceSchema, columns, converting: true) }, { try collect(target, targetSchema, targetColumns, converting: false) })
        func keyText(_ k: [Value]) -> String {
            "(" + zip(key, k).map { name, value in
                // A stored form shown as the value it holds, not as bytes.
                if case .binary(let bytes) = value, columns.first(where: { $0.name == name })?.readHints.contains(.storedForm) == true,
                   let shown = StoredValue.describe(bytes) {
                    return "\(name)=\(shown)"
                }
                return "\(name)=\(value)"
            }.joined(separator: ", ") + ")"
        }
        var found: [Difference] = []
        for (k, row) in left {
            if let other = right[k] {
                if other != row {
                    let cols = zip(columns, zip(row, other)).filter { $1.0 != $1.1 }.map { $0.0.name }
                    found.append(Difference(kind: "changed", key: keyText(k), columns: cols))
                }
            } else {
                found.append(Difference(kind: "missing in target", key: keyText(k), columns: []))
            }
        }
        for k in right.keys where left[k] == nil {
            found.append(Difference(kind: "extra in target", key: keyText(k), columns: []))
        }
        found.sort { ($0.key, $0.kind) < ($1.key, $1.kind) }
        report.truncated = found.count > options.maxReported
        report.differences = Array(found.prefix(options.maxReported))
        return report
    }

    /// Values as compared: decimals by their numeric value (`1.50` and `1.5` are equal: engines
    /// pad to the column's scale), everything else exactly.
    static func canonical(_ row: [Value]) -> [Value] {
        row.map { v in
            guard case .decimal(let s) = v else { return v }
            return .decimal(DecimalText.normalized(s))
        }
    }

    static func bucket(_ row: [Value], _ keyIndexes: [Int], _ buckets: Int) -> Int {
        var h = StableHash()
        for i in keyIndexes { h.add(row[i]) }
        return Int(h.value % UInt64(buckets))
    }

    static func rowHash(_ row: [Value]) -> UInt64 {
        var h = StableHash()
        for v in row { h.add(v) }
        return h.value
    }

}

/// FNV-1a over each value's type tag and canonical bytes: the same on both sides and across
/// runs (Swift's Hasher is seeded per process). Also what names and shapes derived from text
/// are hashed with (a replica's capture name, a change feed's shape).
public struct StableHash {
    public private(set) var value: UInt64 = 0xCBF2_9CE4_8422_2325

    public init() {}

    public mutating func byte(_ b: UInt8) {
        value ^= UInt64(b)
        value &*= 0x0000_0100_0000_01B3
    }

    mutating func int(_ v: UInt64) {
        var x = v
        for _ in 0..<8 {
            byte(UInt8(x & 0xff))
            x >>= 8
        }
    }

    /// `s`'s bytes, then a separator (so that "ab","c" and "a","bc" differ).
    public mutating func bytes<S: Sequence>(_ s: S) where S.Element == UInt8 {
        for b in s { byte(b) }
        byte(0xFF)
    }

    mutating func add(_ v: Value) {
        switch v {
        case .null: byte(0)
        case .bool(let b): byte(1); byte(b ? 1 : 0)
        case .int(let i): byte(2); int(UInt64(bitPattern: i))
        case .double(let d): byte(3); int(d.bitPattern)
        case .decimal(let s): byte(4); bytes(s.utf8)
        case .text(let s): byte(5); bytes(s.utf8)
        case .binary(let b): byte(6); bytes(b)
        case .date(let d): byte(7); int(UInt64(bitPattern: d))
        case .time(let t): byte(8); int(UInt64(bitPattern: t))
        case .timestamp(let t): byte(9); int(UInt64(bitPattern: t))
        case .uuid(let u): byte(10); bytes(u)
        case .json(let s): byte(11); bytes(s.utf8)
        }
    }
}
