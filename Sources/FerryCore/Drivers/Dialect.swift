/// What the copy engine needs to know about an engine's SQL and behaviour. Each driver
/// conforms in its own file; the defaults describe a capable SQL engine.
public protocol Dialect: Sendable {
    /// The engine these rules are for.
    var engine: Engine { get }
    /// Quotes an identifier by the engine's own rules (`"a""b"`, `` `a``b` ``).
    func quote(_ identifier: String) -> String
    /// Quotes a possibly schema-qualified table name.
    func quote(_ table: TableName) -> String
    /// True when CREATE/DROP/ALTER roll back with the transaction (SQLite, PostgreSQL).
    var supportsTransactionalDDL: Bool { get }
    /// The clause that locks the rows a SELECT reads until the transaction ends (`FOR
    /// UPDATE`); nil when a write transaction already keeps other writers out (SQLite) or
    /// the reader cannot lock (the XML service, whose guarded push locks on its side).
    var rowLockClause: String? { get }
    /// True when a reader selects rows by a list of keys (`KeyRange.keys`: `k IN (…)`, index
    /// lookups); false where reads cannot carry such a list (the XML service), and callers fall
    /// back to key-hash buckets.
    var selectsByKeyList: Bool { get }
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
    func carriesNatively(_ column: Column, fromEngine engine: Engine) -> Bool
    /// True when every value read from the `engine` driver keeps its stored form here: the
    /// stored form *is* the value (SQLite, where a column may hold any storage class and the
    /// stored text — `12:00:00.500000`, an upper-case UUID, `12.30` — is what applications
    /// compare). Every column of such a copy travels in the stored form (`Column.storedForm`)
    /// instead of the canonical forms, which would rewrite it.
    func keepsStoredForm(fromEngine engine: Engine) -> Bool

    // Syntax for keyed writes and created tables, declared here so that keyed modes and sync
    // never branch on an engine's name.

    /// How the engine says "insert, or update the row with the same key".
    var upsertSyntax: UpsertSyntax { get }
    /// How a column restricted to a list of labels is declared.
    var enumSyntax: EnumSyntax { get }
    /// How a column that generates its own integers is declared.
    var identitySyntax: IdentitySyntax { get }

    // Schema objects.

    /// A string literal by the engine's rules.
    func literal(_ text: String) -> String
    /// True when index names need only be unique within their table (MySQL), so a staging
    /// table's indexes can carry their final names; false when they share a namespace with
    /// every index (and, on SQLite, table) of the schema.
    var indexNamesArePerTable: Bool { get }
    /// The longest identifier the engine keeps (PostgreSQL truncates at 63 bytes, MySQL refuses past 64).
    var maxIdentifierLength: Int { get }
    /// How the engine measures the longest name it keeps: PostgreSQL in bytes (and cuts a
    /// longer one short without a word), MySQL in characters, SQLite not at all. Default:
    /// `maxIdentifierLength` bytes.
    var identifierLimit: IdentifierLimit { get }
    /// True when a foreign key's columns must have exactly the referenced columns' types
    /// (MySQL: `int` cannot reference `bigint`); the copy then widens the narrower integer end.
    var foreignKeysNeedEqualTypes: Bool { get }
    /// The referential actions a foreign key may declare here.
    var referentialActions: Set<ReferentialAction> { get }
    /// True where a foreign key Ferry creates is declared DEFERRABLE (checked at once, as any
    /// other, unless a transaction defers it): a replica's transaction can then check its keys
    /// at commit (PostgreSQL).
    var deferrableForeignKeys: Bool { get }
    /// The SQL of a default for a column of `type` on this engine; nil when the engine cannot
    /// express it for that type (reported, never guessed). Expressions are the caller's
    /// business (kept only between databases of one engine).
    func defaultSQL(_ value: ColumnDefault, for type: LogicalType) -> String?
    /// Text after a table's name in a SELECT that reads a random sample of about `fraction` of
    /// its rows (PostgreSQL `TABLESAMPLE SYSTEM (p)`: whole pages, cheap); nil where the engine
    /// samples by a condition instead (`sampleCondition`), or not at all. Default: nil.
    func tableSample(_ fraction: Double) -> String?
    /// A WHERE condition true for a random `fraction` of the rows (MySQL `RAND() < f`, SQLite
    /// by `random()`); nil where the engine has none. Default: nil.
    func sampleCondition(_ fraction: Double) -> String?
}

/// How an engine writes "insert, or update the row with the same key".
public enum UpsertSyntax: Sendable, Hashable {
    /// `INSERT … ON CONFLICT (key) DO UPDATE SET c = excluded.c` (SQLite, PostgreSQL).
    case onConflict
    /// `INSERT … ON DUPLICATE KEY UPDATE c = VALUES(c)` (MySQL, MariaDB).
    case onDuplicateKey
    /// No SQL of its own: the driver upserts by other means (the XML service's change sets).
    case driverDefined
}

/// How an engine declares a column restricted to a list of labels.
public enum EnumSyntax: Sendable, Hashable {
    /// A named type created first: `CREATE TYPE t AS ENUM ('a', 'b')` (PostgreSQL).
    case namedType
    /// In the column's type: `ENUM('a', 'b')` (MySQL, MariaDB).
    case columnType
    /// A text column with `CHECK (c IN ('a', 'b'))` (SQLite).
    case checkConstraint
    /// Whatever the driver's service does with the labels it is sent.
    case driverDefined
}

/// How an engine declares a column that generates its own integers.
public enum IdentitySyntax: Sendable, Hashable {
    /// `GENERATED BY DEFAULT AS IDENTITY` (PostgreSQL).
    case generatedByDefault
    /// `AUTO_INCREMENT` (MySQL, MariaDB).
    case autoIncrement
    /// `INTEGER PRIMARY KEY [AUTOINCREMENT]`, an alias of the rowid (SQLite).
    case rowidAlias
    /// Whatever the driver's service does with a serial column it is sent.
    case driverDefined
}

extension Dialect {
    public func tableSample(_ fraction: Double) -> String? { nil }
    public func sampleCondition(_ fraction: Double) -> String? { nil }
    /// True where a read can ask for a random sample of a table's rows.
    public var samples: Bool { tableSample(0.5) != nil || sampleCondition(0.5) != nil }

    public func quote(_ identifier: String) -> String {
        // Most names hold no quote: no Foundation search (describe quotes names by the hundred).
        guard identifier.utf8.contains(UInt8(ascii: "\"")) else { return "\"" + identifier + "\"" }
        return "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
    public func quote(_ table: TableName) -> String {
        if let schema = table.schema { return quote(schema) + "." + quote(table.name) }
        return quote(table.name)
    }
    public var supportsTransactionalDDL: Bool { true }
    public var rowLockClause: String? { nil }
    public var selectsByKeyList: Bool { true }
    public var supportsConcurrentWriters: Bool { true }
    public func logicalType(forDeclaredType native: String) -> LogicalType? { nil }
    public func ddlType(for type: LogicalType) -> String? { nil }
    public func carriesNatively(_ column: Column, fromEngine engine: Engine) -> Bool { false }
    public func keepsStoredForm(fromEngine engine: Engine) -> Bool { false }

    public func literal(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "''") + "'" }
    public var indexNamesArePerTable: Bool { false }
    public var maxIdentifierLength: Int { 63 }
    public var identifierLimit: IdentifierLimit { .bytes(maxIdentifierLength) }

    /// Why `name` cannot name a table or column of this engine as it is — empty, a NUL byte, or
    /// longer than `identifierLimit` — or nil.
    public func identifierProblem(_ name: String) -> String? {
        if name.isEmpty { return "the name is empty" }
        if name.utf8.contains(0) { return "the name holds a NUL byte" }
        switch identifierLimit {
        case .bytes(let n) where name.utf8.count > n:
            return "the name \(name.prefix(24))… is \(name.utf8.count) bytes long, and \(engine.rawValue) keeps \(n)"
        case .characters(let n) where name.count > n:
            return "the name \(name.prefix(24))… is \(name.count) characters long, and \(engine.rawValue) keeps \(n)"
        default:
            return nil
        }
    }
    public var foreignKeysNeedEqualTypes: Bool { false }
    public var referentialActions: Set<ReferentialAction> { Set(ReferentialAction.allCases) }
    public var deferrableForeignKeys: Bool { false }

    /// Literals as literals (booleans as `TRUE`/`FALSE`, or `1`/`0` for an integer column);
    /// current date and time by their SQL-standard names, for a column of a matching type.
    public func defaultSQL(_ value: ColumnDefault, for type: LogicalType) -> String? {
        switch value {
        case .text(let s): return literal(s)
        case .number(let n):
            if type == .boolean { return n == "0" ? "FALSE" : n == "1" ? "TRUE" : nil }
            return type.isNumeric ? n : literal(n)
        case .boolean(let b):
            if type == .boolean { return b ? "TRUE" : "FALSE" }
            return type.isNumeric ? (b ? "1" : "0") : nil
        case .currentTimestamp:
            if case .timestamp = type { return "CURRENT_TIMESTAMP" }
            return nil
        case .currentDate: return type == .date ? "CURRENT_DATE" : nil
        case .currentTime:
            if case .time = type { return "CURRENT_TIME" }
            return nil
        case .expression: return nil
        }
    }

    /// The clause that turns `INSERT INTO t (columns) …` into an upsert on `key`, updating
    /// `others` (the non-key columns written); nil when the engine has no such SQL. With no
    /// other column, a row whose key exists is left as it is. nil too for an empty key.
    public func upsertClause(key: [String], others: [String]) -> String? {
        guard let first = key.first else { return nil }
        let q = { (s: String) in self.quote(s) }
        switch upsertSyntax {
        case .onConflict:
            return " ON CONFLICT (" + key.map(q).joined(separator: ", ") + ") "
                + (others.isEmpty ? "DO NOTHING" : "DO UPDATE SET " + others.map { "\(q($0)) = excluded.\(q($0))" }.joined(separator: ", "))
        case .onDuplicateKey:
            // With no other column, "update" the key to itself.
            return " ON DUPLICATE KEY UPDATE "
                + (others.isEmpty ? [first] : others).map { "\(q($0)) = VALUES(\(q($0)))" }.joined(separator: ", ")
        case .driverDefined:
            return nil
        }
    }
}

/// The longest table or column name an engine keeps (`Dialect.identifierLimit`).
public enum IdentifierLimit: Sendable, Hashable {
    case bytes(Int)
    case characters(Int)
    /// Any length (SQLite; a service, which checks against its own engine).
    case unlimited
}
