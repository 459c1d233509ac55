/// The parts of a table's schema beyond its columns and keys, as every driver's catalog file
/// fills them: secondary indexes, foreign keys, CHECK constraints, and objects Ferry reports
/// but does not carry. Structured objects (column lists, uniqueness, order, actions) travel
/// between engines and through the XML service; objects that exist only as SQL text (partial
/// and expression indexes, CHECKs, expression defaults) are carried only where the target can
/// express them, and never through the service.

/// One column of an index, in index order.
public struct IndexColumn: Hashable, Sendable, Codable {
    public var name: String
    public var descending: Bool
    public init(_ name: String, descending: Bool = false) {
        self.name = name
        self.descending = descending
    }
}

/// A secondary index (the primary key and unique constraints are `TableSchema`'s keys).
public struct IndexInfo: Hashable, Sendable, Codable {
    /// The name as the source engine spells it.
    public var name: String
    /// The indexed columns, in order (for an index over expressions, the plain columns it names).
    public var columns: [IndexColumn]
    public var isUnique: Bool
    /// The engine's own SQL for the parts that are not plain columns: the predicate of a
    /// partial index (`WHERE …`).
    public var predicate: String?
    /// The engine's own definition of an index over expressions (not portable).
    public var expression: String?

    public init(name: String, columns: [IndexColumn], isUnique: Bool = false, predicate: String? = nil, expression: String? = nil) {
        self.name = name
        self.columns = columns
        self.isUnique = isUnique
        self.predicate = predicate
        self.expression = expression
    }

    /// True when the index is only column lists and flags: any engine, and the service, can carry it.
    public var isStructured: Bool { predicate == nil && expression == nil && !columns.isEmpty }
}

/// What a foreign key does when the referenced row is deleted or its key updated.
public enum ReferentialAction: String, Hashable, Sendable, Codable, CaseIterable {
    case noAction = "NO ACTION"
    case restrict = "RESTRICT"
    case cascade = "CASCADE"
    case setNull = "SET NULL"
    case setDefault = "SET DEFAULT"

    /// Reads the action as catalogs spell it (`CASCADE`, `NO ACTION`, PostgreSQL's `a`/`r`/`c`/`n`/`d`).
    public init?(catalog text: String) {
        switch text.uppercased().trimmingCharacters(in: .whitespaces) {
        case "NO ACTION", "A", "": self = .noAction
        case "RESTRICT", "R": self = .restrict
        case "CASCADE", "C": self = .cascade
        case "SET NULL", "N": self = .setNull
        case "SET DEFAULT", "D": self = .setDefault
        default: return nil
        }
    }
}

/// A foreign key of the table.
public struct ForeignKey: Hashable, Sendable, Codable {
    /// The constraint's name; nil when the engine gives none (SQLite's unnamed constraints).
    public var name: String?
    public var columns: [String]
    /// The referenced table, as the source names it (schema-qualified when not in the default schema).
    public var referencedTable: TableName
    public var referencedColumns: [String]
    public var onDelete: ReferentialAction
    public var onUpdate: ReferentialAction

    public init(
        name: String?, columns: [String], referencedTable: TableName, referencedColumns: [String],
        onDelete: ReferentialAction = .noAction, onUpdate: ReferentialAction = .noAction
    ) {
        self.name = name
        self.columns = columns
        self.referencedTable = referencedTable
        self.referencedColumns = referencedColumns
        self.onDelete = onDelete
        self.onUpdate = onUpdate
    }

    /// `(AlbumId) → Album(AlbumId)`, for messages.
    public var summary: String {
        "(" + columns.joined(separator: ", ") + ") → \(referencedTable)(" + referencedColumns.joined(separator: ", ") + ")"
    }
}

/// A CHECK constraint, as SQL text of its engine.
public struct CheckConstraint: Hashable, Sendable, Codable {
    public var name: String?
    /// The condition, without the `CHECK ( )` around it.
    public var expression: String
    public init(name: String?, expression: String) {
        self.name = name
        self.expression = expression
    }
}

/// A column default, as far as it can be understood without running SQL.
public enum ColumnDefault: Hashable, Sendable, Codable {
    /// A string literal (its value, unquoted).
    case text(String)
    /// A numeric literal, as written (`0`, `-1.50`).
    case number(String)
    case boolean(Bool)
    /// `CURRENT_TIMESTAMP`, `now()`, `current_timestamp()`, `localtimestamp`.
    case currentTimestamp
    case currentDate
    case currentTime
    /// Anything else: the engine's own SQL, carried only to the same engine.
    case expression(String)

    /// True when the default is a value or a well-known function, which every engine can express.
    public var isPortable: Bool {
        if case .expression = self { return false }
        return true
    }
}

/// A relation or object of the source that a copy does not carry, reported by name.
public struct OtherObject: Hashable, Sendable, Codable, CustomStringConvertible {
    /// `view`, `trigger`, `sequence`, `materialized view`, `partition`, `rule`…
    public var kind: String
    public var name: String
    /// The table it belongs to, when it belongs to one (a trigger, a partition).
    public var table: String?
    public init(kind: String, name: String, table: String? = nil) {
        self.kind = kind
        self.name = name
        self.table = table
    }
    public var description: String { "\(kind) \(name)" + (table.map { " (on \($0))" } ?? "") }

    /// One line per kind: `views: a, b`; `triggers: last_updated (on 14 tables), t2 (on film)`.
    public static func summary(_ objects: [OtherObject]) -> [String] {
        var kinds: [String] = []
        var byKind: [String: [String: [String]]] = [:]
        var order: [String: [String]] = [:]
        for o in objects {
            if byKind[o.kind] == nil { kinds.append(o.kind) }
            if byKind[o.kind, default: [:]][o.name] == nil { order[o.kind, default: []].append(o.name) }
            byKind[o.kind, default: [:]][o.name, default: []] += o.table.map { [$0] } ?? []
        }
        return kinds.map { kind in
            let names = (order[kind] ?? []).map { name -> String in
                let tables = byKind[kind]?[name] ?? []
                switch tables.count {
                case 0: return name
                case 1: return "\(name) (on \(tables[0]))"
                default: return "\(name) (on \(tables.count) tables)"
                }
            }
            return "\(kind)\(names.count == 1 ? "" : "s") " + names.joined(separator: ", ")
        }
    }
}

/// A schema object a plan leaves out, and why (shown by the plan, `--dry-run` and the summary).
public struct SkippedObject: Hashable, Sendable, Codable, CustomStringConvertible {
    /// `index`, `foreign key`, `check`, `default`, or an `OtherObject`'s kind.
    public var kind: String
    public var name: String
    public var table: String
    public var reason: String
    public init(kind: String, name: String, table: String, reason: String) {
        self.kind = kind
        self.name = name
        self.table = table
        self.reason = reason
    }
    public var description: String { "\(table): \(kind) \(name) not carried: \(reason)" }

    /// SQL text cut for a one-line message.
    public static func shortened(_ sql: String, limit: Int = 60) -> String {
        let one = sql.split(whereSeparator: \.isNewline).joined(separator: " ")
        return one.count > limit ? one.prefix(limit - 3) + "..." : one
    }
}

/// The indexes and foreign keys a target creates for one table, as its driver planned them:
/// indexes right after the table's rows are loaded, foreign keys after every table of the copy
/// is loaded (SQLite, which cannot add them later, declares them in its CREATE TABLE instead).
public struct PlannedObjects: Hashable, Sendable, Codable {
    /// The table they belong to (foreign keys are added to it).
    public var table: TableName
    /// The table the indexes are built on: `table`, or a replace's staging table.
    public var indexesOn: TableName
    /// The indexes as planned (names as the target will have them).
    public var indexes: [IndexInfo]
    /// The foreign keys added after the load (none on engines that declare them in CREATE TABLE).
    public var foreignKeys: [ForeignKey]
    /// Exactly what runs for `indexes`, in order (for the XML service, the request).
    public var indexStatements: [String]
    /// Exactly what runs for `foreignKeys`, in order.
    public var foreignKeyStatements: [String]
    /// Objects of the schema the target cannot create, each with its reason.
    public var skipped: [SkippedObject]

    public init(
        table: TableName, indexesOn: TableName? = nil, indexes: [IndexInfo] = [], foreignKeys: [ForeignKey] = [], indexStatements: [String] = [],
        foreignKeyStatements: [String] = [], skipped: [SkippedObject] = []
    ) {
        self.table = table
        self.indexesOn = indexesOn ?? table
        self.indexes = indexes
        self.foreignKeys = foreignKeys
        self.indexStatements = indexStatements
        self.foreignKeyStatements = foreignKeyStatements
        self.skipped = skipped
    }
}
