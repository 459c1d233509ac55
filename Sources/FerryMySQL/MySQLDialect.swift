import FerryCore

/// MySQL's naming rules and capabilities: backtick-quoted identifiers, DDL that commits
/// implicitly (so a failed create is undone by dropping the table), concurrent writers.
public struct MySQLDialect: Dialect {
    public init() {}
    public var engine: Engine { .mysql }
    public var upsertSyntax: UpsertSyntax { .onDuplicateKey }
    public var enumSyntax: EnumSyntax { .columnType }
    public var identitySyntax: IdentitySyntax { .autoIncrement }

    public func quote(_ identifier: String) -> String {
        "`" + identifier.replacingOccurrences(of: "`", with: "``") + "`"
    }

    public var supportsTransactionalDDL: Bool { false }
    public var indexNamesArePerTable: Bool { true }
    public var maxIdentifierLength: Int { 64 }
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
