import FerryCore

/// Where MySQL/MariaDB tables are planned: the CREATE TABLE Ferry runs and the table it makes.
enum MySQLDDL {
    /// CREATE TABLE with the primary key and unique keys, AUTO_INCREMENT for a serial key
    /// column, InnoDB, utf8mb4 with a binary collation (text keys compare as their bytes, as
    /// every other engine's do). From MySQL, column types and defaults are kept.
    static func plan(_ schema: TableSchema, named name: TableName, on c: MySQLConnection) throws -> PlannedTable {
        let d = c.myDialect
        let sameEngine = schema.engine == .mysql
        var skipped: [SkippedObject] = []
        let keyColumns = Set(schema.primaryKey + schema.uniqueKeys.flatMap { $0 })
        var parts: [String] = []
        var created = schema
        created.name = name
        created.engine = .mysql
        created.rowEstimate = nil
        for (i, col) in schema.columns.enumerated() {
            var type: String
            if let declared = col.declaredType {
                type = declared  // named by a cast rule; checked by MySQLDialect.logicalType(forDeclaredType:)
            } else if sameEngine, !col.nativeType.isEmpty {
                type = col.nativeType
                if col.logicalType == .json { type = "JSON" }
            } else {
                guard let t = MySQLTypeMap.declaredType(for: col.logicalType) else {
                    throw FerryError.unsupportedType(table: schema.name, column: col.name, type: col.logicalType.description, target: c.endpoint.redacted)
                }
                type = t
            }
            if keyColumns.contains(col.name), type == "LONGTEXT" || type == "LONGBLOB" {
                throw FerryError.invalidValue(
                    table: schema.name, column: col.name, key: nil,
                    message: "a key column of unbounded \(col.logicalType) cannot be indexed by MySQL without a prefix length; give the source column a length (e.g. varchar(255))")
            }
            var def = d.quote(col.name) + " " + type
            if !col.isNullable { def += " NOT NULL" }
            if col.isSerial, [.int16, .int32, .int64].contains(col.logicalType), keyColumns.contains(col.name) {
                def += " AUTO_INCREMENT"
            }
            if !col.isSerial, let sql = defaultClause(col, type: type, sameEngine: sameEngine, table: schema.name, dialect: d, skipped: &skipped) {
                def += " DEFAULT " + sql
            }
            // Other engines' columns have none: the plan reports it for them.
            if sameEngine, let update = col.updateExpression { def += " ON UPDATE " + update }
            parts.append(def)
            // The column as MySQL's catalog will describe it (JSON is MariaDB's checked LONGTEXT).
            created.columns[i].nativeType = type
            let described = MySQLTypeMap.logicalType(columnType: type)
            created.columns[i].logicalType = col.readHints.contains(.nativeForm) || !described.isSupported ? col.logicalType : described
            created.columns[i].declaredType = nil
        }
        if !schema.primaryKey.isEmpty {
            parts.append("PRIMARY KEY (" + schema.primaryKey.map { d.quote($0) }.joined(separator: ", ") + ")")
        }
        for key in schema.uniqueKeys {
            parts.append("UNIQUE (" + key.map { d.quote($0) }.joined(separator: ", ") + ")")
        }
        for check in schema.checks {
            if sameEngine {
                parts.append((check.name.map { "CONSTRAINT \(d.quote($0)) " } ?? "") + "CHECK " + check.expression)
            } else {
                skipped.append(SkippedObject(
                    kind: "check", name: check.name ?? check.expression, table: schema.name.description,
                    reason: "CHECK \(SkippedObject.shortened(check.expression)) is SQL of \(schema.engine.rawValue), copied only between databases of that engine"))
            }
        }
        created.checks = sameEngine ? schema.checks : []
        created.indexes = []
        created.foreignKeys = []
        let sql = "CREATE TABLE \(d.quote(name)) (\n  " + parts.joined(separator: ",\n  ")
            + "\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
        return PlannedTable(schema: created, statements: [sql], skipped: skipped)
    }

    /// A column's DEFAULT: the source's own between MySQL databases, else a portable default in
    /// MySQL's SQL (CURRENT_TIMESTAMP with the column's fraction digits); the rest is reported.
    static func defaultClause(
        _ col: Column, type: String, sameEngine: Bool, table: TableName, dialect d: MySQLDialect, skipped: inout [SkippedObject]
    ) -> String? {
        if sameEngine, let expr = col.defaultExpression {
            // MySQL 8 prints string defaults bare: write them back quoted.
            if case .text(let s)? = col.defaultValue, !expr.hasPrefix("'") { return d.literal(s) }
            if case .expression? = col.defaultValue, !expr.hasPrefix("(") { return "(" + expr + ")" }
            return expr
        }
        guard let value = col.defaultValue else { return nil }
        let logical = MySQLTypeMap.logicalType(columnType: type)
        if let sql = d.defaultSQL(value, for: logical) { return sql }
        skipped.append(SkippedObject(
            kind: "default", name: col.name, table: table.description,
            reason: "default \(col.defaultExpression ?? "\(value)") has no MySQL form for a column of type \(type)"))
        return nil
    }

    /// Indexes (named as in the source: MySQL's index names are per table) and foreign keys
    /// (named so that they are free in the database: MySQL's are per schema), added after the
    /// load. A replace creates the indexes on its staging table before the swap.
    static func planObjects(
        _ schema: TableSchema, on table: TableName, indexesOn: TableName, replacing: TableName?, avoiding: Set<String>,
        on c: MySQLConnection
    ) throws -> PlannedObjects {
        let d = c.myDialect
        let sameEngine = schema.engine == .mysql
        var out = PlannedObjects(table: table, indexesOn: indexesOn)
        var taken = Set<String>()
        for index in schema.indexes {
            if !index.isStructured && schema.engine != .mysql || index.predicate != nil {
                out.skipped.append(SkippedObject(
                    kind: "index", name: index.name, table: schema.name.description,
                    reason: index.predicate != nil
                        ? "MySQL has no partial indexes (WHERE \(index.predicate ?? ""))"
                        : "an index over expressions or prefixes is SQL of \(schema.engine.rawValue); it is copied only between databases of that engine"))
                continue
            }
            var planned = index
            planned.name = SchemaObjectSQL.freeName(index.name, table: table.name, limit: d.maxIdentifierLength, taken: taken)
            taken.insert(planned.name)
            if let native = index.expression {
                // MySQL's own definition: [FULLTEXT|SPATIAL] (cols with prefixes).
                let kind = native.hasPrefix("FULLTEXT") ? "FULLTEXT " : native.hasPrefix("SPATIAL") ? "SPATIAL " : index.isUnique ? "UNIQUE " : ""
                guard let open = native.firstIndex(of: "(") else {
                    out.skipped.append(SkippedObject(
                        kind: "index", name: index.name, table: schema.name.description, reason: "it is over an expression, which Ferry does not read from MySQL's catalog"))
                    continue
                }
                out.indexStatements.append("CREATE \(kind)INDEX \(d.quote(planned.name)) ON \(d.quote(indexesOn)) " + native[open...])
            } else {
                // Long text and binary columns are indexed by a prefix (InnoDB keys hold 3072 bytes: 768 characters).
                let cols = planned.columns.map { ic -> String in
                    let type = schema.column(named: ic.name).map { $0.declaredType ?? (sameEngine && !$0.nativeType.isEmpty ? $0.nativeType : MySQLTypeMap.declaredType(for: $0.logicalType) ?? "") } ?? ""
                    let long = ["text", "blob", "json"].contains { type.lowercased().hasSuffix($0) } || type.lowercased().hasPrefix("longtext") || type.lowercased().hasPrefix("longblob")
                    return d.quote(ic.name) + (long ? "(768)" : "") + (ic.descending ? " DESC" : "")
                }.joined(separator: ", ")
                out.indexStatements.append(
                    "CREATE \(planned.isUnique ? "UNIQUE " : "")INDEX \(d.quote(planned.name)) ON \(d.quote(indexesOn)) (\(cols))")
            }
            out.indexes.append(planned)
        }
        var fkNames = try c.foreignKeyNames(except: replacing).union(avoiding)
        for var fk in schema.foreignKeys {
            if !d.referentialActions.contains(fk.onDelete) || !d.referentialActions.contains(fk.onUpdate) {
                out.skipped.append(SkippedObject(
                    kind: "foreign key", name: fk.name ?? fk.summary, table: schema.name.description,
                    reason: "MySQL's InnoDB refuses ON DELETE/ON UPDATE SET DEFAULT"))
                continue
            }
            if fk.onDelete == .setNull || fk.onUpdate == .setNull,
               let notNull = fk.columns.first(where: { schema.column(named: $0)?.isNullable == false })
            {
                out.skipped.append(SkippedObject(
                    kind: "foreign key", name: fk.name ?? fk.summary, table: schema.name.description,
                    reason: "it says SET NULL but column \(notNull) is NOT NULL, which MySQL refuses"))
                continue
            }
            let name = fk.name ?? "fk_\(table.name)_\(fk.columns.joined(separator: "_"))"
            fk.name = SchemaObjectSQL.freeName(name, table: table.name, limit: d.maxIdentifierLength, taken: fkNames)
            fkNames.insert(fk.name ?? name)
            out.foreignKeys.append(fk)
            out.foreignKeyStatements.append(SchemaObjectSQL.addForeignKey(fk, to: table, dialect: d))
        }
        return out
    }
}
