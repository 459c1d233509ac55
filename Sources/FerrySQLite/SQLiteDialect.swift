import FerryCore

/// SQLite's naming rules and capabilities: double-quoted identifiers, transactional DDL,
/// one writer at a time per file.
public struct SQLiteDialect: Dialect {
    public init() {}
    public var supportsTransactionalDDL: Bool { true }
    /// SQLite serialises writers on a file; loading tables one after another is faster than
    /// making them wait on each other's locks.
    public var supportsConcurrentWriters: Bool { false }
}
