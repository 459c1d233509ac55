import FerryCore

/// PostgreSQL's naming rules and capabilities: double-quoted identifiers (the default quoting),
/// transactional DDL, many concurrent writers.
public struct PostgresDialect: Dialect {
    public init() {}

    /// Quotes a string literal with standard_conforming_strings semantics (the session sets it on).
    public func literal(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
    }

    /// Built-in PostgreSQL types a cast rule may name for a target column.
    public func logicalType(forDeclaredType native: String) -> LogicalType? {
        PostgresTypeMap.logicalType(declared: native)
    }

    public func ddlType(for type: LogicalType) -> String? { PostgresTypeMap.declaredType(for: type) }
}
