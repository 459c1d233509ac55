import FerryCore

/// MySQL/MariaDB ↔ logical types, both ways, in one place (docs/type-mapping.md).
public enum MySQLTypeMap {
    /// A parsed COLUMN_TYPE: `int(11) unsigned zerofill` → (int, [11], unsigned, …).
    public struct ColumnType: Sendable, Equatable {
        public var base: String
        public var args: [String]
        public var unsigned: Bool

        public init(_ text: String) {
            var t = text.trimmingCharacters(in: .whitespaces)
            var args: [String] = []
            if let open = t.firstIndex(of: "("), let close = t.lastIndex(of: ")"), open < close {
                args = Self.splitArgs(String(t[t.index(after: open)..<close]))
                t = String(t[..<open]) + String(t[t.index(after: close)...])
            }
            let words = t.lowercased().split(separator: " ").map(String.init)
            base = words.first ?? ""
            unsigned = words.contains("unsigned")
            self.args = args
        }

        /// Splits `'a','b''c',3` on commas outside quotes, unquoting labels.
        static func splitArgs(_ s: String) -> [String] {
            var out: [String] = []
            var cur = ""
            var quoted = false
            var chars = Array(s)[...]
            while let c = chars.popFirst() {
                if quoted {
                    if c == "'" {
                        if chars.first == "'" { cur.append("'"); chars.removeFirst() } else { quoted = false }
                    } else if c == "\\", let n = chars.popFirst() {
                        cur.append(n)
                    } else {
                        cur.append(c)
                    }
                } else if c == "'" {
                    quoted = true
                } else if c == "," {
                    out.append(cur)
                    cur = ""
                } else if c != " " {
                    cur.append(c)
                }
            }
            out.append(cur)
            return out
        }

        var intArgs: [Int] { args.compactMap { Int($0) } }
    }

    /// The logical type of a COLUMN_TYPE. TINYINT(1) and BIT(1) are booleans; BIGINT UNSIGNED
    /// travels as decimal(20,0) so values above Int64 are never wrapped.
    public static func logicalType(columnType: String) -> LogicalType {
        let t = ColumnType(columnType)
        let n = t.intArgs
        switch t.base {
        case "tinyint": return n.first == 1 && !t.unsigned ? .boolean : .int16
        case "bool", "boolean": return .boolean
        case "smallint": return t.unsigned ? .int32 : .int16
        case "mediumint": return .int32
        case "int", "integer": return t.unsigned ? .int64 : .int32
        case "bigint": return t.unsigned ? .decimal(precision: 20, scale: 0) : .int64
        case "decimal", "numeric", "dec", "fixed": return .decimal(precision: n.first ?? 10, scale: n.count > 1 ? n[1] : 0)
        case "float": return .float32
        case "double", "real": return .float64
        case "bit": return (n.first ?? 1) == 1 ? .boolean : ((n.first ?? 1) <= 63 ? .int64 : .binary(maxLength: 8))
        case "year": return .int16
        case "char": return .text(maxLength: n.first ?? 1, fixed: true)
        case "varchar": return .text(maxLength: n.first, fixed: false)
        case "tinytext": return .text(maxLength: 255, fixed: false)
        case "text", "mediumtext", "longtext": return .text
        case "binary": return .binary(maxLength: n.first ?? 1)
        case "varbinary": return .binary(maxLength: n.first)
        case "tinyblob", "blob", "mediumblob", "longblob": return .binary(maxLength: nil)
        case "date": return .date
        case "time": return .time(precision: n.first ?? 0)
        case "datetime": return .timestamp(precision: n.first ?? 0, timeZone: false)
        // TIMESTAMP stores UTC; the session's time zone is +00:00, so values read are UTC.
        case "timestamp": return .timestamp(precision: n.first ?? 0, timeZone: true)
        case "json": return .json
        case "uuid": return .uuid
        case "enum": return .enumeration(labels: t.args)
        case "set": return .text
        default: return .unsupported(native: columnType)
        }
    }

    static let spatialTypes: Set<String> = [
        "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
        "geometrycollection", "geomcollection",
    ]

    /// True for MySQL's spatial types (read as WKT or GeoJSON when a cast asks for text or JSON).
    static func isSpatial(_ base: String) -> Bool { spatialTypes.contains(base) }

    /// The DDL type Ferry gives a column of `type`; nil when MySQL has none.
    public static func declaredType(for type: LogicalType) -> String? {
        switch type {
        case .boolean: return "TINYINT(1)"
        case .int16: return "SMALLINT"
        case .int32: return "INT"
        case .int64: return "BIGINT"
        case .decimal(let p, let s):
            // MySQL: precision ≤ 65, scale ≤ 30 (MariaDB 38). Wider values are refused row by row.
            guard let p, p <= 65 else { return "DECIMAL(65,30)" }
            return "DECIMAL(\(p),\(min(s ?? 0, 30)))"
        case .float32: return "FLOAT"
        case .float64: return "DOUBLE"
        case .text(let n, let fixed):
            if fixed, let n, n <= 255 { return "CHAR(\(n))" }
            if let n, n <= 16_383 { return "VARCHAR(\(n))" }
            return "LONGTEXT"
        case .binary(let n):
            if let n, n <= 65_535 { return "VARBINARY(\(n))" }
            return "LONGBLOB"
        case .date: return "DATE"
        case .time(let p): return "TIME(\(min(p ?? 6, 6)))"
        case .timestamp(let p, _): return "DATETIME(\(min(p ?? 6, 6)))"
        // Not MariaDB's UUID type: it refuses 128-bit values that are not RFC 4122 (PostgreSQL's uuid takes any).
        case .uuid: return "CHAR(36)"
        case .json: return "JSON"
        case .enumeration(let labels): return "ENUM(" + labels.map { MySQLDialect().literal($0) }.joined(separator: ",") + ")"
        case .unsupported: return nil
        }
    }
}

extension MySQLTypeMap {
    /// MySQL/MariaDB built-in types as data: declaration, logical type, edge samples. Tested
    /// column by column by the fidelity matrix; rendered into docs/type-mapping.md.
    public static let nativeTypes: [NativeTypeEntry] = [
        .init("tinyint(1)", .boolean, ["1", "0"], note: "TINYINT(1) is MySQL's boolean"),
        .init("tinyint", .int16, ["-128", "127"]),
        .init("tinyint unsigned", .int16, ["0", "255"]),
        .init("smallint", .int16, ["-32768", "32767"]),
        .init("smallint unsigned", .int32, ["0", "65535"]),
        .init("mediumint", .int32, ["-8388608", "8388607"]),
        .init("mediumint unsigned", .int32, ["0", "16777215"]),
        .init("int", .int32, ["-2147483648", "2147483647"]),
        .init("int unsigned", .int64, ["0", "4294967295"]),
        .init("bigint", .int64, ["-9223372036854775808", "9223372036854775807"]),
        .init("bigint unsigned", .decimal(precision: 20, scale: 0), ["0", "18446744073709551615"],
              note: "as decimal(20,0): values above 2^63 are never wrapped"),
        .init("decimal(38,10)", .decimal(precision: 38, scale: 10), ["1234567890123456789012345678.0123456789", "-0.0000000001"]),
        .init("decimal(65,30)", .decimal(precision: 65, scale: 30),
              ["12345678901234567890123456789012345.123456789012345678901234567890", "-0.000000000000000000000000000001"]),
        .init("float", .float32, ["1.5", "-0.25"]),
        .init("double", .float64, ["1.7976931348623157e308", "-2.2250738585072014e-308"]),
        .init("bit(1)", .boolean, ["b'1'", "b'0'"]),
        .init("bit(5)", .int64, ["b'10101'", "b'0'"]),
        .init("bit(64)", .binary(maxLength: 8), ["b'1000000000000000000000000000000000000000000000000000000000000001'", "b'0'"],
              note: "BIT wider than 63 bits travels as 8 bytes"),
        .init("year", .int16, ["1901", "2155"]),
        .init("char(5)", .text(maxLength: 5, fixed: true), ["'abcde'", "'😀😀😀😀😀'"]),
        .init("varchar(40)", .text(maxLength: 40, fixed: false), [#"'Ünïcödé 😀 𝄞'"#, #"'quote '' and \\ backslash\ttab'"#]),
        .init("tinytext", .text(maxLength: 255, fixed: false), [#"'line\nbreak\r'"#, "''"]),
        .init("text", .text, ["'text'", "''"]),
        .init("mediumtext", .text, ["REPEAT('ab😀', 350000)", "''"], note: "1 MB values tested"),
        .init("longtext", .text, ["'longtext'", "''"]),
        .init("binary(3)", .binary(maxLength: 3), ["X'00FF00'", "X'000000'"]),
        .init("varbinary(10)", .binary(maxLength: 10), ["X'00FF00'", "X''"]),
        .init("tinyblob", .binary(maxLength: nil), ["X'00'", "X''"]),
        .init("blob", .binary(maxLength: nil), ["X'00FF00FF'", "X''"]),
        .init("mediumblob", .binary(maxLength: nil), ["X'FF'", "X''"]),
        .init("longblob", .binary(maxLength: nil), ["X'0000'", "X''"]),
        .init("date", .date, ["'1000-01-01'", "'9999-12-31'"]),
        .init("time", .time(precision: 0), ["'12:34:56'", "'00:00:00'"]),
        .init("time(6)", .time(precision: 6), ["'23:59:59.999999'", "'00:00:00.000001'"]),
        .init("datetime", .timestamp(precision: 0, timeZone: false), ["'1000-01-01 00:00:00'", "'9999-12-31 23:59:59'"]),
        .init("datetime(6)", .timestamp(precision: 6, timeZone: false), ["'1899-12-31 23:59:59.999999'", "'2150-06-30 12:00:00.000001'"]),
        .init("timestamp(6)", .timestamp(precision: 6, timeZone: true), ["'1970-01-01 00:00:01.000001'", "'2038-01-19 03:14:07.999999'"],
              note: "TIMESTAMP is UTC (the session's time zone is +00:00)"),
        .init("json", .json, [#"'{"a": [1, {"b": "ü😀"}], "c": null}'"#, "'[]'"], note: "MariaDB's JSON is LONGTEXT with a check"),
        .init("uuid", .uuid, ["'550e8400-e29b-41d4-a716-446655440000'", "'00000000-0000-0000-0000-000000000000'"], note: "MariaDB 10.7+"),
        .init("enum('sad','ok','happy')", .enumeration(labels: ["sad", "ok", "happy"]), ["'sad'", "'happy'"]),
        .init("set('a','b','c')", .text, ["'a,c'", "''"], note: "carried as its text"),
        .init("geometry", .unsupported(native: "geometry"), ["ST_GeomFromText('POINT(1 2)')", "ST_GeomFromText('LINESTRING(0 0,1 1)')"],
              note: "`to json` gives GeoJSON"),
        .init("point", .unsupported(native: "point"), ["POINT(1.5, 2)", "POINT(0, 0)"]),
        .init("linestring", .unsupported(native: "linestring"), ["ST_GeomFromText('LINESTRING(0 0,1 1,2 0)')", "ST_GeomFromText('LINESTRING(1 1,2 2)')"]),
        .init("polygon", .unsupported(native: "polygon"), ["ST_GeomFromText('POLYGON((0 0,1 1,2 0,0 0))')", "ST_GeomFromText('POLYGON((0 0,0 1,1 1,0 0))')"]),
        .init("multipoint", .unsupported(native: "multipoint"), ["ST_GeomFromText('MULTIPOINT(0 0,1 1)')", "ST_GeomFromText('MULTIPOINT(2 2)')"]),
        .init("multilinestring", .unsupported(native: "multilinestring"), ["ST_GeomFromText('MULTILINESTRING((0 0,1 1),(2 2,3 3))')", "ST_GeomFromText('MULTILINESTRING((0 0,1 1))')"]),
        .init("multipolygon", .unsupported(native: "multipolygon"), ["ST_GeomFromText('MULTIPOLYGON(((0 0,1 1,2 0,0 0)))')", "ST_GeomFromText('MULTIPOLYGON(((0 0,0 1,1 1,0 0)))')"]),
        .init("geometrycollection", .unsupported(native: "geometrycollection"), ["ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1))')", "ST_GeomFromText('GEOMETRYCOLLECTION(POINT(0 0),LINESTRING(0 0,1 1))')"]),
        .init("inet6", .unsupported(native: "inet6"), ["'::1'", "'2001:db8::ff00:42:8329'"], note: "MariaDB 10.5+"),
    ]
}
