import CSQLite
import FerryCore

/// Catalog queries, kept together by purpose: tables, columns, keys. All go through the
/// PRAGMA table-valued functions with bound names, so no identifier is ever spliced into SQL
/// except through `quote`.
extension SQLiteConnection {
    /// `main` unless the table names an attached schema.
    func schemaName(_ table: TableName) -> String { table.schema ?? "main" }

    public func listTables() throws -> [TableInfo] {
        var out: [TableInfo] = []
        for schema in try schemas() {
            let sql = """
                SELECT name FROM \(dialect.quote(schema)).sqlite_schema
                WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'
                  AND name NOT LIKE '\(CopyEngine.internalPrefix.replacingOccurrences(of: "_", with: "\\_"))%' ESCAPE '\\'
                  AND coalesce(sql, '') NOT LIKE 'CREATE VIRTUAL%'
                ORDER BY name
                """
            for row in try prepare(sql).rows() {
                guard let name = row[0] else { continue }
                let t = TableName(schema: schema == "main" ? nil : schema, name)
                out.append(TableInfo(name: t, rowEstimate: try countRows(t)))
            }
        }
        return out
    }

    /// `main` and attached databases (not `temp`).
    func schemas() throws -> [String] {
        try prepare("SELECT name FROM pragma_database_list WHERE name <> 'temp' ORDER BY seq").rows().compactMap { $0[0] }
    }

    public func tableExists(_ table: TableName) throws -> Bool {
        let st = try prepare(
            "SELECT 1 FROM \(dialect.quote(schemaName(table))).sqlite_schema WHERE type = 'table' AND name = ?1")
        try st.bind([.text(table.name)])
        // Reset before returning: a statement left on a row holds a read lock on the file.
        defer { st.reset() }
        return try st.step()
    }

    public func countRows(_ table: TableName) throws -> Int64 {
        guard try tableExists(table) else { throw FerryError.tableNotFound(table: table, endpoint: endpoint.redacted) }
        let st = try prepare("SELECT count(*) FROM \(dialect.quote(qualified(table)))")
        defer { st.reset() }
        _ = try st.step()
        return st.columnInt(0)
    }

    /// The table with its schema made explicit when it is an attached one.
    func qualified(_ table: TableName) -> TableName {
        table.schema == nil || table.schema == "main" ? TableName(table.name) : table
    }

    public func describe(_ table: TableName) throws -> TableSchema {
        let schema = schemaName(table)
        let sqlSt = try prepare(
            "SELECT sql FROM \(dialect.quote(schema)).sqlite_schema WHERE type = 'table' AND name = ?1")
        try sqlSt.bind([.text(table.name)])
        guard try sqlSt.step() else { throw FerryError.tableNotFound(table: table, endpoint: endpoint.redacted) }
        let createSQL = sqlSt.columnText(0) ?? ""
        sqlSt.reset()
        let hasAutoincrement = Self.containsKeyword(createSQL, "AUTOINCREMENT")

        // Columns: cid, name, type, notnull, dflt_value, pk, hidden (2, 3 = generated).
        let colSt = try prepare(
            "SELECT name, type, \"notnull\", dflt_value, pk, hidden FROM pragma_table_xinfo(?1, ?2) ORDER BY cid")
        try colSt.bind([.text(table.name), .text(schema)])
        struct Raw { var name: String; var type: String; var notNull: Bool; var dflt: String?; var pk: Int64; var hidden: Int64 }
        var raws: [Raw] = []
        while try colSt.step() {
            raws.append(Raw(
                name: colSt.columnText(0) ?? "", type: colSt.columnText(1) ?? "", notNull: colSt.columnInt(2) != 0,
                dflt: colSt.columnText(3), pk: colSt.columnInt(4), hidden: colSt.columnInt(5)))
        }
        // hidden = 1 marks virtual-table columns, which listTables excludes anyway.
        raws.removeAll { $0.hidden == 1 }
        let primaryKey = raws.filter { $0.pk > 0 }.sorted { $0.pk < $1.pk }.map(\.name)

        // Indexes: unique ones (not partial, no expressions) become unique keys; an index of
        // origin 'pk' means the primary key is not a rowid alias (WITHOUT ROWID or non-INTEGER).
        var uniqueKeys: [[String]] = []
        var hasPKIndex = false
        let idxSt = try prepare("SELECT name, \"unique\", origin, partial FROM pragma_index_list(?1, ?2) ORDER BY seq")
        try idxSt.bind([.text(table.name), .text(schema)])
        var indexes: [(name: String, unique: Bool, origin: String, partial: Bool)] = []
        while try idxSt.step() {
            indexes.append((idxSt.columnText(0) ?? "", idxSt.columnInt(1) != 0, idxSt.columnText(2) ?? "", idxSt.columnInt(3) != 0))
        }
        for idx in indexes {
            if idx.origin == "pk" { hasPKIndex = true; continue }
            guard idx.unique, !idx.partial else { continue }
            let infoSt = try prepare("SELECT cid, name FROM pragma_index_info(?1, ?2) ORDER BY seqno")
            try infoSt.bind([.text(idx.name), .text(schema)])
            var cols: [String] = []
            var expression = false
            while try infoSt.step() {
                if infoSt.columnInt(0) < 0 { expression = true }
                if let n = infoSt.columnText(1) { cols.append(n) }
            }
            if !expression, !cols.isEmpty, cols != primaryKey, !uniqueKeys.contains(cols) { uniqueKeys.append(cols) }
        }

        let rowidAlias = primaryKey.count == 1 && !hasPKIndex
            && raws.first(where: { $0.name == primaryKey[0] })?.type.uppercased() == "INTEGER"
        let columns = raws.map { raw -> Column in
            let isAlias = rowidAlias && raw.name == primaryKey[0]
            return Column(
                name: raw.name, nativeType: raw.type, logicalType: SQLiteTypeMap.logicalType(declared: raw.type),
                isNullable: !raw.notNull && !isAlias, defaultExpression: raw.dflt,
                serial: isAlias ? (hasAutoincrement ? .autoincrement : .rowid) : nil,
                generated: raw.hidden == 2 || raw.hidden == 3)
        }
        return TableSchema(
            name: table, engine: .sqlite, columns: columns, primaryKey: primaryKey, uniqueKeys: uniqueKeys,
            rowEstimate: try countRows(table))
    }

    /// True when `keyword` appears in `sql` as a word outside quotes and comments.
    static func containsKeyword(_ sql: String, _ keyword: String) -> Bool {
        var scrubbed = ""
        var quote: Character?
        var it = Array(sql)[...]
        while let c = it.popFirst() {
            if let q = quote {
                if c == q { quote = nil }
                continue
            }
            switch c {
            case "'", "\"", "`":
                quote = c
                scrubbed.append(" ")
            case "[":
                quote = "]"
                scrubbed.append(" ")
            case "-" where it.first == "-":
                while let n = it.popFirst(), n != "\n" {}
                scrubbed.append(" ")
            case "/" where it.first == "*":
                it.removeFirst()
                while let n = it.popFirst() { if n == "*" && it.first == "/" { it.removeFirst(); break } }
                scrubbed.append(" ")
            default: scrubbed.append(c)
            }
        }
        return scrubbed.uppercased().split(whereSeparator: { !$0.isLetter && !$0.isNumber && $0 != "_" })
            .contains { $0 == keyword }
    }
}
