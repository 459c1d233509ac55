import FerryCore

/// Where SQLite tables are planned: the CREATE TABLE Ferry runs and the table it makes.
enum SQLiteDDL {
    /// Declared types keep values exact (`SQLiteTypeMap.declaredType`); a single integer serial
    /// primary key becomes SQLite's own serial (`INTEGER PRIMARY KEY`, an alias of the rowid);
    /// enumerations are TEXT with a CHECK of their labels; a table with any other primary key
    /// and narrow rows from another engine is WITHOUT ROWID (`keepsRowsInKeyOrder`). From
    /// SQLite, declared types and defaults are kept as they are.
    static func plan(_ schema: TableSchema, named name: TableName, qualified: TableName, on c: SQLiteConnection) throws -> PlannedTable {
        let d = c.dialect
        let sameEngine = schema.engine == .sqlite
        let q = { (s: String) in d.quote(s) }
        var inlinePK: String?
        if schema.primaryKey.count == 1, let col = schema.column(named: schema.primaryKey[0]), col.isSerial,
           [.int16, .int32, .int64].contains(col.logicalType)
        {
            inlinePK = col.name
        }
        var parts: [String] = []
        var skipped: [SkippedObject] = []
        var created = schema
        created.name = name
        created.engine = .sqlite
        created.rowEstimate = nil
        for (i, col) in schema.columns.enumerated() {
            var def = q(col.name) + " "
            let declared: String
            if col.name == inlinePK {
                declared = "INTEGER"
                def += "INTEGER PRIMARY KEY" + (col.serial == .rowid ? "" : " AUTOINCREMENT")
            } else {
                if let cast = col.declaredType {
                    declared = cast  // named by a cast rule; checked by SQLiteDialect.logicalType(forDeclaredType:)
                } else if sameEngine, !col.nativeType.isEmpty || col.travelsNatively {
                    // (A column declared without a type stays without one: values as stored.)
                    declared = col.nativeType
                } else {
                    guard let mapped = SQLiteTypeMap.declaredType(for: col.logicalType) else {
                        throw FerryError.unsupportedType(
                            table: schema.name, column: col.name, type: col.logicalType.description, target: c.endpoint.redacted)
                    }
                    declared = mapped
                }
                def += declared
                if !col.isNullable { def += " NOT NULL" }
                if sameEngine, let expr = col.defaultExpression {
                    def += " DEFAULT (\(expr))"
                } else if let value = col.defaultValue {
                    if let sql = d.defaultSQL(value, for: col.logicalType) {
                        def += " DEFAULT " + sql
                    } else {
                        skipped.append(SkippedObject(
                            kind: "default", name: col.name, table: schema.name.description,
                            reason: "default \(col.defaultExpression ?? "\(value)") has no SQLite form for a column of type \(col.logicalType)"))
                    }
                }
                if case .enumeration(let labels) = col.logicalType {
                    let list = labels.map { "'" + $0.replacingOccurrences(of: "'", with: "''") + "'" }.joined(separator: ", ")
                    def += " CHECK (\(q(col.name)) IN (\(list)))"
                }
            }
            parts.append(def.trimmingCharacters(in: .whitespaces))
            // The column as SQLite's catalog will describe it.
            created.columns[i].nativeType = declared
            created.columns[i].logicalType = SQLiteTypeMap.logicalType(declared: declared)
            created.columns[i].declaredType = nil
            created.columns[i].readHints = []
        }
        if inlinePK == nil && !schema.primaryKey.isEmpty {
            parts.append("PRIMARY KEY (" + schema.primaryKey.map(q).joined(separator: ", ") + ")")
        }
        for key in schema.uniqueKeys {
            parts.append("UNIQUE (" + key.map(q).joined(separator: ", ") + ")")
        }
        // SQLite cannot add a foreign key later: they are declared here (and checked only on
        // connections that turn PRAGMA foreign_keys on).
        for fk in schema.foreignKeys {
            parts.append(SchemaObjectSQL.foreignKeyClause(fk, dialect: d))
        }
        for check in schema.checks {
            if sameEngine {
                parts.append((check.name.map { "CONSTRAINT \(q($0)) " } ?? "") + "CHECK " + check.expression)
            } else {
                skipped.append(SkippedObject(
                    kind: "check", name: check.name ?? check.expression, table: schema.name.description,
                    reason: "CHECK \(SkippedObject.shortened(check.expression)) is SQL of \(schema.engine.rawValue), copied only between databases of that engine"))
            }
        }
        created.checks = sameEngine ? schema.checks : []
        created.indexes = []
        var sql = "CREATE TABLE \(d.quote(qualified)) (\n  " + parts.joined(separator: ",\n  ") + "\n)"
        if !sameEngine && inlinePK == nil && Self.keepsRowsInKeyOrder(schema) { sql += " WITHOUT ROWID" }
        return PlannedTable(schema: created, statements: [sql], skipped: skipped)
    }

    /// The widest row, in bytes, that goes into a WITHOUT ROWID table: SQLite's advice is rows
    /// under a twentieth of a page (https://sqlite.org/withoutrowid.html §4), and 200 bytes is
    /// that of its default 4 KiB page.
    static let withoutRowidRowBytes = 200

    /// Whether a table from another engine is created WITHOUT ROWID: its primary key is not a
    /// serial integer (that one is the rowid itself), every key column is NOT NULL, and no row
    /// can be wider than `withoutRowidRowBytes`. Such a table keeps its rows in the key's own
    /// B-tree instead of a rowid B-tree plus an index of the key that repeats every key value:
    /// PostgreSQL -> SQLite, 5,000,000 rows of (bigint key, integer), the load into SQLite took
    /// 1.13-1.35 s instead of 1.90-2.09 s and the file is 74 MB instead of 152 MB. Its key
    /// takes only the values the source's did (a rowid alias would be a serial key that fills
    /// itself in, and would come back from SQLite as one).
    static func keepsRowsInKeyOrder(_ schema: TableSchema) -> Bool {
        guard !schema.primaryKey.isEmpty else { return false }
        for name in schema.primaryKey {
            guard let col = schema.column(named: name), !col.isNullable else { return false }
        }
        var bound = 0
        for col in schema.columns {
            guard let width = SQLiteTypeMap.storedWidthBound(of: col.logicalType) else { return false }
            bound += width
            if bound > withoutRowidRowBytes { return false }
        }
        return true
    }

    /// Indexes named so that they are free in the file (SQLite's index names share one
    /// namespace with its tables); foreign keys are in CREATE TABLE already.
    static func planObjects(
        _ schema: TableSchema, on table: TableName, qualified: TableName, replacing: TableName?, avoiding: Set<String>, on c: SQLiteConnection
    ) throws -> PlannedObjects {
        let d = c.dialect
        var out = PlannedObjects(table: table)
        var taken = try c.objectNames(in: c.schemaName(table), except: replacing).union(avoiding)
        for index in schema.indexes {
            if !index.isStructured && schema.engine != .sqlite {
                out.skipped.append(SkippedObject(
                    kind: "index", name: index.name, table: schema.name.description,
                    reason: "an index over expressions or with a WHERE clause is SQL of \(schema.engine.rawValue); it is copied only between databases of that engine"))
                continue
            }
            var planned = index
            planned.name = SchemaObjectSQL.freeName(index.name, table: table.name, limit: 1_000, taken: taken)
            taken.insert(planned.name)
            let name = d.quote(TableName(schema: qualified.schema, planned.name))
            if let definition = index.expression {
                // SQLite's own CREATE INDEX, retargeted: everything from the column list on.
                let scrubbed = SQLiteConnection.scrub(definition)
                guard let on = scrubbed.range(of: #"\sON\s"#, options: [.regularExpression, .caseInsensitive]),
                      let open = scrubbed[on.upperBound...].firstIndex(of: "(")
                else {
                    out.skipped.append(SkippedObject(
                        kind: "index", name: index.name, table: schema.name.description, reason: "its definition could not be read: \(SkippedObject.shortened(definition))"))
                    continue
                }
                let offset = scrubbed.distance(from: scrubbed.startIndex, to: open)
                out.indexStatements.append(
                    "CREATE \(index.isUnique ? "UNIQUE " : "")INDEX \(name) ON \(d.quote(table.name)) " + definition.dropFirst(offset))
            } else {
                var sql = SchemaObjectSQL.createIndex(planned, on: TableName(table.name), dialect: d, indexName: name)
                if let predicate = index.predicate { sql += " WHERE " + predicate }
                out.indexStatements.append(sql)
            }
            out.indexes.append(planned)
        }
        return out
    }
}
