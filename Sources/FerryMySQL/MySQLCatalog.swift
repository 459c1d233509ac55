import CMariaDB
import FerryCore
import Foundation

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

    /// InnoDB's TABLE_ROWS is a rough guess (0 for a table loaded since its statistics were
    /// taken): small tables are counted exactly. Not up to a million rows: counting 1,000,000
    /// bench_orders rows took MariaDB 0.55 s, and listing the tables and describing the one
    /// copied counted it twice.
    func estimate(_ table: TableName, _ guess: Int64?) throws -> Int64? {
        if let guess, guess >= 100_000 { return guess }
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
        try describe(table, rowEstimate: true)
    }

    /// Without `rowEstimate`, no small table is counted (a target, described before it is
    /// written, never shows its estimate).
    public func describe(_ table: TableName, rowEstimate: Bool) throws -> TableSchema {
        let schema = schemaOf(table)
        let meta = try query(
            "SELECT TABLE_ROWS, ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = \(lit(schema)) AND TABLE_NAME = \(lit(table.name))")
        guard let first = meta.first else { throw FerryError.tableNotFound(table: table, endpoint: endpoint.redacted) }
        let cols = try query(
            """
            SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA FROM information_schema.COLUMNS
            WHERE TABLE_SCHEMA = \(lit(schema)) AND TABLE_NAME = \(lit(table.name)) ORDER BY ORDINAL_POSITION
            """)
        // MariaDB's JSON is LONGTEXT with a json_valid() check: find those columns.
        let checkRows = try query(
            """
            SELECT CONSTRAINT_NAME, CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS
            WHERE CONSTRAINT_SCHEMA = \(lit(schema)) AND TABLE_NAME = \(lit(table.name)) ORDER BY CONSTRAINT_NAME
            """)
        let checks = checkRows.compactMap { $0[1] }
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
            var column = Column(
                name: name, nativeType: type, logicalType: logical, isNullable: c[2] == "YES",
                defaultExpression: dflt, defaultValue: dflt.flatMap { Self.parseDefault($0, extra: extra) },
                serial: extra.contains("auto_increment") ? .autoincrement : nil,
                generated: extra.contains("generated") || extra.contains("virtual") || extra.contains("persistent"))
            if let r = extra.range(of: "on update ") { column.updateExpression = String(extra[r.upperBound...]) }
            if zeroDatesAsNull, [.date].contains(logical) || { if case .timestamp = logical { return true } else { return false } }() {
                // --zero-dates null: this column's zero dates arrive as NULL (and so may its default).
                column.readHints.insert(.zeroDatesAsNull)
            }
            columns.append(column)
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
        var described = TableSchema(
            name: table, engine: .mysql, columns: columns, primaryKey: primary, uniqueKeys: unique,
            rowEstimate: rowEstimate ? try estimate(table, first.first.flatMap { $0.flatMap { Int64($0) } }) : nil)
        let unbounded = Set(columns.filter { c in
            switch c.logicalType {
            case .text(nil, _), .binary(nil), .json: return true
            default: return false
            }
        }.map(\.name))
        described.indexes = try indexes(table, keys: [primary] + unique, unbounded: unbounded)
        described.foreignKeys = try foreignKeys(table)
        described.checks = checkRows.compactMap { r in
            guard let clause = r[1], !clause.hasPrefix("json_valid(") else { return nil }
            return CheckConstraint(name: r[0], expression: "(" + clause + ")")
        }
        // InnoDB (and XtraDB, RocksDB, Aria's transactional mode aside) keep snapshots; MyISAM,
        // MEMORY, ARCHIVE, CSV and Aria do not.
        if let engine = first.count > 1 ? first[1] : nil, ["MyISAM", "MEMORY", "ARCHIVE", "CSV", "Aria", "MRG_MyISAM"].contains(engine) {
            described.readWarnings.append(
                "\(table) uses the \(engine) storage engine, which has no transactions: it is read as it is while the copy runs, "
                    + "not from the copy's snapshot (rows written meanwhile may or may not arrive; convert it with ALTER TABLE … ENGINE=InnoDB, or copy it while nothing writes)")
        }
        return described
    }

    /// Secondary indexes: every index but PRIMARY and the unique keys. FULLTEXT and SPATIAL
    /// indexes, and prefixes of bounded columns (`code(4)` of a varchar(100)), keep MySQL's own
    /// definition (carried only to MySQL); a prefix of a long text or blob counts as an index
    /// over the column (MySQL cannot index those otherwise).
    func indexes(_ table: TableName, keys: [[String]], unbounded: Set<String>) throws -> [IndexInfo] {
        let rows = try query(
            """
            SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME, SUB_PART, COLLATION, INDEX_TYPE FROM information_schema.STATISTICS
            WHERE TABLE_SCHEMA = \(lit(schemaOf(table))) AND TABLE_NAME = \(lit(table.name)) AND INDEX_NAME <> 'PRIMARY'
            ORDER BY INDEX_NAME, SEQ_IN_INDEX
            """)
        var out: [IndexInfo] = []
        var native: [String: [String]] = [:]
        for r in rows {
            let name = r[0] ?? ""
            if out.last?.name != name { out.append(IndexInfo(name: name, columns: [], isUnique: r[1] == "0")) }
            let type = (r[5] ?? "BTREE").uppercased()
            guard let col = r[2] else {
                out[out.count - 1].expression = "(an expression)"
                continue
            }
            var part = dialect.quote(col)
            if let sub = r[3] { part += "(\(sub))" }
            if r[4] == "D" { part += " DESC" }
            native[name, default: []].append(part)
            // A prefix on a long text or blob (`body(768)`) is how MySQL indexes such a column: the
            // index is over the column. A prefix on a bounded column is MySQL's own choice.
            if type == "FULLTEXT" || type == "SPATIAL" || (r[3] != nil && !unbounded.contains(col)) {
                out[out.count - 1].expression = (type == "FULLTEXT" || type == "SPATIAL" ? type + " " : "") + "(COLUMNS)"
            }
            out[out.count - 1].columns.append(IndexColumn(col, descending: r[4] == "D"))
        }
        for i in out.indices where out[i].expression != nil {
            let cols = native[out[i].name, default: []].joined(separator: ", ")
            out[i].expression = out[i].expression?.replacingOccurrences(of: "(COLUMNS)", with: "(" + cols + ")")
        }
        return out.filter { !($0.isUnique && $0.isStructured && keys.contains($0.columns.map(\.name)) && $0.columns.allSatisfy { !$0.descending }) }
    }

    /// Foreign keys, column pairs in key order.
    func foreignKeys(_ table: TableName) throws -> [ForeignKey] {
        let schema = schemaOf(table)
        let rows = try query(
            """
            SELECT k.CONSTRAINT_NAME, k.COLUMN_NAME, k.REFERENCED_TABLE_SCHEMA, k.REFERENCED_TABLE_NAME, k.REFERENCED_COLUMN_NAME,
                   r.DELETE_RULE, r.UPDATE_RULE
            FROM information_schema.KEY_COLUMN_USAGE k
            JOIN information_schema.REFERENTIAL_CONSTRAINTS r
              ON r.CONSTRAINT_SCHEMA = k.CONSTRAINT_SCHEMA AND r.CONSTRAINT_NAME = k.CONSTRAINT_NAME AND r.TABLE_NAME = k.TABLE_NAME
            WHERE k.TABLE_SCHEMA = \(lit(schema)) AND k.TABLE_NAME = \(lit(table.name)) AND k.REFERENCED_TABLE_NAME IS NOT NULL
            ORDER BY k.CONSTRAINT_NAME, k.ORDINAL_POSITION
            """)
        var out: [ForeignKey] = []
        for r in rows {
            let name = r[0] ?? ""
            if out.last?.name != name {
                let refSchema = r[2] ?? schema
                out.append(ForeignKey(
                    name: name, columns: [], referencedTable: TableName(schema: refSchema == database ? nil : refSchema, r[3] ?? ""),
                    referencedColumns: [], onDelete: ReferentialAction(catalog: r[5] ?? "") ?? .noAction,
                    onUpdate: ReferentialAction(catalog: r[6] ?? "") ?? .noAction))
            }
            out[out.count - 1].columns.append(r[1] ?? "")
            out[out.count - 1].referencedColumns.append(r[4] ?? "")
        }
        return out
    }

    /// A default as information_schema prints it: MariaDB quotes strings (`'abc'`) and writes
    /// functions (`current_timestamp()`); MySQL 8 prints strings bare and marks expressions
    /// DEFAULT_GENERATED in EXTRA.
    static func parseDefault(_ text: String, extra: String) -> ColumnDefault? {
        let lower = text.lowercased()
        // A zero date has no value elsewhere: only MySQL can take it as a default.
        if text.trimmingCharacters(in: CharacterSet(charactersIn: "'")).hasPrefix("0000-00-00") { return .expression(text) }
        if lower.hasPrefix("current_timestamp") || lower.hasPrefix("now(") || lower.hasPrefix("localtimestamp") { return .currentTimestamp }
        if lower == "curdate()" || lower == "current_date()" || lower == "current_date" { return .currentDate }
        if lower == "curtime()" || lower == "current_time()" || lower == "current_time" { return .currentTime }
        // Bit and hex literals (b'1', x'0A') are MySQL's own.
        if let f = text.first, "bBxX".contains(f), text.dropFirst().hasPrefix("'") { return .expression(text) }
        if text.hasPrefix("'"), text.hasSuffix("'"), text.count >= 2 {
            var out = ""
            var it = Array(text.dropFirst().dropLast())[...]
            while let ch = it.popFirst() {
                if ch == "'" , it.first == "'" { it.removeFirst(); out.append("'"); continue }
                if ch == "\\", let next = it.popFirst() {
                    switch next {
                    case "n": out.append("\n")
                    case "r": out.append("\r")
                    case "t": out.append("\t")
                    case "0": out.append("\0")
                    case "Z": out.append("\u{1A}")
                    default: out.append(next)
                    }
                    continue
                }
                out.append(ch)
            }
            return .text(out)
        }
        if Double(text) != nil, text.allSatisfy({ $0.isNumber || "-+.eE".contains($0) }) { return .number(text) }
        if extra.contains("default_generated") || text.contains("(") { return .expression(text) }
        // MySQL 8 prints string defaults without quotes; MariaDB quotes them (above).
        return .text(text)
    }

    /// Views, triggers, routines and events of the database, and MariaDB sequences.
    public func listOtherObjects() throws -> [OtherObject] {
        var out: [OtherObject] = []
        for r in try query(
            """
            SELECT CASE TABLE_TYPE WHEN 'VIEW' THEN 'view' WHEN 'SEQUENCE' THEN 'sequence' ELSE lower(TABLE_TYPE) END, TABLE_NAME
            FROM information_schema.TABLES WHERE TABLE_SCHEMA = \(lit(database)) AND TABLE_TYPE NOT IN ('BASE TABLE', 'SYSTEM VERSIONED')
            ORDER BY 1, 2
            """)
        {
            out.append(OtherObject(kind: r[0] ?? "", name: r[1] ?? ""))
        }
        for r in try query(
            "SELECT TRIGGER_NAME, EVENT_OBJECT_TABLE FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = \(lit(database)) ORDER BY 1")
        {
            out.append(OtherObject(kind: "trigger", name: r[0] ?? "", table: r[1]))
        }
        for r in try query(
            "SELECT lower(ROUTINE_TYPE), ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = \(lit(database)) ORDER BY 1, 2")
        {
            out.append(OtherObject(kind: r[0] ?? "routine", name: r[1] ?? ""))
        }
        for r in try query("SELECT EVENT_NAME FROM information_schema.EVENTS WHERE EVENT_SCHEMA = \(lit(database)) ORDER BY 1") {
            out.append(OtherObject(kind: "event", name: r[0] ?? ""))
        }
        return out
    }
}
