import FerryCore
import Foundation

/// The conformance suite every driver's tests run against a live database, in the spirit of
/// sql-kit's `SQLBenchmarker`: catalog listing, describe with keys and serial columns, every
/// logical type written and read back exactly, NULLs, empty tables, quoted identifiers,
/// create/replace/append through the copy engine, serial counters after a load, and errors for
/// missing tables.
///
/// ```swift
/// let kit = DriverConformance(freshDatabase: { try makeEmptyDatabase() })
/// for check in kit.checks { XCTAssertNoThrow(try check.run(), check.name) }
/// ```
public struct DriverConformance {
    /// A check that throws `ConformanceFailure` on the first thing that is wrong.
    public struct Check {
        public let name: String
        /// What the connection must declare for the check to apply (a plugin without keyed reads
        /// is never asked for a key range: Ferry refuses that work before it starts).
        public var requires: Capabilities = []
        public let run: () throws -> Void
        init(name: String, requires: Capabilities = [], run: @escaping () throws -> Void) {
            self.name = name
            self.requires = requires
            self.run = run
        }
    }

    /// Opens a connection (role target) to a new, empty database each call.
    public let freshDatabase: () throws -> any Connection
    /// What the engine may refuse instead of storing exactly (e.g. SQLite and -0.0).
    public var options: Options

    public struct Options {
        /// The engine stores -0.0 with its sign in a float column Ferry creates.
        public var keepsNegativeZero = true
        /// The engine stores NaN in a float column.
        public var keepsNaN = true
        /// The engine stores ±infinity in a float column.
        public var keepsInfinity = true
        /// The driver's catalog describes a table it planned with the logical types the plan
        /// gave (false for the XML service, whose own engine maps the types it is sent).
        public var describesPlannedTypes = true
        /// What the connections declare (driver plugins declare less than everything); checks
        /// needing more are not part of this driver's kit.
        public var capabilities: Capabilities = .all
        /// Values in the engine's stored form, for engines whose stored form is the value
        /// (SQLite: `StoredFormSample.sqlite`); nil where values are their canonical forms.
        public var storedForm: StoredFormSample?
        public init() {}
    }

    public init(options: Options = Options(), freshDatabase: @escaping () throws -> any Connection) {
        self.freshDatabase = freshDatabase
        self.options = options
    }

    /// The checks that apply to a driver with `options.capabilities`.
    public var checks: [Check] {
        allChecks.filter { options.capabilities.isSuperset(of: $0.requires) && ($0.name != Self.storedFormCheck || options.storedForm != nil) }
    }

    static let storedFormCheck = "a copy into a database of the same engine keeps every stored value, byte for byte"

    var allChecks: [Check] {
        [
            Check(name: "every logical type round-trips exactly", run: everyTypeRoundTrips),
            Check(name: "a planned table is created as planned, and planning changes nothing", run: plannedTable),
            Check(name: "describe finds keys and serial columns", run: describeFindsKeys),
            Check(name: "NULL and empty values stay apart", run: nullsAndEmpties),
            Check(name: "empty tables read as no batches", run: emptyTable),
            Check(name: "identifiers are quoted", run: quotedIdentifiers),
            Check(name: "create, replace and append modes", run: writeModes),
            Check(name: "serial counter moves past the copied maximum", run: serialCounter),
            Check(name: "missing tables are clear errors", run: missingTable),
            Check(name: "key ranges read slices in key order", requires: .keyedReads, run: keyRanges),
            Check(name: "keyed page walks return every row once, for every key type", requires: .keyedReads, run: keyedWalks),
            Check(name: "upsert and delete by key", requires: [.keyedReads, .keyedWrites], run: upsertAndDelete),
            Check(name: "a row error in the middle of a large load leaves the target as it was", run: abortMidLoad),
            Check(name: "batches end by bytes as well as rows", run: batchesByBytes),
            Check(name: Self.storedFormCheck, requires: [.keyedReads, .keyedWrites], run: storedFormsSurviveACopy),
        ]
    }

    // MARK: Failing loads

    /// Rows of the abort check's load: many batches, the bad row in the middle.
    public static let abortRows = 300_000

    /// A 300,000-row append into a table holding three rows, where row id=150001 has a NULL the
    /// target's NOT NULL column refuses: the copy fails with one line naming the table, the column
    /// and the key; the target holds its three rows; the connection still works afterwards.
    func abortMidLoad() throws {
        let src = try freshDatabase()
        defer { src.close() }
        let dst = try freshDatabase()
        defer { dst.close() }
        let name = TableName("aborted_load")
        let columns = [col("id", .int64, nullable: false), col("label", .text), col("n", .int64)]
        let bad = Int64(Self.abortRows / 2 + 1)
        try src.begin()
        do {
            let created = try src.createTable(makeSchema(name.name, columns: columns, primaryKey: ["id"]), named: name)
            let writer = try src.writer(into: created, columns: columns)
            var id: Int64 = 1
            while id <= Int64(Self.abortRows) {
                var rows: [[Value]] = []
                rows.reserveCapacity(20_000)
                for _ in 0..<20_000 where id <= Int64(Self.abortRows) {
                    rows.append([.int(id), id == bad ? .null : .text("row \(id)"), .int(id * 7)])
                    id += 1
                }
                try writer.write(RowBatch(rows: rows, types: columns.map(\.logicalType)))
            }
            try writer.finish()
            try src.commit()
        } catch {
            try? src.rollback()
            throw error
        }
        var strict = columns
        strict[1].isNullable = false
        let before: [[Value]] = [[.int(-3), .text("kept"), .int(0)], [.int(-2), .text("kept too"), .int(0)], [.int(-1), .text("kept three"), .int(0)]]
        try load(dst, makeSchema(name.name, columns: strict, primaryKey: ["id"]), before)

        var o = CopyOptions()
        o.mode = .append
        o.tables = [name]
        let engine = CopyEngine(registry: DriverRegistry())
        let plan = try engine.plan(source: src, target: dst, options: o)
        let summary = engine.run(plan, source: src, target: dst, options: o, progress: ProgressReporter(style: .quiet) { _ in })
        guard !summary.ok, let message = summary.tables.first?.error else {
            throw ConformanceFailure("a NULL into a NOT NULL column in row \(bad) of \(Self.abortRows) did not fail the copy")
        }
        for part in ["aborted_load", "label", "id=\(bad)"] where !message.contains(part) {
            throw ConformanceFailure("the error does not name \(part): \(message)")
        }
        guard !message.contains("\n") else { throw ConformanceFailure("the error is not one line: \(message)") }
        let after = try Self.readAll(dst, name, keyRange: KeyRange(key: ["id"]))
        try expectEqual(after, before, "the target after the failed load", names: ["id", "label", "n"])
        // The connection is usable: a new transaction writes and reads back.
        try dst.begin()
        let w = try dst.writer(into: try dst.describe(name), columns: strict)
        try w.write(RowBatch(rows: [[.int(1), .text("after"), .int(1)]], types: strict.map(\.logicalType)))
        try w.finish()
        try dst.commit()
        guard try dst.countRows(name) == 4 else { throw ConformanceFailure("the write after the failed load did not land") }
    }

    /// A table of large values reads in batches bounded by bytes, not by the row limit asked for:
    /// 12 rows of 1.5 MB with a row limit of 1,000 come in more than two batches, none much
    /// over `RowBatch.byteLimit`.
    func batchesByBytes() throws {
        let db = try freshDatabase()
        defer { db.close() }
        let columns = [col("id", .int64, nullable: false), col("doc", .text), col("img", .binary(maxLength: nil))]
        let schema = makeSchema("large_values", columns: columns, primaryKey: ["id"])
        let text = String(repeating: "Ferry ✓ ", count: 100_000)  // 1 MB
        let blob = [UInt8](repeating: 0xAB, count: 500_000)
        try load(db, schema, [])
        for i in 0..<12 {
            try db.begin()
            let w = try db.writer(into: try db.describe(schema.name), columns: columns)
            try w.write(RowBatch(rows: [[.int(Int64(i)), .text(text), .binary(blob)]], types: columns.map(\.logicalType)))
            try w.finish()
            try db.commit()
        }
        let reader = try db.reader(table: try db.describe(schema.name), columns: columns, keyRange: nil, batchSize: 1000)
        defer { reader.close() }
        var batches = 0
        var rows = 0
        while let b = try reader.next() {
            batches += 1
            rows += b.count
            guard b.byteSize < RowBatch.byteLimit + 2_000_000 else {
                throw ConformanceFailure("a batch of \(b.count) rows holds \(b.byteSize) bytes, beyond the \(RowBatch.byteLimit)-byte limit plus one row")
            }
        }
        guard rows == 12 else { throw ConformanceFailure("\(rows) of 12 large rows read") }
        guard batches > 2 else { throw ConformanceFailure("12 rows of 1.5 MB came in \(batches) batches: batches are not bounded by bytes") }
    }

    // MARK: Fixtures

    /// A column per logical type, with the values each must carry.
    public static let typeSamples: [(name: String, type: LogicalType, values: [Value])] = {
        let big = String(repeating: "Ferry ✓ 😀 ", count: 80_000)
        return [
            ("c_bool", .boolean, [.bool(true), .bool(false)]),
            ("c_i16", .int16, [.int(Int64(Int16.min)), .int(Int64(Int16.max))]),
            ("c_i32", .int32, [.int(Int64(Int32.min)), .int(Int64(Int32.max))]),
            ("c_i64", .int64, [.int(Int64.min), .int(Int64.max)]),
            ("c_dec", .decimal(precision: 38, scale: 10),
             [.decimal("1234567890123456789012345678.0123456789"), .decimal("-0.0000000001")]),
            ("c_f32", .float32, [.double(Double(Float.greatestFiniteMagnitude)), .double(Double(Float.leastNonzeroMagnitude))]),
            ("c_f64", .float64, [.double(.infinity), .double(Double.leastNonzeroMagnitude)]),
            ("c_f64b", .float64, [.double(-.infinity), .double(.greatestFiniteMagnitude)]),
            ("c_text", .text, [.text("& < > ' \" \\ \t\r\n é 中文 😀 \u{1}\u{7f}"), .text(big)]),
            ("c_vchar", .text(maxLength: 40, fixed: false), [.text("Ünïcødé"), .text("]]> &amp; <v>")]),
            ("c_bin", .binary(maxLength: nil), [.binary([0, 1, 0, 255, 0]), .binary(Array(repeating: 0, count: 70_000))]),
            ("c_date", .date, [.date(Temporal.days(year: 1, month: 1, day: 1)), .date(Temporal.days(year: 9999, month: 12, day: 31))]),
            ("c_time", .time(precision: 6), [.time(0), .time(Temporal.microsPerDay - 1)]),
            ("c_ts", .timestamp(precision: 6, timeZone: false),
             [.timestamp(-2_208_988_800_000_001), .timestamp(4_102_444_800_123_456)]),
            ("c_tstz", .timestamp(precision: 6, timeZone: true), [.timestamp(0), .timestamp(1_700_000_000_000_001)]),
            ("c_uuid", .uuid, [.uuid(Array(0..<16)), .uuid(Array(repeating: 255, count: 16))]),
            ("c_json", .json, [.json("{\"a\": [1, 2.50, {\"b\": \"é😀\"}], \"c\": null}"), .json("12.30")]),
            ("c_enum", .enumeration(labels: ["small", "medium", "large"]), [.text("small"), .text("large")]),
        ]
    }()

    func makeSchema(_ name: String, columns: [Column], primaryKey: [String] = [], uniqueKeys: [[String]] = []) -> TableSchema {
        TableSchema(name: TableName(name), engine: Engine("conformance"), columns: columns, primaryKey: primaryKey, uniqueKeys: uniqueKeys)
    }

    func col(_ name: String, _ type: LogicalType, nullable: Bool = true, serial: SerialKind? = nil) -> Column {
        Column(name: name, nativeType: type.description, logicalType: type, isNullable: nullable, serial: serial)
    }

    /// Creates `schema` in `db` and writes `rows` in one transaction.
    func load(_ db: any Connection, _ schema: TableSchema, _ rows: [[Value]]) throws {
        try db.begin()
        do {
            let created = try db.createTable(schema, named: schema.name)
            let writer = try db.writer(into: created, columns: schema.columns)
            if !rows.isEmpty {
                try writer.write(RowBatch(rows: rows, types: schema.columns.map(\.logicalType)))
            }
            try writer.finish()
            try db.commit()
        } catch {
            try? db.rollback()
            // What the copy engine does where DDL is not transactional (MySQL).
            if !db.dialect.supportsTransactionalDDL { try? db.dropTable(schema.name) }
            throw error
        }
    }

    /// Reads every row of `table` back as values, for the given columns.
    public static func readAll(_ db: any Connection, _ table: TableName, columns: [Column]? = nil, keyRange: KeyRange? = nil, batchSize: Int = 1000) throws -> [[Value]] {
        let schema = try db.describe(table)
        let cols = columns ?? schema.columns
        let reader = try db.reader(table: schema, columns: cols, keyRange: keyRange, batchSize: batchSize)
        defer { reader.close() }
        var rows: [[Value]] = []
        let types = cols.map(\.logicalType)
        while let batch = try reader.next() {
            guard !batch.isEmpty else { throw ConformanceFailure("reader returned an empty batch") }
            for r in 0..<batch.count { rows.append(batch.row(r, types: types)) }
        }
        return rows
    }

    func expectEqual(_ got: [[Value]], _ want: [[Value]], _ what: String, names: [String]) throws {
        guard got.count == want.count else { throw ConformanceFailure("\(what): \(got.count) rows read, \(want.count) written") }
        for (r, (g, w)) in zip(got, want).enumerated() {
            for (c, (gv, wv)) in zip(g, w).enumerated() where gv != wv {
                throw ConformanceFailure("\(what): row \(r) column \(names[c]): wrote \(wv), read \(gv)")
            }
        }
    }

    // MARK: Checks

    func everyTypeRoundTrips() throws {
        let db = try freshDatabase()
        defer { db.close() }
        var samples = Self.typeSamples
        if !options.keepsInfinity {
            samples = samples.map { s in
                (s.name, s.type, s.values.map { v in
                    if case .double(let d) = v, d.isInfinite { return .double(d < 0 ? -1.7976931348623157e308 : 2.2250738585072014e-308) }
                    return v
                })
            }
        }
        if options.keepsNegativeZero { samples.append(("c_negzero", .float64, [.double(-0.0), .double(0.0)])) }
        if options.keepsNaN { samples.append(("c_nan", .float64, [.double(.nan), .double(1)])) }
        let columns = [col("id", .int64, nullable: false)] + samples.map { col($0.name, $0.type) }
        let schema = makeSchema("types", columns: columns, primaryKey: ["id"])
        var rows: [[Value]] = []
        for i in 0..<2 { rows.append([.int(Int64(i))] + samples.map { $0.values[i] }) }
        rows.append([.int(2)] + samples.map { _ in .null })
        try load(db, schema, rows)
        let got = try Self.readAll(db, schema.name, columns: columns).sorted { $0[0].description < $1[0].description }
        try expectEqual(got, rows, "types", names: columns.map(\.name))
        // The driver must say what it would refuse rather than change it.
        if !options.keepsNegativeZero || !options.keepsNaN || !options.keepsInfinity {
            for (label, value, kept) in [("-0.0", Value.double(-0.0), options.keepsNegativeZero), ("NaN", .double(.nan), options.keepsNaN),
                                         ("infinity", .double(.infinity), options.keepsInfinity)] where !kept {
                let s = makeSchema("refused", columns: [col("f", .float64)])
                do {
                    try load(db, s, [[value]])
                    throw ConformanceFailure("\(label) was accepted although the driver says it cannot keep it")
                } catch is ConformanceFailure {
                    throw ConformanceFailure("\(label) was accepted although the driver says it cannot keep it")
                } catch {
                    if try db.tableExists(s.name) { throw ConformanceFailure("a failed load left table 'refused' behind") }
                }
            }
        }
    }

    /// What `planTable` says (the DDL `--dry-run` shows, the table writers are given) is what
    /// `createTable` makes: every column with the planned logical type, the keys; planning runs
    /// nothing; a named enum type is created by a statement of the plan, once.
    func plannedTable() throws {
        let db = try freshDatabase()
        defer { db.close() }
        let columns = [col("id", .int64, nullable: false, serial: .autoincrement)] + Self.typeSamples.map { col($0.name, $0.type) }
        let schema = makeSchema("planned", columns: columns, primaryKey: ["id"], uniqueKeys: [["c_vchar"]])
        let planned = try db.planTable(schema, named: schema.name)
        guard try !db.tableExists(schema.name) else { throw ConformanceFailure("planning created the table") }
        guard planned.schema.name == schema.name, planned.schema.columns.map(\.name) == columns.map(\.name) else {
            throw ConformanceFailure("the planned table is \(planned.schema.name) with columns \(planned.schema.columns.map(\.name))")
        }
        if db.dialect.enumSyntax == .namedType {
            guard planned.statements.count == 2, planned.statements[0].uppercased().hasPrefix("CREATE TYPE") else {
                throw ConformanceFailure("the plan does not create the enum type first: \(planned.statements)")
            }
        }
        try db.begin()
        try db.createTable(planned)
        try db.commit()
        let described = try db.describe(schema.name)
        guard described.primaryKey == ["id"], described.uniqueKeys == [["c_vchar"]] else {
            throw ConformanceFailure("keys: planned [id] and [[c_vchar]], described \(described.primaryKey) and \(described.uniqueKeys)")
        }
        for p in planned.schema.columns {
            guard let d = described.column(named: p.name) else { throw ConformanceFailure("column \(p.name) was planned, not created") }
            guard d.isNullable == p.isNullable else { throw ConformanceFailure("column \(p.name): nullable \(d.isNullable), planned \(p.isNullable)") }
            if options.describesPlannedTypes, d.logicalType != p.logicalType {
                throw ConformanceFailure("column \(p.name): planned as \(p.logicalType) (\(p.nativeType)), described as \(d.logicalType) (\(d.nativeType))")
            }
        }
        // Planned again, with the enum type now there: only the table is created.
        let again = try db.planTable(schema, named: TableName("planned_again"))
        guard again.statements.count == 1 else { throw ConformanceFailure("a second plan creates the enum type again: \(again.statements)") }
    }

    func describeFindsKeys() throws {
        let db = try freshDatabase()
        defer { db.close() }
        let schema = makeSchema(
            "keyed",
            columns: [col("id", .int64, nullable: false, serial: .autoincrement), col("code", .text(maxLength: 20, fixed: false), nullable: false),
                      col("a", .int32, nullable: false), col("b", .int32, nullable: false), col("note", .text)],
            primaryKey: ["id"], uniqueKeys: [["code"], ["b", "a"]])
        try load(db, schema, [])
        let listed = try db.listTables().map(\.name.name)
        guard listed.contains("keyed") else { throw ConformanceFailure("listTables() does not list 'keyed': \(listed)") }
        let d = try db.describe(TableName("keyed"))
        guard d.primaryKey == ["id"] else { throw ConformanceFailure("primary key \(d.primaryKey), expected [id]") }
        guard Set(d.uniqueKeys) == Set([["code"], ["b", "a"]]) else {
            throw ConformanceFailure("unique keys \(d.uniqueKeys), expected [code] and [b, a] in that column order")
        }
        guard d.column(named: "id")?.isSerial == true else { throw ConformanceFailure("column id is not reported as serial") }
        guard d.column(named: "code")?.isNullable == false, d.column(named: "note")?.isNullable == true else {
            throw ConformanceFailure("nullability not reported")
        }
        guard d.columns.map(\.name) == ["id", "code", "a", "b", "note"] else {
            throw ConformanceFailure("columns \(d.columns.map(\.name)) not in declared order")
        }
        guard d.preferredKey?.columns == ["id"] else { throw ConformanceFailure("preferred key \(String(describing: d.preferredKey))") }
    }

    func nullsAndEmpties() throws {
        let db = try freshDatabase()
        defer { db.close() }
        let columns = [col("id", .int64, nullable: false), col("t", .text), col("b", .binary(maxLength: nil))]
        let schema = makeSchema("empties", columns: columns, primaryKey: ["id"])
        let rows: [[Value]] = [[.int(1), .text(""), .binary([])], [.int(2), .null, .null], [.int(3), .text(" "), .binary([0])]]
        try load(db, schema, rows)
        // A batch whose text and binary columns hold only empty values: their arenas have no
        // storage at all, and an empty value must still not become NULL.
        var lone = RowBatch(types: columns.map(\.logicalType), capacity: 0)
        for (i, v) in [Value.int(4), .text(""), .binary([])].enumerated() { try v.append(to: &lone.columns[i], as: columns[i].logicalType) }
        try db.begin()
        let w = try db.writer(into: try db.describe(schema.name), columns: columns)
        try w.write(lone)
        try w.finish()
        try db.commit()
        let got = try Self.readAll(db, schema.name).sorted { $0[0].description < $1[0].description }
        try expectEqual(got, rows + [[.int(4), .text(""), .binary([])]], "empties", names: columns.map(\.name))
    }

    func emptyTable() throws {
        let db = try freshDatabase()
        defer { db.close() }
        let schema = makeSchema("nothing", columns: [col("id", .int64)])
        try load(db, schema, [])
        let reader = try db.reader(table: try db.describe(schema.name), columns: schema.columns, keyRange: nil, batchSize: 10)
        if try reader.next() != nil { throw ConformanceFailure("an empty table produced a batch") }
        guard try db.countRows(schema.name) == 0 else { throw ConformanceFailure("countRows of an empty table is not 0") }
    }

    func quotedIdentifiers() throws {
        let db = try freshDatabase()
        defer { db.close() }
        let names = ["select", "a b", "q\"uote", "it's", "naïve.dot", "MixedCase", "`tick`", "[br]"]
        let columns = names.map { col($0, .text(maxLength: 100, fixed: false)) }
        let schema = makeSchema("we\"ird tab.le; drop", columns: columns, primaryKey: ["select"])
        let rows: [[Value]] = [names.map { .text("v-" + $0) }]
        try load(db, schema, rows)
        let d = try db.describe(schema.name)
        guard d.columns.map(\.name) == names else { throw ConformanceFailure("column names came back as \(d.columns.map(\.name))") }
        guard d.primaryKey == ["select"] else { throw ConformanceFailure("primary key came back as \(d.primaryKey)") }
        try expectEqual(try Self.readAll(db, schema.name), rows, "quoted", names: names)
    }

    func writeModes() throws {
        let src = try freshDatabase()
        defer { src.close() }
        let dst = try freshDatabase()
        defer { dst.close() }
        let columns = [col("id", .int64, nullable: false), col("name", .text)]
        let schema = makeSchema("modes", columns: columns, primaryKey: ["id"])
        let first: [[Value]] = [[.int(1), .text("one")], [.int(2), .text("two")]]
        try load(src, schema, first)
        let engine = CopyEngine(registry: DriverRegistry())
        let quiet = ProgressReporter(style: .quiet) { _ in }

        func copy(_ mode: WriteMode) throws -> CopySummary {
            var o = CopyOptions()
            o.mode = mode
            o.tables = [TableName("modes")]
            o.batchSize = 1
            let plan = try engine.plan(source: src, target: dst, options: o)
            return engine.run(plan, source: src, target: dst, options: o, progress: quiet)
        }
        func target() throws -> [[Value]] {
            try Self.readAll(dst, TableName("modes")).sorted { $0[0].description < $1[0].description }
        }

        guard try copy(.create).ok else { throw ConformanceFailure("create failed") }
        try expectEqual(try target(), first, "create", names: ["id", "name"])
        do {
            _ = try copy(.create)
            throw ConformanceFailure("create into an existing table did not fail")
        } catch let e as FerryError {
            guard case .targetTableExists = e else { throw ConformanceFailure("create into an existing table: \(e)") }
        }
        try expectEqual(try target(), first, "after refused create", names: ["id", "name"])

        // append: duplicates of the primary key fail and leave the target as it was.
        let failed = try copy(.append)
        guard !failed.ok, let message = failed.tables.first?.error else {
            throw ConformanceFailure("append of duplicate keys did not fail")
        }
        guard message.contains("modes") else { throw ConformanceFailure("the error does not name the table: \(message)") }
        try expectEqual(try target(), first, "after failed append", names: ["id", "name"])

        // replace: the target becomes the source's new content.
        let second: [[Value]] = [[.int(3), .text("three")]]
        try src.begin()
        try src.dropTable(TableName("modes"))
        try src.commit()
        try load(src, schema, second)
        guard try copy(.replace).ok else { throw ConformanceFailure("replace failed") }
        try expectEqual(try target(), second, "replace", names: ["id", "name"])
        let leftovers = try dst.listTables().map(\.name.name).filter { $0 != "modes" }
        guard leftovers.isEmpty else { throw ConformanceFailure("replace left tables behind: \(leftovers)") }

        // append: new keys are added.
        try src.begin()
        try src.dropTable(TableName("modes"))
        try src.commit()
        try load(src, schema, first)
        guard try copy(.append).ok else { throw ConformanceFailure("append failed") }
        try expectEqual(try target(), first + second, "append", names: ["id", "name"])
    }

    func serialCounter() throws {
        let src = try freshDatabase()
        defer { src.close() }
        let dst = try freshDatabase()
        defer { dst.close() }
        let columns = [col("id", .int64, nullable: false, serial: .autoincrement), col("name", .text)]
        let schema = makeSchema("counted", columns: columns, primaryKey: ["id"])
        try load(src, schema, [[.int(1), .text("a")], [.int(2), .text("b")], [.int(41), .text("c")]])
        let engine = CopyEngine(registry: DriverRegistry())
        var o = CopyOptions()
        o.tables = [TableName("counted")]
        let plan = try engine.plan(source: src, target: dst, options: o)
        let summary = engine.run(plan, source: src, target: dst, options: o, progress: ProgressReporter(style: .quiet) { _ in })
        guard summary.ok else { throw ConformanceFailure("copy failed: \(summary.tables.first?.error ?? "")") }
        // Insert without the key: the target's own counter must give 42.
        try dst.begin()
        let w = try dst.writer(into: try dst.describe(TableName("counted")), columns: [columns[1]])
        try w.write(RowBatch(rows: [[.text("next")]], types: [.text]))
        try w.finish()
        try dst.commit()
        let rows = try Self.readAll(dst, TableName("counted"))
        guard let next = rows.first(where: { $0[1] == .text("next") }) else { throw ConformanceFailure("inserted row not found") }
        guard next[0] == .int(42) else { throw ConformanceFailure("the next generated key is \(next[0]), expected 42") }
    }

    func missingTable() throws {
        let db = try freshDatabase()
        defer { db.close() }
        do {
            _ = try db.describe(TableName("no_such_table"))
            throw ConformanceFailure("describe of a missing table did not fail")
        } catch let e as FerryError {
            guard case .tableNotFound = e else { throw ConformanceFailure("describe of a missing table: \(e)") }
            guard e.description.contains("no_such_table") else { throw ConformanceFailure("the error does not name the table: \(e)") }
        }
        guard try !db.tableExists(TableName("no_such_table")) else { throw ConformanceFailure("tableExists says yes") }
    }

    func upsertAndDelete() throws {
        let db = try freshDatabase()
        defer { db.close() }
        let columns = [col("k1", .int32, nullable: false), col("k2", .text(maxLength: 10, fixed: false), nullable: false),
                       col("price", .decimal(precision: 12, scale: 2)), col("note", .text)]
        let schema = makeSchema("keyed_changes", columns: columns, primaryKey: ["k1", "k2"])
        try load(db, schema, [[.int(1), .text("a"), .decimal("1.00"), .text("one")], [.int(2), .text("b"), .decimal("2.00"), .text("two")],
                              [.int(3), .text("c"), .decimal("3.00"), .null]])
        let types = columns.map(\.logicalType)
        try db.begin()
        let described = try db.describe(schema.name)
        let upserted = try db.upsertRows(
            into: described, columns: columns, key: ["k1", "k2"],
            rows: RowBatch(rows: [[.int(2), .text("b"), .decimal("20.50"), .null], [.int(4), .text("d"), .decimal("4.00"), .text("it's new")]], types: types))
        let deleted = try db.deleteRows(
            from: described, key: Array(columns.prefix(2)),
            keys: RowBatch(rows: [[.int(1), .text("a")], [.int(99), .text("zz")], [.int(3), .text("x")]], types: [.int32, .text(maxLength: 10, fixed: false)]))
        try db.commit()
        // A connection that stages keyed writes (the XML service) counts them at commit.
        let deletedCount = Int64(deleted) + (db.committedCounts?.deleted ?? 0)
        guard upserted == 2 else { throw ConformanceFailure("upsertRows returned \(upserted), expected 2") }
        guard deletedCount == 1 else { throw ConformanceFailure("deleteRows deleted \(deletedCount), expected 1 (one key matched)") }
        let got = try Self.readAll(db, schema.name, columns: columns).sorted { $0[0].description < $1[0].description }
        try expectEqual(got, [[.int(2), .text("b"), .decimal("20.50"), .null], [.int(3), .text("c"), .decimal("3.00"), .null],
                              [.int(4), .text("d"), .decimal("4.00"), .text("it's new")]], "after upsert and delete", names: columns.map(\.name))
    }

    /// Key types a keyed page walk must handle, each with a generator of distinct values
    /// (row i → the i-th key, in no particular order) — every logical type usable in a key.
    public static let walkKeys: [(label: String, columns: [(String, LogicalType)], key: @Sendable (Int) -> [Value])] = [
        ("int64", [("k", .int64)], { i in [.int(Int64(i * 7919 % 1_000_003) - 500_000)] }),
        ("int32", [("k", .int32)], { i in [.int(Int64(i) * 31 - 4000)] }),
        ("decimal", [("k", .decimal(precision: 12, scale: 3))], { i in [.decimal(DecimalText.normalized(String(format: "%.3f", Double(i) * 1.25 - 150)))] }),
        ("text", [("k", .text(maxLength: 40, fixed: false))], { i in
            // Mixed case, digits of unequal length and non-ASCII: orders differ between collations.
            let stems = ["alpha", "Beta", "gamma", "Émile", "zeta", "Zulu", "ß", "日本"]
            return [.text("\(stems[i % stems.count])-\(i)")]
        }),
        ("binary", [("k", .binary(maxLength: 16))], { i in [.binary([UInt8(i % 256), UInt8(i / 256), 0, UInt8(255 - i % 256)])] }),
        ("uuid", [("k", .uuid)], { i in
            var b = [UInt8](repeating: 0, count: 16)
            let x = UInt64(i + 1) &* 0x9E37_79B9_7F4A_7C15
            for j in 0..<8 { b[j] = UInt8(truncatingIfNeeded: x >> (8 * UInt64(j))); b[8 + j] = b[j] ^ 0x5A }
            return [.uuid(b)]
        }),
        ("date", [("k", .date)], { i in [.date(Int64(i) * 3 - 800)] }),
        ("time", [("k", .time(precision: 6))], { i in [.time(Int64(i) * 97_000_001 % Temporal.microsPerDay)] }),
        ("timestamp", [("k", .timestamp(precision: 6, timeZone: false))], { i in [.timestamp(Int64(i) * 86_400_000_123 - 9_000_000_000_000)] }),
        ("timestamptz", [("k", .timestamp(precision: 6, timeZone: true))], { i in [.timestamp(Int64(i) * 3_600_000_001 + 1_600_000_000_000_000)] }),
        ("boolean+int (composite)", [("flag", .boolean), ("n", .int32)], { i in [.bool(i % 2 == 0), .int(Int64(i / 2))] }),
        ("int+text (composite)", [("a", .int32), ("b", .text(maxLength: 20, fixed: false))], { i in [.int(Int64(i % 5)), .text("k\(i)")] }),
    ]

    /// Rows in the keyed-walk tables: more than two pages of `walkPage` rows.
    public static let walkRows = 230
    public static let walkPage = 50

    /// Creates one table per key type in `walkKeys` (`walk_0`, `walk_1`, …) holding `walkRows`
    /// rows loaded in no key order; returns the table names with the key-type labels.
    public func loadWalkTables(_ db: any Connection) throws -> [(table: TableName, label: String)] {
        var out: [(TableName, String)] = []
        for (n, spec) in Self.walkKeys.enumerated() {
            let columns = spec.columns.map { col($0.0, $0.1, nullable: false) } + [col("row_no", .int32, nullable: false), col("note", .text)]
            let schema = makeSchema("walk_\(n)", columns: columns, primaryKey: spec.columns.map(\.0))
            // A stride coprime with the row count: rows go in out of key order.
            let rows: [[Value]] = (0..<Self.walkRows).map { j in
                let i = (j * 97) % Self.walkRows
                return spec.key(i) + [.int(Int64(i)), .text("row \(i)")]
            }
            try load(db, schema, rows)
            out.append((schema.name, spec.label))
        }
        return out
    }

    /// Walks `table` page by page by its key (`after` = the last key read, `limit` = page) and
    /// checks it returns every row exactly once, in the order of one ordered read of the table.
    public static func checkKeyedWalk(_ db: any Connection, _ table: TableName, label: String, page: Int = walkPage) throws {
        let schema = try db.describe(table)
        guard let key = schema.preferredKey?.columns, !key.isEmpty else { throw ConformanceFailure("\(label): \(table) has no key") }
        let keyIdx = key.compactMap { k in schema.columns.firstIndex { $0.name == k } }
        let ordered = try readAll(db, table, keyRange: KeyRange(key: key))
        var walked: [[Value]] = []
        var after: [Value]?
        var pages = 0
        while true {
            let got = try readAll(db, table, keyRange: KeyRange(key: key, after: after, limit: page), batchSize: 17)
            pages += 1
            walked += got
            if got.count < page { break }
            guard let last = got.last else { break }
            let next = keyIdx.map { last[$0] }
            if let after, after == next { throw ConformanceFailure("\(label): page \(pages) did not advance past \(next)") }
            after = next
            if pages > walkRows { throw ConformanceFailure("\(label): the walk does not end (\(pages) pages)") }
        }
        guard ordered.count == walkRows else { throw ConformanceFailure("\(label): an ordered read returned \(ordered.count) rows, \(walkRows) were written") }
        let rowNo = schema.columns.firstIndex { $0.name == "row_no" } ?? 0
        let seen = Set(walked.map { $0[rowNo].description })
        guard walked.count == walkRows, seen.count == walkRows else {
            throw ConformanceFailure("\(label): the keyed walk returned \(walked.count) rows (\(seen.count) distinct) of \(walkRows) in \(pages) pages")
        }
        for (i, (w, o)) in zip(walked, ordered).enumerated() where w != o {
            throw ConformanceFailure("\(label): row \(i) of the walk is \(w), the ordered read has \(o)")
        }
        guard pages > 2 else { throw ConformanceFailure("\(label): only \(pages) pages walked") }
    }

    func keyedWalks() throws {
        let db = try freshDatabase()
        defer { db.close() }
        for (table, label) in try loadWalkTables(db) {
            try Self.checkKeyedWalk(db, table, label: label)
        }
    }

    func keyRanges() throws {
        let db = try freshDatabase()
        defer { db.close() }
        let columns = [col("k1", .int32, nullable: false), col("k2", .text(maxLength: 10, fixed: false), nullable: false), col("v", .float64)]
        let schema = makeSchema("ranged", columns: columns, primaryKey: ["k1", "k2"])
        var rows: [[Value]] = []
        for i in 0..<5 { for s in ["a", "b"] { rows.append([.int(Int64(i)), .text(s), .double(Double(i) + 0.5)]) } }
        try load(db, schema, rows.reversed())
        let range = KeyRange(key: ["k1", "k2"], after: [.int(1), .text("a")], upTo: [.int(3), .text("a")])
        let got = try Self.readAll(db, schema.name, keyRange: range, batchSize: 2)
        try expectEqual(got, Array(rows[3...6]), "key range (1,a) < key <= (3,a)", names: columns.map(\.name))
    }
}

/// What a conformance check found wrong.
public struct ConformanceFailure: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
