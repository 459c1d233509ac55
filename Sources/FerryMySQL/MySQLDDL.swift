import FerryCore

/// Where MySQL/MariaDB tables are planned: the CREATE TABLE Ferry runs and the table it makes.
enum MySQLDDL {
    /// CREATE TABLE with the primary key and unique keys, AUTO_INCREMENT for a serial key
    /// column, InnoDB, utf8mb4 with a binary collation (text keys compare as their bytes, as
    /// every other engine's do). From MySQL, column types and defaults are kept.
    static func plan(_ schema: TableSchema, named name: TableName, on c: MySQLConnection) throws -> PlannedTable {
        let d = c.dialect
        let sameEngine = schema.engine == .mysql
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
            if sameEngine, let expr = col.defaultExpression, !col.isSerial { def += " DEFAULT " + expr }
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
        let sql = "CREATE TABLE \(d.quote(name)) (\n  " + parts.joined(separator: ",\n  ")
            + "\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
        return PlannedTable(schema: created, statements: [sql])
    }
}
