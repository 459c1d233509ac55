import FerryCore

/// SQLite's naming rules and capabilities: double-quoted identifiers, transactional DDL,
/// one writer at a time per file.
public struct SQLiteDialect: Dialect {
    public init() {}
    public var engine: Engine { .sqlite }
    /// SQLite keeps a name of any length.
    public var identifierLimit: IdentifierLimit { .unlimited }
    public var upsertSyntax: UpsertSyntax { .onConflict }
    public var enumSyntax: EnumSyntax { .checkConstraint }
    public var identitySyntax: IdentitySyntax { .rowidAlias }
    public var supportsTransactionalDDL: Bool { true }
    public func sampleCondition(_ fraction: Double) -> String? {
        "(random() & 1048575) < " + String(Int((min(1, max(0, fraction)) * 1_048_576).rounded(.up)))
    }
    /// SQLite serialises writers on a file; loading tables one after another is faster than
    /// making them wait on each other's locks.
    public var supportsConcurrentWriters: Bool { false }

    /// SQLite declared types a cast rule may name for a target column. Only names whose
    /// affinity keeps the values exact are taken: `DECIMAL(10,2)` (NUMERIC affinity, which
    /// turns `12.30` into the REAL 12.3) is refused; `DECIMAL TEXT(10,2)` is what Ferry uses.
    public func logicalType(forDeclaredType native: String) -> LogicalType? {
        guard NativeTypeName.isPlainDeclaration(native) else { return nil }
        let t = SQLiteTypeMap.logicalType(declared: native)
        guard t.isSupported, let ferrys = SQLiteTypeMap.declaredType(for: t),
              SQLiteTypeMap.affinity(of: ferrys) == SQLiteTypeMap.affinity(of: native)
        else { return nil }
        return t
    }

    public func ddlType(for type: LogicalType) -> String? { SQLiteTypeMap.declaredType(for: type) }

    /// SQLite to SQLite: a value is its storage class and its stored bytes (the text
    /// `12:00:00.500000`, not the instant), whatever the column's declared type says.
    public func keepsStoredForm(fromEngine engine: Engine) -> Bool { engine == .sqlite }
}

/// SQLite's 64-bit integer arithmetic computes the integer key hash, so a bucket filter on a key
/// of one integer column is a WHERE clause (it has no MD5: other keys are filtered by Ferry).
extension SQLiteDialect: IntegerKeyHashDialect {
    public func int64SQL(_ expression: String) -> String { "CAST(\(expression) AS INTEGER)" }
}
