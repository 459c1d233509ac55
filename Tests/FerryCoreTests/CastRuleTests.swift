@testable import FerryCore
import XCTest

final class CastRuleTests: XCTestCase {
    private func rule(_ text: String) throws -> CastRule { try CastRule(parsing: text, origin: "test") }

    func testParsesTheIssueExamples() throws {
        var r = try rule("type int[] to text")
        XCTAssertEqual(r.subject, .type("int[]"))
        XCTAssertEqual(r.target, .logical(.text))
        XCTAssertEqual(r.guards, [])

        r = try rule("column film.fulltext to skip")
        XCTAssertEqual(r.subject, .column(table: TableName("film"), column: "fulltext"))
        XCTAssertEqual(r.target, .skip)

        r = try rule("type tinyint when width 1 to boolean")
        XCTAssertEqual(r.guards, [.compare(.width, .equal, 1)])
        XCTAssertEqual(r.target, .logical(.boolean))

        r = try rule("type date to date using zero-dates-to-null")
        XCTAssertEqual(r.transforms, [.zeroDatesToNull])
        XCTAssertEqual(r.target, .logical(.date))

        r = try rule("  type   double precision  when not null and precision>=3 and unsigned to decimal(12, 2) using trim, right-trim ")
        XCTAssertEqual(r.subject, .type("double precision"))
        XCTAssertEqual(r.guards, [.nullable(false), .compare(.precision, .greaterOrEqual, 3), .unsigned(true)])
        XCTAssertEqual(r.target, .logical(.decimal(precision: 12, scale: 2)))
        XCTAssertEqual(r.transforms, [.trim, .rightTrim])

        r = try rule("type timestamp with time zone when precision > 3 to timestamp(3) with time zone")
        XCTAssertEqual(r.subject, .type("timestamp with time zone"))
        XCTAssertEqual(r.target, .logical(.timestamp(precision: 3, timeZone: true)))

        r = try rule("column public.\"my.table\".\"Col\" to varchar(20)")
        XCTAssertEqual(r.subject, .column(table: TableName(schema: "public", "my.table"), column: "Col"))
        XCTAssertEqual(r.target, .native("varchar(20)"))

        r = try rule("type bigint when unsigned to bigint unsigned")
        XCTAssertEqual(r.target, .native("bigint unsigned"))
    }

    func testRefusesBadRulesWithOneLine() {
        let bad: [(String, String)] = [
            ("", "empty"),
            ("typ int to text", "not 'type' or 'column'"),
            ("type int text", "no 'to TARGET'"),
            ("type int to", "names no target"),
            ("type when serial to text", "names no type"),
            ("type int when size 3 to text", "unknown guard 'size 3'"),
            ("type int when length > x to text", "needs a whole number"),
            ("type int to text using upcase", "unknown transform 'upcase'"),
            ("type int to skip using trim", "takes no transform"),
            ("column film to skip", "is not TABLE.COLUMN"),
            ("column a.b when serial to skip", "no guard"),
            ("type int to text; drop table users", "plain native type name"),
            ("type int to varchar(10) -- x", "plain native type name"),
            ("type int to \"quoted\"", "plain native type name"),
        ]
        for (text, expected) in bad {
            XCTAssertThrowsError(try rule(text), text) { e in
                let message = "\(e)"
                XCTAssertTrue(message.contains(expected), "\(text): \(message)")
                XCTAssertFalse(message.contains("\n"))
                XCTAssertTrue((e as? FerryError)?.isUsage == true)
            }
        }
    }

    func testMatchingFoldsSpellingsAndChecksGuards() throws {
        let t = TableName(schema: "public", "film")
        func col(_ native: String, _ logical: LogicalType, serial: SerialKind? = nil, nullable: Bool = true) -> Column {
            Column(name: "c", nativeType: native, logicalType: logical, isNullable: nullable, serial: serial)
        }
        XCTAssertTrue(try rule("type int to text").matches(col("integer", .int32), in: t))
        XCTAssertTrue(try rule("type int4 to text").matches(col("int(11)", .int32), in: t))
        XCTAssertTrue(try rule("type int[] to text").matches(col("integer[]", .unsupported(native: "integer[]")), in: t))
        XCTAssertFalse(try rule("type int[] to text").matches(col("integer", .int32), in: t))
        XCTAssertTrue(try rule("type varchar to text").matches(col("character varying(20)", .text(maxLength: 20, fixed: false)), in: t))
        XCTAssertTrue(try rule("type timestamptz to text").matches(col("timestamp(3) with time zone", .timestamp(precision: 3, timeZone: true)), in: t))
        XCTAssertFalse(try rule("type timestamptz to text").matches(col("timestamp without time zone", .timestamp(precision: nil, timeZone: false)), in: t))

        let width1 = try rule("type tinyint when width 1 to boolean")
        XCTAssertTrue(width1.matches(col("tinyint(1)", .boolean), in: t))
        XCTAssertFalse(width1.matches(col("tinyint(4)", .int16), in: t))
        XCTAssertTrue(try rule("type tinyint(4) to boolean").matches(col("tinyint(4)", .int16), in: t))
        XCTAssertFalse(try rule("type tinyint(4) to boolean").matches(col("tinyint(1)", .boolean), in: t))

        let unsigned = try rule("type bigint when unsigned to text")
        XCTAssertTrue(unsigned.matches(col("bigint(20) unsigned", .decimal(precision: 20, scale: 0)), in: t))
        XCTAssertFalse(unsigned.matches(col("bigint(20)", .int64), in: t))
        XCTAssertTrue(try rule("type int when signed to text").matches(col("int(11)", .int32), in: t))

        let long = try rule("type varchar when length > 255 to text")
        XCTAssertTrue(long.matches(col("varchar(1000)", .text(maxLength: 1000, fixed: false)), in: t))
        XCTAssertFalse(long.matches(col("varchar(255)", .text(maxLength: 255, fixed: false)), in: t))
        XCTAssertFalse(long.matches(col("varchar", .text), in: t))  // unknown length: the guard does not hold

        let wide = try rule("type numeric when precision > 18 and scale = 0 to text")
        XCTAssertTrue(wide.matches(col("numeric(20,0)", .decimal(precision: 20, scale: 0)), in: t))
        XCTAssertFalse(wide.matches(col("numeric(20,2)", .decimal(precision: 20, scale: 2)), in: t))
        XCTAssertFalse(wide.matches(col("numeric(10,0)", .decimal(precision: 10, scale: 0)), in: t))

        XCTAssertTrue(try rule("type integer when serial to int64").matches(col("integer", .int32, serial: .sequence), in: t))
        XCTAssertFalse(try rule("type integer when serial to int64").matches(col("integer", .int32), in: t))
        XCTAssertTrue(try rule("type integer when not serial to int64").matches(col("integer", .int32), in: t))
        XCTAssertTrue(try rule("type text when not null to text(10)").matches(col("text", .text, nullable: false), in: t))
        XCTAssertFalse(try rule("type text when not null to text(10)").matches(col("text", .text), in: t))

        XCTAssertTrue(try rule("column film.c to skip").matches(col("text", .text), in: t))
        XCTAssertTrue(try rule("column FILM.C to skip").matches(col("text", .text), in: t))
        XCTAssertTrue(try rule("column public.film.c to skip").matches(col("text", .text), in: t))
        XCTAssertFalse(try rule("column other.film.c to skip").matches(col("text", .text), in: t))
        XCTAssertFalse(try rule("column actor.c to skip").matches(col("text", .text), in: t))
    }

    func testResolutionFirstMatchWinsAndReportsUnusedRules() throws {
        let rules = try CastRuleSet.load(
            options: ["column t.a to skip", "type integer to text", "type integer to int16", "type point to json"], files: [])
        let t = TableName("t")
        let a = Column(name: "a", nativeType: "integer", logicalType: .int32)
        let b = Column(name: "b", nativeType: "int4", logicalType: .int32, serial: .sequence)
        let g = Column(name: "g", nativeType: "geometry", logicalType: .unsupported(native: "geometry"))

        let ra = try rules.resolve(a, in: t, engine: Engine("postgres"), target: nil)
        XCTAssertEqual(ra.ruleIndex, 0)
        XCTAssertNil(ra.read)
        XCTAssertTrue(ra.skipReason?.contains("column t.a to skip") == true)

        let rb = try rules.resolve(b, in: t, engine: Engine("postgres"), target: nil)
        XCTAssertEqual(rb.ruleIndex, 1)
        XCTAssertEqual(rb.read?.logicalType, .int32, "a supported type is read as usual and converted")
        XCTAssertEqual(rb.read?.readHints, [])
        XCTAssertEqual(rb.write?.logicalType, .text)
        XCTAssertTrue(rb.converts)
        XCTAssertNil(rb.write?.serial, "a serial cast to text is no longer serial")
        XCTAssertEqual(rb.decision.decidedBy, "cast rule --cast #2 'type integer to text'")

        let rp = try CastRuleSet.load(options: ["type geometry to json"], files: []).resolve(g, in: t, engine: Engine("mysql"), target: nil)
        XCTAssertEqual(rp.read?.readHints, [.jsonForm], "a type without a logical type is read in the engine's JSON form")
        XCTAssertEqual(rp.read?.logicalType, .json)

        let rg = try rules.resolve(g, in: t, engine: Engine("postgres"), target: nil)
        XCTAssertNil(rg.ruleIndex)
        XCTAssertEqual(rg.decision.decidedBy, "postgres type map")
        XCTAssertTrue(rg.skipReason?.contains("--cast 'type geometry to text'") == true)

        XCTAssertEqual(rules.unused([0, 1]), [
            "cast rule --cast #3 'type integer to int16' matched no column",
            "cast rule --cast #4 'type point to json' matched no column",
        ])
    }

    func testCastsFile() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-casts-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("casts.txt")
        try "# pagila\n\ntype tsvector to text,\n-- arrays\ntype text[] to json;\n".write(to: file, atomically: true, encoding: .utf8)
        let rules = try CastRuleSet.load(options: ["column film.fulltext to skip"], files: [file.path])
        XCTAssertEqual(rules.rules.map(\.origin), ["--cast #1", "\(file.path):3", "\(file.path):5"])
        XCTAssertEqual(rules.rules[2].target, .logical(.json))

        try "type tsvector to text\ntype x to\n".write(to: file, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try CastRuleSet.load(options: [], files: [file.path])) { e in
            XCTAssertTrue("\(e)".contains("casts.txt:2"), "\(e)")
        }
        XCTAssertThrowsError(try CastRuleSet.load(options: [], files: [dir.appendingPathComponent("missing").path])) { e in
            XCTAssertTrue("\(e)".contains("cannot read --casts file"), "\(e)")
        }
    }

    func testConversionsFollowSQLCast() throws {
        func c(_ v: Value, _ t: LogicalType) throws -> Value { try ValueConversion.convert(v, to: t) }
        XCTAssertEqual(try c(.decimal("2.345"), .decimal(precision: 10, scale: 2)), .decimal("2.35"))
        XCTAssertEqual(try c(.decimal("-2.5"), .decimal(precision: 10, scale: 0)), .decimal("-3"))
        XCTAssertEqual(try c(.decimal("9.999"), .decimal(precision: 10, scale: 2)), .decimal("10.00"))
        XCTAssertEqual(try c(.decimal("-0.001"), .decimal(precision: 10, scale: 2)), .decimal("0.00"))
        XCTAssertEqual(try c(.decimal("1.5"), .decimal(precision: 10, scale: 3)), .decimal("1.5"))
        XCTAssertEqual(try c(.decimal("12.5"), .int32), .int(13))
        XCTAssertEqual(try c(.double(0.1), .decimal(precision: nil, scale: nil)), .decimal("0.1"))
        XCTAssertEqual(try c(.decimal("0.1"), .float64), .double(0.1))
        XCTAssertEqual(try c(.int(7), .text), .text("7"))
        XCTAssertEqual(try c(.text("abcdef"), .text(maxLength: 3, fixed: false)), .text("abc"))
        XCTAssertEqual(try c(.text("😀😀"), .text(maxLength: 1, fixed: false)), .text("😀"))
        XCTAssertEqual(try c(.binary([0, 255]), .text), .text("\\x00ff"))
        XCTAssertEqual(try c(.int(1), .boolean), .bool(true))
        XCTAssertEqual(try c(.text("t"), .boolean), .bool(true))
        XCTAssertEqual(try c(.bool(true), .int16), .int(1))
        XCTAssertEqual(try c(.timestamp(86_400_000_000 + 1_234_567), .date), .date(1))
        XCTAssertEqual(try c(.timestamp(-1), .date), .date(-1))
        XCTAssertEqual(try c(.timestamp(1_234_567), .timestamp(precision: 3, timeZone: false)), .timestamp(1_234_000))
        XCTAssertEqual(try c(.timestamp(-1), .timestamp(precision: 0, timeZone: false)), .timestamp(-1_000_000))
        XCTAssertEqual(try c(.time(1_999_999), .time(precision: 1)), .time(1_900_000))
        XCTAssertEqual(try c(.date(1), .timestamp(precision: nil, timeZone: true)), .timestamp(86_400_000_000))
        XCTAssertEqual(try c(.text("2020-01-02"), .date), .date(Temporal.days(year: 2020, month: 1, day: 2)))
        XCTAssertEqual(try c(.text("550e8400-e29b-41d4-a716-446655440000"), .uuid).canonicalText, "550e8400-e29b-41d4-a716-446655440000")
        XCTAssertEqual(try c(.text("{\"a\": 1}"), .json), .json("{\"a\": 1}"))  // text holding JSON is carried as it is
        XCTAssertEqual(try c(.time(1_000_000), .json), .json("\"00:00:01\""))
        XCTAssertEqual(try c(.binary([34, 10]), .json), .json("\"\\\\x220a\""))
        XCTAssertEqual(try c(.int(5), .json), .json("5"))
        XCTAssertEqual(try c(.null, .int16), .null)

        for (v, t) in [(Value.int(2), LogicalType.boolean), (.int(40_000), .int16), (.text("abc"), .int64), (.text("x"), .date),
                       (.double(.nan), .int64), (.text("1e999x"), .float64), (.date(1), .uuid), (.double(.infinity), .json),
                       (.text("{not json"), .json)] {
            XCTAssertThrowsError(try c(v, t), "\(v) → \(t)") { e in XCTAssertTrue("\(e)".contains("cannot be cast to \(t)"), "\(e)") }
        }
    }

    func testTransforms() throws {
        XCTAssertEqual(CastTransform.tinyintToBoolean.apply(.int(2)), .bool(true))
        XCTAssertEqual(CastTransform.tinyintToBoolean.apply(.int(0)), .bool(false))
        XCTAssertEqual(CastTransform.trim.apply(.text(" \t a b \r\n")), .text("a b"))
        XCTAssertEqual(CastTransform.rightTrim.apply(.text("  ab   ")), .text("  ab"))
        XCTAssertEqual(CastTransform.emptyStringToNull.apply(.text("")), .null)
        XCTAssertEqual(CastTransform.emptyStringToNull.apply(.text(" ")), .text(" "))
        XCTAssertEqual(CastTransform.removeNullCharacters.apply(.text("a\u{0}b")), .text("ab"))
        XCTAssertEqual(CastTransform.trim.apply(.null), .null)
        XCTAssertFalse(CastTransform.trim.accepts(.int32))
        XCTAssertTrue(CastTransform.zeroDatesToNull.accepts(.timestamp(precision: 0, timeZone: false)))
        XCTAssertFalse(CastTransform.zeroDatesToNull.accepts(.text))

        // A whole column, with the failing row reported.
        var col = ColumnBuffer(storage: .bytes)
        for s in ["1", " 2 ", "x"] { col.append(string: s) }
        XCTAssertThrowsError(try ValueConversion.convert(col, from: .text, to: .int32, transforms: [.trim])) { e in
            XCTAssertEqual((e as? BatchRowError)?.row, 2)
        }
        let ok = try ValueConversion.convert(col, from: .text, to: .text(maxLength: 1, fixed: false), transforms: [.trim])
        XCTAssertEqual((0..<3).map { Value(column: ok, row: $0, type: .text) }, [.text("1"), .text("2"), .text("x")])
    }

    /// The buffer-to-buffer fast paths give what the value-by-value path gives, failures included.
    func testFastPathsMatchTheGeneralPath() throws {
        let cases: [(LogicalType, [Value], LogicalType)] = [
            (.int64, [.int(5), .null, .int(-32768), .int(40_000)], .int16),
            (.int32, [.int(7), .null, .int(-1)], .float64),
            (.float32, [.double(1.5), .null, .double(-0.0)], .float64),
            (.decimal(precision: 12, scale: 2), [.decimal("12.30"), .null, .decimal("-0.01"), .decimal("NaN"), .decimal("1e5x")], .float64),
            (.text, [.text("abcdef"), .null, .text(""), .text("😀😀😀"), .text("ab")], .text(maxLength: 2, fixed: false)),
            (.enumeration(labels: ["a"]), [.text("a"), .null], .text),
        ]
        for (from, values, to) in cases {
            var col = ColumnBuffer(storage: from.storage)
            for v in values {
                if case .decimal(let d) = v { col.append(string: d) } else { try v.append(to: &col, as: from) }
            }
            XCTAssertNotNil(try? ValueConversion.convertFast(ColumnBuffer(storage: from.storage), from: from, to: to), "\(from) → \(to) has a fast path")
            var expected: [Value?] = []
            for r in 0..<values.count { expected.append(try? ValueConversion.convert(Value(column: col, row: r, type: from), to: to)) }
            do {
                let fast = try ValueConversion.convert(col, from: from, to: to, transforms: [])
                XCTAssertFalse(expected.contains(nil), "\(from) → \(to): the fast path accepted what the general path refuses")
                XCTAssertEqual((0..<values.count).map { Value(column: fast, row: $0, type: to) }, expected.compactMap { $0 })
            } catch let e as BatchRowError {
                XCTAssertEqual(expected.firstIndex(where: { $0 == nil }), e.row, "\(from) → \(to)")
            }
        }
    }

    func testLogicalTypeNamesParseBack() {
        let types: [LogicalType] = [
            .boolean, .int16, .int32, .int64, .decimal(precision: nil, scale: nil), .decimal(precision: 38, scale: 10), .float32, .float64,
            .text, .text(maxLength: 20, fixed: false), .text(maxLength: 3, fixed: true), .binary(maxLength: nil), .binary(maxLength: 16),
            .date, .time(precision: nil), .time(precision: 3), .timestamp(precision: nil, timeZone: false),
            .timestamp(precision: 6, timeZone: true), .uuid, .json,
        ]
        for t in types { XCTAssertEqual(LogicalType(parsing: t.description), t, t.description) }
        XCTAssertNil(LogicalType(parsing: "integer"))
        XCTAssertNil(LogicalType(parsing: "text(a)"))
        XCTAssertNil(LogicalType(parsing: "date with time zone"))
    }
}
