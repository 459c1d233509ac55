import FerryCore

/// MySQL's naming rules and capabilities: backtick-quoted identifiers, DDL that commits
/// implicitly (so a failed create is undone by dropping the table), concurrent writers.
public struct MySQLDialect: Dialect {
    public init() {}
    /// Columns whose character set stores UTF-8 already (utf8mb4, utf8mb3, ascii): their text
    /// is hashed as stored, without a CONVERT per value (a fifth of a digest of bench_orders).
    /// Filled for one digest query from the catalog; empty: every text converted.
    var utf8Columns: Set<String> = []
    public var engine: Engine { .mysql }
    public var upsertSyntax: UpsertSyntax { .onDuplicateKey }
    public var enumSyntax: EnumSyntax { .columnType }
    public var identitySyntax: IdentitySyntax { .autoIncrement }

    public func quote(_ identifier: String) -> String {
        guard identifier.utf8.contains(UInt8(ascii: "`")) else { return "`" + identifier + "`" }
        return "`" + identifier.replacingOccurrences(of: "`", with: "``") + "`"
    }

    public var supportsTransactionalDDL: Bool { false }
    public var rowLockClause: String? { "FOR UPDATE" }
    public func sampleCondition(_ fraction: Double) -> String? { "RAND() < " + String(format: "%.9f", min(1, max(0, fraction))) }
    public var indexNamesArePerTable: Bool { true }
    public var maxIdentifierLength: Int { 64 }
    /// MySQL counts characters (and refuses a longer name itself; said here before any SQL).
    public var identifierLimit: IdentifierLimit { .characters(maxIdentifierLength) }
    public var foreignKeysNeedEqualTypes: Bool { true }
    public var referentialActions: Set<ReferentialAction> { [.noAction, .restrict, .cascade, .setNull] }

    /// As the SQL standard's, with CURRENT_TIMESTAMP given the column's fraction digits (MySQL
    /// refuses `DATETIME(6) DEFAULT CURRENT_TIMESTAMP`) and CURRENT_DATE/TIME as expressions.
    public func defaultSQL(_ value: ColumnDefault, for type: LogicalType) -> String? {
        switch value {
        case .currentTimestamp:
            guard case .timestamp(let p, _) = type else { return nil }
            return (p ?? 0) > 0 ? "CURRENT_TIMESTAMP(\(p ?? 0))" : "CURRENT_TIMESTAMP"
        case .currentDate: return type == .date ? "(CURRENT_DATE)" : nil
        case .currentTime:
            guard case .time = type else { return nil }
            return "(CURRENT_TIME)"
        case .boolean(let b): return type == .boolean || type.isNumeric ? (b ? "1" : "0") : nil
        case .text(let s): return literal(s)
        case .number(let n): return type.isNumeric || type == .boolean ? n : literal(n)
        case .expression: return nil
        }
    }

    /// A string literal for SQL text, escaped for the default sql_mode (backslash escapes on).
    public func literal(_ text: String) -> String {
        var out = "'"
        for u in text.unicodeScalars {
            switch u {
            case "\\": out += "\\\\"
            case "'": out += "\\'"
            case "\0": out += "\\0"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\u{1A}": out += "\\Z"
            default: out.unicodeScalars.append(u)
            }
        }
        return out + "'"
    }

    /// MySQL/MariaDB types a cast rule may name for a target column (`varchar(20)`, `mediumtext`,
    /// `tinyint(1)`, `datetime(3)`, `bigint unsigned`, …).
    public func logicalType(forDeclaredType native: String) -> LogicalType? {
        guard NativeTypeName.isPlainDeclaration(native) else { return nil }
        let t = MySQLTypeMap.logicalType(columnType: native)
        return t.isSupported ? t : nil
    }

    public func ddlType(for type: LogicalType) -> String? { MySQLTypeMap.declaredType(for: type) }

    /// MySQL to MySQL: spatial columns keep their type, values MySQL's own form (SRID + WKB), as
    /// the text protocol reads them and LOAD DATA takes them back.
    public func carriesNatively(_ column: Column, fromEngine engine: Engine) -> Bool {
        engine == .mysql && MySQLTypeMap.isSpatial(MySQLTypeMap.ColumnType(column.nativeType).base)
    }
}

/// Range digests in MySQL's and MariaDB's SQL (`MD5`, `DATE_FORMAT`, `CONV`). Every piece is
/// converted to UTF-8 bytes, so columns of different collations concatenate and hash as the
/// other engines' text does.
extension MySQLDialect: DigestSQLDialect {
    public func canonicalTextSQL(_ column: Column, quoted q: String) -> String {
        let text: String
        switch column.logicalType {
        case .boolean: text = "IF(\(q) <> 0, '1', '0')"
        case .decimal:
            text = "IF(LOCATE('.', \(q)) > 0, TRIM(TRAILING '.' FROM TRIM(TRAILING '0' FROM CAST(\(q) AS CHAR))), CAST(\(q) AS CHAR))"
        case .binary: text = "LOWER(HEX(\(q)))"
        case .float32: text = "CAST(CAST(\(q) AS DOUBLE) AS CHAR)"
        case .uuid: text = "LOWER(\(q))"
        case .date: text = "DATE_FORMAT(\(q), '%Y-%m-%d')"
        case .time: text = "TIME_FORMAT(\(q), '%H:%i:%s.%f')"
        case .timestamp: text = "DATE_FORMAT(\(q), '%Y-%m-%d %H:%i:%s.%f')"
        default: text = "CAST(\(q) AS CHAR)"
        }
        // Digits, dates and hex are ASCII whatever the column's character set.
        if case .binary = column.logicalType { return text }
        if CanonicalText.isDelimitable(column) { return text }
        // As bytes either way, so that columns of different collations concatenate.
        // MySQL's own JSON type keeps its binary form: its text is CAST(… AS CHAR).
        if utf8Columns.contains(column.name) { return column.nativeType.lowercased().hasPrefix("json") ? "CAST(\(text) AS BINARY)" : "CAST(\(q) AS BINARY)" }
        return "CAST(CONVERT(\(text) USING utf8mb4) AS BINARY)"
    }
    public func byteLengthSQL(_ text: String) -> String { "LENGTH(\(text))" }
    public func concatSQL(_ parts: [String]) -> String { parts.count == 1 ? parts[0] : "CONCAT(" + parts.joined(separator: ", ") + ")" }
    public func md5HexSQL(_ text: String) -> String { "MD5(\(text))" }
    public func hex32SQL(_ hex: String) -> String { "CAST(CONV(\(hex), 16, 10) AS UNSIGNED)" }
    public func hex64SQL(_ hex: String) -> String { "CAST(CONV(\(hex), 16, 10) AS UNSIGNED)" }
    public func int64SQL(_ expression: String) -> String { "CAST(\(expression) AS SIGNED)" }
}
