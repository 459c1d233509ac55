import FerryCore

/// The naming rules and type map of a folder of CSV files. A column's "native" type is its
/// logical type's name (`int64`, `decimal(10,2)`, `timestamp(6) with time zone`): the sidecar
/// keeps the logical types exactly, so the map is the identity. Keyed writes, enumerations and
/// serial columns are the driver's own business (no SQL).
public struct CSVDialect: Dialect {
    public init() {}
    public var engine: Engine { CSVCatalog.engine }
    public var upsertSyntax: UpsertSyntax { .driverDefined }
    public var enumSyntax: EnumSyntax { .driverDefined }
    public var identitySyntax: IdentitySyntax { .driverDefined }
    /// Creating, dropping and swapping tables take effect at commit, like the rows.
    public var supportsTransactionalDDL: Bool { true }
    /// Tables are separate files: loads of different tables never wait on each other.
    public var supportsConcurrentWriters: Bool { true }
    /// Leaves room in a file name for the driver's suffixes (`.schema.xml.tmp-…`).
    public var maxIdentifierLength: Int { CSVCatalog.maxNameBytes }

    /// A cast rule may name any logical type by its name (`text(20)`, `decimal(12,2)`).
    public func logicalType(forDeclaredType native: String) -> LogicalType? {
        LogicalType(parsing: native)
    }

    public func ddlType(for type: LogicalType) -> String? {
        type.isSupported ? type.description : nil
    }
}
