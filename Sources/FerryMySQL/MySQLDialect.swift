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
