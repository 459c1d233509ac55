/// What the copy engine needs to know about an engine's SQL and behaviour. Each driver
/// conforms in its own file; the defaults describe a capable SQL engine.
public protocol Dialect: Sendable {
    /// Quotes an identifier by the engine's own rules (`"a""b"`, `` `a``b` ``).
    func quote(_ identifier: String) -> String
    /// Quotes a possibly schema-qualified table name.
    func quote(_ table: TableName) -> String
    /// True when CREATE/DROP/ALTER roll back with the transaction (SQLite, PostgreSQL).
    var supportsTransactionalDDL: Bool { get }
    /// True when several connections may load different tables at the same time.
    var supportsConcurrentWriters: Bool { get }
    /// The logical type of a column declared as `native` on this engine (a plain type name
    /// such as `varchar(20)` or `jsonb`, named by a cast rule); nil when the engine does not
    /// know the name or Ferry cannot write it.
    func logicalType(forDeclaredType native: String) -> LogicalType?
    /// The DDL type this engine gives a column of `type` in a table Ferry creates; nil when it
    /// has none (or, for enumerations, when it creates a named type).
    func ddlType(for type: LogicalType) -> String?
    /// True when a column of a type with no logical type, described by the `engine` driver,
    /// can be created with its own native type here and its values written in their native
    /// binary form (a copy between two databases of this engine).
    func carriesNatively(_ column: Column, fromEngine engine: String) -> Bool
}

extension Dialect {
    public func quote(_ identifier: String) -> String {
        "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
    public func quote(_ table: TableName) -> String {
        if let schema = table.schema { return quote(schema) + "." + quote(table.name) }
        return quote(table.name)
    }
    public var supportsTransactionalDDL: Bool { true }
    public var supportsConcurrentWriters: Bool { true }
    public func logicalType(forDeclaredType native: String) -> LogicalType? { nil }
    public func ddlType(for type: LogicalType) -> String? { nil }
    public func carriesNatively(_ column: Column, fromEngine engine: String) -> Bool { false }
}
