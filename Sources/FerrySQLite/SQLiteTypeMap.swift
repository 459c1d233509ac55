import FerryCore

/// Ferry's SQLite type conventions, both ways, in one place (documented in
/// docs/type-mapping.md).
///
/// SQLite stores any value in any column; the declared type only sets an *affinity*. Ferry
/// reads the declared type as the logical type (common names first, then SQLite's own affinity
/// rules), and when it creates tables it picks declared types that keep values exact:
/// decimals and JSON get TEXT affinity (`DECIMAL TEXT(p,s)`, `JSON TEXT`), because NUMERIC
/// affinity would turn `12.30` into the REAL 12.3.
public enum SQLiteTypeMap {
    /// SQLite's column affinity (https://sqlite.org/datatype3.html §3.1).
    public enum Affinity: String, Sendable {
        case integer, text, blob, real, numeric
    }

    /// The affinity SQLite gives a declared type.
    public static func affinity(of declared: String) -> Affinity {
        let t = declared.uppercased()
        if t.contains("INT") { return .integer }
        if t.contains("CHAR") || t.contains("CLOB") || t.contains("TEXT") { return .text }
        if t.contains("BLOB") || t.trimmingCharacters(in: .whitespaces).isEmpty { return .blob }
        if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") { return .real }
        return .numeric
    }

    /// Declared type names Ferry recognises, before the affinity fallback. The key is the type
    /// name upper-cased with its `(…)` arguments removed and spaces folded.
    static let byName: [String: @Sendable (_ args: [Int]) -> LogicalType] = {
        var m: [String: @Sendable (_ args: [Int]) -> LogicalType] = [:]
        func add(_ names: [String], _ f: @escaping @Sendable (_ args: [Int]) -> LogicalType) { for n in names { m[n] = f } }
        add(["BOOLEAN", "BOOL"]) { _ in .boolean }
        add(["TINYINT", "SMALLINT", "INT2"]) { _ in .int16 }
        add(["MEDIUMINT", "INT", "INT4"]) { _ in .int32 }
        add(["INTEGER", "BIGINT", "INT8", "UNSIGNED BIG INT"]) { _ in .int64 }
        add(["REAL", "DOUBLE", "DOUBLE PRECISION", "FLOAT", "FLOAT8"]) { _ in .float64 }
        add(["FLOAT4"]) { _ in .float32 }
        add(["DECIMAL", "NUMERIC", "DEC", "DECIMAL TEXT", "NUMERIC TEXT", "NUMBER"]) { a in
            .decimal(precision: a.first, scale: a.count > 1 ? a[1] : (a.isEmpty ? nil : 0))
        }
        add(["CHAR", "CHARACTER", "NCHAR", "NATIVE CHARACTER"]) { a in
            a.first.map { .text(maxLength: $0, fixed: true) } ?? .text
        }
        add(["VARCHAR", "NVARCHAR", "VARYING CHARACTER", "CHARACTER VARYING", "TEXT", "CLOB", "STRING", "NTEXT"]) { a in
            .text(maxLength: a.first, fixed: false)
        }
        add(["BLOB", "BINARY", "VARBINARY", "BYTEA"]) { a in .binary(maxLength: a.first) }
        add(["DATE"]) { _ in .date }
        add(["TIME"]) { a in .time(precision: a.first) }
        add(["DATETIME", "TIMESTAMP"]) { a in .timestamp(precision: a.first, timeZone: false) }
        add(["TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE", "DATETIMEOFFSET"]) { a in
            .timestamp(precision: a.first, timeZone: true)
        }
        add(["UUID", "GUID", "UNIQUEIDENTIFIER"]) { _ in .uuid }
        add(["JSON", "JSONB", "JSON TEXT"]) { _ in .json }
        return m
    }()

    /// Splits `NUMERIC(10, 2)` into (`NUMERIC`, [10, 2]).
    static func split(_ declared: String) -> (name: String, args: [Int]) {
        var name = declared
        var args: [Int] = []
        if let open = declared.firstIndex(of: "("), let close = declared.lastIndex(of: ")"), open < close {
            name = String(declared[..<open]) + String(declared[declared.index(after: close)...])
            args = declared[declared.index(after: open)..<close].split(separator: ",").compactMap {
                Int($0.trimmingCharacters(in: .whitespaces))
            }
        }
        let words = name.uppercased().split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" })
            .filter { $0 != "UNSIGNED" || name.uppercased().contains("BIG INT") }
        return (words.joined(separator: " "), args)
    }

    /// The logical type of a declared column type.
    public static func logicalType(declared: String) -> LogicalType {
        let (name, args) = split(declared)
        if let f = byName[name] { return f(args) }
        switch affinity(of: declared) {
        case .integer: return .int64
        case .text: return .text(maxLength: args.first, fixed: false)
        case .blob: return .binary(maxLength: nil)
        case .real: return .float64
        case .numeric: return .decimal(precision: args.first, scale: args.count > 1 ? args[1] : nil)
        }
    }

    /// The declared type Ferry gives a column of `type` in a table it creates.
    /// nil for types that have no SQLite form (`unsupported`).
    public static func declaredType(for type: LogicalType) -> String? {
        func p(_ v: Int?) -> String { v.map { "(\($0))" } ?? "" }
        switch type {
        case .boolean: return "BOOLEAN"
        case .int16: return "SMALLINT"
        case .int32: return "INT"
        case .int64: return "BIGINT"
        case .decimal(let precision, let scale):
            switch (precision, scale) {
            case (let pr?, let sc?): return "DECIMAL TEXT(\(pr),\(sc))"
            case (let pr?, nil): return "DECIMAL TEXT(\(pr))"
            default: return "DECIMAL TEXT"
            }
        case .float32: return "FLOAT4"
        case .float64: return "REAL"
        case .text(let n, let fixed):
            if fixed { return "CHAR" + p(n) }
            return n.map { "VARCHAR(\($0))" } ?? "TEXT"
        case .binary(let n): return n.map { "VARBINARY(\($0))" } ?? "BLOB"
        case .date: return "DATE"
        // One fraction width per column (the declared precision; six digits, microseconds,
        // where the source declares none), so that text order and text equality agree with
        // time: `12:00:00.500000` is never also stored as `12:00:00.5`.
        case .time(let n): return "TIME" + p(n ?? 6)
        case .timestamp(let n, let tz): return (tz ? "TIMESTAMPTZ" : "DATETIME") + p(n ?? 6)
        case .uuid: return "UUID"
        case .json: return "JSON TEXT"
        case .enumeration: return "TEXT"
        case .unsupported: return nil
        }
    }
}

extension SQLiteTypeMap {
    /// The most bytes a value of `type` takes in a SQLite record as Ferry stores it (integers
    /// and reals 8, text as UTF-8 at 4 bytes a character, dates and times as their text); nil
    /// when the type bounds nothing (text, BLOB, decimal without a precision, JSON).
    static func storedWidthBound(of type: LogicalType) -> Int? {
        switch type {
        case .boolean, .int16, .int32, .int64, .float32, .float64: return 8
        case .decimal(let precision?, _): return precision + 2
        case .decimal: return nil
        case .text(let n?, _): return 4 * n
        case .text: return nil
        case .binary(let n?): return n
        case .binary: return nil
        case .date: return 10
        case .time: return 15
        case .timestamp: return 32
        case .uuid: return 36
        case .json, .unsupported: return nil
        case .enumeration(let labels): return labels.map(\.utf8.count).max() ?? 0
        }
    }
}

extension SQLiteTypeMap {
    /// Declared types SQLite users write (its documentation's examples and Ferry's own
    /// conventions) as data: declaration, logical type, edge samples. Tested column by column
    /// by the fidelity matrix; rendered into docs/type-mapping.md.
    public static let nativeTypes: [NativeTypeEntry] = [
        .init("INTEGER", .int64, ["9223372036854775807", "-9223372036854775808"]),
        .init("INT", .int32, ["2147483647", "-2147483648"]),
        .init("TINYINT", .int16, ["127", "-128"]),
        .init("SMALLINT", .int16, ["32767", "-32768"]),
        .init("MEDIUMINT", .int32, ["8388607", "-8388608"]),
        .init("BIGINT", .int64, ["9223372036854775807", "0"]),
        .init("UNSIGNED BIG INT", .int64, ["9223372036854775807", "0"]),
        .init("INT2", .int16, ["1", "-1"]),
        .init("INT8", .int64, ["1", "-1"]),
        .init("BOOLEAN", .boolean, ["1", "0"]),
        .init("CHARACTER(20)", .text(maxLength: 20, fixed: true), ["'abcdefghijklmnopqrst'", "'😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀'"]),
        .init("VARCHAR(255)", .text(maxLength: 255, fixed: false), ["'Ünïcödé 😀 𝄞'", "'quote '' and \\ backslash'"]),
        .init("VARYING CHARACTER(255)", .text(maxLength: 255, fixed: false), ["'a'", "''"]),
        .init("NCHAR(55)", .text(maxLength: 55, fixed: true), ["'x'", "'y'"]),
        .init("NATIVE CHARACTER(70)", .text(maxLength: 70, fixed: true), ["'x'", "'y'"]),
        .init("NVARCHAR(100)", .text(maxLength: 100, fixed: false), ["'tab\there' || char(10) || 'newline' || char(13)", "''"]),
        .init("TEXT", .text, ["replace(hex(zeroblob(350000)), '00', 'ab😀')", "''"], note: "1 MB values tested"),
        .init("CLOB", .text, ["'clob'", "''"]),
        .init("BLOB", .binary(maxLength: nil), ["X'00FF00'", "X''"]),
        .init("REAL", .float64, ["1.7976931348623157e308", "-2.2250738585072014e-308"]),
        .init("DOUBLE", .float64, ["0.1", "-1.5"]),
        .init("DOUBLE PRECISION", .float64, ["2.5", "0"]),
        .init("FLOAT", .float64, ["1e-300", "3"]),
        .init("NUMERIC", .decimal(precision: nil, scale: nil), ["12.5", "-7"],
              note: "NUMERIC affinity stores REAL: the exact decimal of the stored double is carried"),
        .init("DECIMAL(10,5)", .decimal(precision: 10, scale: 5), ["12345.125", "-0.5"]),
        .init("DECIMAL TEXT(38,10)", .decimal(precision: 38, scale: 10), ["'1234567890123456789012345678.0123456789'", "'-0.0000000001'"],
              note: "Ferry's own: TEXT affinity keeps every digit"),
        .init("DATE", .date, ["'1899-12-31'", "'2150-06-30'"], note: "ISO-8601 text"),
        .init("TIME", .time(precision: nil), ["'23:59:59.999999'", "'00:00:00'"]),
        .init("DATETIME", .timestamp(precision: nil, timeZone: false), ["'1899-12-31 23:59:59.999999'", "'2150-06-30 12:00:00'"]),
        .init("TIMESTAMPTZ", .timestamp(precision: nil, timeZone: true), ["'2024-02-29 12:34:56.789012+05:30'", "'1970-01-01 00:00:00Z'"],
              note: "offsets are applied: the instant is carried in UTC"),
        .init("UUID", .uuid, ["'550e8400-e29b-41d4-a716-446655440000'", "X'00112233445566778899aabbccddeeff'"], note: "text or 16-byte blob"),
        .init("JSON", .json, [#"'{"a": [1, {"b": "ü😀"}], "c": null}'"#, "'[]'"]),
        .init("JSON TEXT", .json, ["'{}'", "'\"\"'"], note: "Ferry's own: TEXT affinity"),
    ]
}
