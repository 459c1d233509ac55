/// The SQL of indexes and foreign keys as SQLite, PostgreSQL and MySQL share it, in a
/// dialect's quoting. Drivers plan with it (choosing names and what they can express) in
/// their `<Engine>DDL` files.
public enum SchemaObjectSQL {
    /// `ALTER TABLE … ADD COLUMN …` of a nullable column of the target's type, with `default`
    /// where the dialect can express it for the column's type.
    public static func addColumn(_ column: Column, default value: ColumnDefault?, to table: TableName, dialect d: any Dialect) -> String {
        var sql = "ALTER TABLE \(d.quote(table)) ADD COLUMN \(d.quote(column.name)) \(column.nativeType)"
        if let value, let expr = d.defaultSQL(value, for: column.logicalType) { sql += " DEFAULT \(expr)" }
        return sql
    }

    /// `CREATE [UNIQUE] INDEX name ON table (a, b DESC)`.
    public static func createIndex(_ index: IndexInfo, on table: TableName, dialect d: any Dialect, indexName: String? = nil) -> String {
        let cols = index.columns.map { d.quote($0.name) + ($0.descending ? " DESC" : "") }.joined(separator: ", ")
        return "CREATE \(index.isUnique ? "UNIQUE " : "")INDEX \(indexName ?? d.quote(index.name)) ON \(d.quote(table)) (\(cols))"
    }

    /// `FOREIGN KEY (a) REFERENCES t (b) [ON DELETE …] [ON UPDATE …]`, with `CONSTRAINT name` first when named.
    public static func foreignKeyClause(_ fk: ForeignKey, dialect d: any Dialect) -> String {
        var s = fk.name.map { "CONSTRAINT \(d.quote($0)) " } ?? ""
        s += "FOREIGN KEY (" + fk.columns.map { d.quote($0) }.joined(separator: ", ") + ") REFERENCES "
        s += d.quote(fk.referencedTable) + " (" + fk.referencedColumns.map { d.quote($0) }.joined(separator: ", ") + ")"
        if fk.onDelete != .noAction { s += " ON DELETE " + fk.onDelete.rawValue }
        if fk.onUpdate != .noAction { s += " ON UPDATE " + fk.onUpdate.rawValue }
        if d.deferrableForeignKeys { s += " DEFERRABLE" }
        return s
    }

    /// `ALTER TABLE t ADD CONSTRAINT … FOREIGN KEY …`.
    public static func addForeignKey(_ fk: ForeignKey, to table: TableName, dialect d: any Dialect) -> String {
        "ALTER TABLE \(d.quote(table)) ADD " + foreignKeyClause(fk, dialect: d)
    }

    /// A name no longer than `limit` bytes: `name` itself, else cut with a short hash of the
    /// whole so that two long names stay apart.
    public static func fit(_ name: String, limit: Int) -> String {
        guard name.utf8.count > limit else { return name }
        var h: UInt32 = 2_166_136_261
        for b in name.utf8 { h = (h ^ UInt32(b)) &* 16_777_619 }
        let suffix = "_" + String(h, radix: 16)
        var cut = ""
        for ch in name {
            if cut.utf8.count + String(ch).utf8.count + suffix.utf8.count > limit { break }
            cut.append(ch)
        }
        return cut + suffix
    }

    /// The first of `name`, `table_name`, `table_name_2`, … that `taken` does not hold (compared
    /// case-insensitively, as MySQL and SQLite compare them), fitted to `limit`.
    public static func freeName(_ name: String, table: String, limit: Int, taken: Set<String>) -> String {
        let lower = Set(taken.map { $0.lowercased() })
        var candidate = fit(name, limit: limit)
        if !lower.contains(candidate.lowercased()) { return candidate }
        let base = name.lowercased().hasPrefix(table.lowercased()) ? name : table + "_" + name
        candidate = fit(base, limit: limit)
        var n = 2
        while lower.contains(candidate.lowercased()) {
            candidate = fit(base + "_\(n)", limit: limit)
            n += 1
        }
        return candidate
    }
}
