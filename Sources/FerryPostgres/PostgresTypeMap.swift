import FerryCore

/// PostgreSQL ↔ logical types, both ways, in one place (docs/type-mapping.md).
public enum PostgresTypeMap {
    /// A column's type after domains are resolved.
    public struct BaseType: Sendable {
        public var name: String       // pg_type.typname, e.g. int4, varchar, mpaa_rating
        public var schema: String     // the type's schema (pg_catalog for built-ins)
        public var typtype: String    // b base, e enum, c composite, r range, m multirange, p pseudo, d domain
        public var category: String   // typcategory: A array, …
        public var formatted: String  // format_type(), e.g. "character varying(20)"
        public var typmod: Int
        public var oid: String

        public init(name: String, schema: String = "pg_catalog", typtype: String = "b", category: String = "", formatted: String? = nil, typmod: Int = -1, oid: String = "0") {
            self.name = name
            self.schema = schema
            self.typtype = typtype
            self.category = category
            self.formatted = formatted ?? name
            self.typmod = typmod
            self.oid = oid
        }
    }

    /// Built-in base types Ferry carries, by pg_type.typname.
    static let builtIn: [String: @Sendable (_ typmod: Int) -> LogicalType] = [
        "bool": { _ in .boolean },
        "int2": { _ in .int16 },
        "int4": { _ in .int32 },
        "int8": { _ in .int64 },
        "numeric": { m in
            m < 4 ? .decimal(precision: nil, scale: nil) : .decimal(precision: ((m - 4) >> 16) & 0xffff, scale: (m - 4) & 0xffff)
        },
        "float4": { _ in .float32 },
        "float8": { _ in .float64 },
        "text": { _ in .text },
        "varchar": { m in .text(maxLength: m >= 4 ? m - 4 : nil, fixed: false) },
        "bpchar": { m in .text(maxLength: m >= 4 ? m - 4 : nil, fixed: m >= 4) },
        "name": { _ in .text(maxLength: 63, fixed: false) },
        "bytea": { _ in .binary(maxLength: nil) },
        "date": { _ in .date },
        "time": { m in .time(precision: m >= 0 ? m : nil) },
        "timestamp": { m in .timestamp(precision: m >= 0 ? m : nil, timeZone: false) },
        "timestamptz": { m in .timestamp(precision: m >= 0 ? m : nil, timeZone: true) },
        "uuid": { _ in .uuid },
        "json": { _ in .json },
        "jsonb": { _ in .json },
    ]

    /// The logical type of a (domain-resolved) column type. Enums come back with no labels; the
    /// catalog fills them in.
    public static func logicalType(_ t: BaseType) -> LogicalType {
        if t.category == "A" { return .unsupported(native: t.formatted) }
        switch t.typtype {
        case "e": return .enumeration(labels: [])
        case "b" where t.schema == "pg_catalog":
            if let f = builtIn[t.name] { return f(t.typmod) }
            return .unsupported(native: t.formatted)
        default: return .unsupported(native: t.formatted)
        }
    }

    /// The logical type of a built-in type written as in DDL (`varchar(20)`, `numeric(10,2)`,
    /// `timestamp(3) with time zone`, `int8`); nil for anything else. Used for cast rules that
    /// name a PostgreSQL type.
    public static func logicalType(declared: String) -> LogicalType? {
        guard NativeTypeName.isPlainDeclaration(declared) else { return nil }
        let t = NativeTypeName(declared)
        guard !t.unsigned, !t.base.hasSuffix("[]") else { return nil }
        let typname: [String: String] = [
            "integer": "int4", "bigint": "int8", "smallint": "int2", "numeric": "numeric", "real": "float4",
            "double": "float8", "text": "text", "varchar": "varchar", "char": "bpchar", "boolean": "bool",
            "bytea": "bytea", "date": "date", "time": "time", "timestamp": "timestamp", "timestamptz": "timestamptz",
            "uuid": "uuid", "json": "json", "jsonb": "jsonb", "name": "name",
        ]
        guard let name = typname[t.base], let make = builtIn[name] else { return nil }
        let p = t.parameters
        var typmod = -1
        switch name {
        case "numeric":
            if let precision = p.first {
                guard precision >= 1, precision <= 1000 else { return nil }
                typmod = ((precision << 16) | (p.count > 1 ? p[1] : 0)) + 4
            }
        case "varchar", "bpchar":
            if let n = p.first { typmod = n + 4 } else if name == "bpchar" { typmod = 1 + 4 }
        case "time", "timestamp", "timestamptz":
            if let n = p.first { guard n <= 6 else { return nil }; typmod = n }
        default:
            guard p.isEmpty else { return nil }
        }
        return make(typmod)
    }

    /// The DDL type Ferry gives a column of `type`; nil when PostgreSQL has none.
    public static func declaredType(for type: LogicalType) -> String? {
        switch type {
        case .boolean: return "boolean"
        case .int16: return "smallint"
        case .int32: return "integer"
        case .int64: return "bigint"
        case .decimal(let p, let s):
            // PostgreSQL numeric precision is 1…1000; wider declarations become unconstrained numeric.
            guard let p, p >= 1, p <= 1000 else { return "numeric" }
            return "numeric(\(p),\(min(max(s ?? 0, 0), p)))"
        case .float32: return "real"
        case .float64: return "double precision"
        case .text(let n, let fixed):
            if fixed, let n { return "character(\(n))" }
            if let n, n >= 1, n <= 10_485_760 { return "character varying(\(n))" }
            return "text"
        case .binary: return "bytea"
        case .date: return "date"
        case .time(let p): return "time" + (p.map { "(\(min($0, 6)))" } ?? "") + " without time zone"
        case .timestamp(let p, let tz): return "timestamp" + (p.map { "(\(min($0, 6)))" } ?? "") + (tz ? " with time zone" : " without time zone")
        case .uuid: return "uuid"
        case .json: return "json"
        case .enumeration: return nil  // a named type: see enumTypeName
        case .unsupported: return nil
        }
    }

    /// The enum type a column uses on the target: the source's type name when it was a
    /// PostgreSQL enum, else `<table>_<column>`, in the target table's schema.
    static func enumTypeName(for column: Column, table: TableName, target: TableName) -> TableName {
        let base: String
        if column.nativeType.range(of: #"^[A-Za-z_][A-Za-z0-9_$]*$|^"([^"]|"")+"$"#, options: .regularExpression) != nil,
           column.nativeType.lowercased() != "enum", !column.nativeType.lowercased().hasPrefix("enum(")
        {
            var n = column.nativeType
            if n.hasPrefix("\"") { n = String(n.dropFirst().dropLast()).replacingOccurrences(of: "\"\"", with: "\"") }
            base = n
        } else {
            base = (table.name + "_" + column.name).lowercased()
        }
        return TableName(schema: target.schema, base)
    }
}

extension PostgresTypeMap {
    /// Every pg_catalog type name a user's column can have, folded as `NativeTypeName` folds
    /// them (so `integer` and `int4` are one name): the types a PostgreSQL-to-PostgreSQL copy
    /// carries in their native binary form when they have no logical type.
    public static let builtInNames: Set<String> = {
        var names = Set(nativeTypes.filter { $0.declaration != "ferry_mood" && $0.declaration != "ferry_posint" }
            .map { NativeTypeName($0.declaration).base.replacingOccurrences(of: "[]", with: "") })
        names.formUnion([
            "oid", "regclass", "regtype", "regproc", "xid", "cid", "tid", "int2vector", "oidvector", "txid_snapshot",
            "pg_snapshot", "jsonpath", "int8multirange", "nummultirange", "tsmultirange", "tstzmultirange",
            "datemultirange", "char", "\"char\"", "bpchar", "varchar", "name",
        ])
        return names
    }()

    /// PostgreSQL's built-in types (and an enum and a domain) as data: declaration, logical
    /// type, edge samples. Tested column by column by the fidelity matrix; rendered into
    /// docs/type-mapping.md. `ferry_mood` and `ferry_posint` are the matrix's own enum and domain.
    public static let nativeTypes: [NativeTypeEntry] = [
        .init("boolean", .boolean, ["true", "false"]),
        .init("smallint", .int16, ["-32768", "32767"]),
        .init("integer", .int32, ["-2147483648", "2147483647"]),
        .init("bigint", .int64, ["-9223372036854775808", "9223372036854775807"]),
        .init("numeric(38,10)", .decimal(precision: 38, scale: 10), ["1234567890123456789012345678.0123456789", "-0.0000000001"]),
        .init("numeric", .decimal(precision: nil, scale: nil),
              [#"('1' || repeat('7', 110) || '.' || repeat('3', 25))::numeric"#, "-0.5"], refusedBy: ["mysql"],
              note: "MySQL holds 65 digits: wider values are refused"),
        .init("real", .float32, ["3.4028235e38", "1.17549435e-38"]),
        .init("double precision", .float64, ["1.7976931348623157e308", "-2.2250738585072014e-308"]),
        .init("text", .text, [#"repeat('ab😀', 350000)"#, "''"], note: "1 MB values tested"),
        .init("character varying", .text, [#"E'tab\there, newline\nand CR\r'"#, "''"]),
        .init("varchar(40)", .text(maxLength: 40, fixed: false), [#"'Ünïcödé 😀 𝄞'"#, #"'quote '' and \ backslash'"#]),
        .init("char(5)", .text(maxLength: 5, fixed: true), ["'abcde'", "'😀😀😀😀😀'"]),
        .init("name", .text(maxLength: 63, fixed: false), ["'pg_name'", "''"]),
        .init("bytea", .binary(maxLength: nil), [#"'\x00ff00'::bytea"#, "''::bytea"]),
        .init("date", .date, ["'1899-12-31'", "'2150-06-30'"]),
        .init("time", .time(precision: nil), ["'23:59:59.999999'", "'00:00:00'"]),
        .init("time(3)", .time(precision: 3), ["'12:34:56.789'", "'00:00:00.001'"]),
        .init("timestamp", .timestamp(precision: nil, timeZone: false), ["'1899-12-31 23:59:59.999999'", "'2150-06-30 12:00:00.000001'"]),
        .init("timestamp(0)", .timestamp(precision: 0, timeZone: false), ["'2024-02-29 12:34:56'", "'1970-01-01 00:00:00'"]),
        .init("timestamptz", .timestamp(precision: nil, timeZone: true), ["'2024-02-29 12:34:56.789012+05:30'", "'1900-01-01 00:00:00+00'"]),
        .init("timestamp(3) with time zone", .timestamp(precision: 3, timeZone: true), ["'2100-12-31 23:59:59.999+00'", "'1969-12-31 23:59:59.999-01'"]),
        .init("uuid", .uuid, ["'550e8400-e29b-41d4-a716-446655440000'", "'00000000-0000-0000-0000-000000000000'"]),
        .init("json", .json, [#"'{"a": [1, {"b": "ü😀\u00e9"}], "c": null}'"#, "'[]'"], note: "text kept as written"),
        .init("jsonb", .json, [#"'{"a": [1, {"b": "ü😀"}], "c": null}'"#, "'\"\"'"], note: "PostgreSQL normalises jsonb; its text is carried"),
        .init("ferry_mood", .enumeration(labels: ["sad", "ok", "happy"]), ["'sad'", "'happy'"],
              note: "an enum type: native enum on PostgreSQL and MySQL, TEXT with a CHECK on SQLite"),
        .init("ferry_posint", .int32, ["1", "2147483647"], note: "a domain: carried as its base type"),
        .init("money", .unsupported(native: "money"), ["12.34", "-0.01"]),
        .init("interval", .unsupported(native: "interval"), ["'1 year 2 mons 3 days 04:05:06.789'", "'-1 day'"]),
        .init("time with time zone", .unsupported(native: "time with time zone"), ["'12:34:56.789+05:30'", "'00:00:00+00'"]),
        .init("inet", .unsupported(native: "inet"), ["'192.168.0.1/24'", "'::1'"]),
        .init("cidr", .unsupported(native: "cidr"), ["'10.0.0.0/8'", "'2001:db8::/32'"]),
        .init("macaddr", .unsupported(native: "macaddr"), ["'08:00:2b:01:02:03'", "'ff:ff:ff:ff:ff:ff'"]),
        .init("macaddr8", .unsupported(native: "macaddr8"), ["'08:00:2b:01:02:03:04:05'", "'00:00:00:00:00:00:00:00'"]),
        .init("bit(4)", .unsupported(native: "bit(4)"), ["B'1010'", "B'0000'"]),
        .init("bit varying(8)", .unsupported(native: "bit varying(8)"), ["B'101'", "B''"]),
        .init("point", .unsupported(native: "point"), ["'(1.5,2)'", "'(0,0)'"]),
        .init("line", .unsupported(native: "line"), ["'{1,-1,0}'", "'{0,1,2}'"]),
        .init("lseg", .unsupported(native: "lseg"), ["'[(0,0),(1,1)]'", "'[(1,2),(3,4)]'"]),
        .init("box", .unsupported(native: "box"), ["'((0,0),(1,1))'", "'((2,2),(3,4))'"]),
        .init("path", .unsupported(native: "path"), ["'[(0,0),(1,1),(2,0)]'", "'((0,0),(1,1))'"]),
        .init("polygon", .unsupported(native: "polygon"), ["'((0,0),(1,1),(2,0))'", "'((0,0),(0,1),(1,1))'"]),
        .init("circle", .unsupported(native: "circle"), ["'<(0,0),1>'", "'<(1.5,2.5),0.5>'"]),
        .init("tsvector", .unsupported(native: "tsvector"), ["to_tsvector('english', 'The quick brown foxes')", "''::tsvector"]),
        .init("tsquery", .unsupported(native: "tsquery"), ["'fat & (rat | cat)'::tsquery", "''::tsquery"]),
        .init("xml", .unsupported(native: "xml"), ["'<a x=\"1\">ü</a>'::xml", "'text only'::xml"]),
        .init("int4range", .unsupported(native: "int4range"), ["'[1,5)'", "'empty'"]),
        .init("int8range", .unsupported(native: "int8range"), ["'[1,9223372036854775806]'", "'(,0)'"]),
        .init("numrange", .unsupported(native: "numrange"), ["'(1.5,2.5]'", "'[0,)'"]),
        .init("tsrange", .unsupported(native: "tsrange"), ["'[2020-01-01 00:00,2020-01-02 00:00)'", "'empty'"]),
        .init("tstzrange", .unsupported(native: "tstzrange"), ["'[2020-01-01 00:00+00,2020-01-02 00:00+00)'", "'empty'"]),
        .init("daterange", .unsupported(native: "daterange"), ["'[2020-01-01,2020-02-01)'", "'empty'"]),
        .init("int4multirange", .unsupported(native: "int4multirange"), ["'{[1,3), [5,7)}'", "'{}'"]),
        .init("integer[]", .unsupported(native: "integer[]"), ["'{1,2,NULL}'", "'{}'"], note: "arrays: `to json` gives a JSON array"),
        .init("text[]", .unsupported(native: "text[]"), [#"'{"a b","c,d"}'"#, "'{}'"]),
        .init("pg_lsn", .unsupported(native: "pg_lsn"), ["'16/B374D848'", "'0/0'"]),
    ]
}
