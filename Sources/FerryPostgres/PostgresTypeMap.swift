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

    /// CREATE TABLE with PK and UNIQUE constraints; serial columns become identity columns.
    static func createTable(_ schema: TableSchema, named name: TableName, on c: PostgresConnection) throws -> [String] {
        let d = c.dialect
        let sameEngine = schema.engine == PostgresDriver.name
        var parts: [String] = []
        for col in schema.columns {
            var def = d.quote(col.name) + " "
            if let declared = col.declaredType {
                def += declared  // named by a cast rule; checked by PostgresTypeMap.logicalType(declared:)
            } else if case .enumeration = col.logicalType {
                def += d.quote(enumTypeName(for: col, table: schema.name, target: name))
            } else if sameEngine, col.nativeType == "jsonb" {
                def += "jsonb"
            } else {
                guard let t = declaredType(for: col.logicalType) else {
                    throw FerryError.unsupportedType(
                        table: schema.name, column: col.name, type: col.logicalType.description, target: c.endpoint.redacted)
                }
                def += t
            }
            if col.isSerial, [.int16, .int32, .int64].contains(col.logicalType) {
                def += " GENERATED BY DEFAULT AS IDENTITY"
            }
            if !col.isNullable { def += " NOT NULL" }
            if sameEngine, let expr = col.defaultExpression, !col.isSerial, !expr.contains("nextval(") {
                def += " DEFAULT " + expr
            }
            parts.append(def)
        }
        if !schema.primaryKey.isEmpty {
            parts.append("PRIMARY KEY (" + schema.primaryKey.map { d.quote($0) }.joined(separator: ", ") + ")")
        }
        for key in schema.uniqueKeys {
            parts.append("UNIQUE (" + key.map { d.quote($0) }.joined(separator: ", ") + ")")
        }
        return ["CREATE TABLE \(d.quote(name)) (\n  " + parts.joined(separator: ",\n  ") + "\n)"]
    }
}
