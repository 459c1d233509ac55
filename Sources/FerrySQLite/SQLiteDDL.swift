import FerryCore

/// Where SQLite tables are planned: the CREATE TABLE Ferry runs and the table it makes.
enum SQLiteDDL {
    /// Declared types keep values exact (`SQLiteTypeMap.declaredType`); a single integer serial
    /// primary key becomes SQLite's own serial (`INTEGER PRIMARY KEY`, an alias of the rowid);
    /// enumerations are TEXT with a CHECK of their labels. From SQLite, declared types and
    /// defaults are kept as they are.
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
                } else if sameEngine, !col.nativeType.isEmpty {
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
                if sameEngine, let expr = col.defaultExpression { def += " DEFAULT (\(expr))" }
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
        let sql = "CREATE TABLE \(d.quote(qualified)) (\n  " + parts.joined(separator: ",\n  ") + "\n)"
        return PlannedTable(schema: created, statements: [sql])
    }
}
