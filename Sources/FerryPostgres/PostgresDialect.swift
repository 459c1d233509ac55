import FerryCore

/// PostgreSQL's naming rules and capabilities: double-quoted identifiers (the default quoting),
/// transactional DDL, many concurrent writers.
public struct PostgresDialect: Dialect {
    /// The database stores text as UTF-8: a text's bytes are already the UTF-8 that range
    /// digests hash (`convert_to` would copy each value once more per row).
    public var serverEncodingIsUTF8: Bool
    public init(serverEncodingIsUTF8: Bool = false) { self.serverEncodingIsUTF8 = serverEncodingIsUTF8 }
    public var engine: Engine { .postgres }
    public var rowLockClause: String? { "FOR UPDATE" }
    public func tableSample(_ fraction: Double) -> String? {
        "TABLESAMPLE SYSTEM (" + String(format: "%.6f", min(100, max(0.000001, fraction * 100))) + ")"
    }
    public var upsertSyntax: UpsertSyntax { .onConflict }
    public var enumSyntax: EnumSyntax { .namedType }
    public var identitySyntax: IdentitySyntax { .generatedByDefault }
    public var deferrableForeignKeys: Bool { true }

    /// Quotes a string literal with standard_conforming_strings semantics (the session sets it on).
    public func literal(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
    }

    /// Built-in PostgreSQL types a cast rule may name for a target column.
    public func logicalType(forDeclaredType native: String) -> LogicalType? {
        PostgresTypeMap.logicalType(declared: native)
    }

    public func ddlType(for type: LogicalType) -> String? { PostgresTypeMap.declaredType(for: type) }

    /// PostgreSQL to PostgreSQL: built-in types with no logical type (interval, inet, money,
    /// ranges, geometric types, arrays of built-ins, …) keep their type and binary form. Only
    /// pg_catalog types qualify: their binary form (array element OIDs included) is the same in
    /// every PostgreSQL database; user-defined types' is not.
    public func carriesNatively(_ column: Column, fromEngine engine: Engine) -> Bool {
        guard engine == .postgres else { return false }
        var base = NativeTypeName(column.nativeType).base
        while base.hasSuffix("[]") { base.removeLast(2) }
        // An empty tsquery's binary form is refused by tsquery_recv ("operand not found"): tsquery
        // stays skipped unless a cast carries it as text.
        return PostgresTypeMap.builtInNames.contains(base) && base != "tsquery"
    }
}

/// Range digests in PostgreSQL's SQL (`md5`, `to_char`, `trim_scale`, PostgreSQL 13 or later).
extension PostgresDialect: DigestSQLDialect {
    public func canonicalTextSQL(_ column: Column, quoted q: String) -> String {
        switch column.logicalType {
        case .boolean: return "CASE WHEN \(q) THEN '1' ELSE '0' END"
        case .decimal: return "trim_scale(\(q))::text"
        case .float32: return "\(q)::float8::text"
        case .binary: return "encode(\(q), 'hex')"
        case .date: return "to_char(\(q), 'YYYY-MM-DD')"
        case .time: return "to_char(\(q)::time, 'HH24:MI:SS.US')"
        case .timestamp(_, let tz):
            return tz ? "to_char(\(q) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')" : "to_char(\(q), 'YYYY-MM-DD HH24:MI:SS.US')"
        default: return "\(q)::text"
        }
    }
    /// As text: `text || integer` looks the integer's output function up on every call.
    public func byteLengthSQL(_ text: String) -> String {
        serverEncodingIsUTF8 ? "octet_length(\(text))::text" : "octet_length(convert_to(\(text), 'UTF8'))::text"
    }
    public func concatSQL(_ parts: [String]) -> String { parts.count == 1 ? parts[0] : "(" + parts.joined(separator: " || ") + ")" }
    public func md5HexSQL(_ text: String) -> String { serverEncodingIsUTF8 ? "md5(\(text))" : "md5(convert_to(\(text), 'UTF8'))" }
    public func hex32SQL(_ hex: String) -> String { "('x' || \(hex))::bit(32)::bigint" }
    public func hex64SQL(_ hex: String) -> String { "('x' || \(hex))::bit(64)::bigint" }
    /// `OFFSET 0` keeps the hashes' subquery whole: flattened, the planner sorts the table's
    /// whole rows by bucket (spilling past work_mem) and hashes them after; kept, it hashes the
    /// rows it scans and aggregates 16-byte pairs (200,000 bench_orders rows: 550 ms → 420 ms).
    public func computedOnce(_ select: String) -> String { select + " OFFSET 0" }

    /// `hash_record_extended(ROW(…), 0)` (PostgreSQL 14 or later; the connection offers
    /// `lookup3` only there): each column as the type whose hash Ferry reproduces — integers as
    /// int8, booleans as int4 (0/1), dates, times, timestamps, float8, uuid and bytea as they are
    /// — and every other column as its canonical text in the C collation (hashed as its bytes,
    /// whatever collation the column has). Casts to the column's own type cost nothing; a
    /// domain's value is hashed as its base type's.
    public func lookup3RowHashSQL(_ columns: [Column], forms: [ColumnHashForm]) -> String? {
        guard forms.count == columns.count, !columns.isEmpty else { return nil }
        let elements = zip(columns, forms).map { c, form -> String in
            let q = quote(c.name)
            switch form {
            case .integer: return c.logicalType == .boolean ? "\(q)::int4" : "\(q)::int8"
            case .date: return "\(q)::date"
            case .time: return "\(q)::time"
            case .timestamp:
                if case .timestamp(_, let tz) = c.logicalType, tz { return "\(q)::timestamptz" }
                return "\(q)::timestamp"
            case .float: return "\(q)::float8"
            case .bytes: return c.logicalType == .uuid ? "\(q)::uuid" : "\(q)::bytea"
            case .text, .stored:
                let text = c.travelsNatively ? "\(q)::text" : canonicalTextSQL(c, quoted: q)
                return serverEncodingIsUTF8 ? "(\(text)) COLLATE \"C\"" : "convert_to(\(text), 'UTF8')"
            }
        }
        return "hash_record_extended(ROW(" + elements.joined(separator: ", ") + "), 0)"
    }
}
