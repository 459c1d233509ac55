import CMariaDB
import FerryCore

/// Catalog queries from information_schema, kept together by purpose: tables, columns, keys.
/// Names travel as escaped literals; identifiers reach SQL only through `quote`.
extension MySQLConnection {
    func schemaOf(_ table: TableName) -> String { table.schema ?? database }

    public func listTables() throws -> [TableInfo] {
        let rows = try query(
            """
            SELECT TABLE_NAME, TABLE_ROWS FROM information_schema.TABLES
            WHERE TABLE_SCHEMA = \(lit(database)) AND TABLE_TYPE = 'BASE TABLE'
              AND TABLE_NAME NOT LIKE '\\_ferry\\_%' ORDER BY TABLE_NAME
            """)
        return try rows.map { r in
            let name = TableName(r[0] ?? "")
            return TableInfo(name: name, rowEstimate: try estimate(name, r[1].flatMap { Int64($0) }))
        }
    }

    /// InnoDB's TABLE_ROWS is a rough guess: small tables are counted exactly.
    func estimate(_ table: TableName, _ guess: Int64?) throws -> Int64? {
        if let guess, guess >= 1_000_000 { return guess }
        return try? countRows(table)
    }

    public func tableExists(_ table: TableName) throws -> Bool {
        try !query(
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = \(lit(schemaOf(table))) AND TABLE_NAME = \(lit(table.name))"
        ).isEmpty
    }

    public func countRows(_ table: TableName) throws -> Int64 {
        guard try tableExists(table) else { throw FerryError.tableNotFound(table: table, endpoint: endpoint.redacted) }
        return try query("SELECT count(*) FROM \(dialect.quote(table))").first?.first?.flatMap { Int64($0) } ?? 0
    }

    public func describe(_ table: TableName) throws -> TableSchema {
        let schema = schemaOf(table)
        let meta = try query(
            "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = \(lit(schema)) AND TABLE_NAME = \(lit(table.name))")
        guard let first = meta.first else { throw FerryError.tableNotFound(table: table, endpoint: endpoint.redacted) }
        let cols = try query(
            """
            SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA FROM information_schema.COLUMNS
            WHERE TABLE_SCHEMA = \(lit(schema)) AND TABLE_NAME = \(lit(table.name)) ORDER BY ORDINAL_POSITION
            """)
        // MariaDB's JSON is LONGTEXT with a json_valid() check: find those columns.
        let checks = try query(
            """
            SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS
            WHERE CONSTRAINT_SCHEMA = \(lit(schema)) AND TABLE_NAME = \(lit(table.name))
            """).compactMap { $0.first ?? nil }
        var columns: [Column] = []
        for c in cols {
            let name = c[0] ?? ""
            let type = c[1] ?? ""
            let extra = (c[4] ?? "").lowercased()
            var logical = MySQLTypeMap.logicalType(columnType: type)
            if checks.contains("json_valid(" + dialect.quote(name) + ")") { logical = .json }
            var dflt = c[3]
            // MariaDB reports "NULL" for no default and quotes string defaults.
            if dflt == "NULL" { dflt = nil }
            columns.append(Column(
                name: name, nativeType: type, logicalType: logical, isNullable: c[2] == "YES",
                defaultExpression: dflt, serial: extra.contains("auto_increment") ? .autoincrement : nil,
                generated: extra.contains("generated") || extra.contains("virtual") || extra.contains("persistent")))
        }
        let stats = try query(
            """
            SELECT INDEX_NAME, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS
            WHERE TABLE_SCHEMA = \(lit(schema)) AND TABLE_NAME = \(lit(table.name)) AND NON_UNIQUE = 0
            ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX
            """)
        var keys: [(name: String, cols: [String], usable: Bool)] = []
        for s in stats {
            let index = s[0] ?? ""
            if keys.last?.name != index { keys.append((index, [], true)) }
            if let col = s[1], s[2] == nil { keys[keys.count - 1].cols.append(col) } else { keys[keys.count - 1].usable = false }
        }
        let primary = keys.first { $0.name == "PRIMARY" && $0.usable }?.cols ?? []
        var unique: [[String]] = []
        for k in keys where k.name != "PRIMARY" && k.usable && !unique.contains(k.cols) && k.cols != primary { unique.append(k.cols) }
        return TableSchema(
            name: table, engine: .mysql, columns: columns, primaryKey: primary, uniqueKeys: unique,
            rowEstimate: try estimate(table, first.first.flatMap { $0.flatMap { Int64($0) } }))
    }
}
