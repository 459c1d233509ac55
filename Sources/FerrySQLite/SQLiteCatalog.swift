import CSQLite
import Foundation
import FerryCore

/// Catalog queries, kept together by purpose: tables, columns, keys. All go through the
/// PRAGMA table-valued functions with bound names, so no identifier is ever spliced into SQL
/// except through `quote`.
extension SQLiteConnection {
    /// `main` unless the table names an attached schema.
    func schemaName(_ table: TableName) -> String { table.schema ?? "main" }

    /// Every table with its exact row count (a scan of each).
    public func listTables() throws -> [TableInfo] {
        try listTableNames().map { TableInfo(name: $0, rowEstimate: try countRows($0)) }
    }

    /// The tables without their counts: a copy of one table of a file must not count the rows
    /// of every other (bench.sqlite: `--tables bench_orders` counted bench_narrow's 5,000,000
    /// rows, and bench_orders' own twice).
    public func listTableNames() throws -> [TableName] {
        var out: [TableName] = []
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
                out.append(TableName(schema: schema == "main" ? nil : schema, name))
            }
        }
        return out
    }

    /// `main` and attached databases (not `temp`).
    func schemas() throws -> [String] {
        try prepare("SELECT name FROM pragma_database_list WHERE name <> 'temp' ORDER BY seq").rows().compactMap { $0[0] }
    }

    public func tableExists(_ table: TableName) throws -> Bool {
        // A schema that is not an attached database holds no table (and must not reach the SQL).
        let schema = schemaName(table)
        if schema != "main" && schema != "temp" {
            let list = try prepare("SELECT 1 FROM pragma_database_list WHERE name = ?1")
            try list.bind([.text(schema)])
            defer { list.reset() }
            guard try list.step() else { return false }
        }
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

    /// A table's rows, estimated without reading them where the table has a rowid: the span of
    /// its rowids (its count until rows are deleted), at most the rows its file could hold at
    /// 4 bytes a row, so that sparse ids never give an absurd figure. Counting reads every page
    /// of the table before a copy starts (1,000,000 bench_orders rows: 0.07–0.09 s of a 1.2 s
    /// copy into SQLite; minutes for a large file). A count where there is no rowid to ask (a
    /// WITHOUT ROWID table, or columns named rowid, _rowid_ and oid).
    func estimateRows(_ table: TableName, createSQL: String, columns: [String]) throws -> Int64 {
        let taken = Set(columns.map { $0.lowercased() })
        guard !(Self.containsKeyword(createSQL, "WITHOUT") && Self.containsKeyword(createSQL, "ROWID")),
            let rowid = ["_rowid_", "rowid", "oid"].first(where: { !taken.contains($0) })
        else { return try countRows(table) }
        // Each bound alone in its query, where SQLite looks it up in the b-tree (both in one
        // expression scan the table).
        let t = dialect.quote(qualified(table))
        let span = try prepare("SELECT (SELECT max(\(rowid)) FROM \(t)) - (SELECT min(\(rowid)) FROM \(t)) + 1")
        defer { span.reset() }
        guard try span.step(), !span.isNull(0) else { return 0 }
        let size = try prepare("SELECT (SELECT page_count FROM pragma_page_count(?1)) * (SELECT page_size FROM pragma_page_size(?1))")
        defer { size.reset() }
        try size.bind([.text(schemaName(table))])
        let bytes = try size.step() ? size.columnInt(0) : Int64.max
        return max(0, min(span.columnInt(0), bytes / 4))
    }

    /// The table with its schema made explicit when it is an attached one.
    func qualified(_ table: TableName) -> TableName {
        table.schema == nil || table.schema == "main" ? TableName(table.name) : table
    }

    public func describe(_ table: TableName) throws -> TableSchema {
        try describe(table, rowEstimate: true)
    }

    /// The row estimate is `estimateRows`: no scan where the table has a rowid.
    public func describe(_ table: TableName, rowEstimate: Bool) throws -> TableSchema {
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

        // Secondary indexes: those created by CREATE INDEX (origin 'c'), but not a unique one
        // that is already a unique key; partial and expression ones keep their SQL.
        var secondary: [IndexInfo] = []
        for idx in indexes where idx.origin == "c" {
            let xSt = try prepare("SELECT cid, name, \"desc\" FROM pragma_index_xinfo(?1, ?2) WHERE key = 1 ORDER BY seqno")
            try xSt.bind([.text(idx.name), .text(schema)])
            var info = IndexInfo(name: idx.name, columns: [], isUnique: idx.unique)
            var expression = false
            while try xSt.step() {
                if xSt.columnInt(0) < 0 { expression = true }
                if let n = xSt.columnText(1) { info.columns.append(IndexColumn(n, descending: xSt.columnInt(2) != 0)) }
            }
            if expression || idx.partial {
                let sqlSt = try prepare("SELECT sql FROM \(dialect.quote(schema)).sqlite_schema WHERE type = 'index' AND name = ?1")
                try sqlSt.bind([.text(idx.name)])
                let sql = try sqlSt.step() ? sqlSt.columnText(0) ?? "" : ""
                sqlSt.reset()
                if expression { info.expression = sql }
                if idx.partial { info.predicate = Self.wherePart(of: sql) }
            }
            if info.isUnique, info.isStructured, uniqueKeys.contains(info.columns.map(\.name)), !info.columns.contains(where: \.descending) { continue }
            secondary.append(info)
        }

        let rowidAlias = primaryKey.count == 1 && !hasPKIndex
            && raws.first(where: { $0.name == primaryKey[0] })?.type.uppercased() == "INTEGER"
        let columns = raws.map { raw -> Column in
            let isAlias = rowidAlias && raw.name == primaryKey[0]
            return Column(
                name: raw.name, nativeType: raw.type, logicalType: SQLiteTypeMap.logicalType(declared: raw.type),
                isNullable: !raw.notNull && !isAlias, defaultExpression: raw.dflt, defaultValue: raw.dflt.flatMap(Self.parseDefault),
                serial: isAlias ? (hasAutoincrement ? .autoincrement : .rowid) : nil,
                generated: raw.hidden == 2 || raw.hidden == 3)
        }
        var described = TableSchema(
            name: table, engine: .sqlite, columns: columns, primaryKey: primaryKey, uniqueKeys: uniqueKeys,
            rowEstimate: rowEstimate ? try estimateRows(table, createSQL: createSQL, columns: raws.map(\.name)) : nil)
        described.indexes = secondary
        described.foreignKeys = try foreignKeys(table)
        described.checks = Self.checks(in: createSQL)
        return described
    }

    /// Foreign keys from pragma_foreign_key_list (unnamed: SQLite keeps no names there); a
    /// reference to the parent's primary key without columns is resolved to those columns.
    func foreignKeys(_ table: TableName) throws -> [ForeignKey] {
        let st = try prepare(
            "SELECT id, \"table\", \"from\", \"to\", on_update, on_delete FROM pragma_foreign_key_list(?1, ?2) ORDER BY id, seq")
        try st.bind([.text(table.name), .text(schemaName(table))])
        var out: [(id: Int64, fk: ForeignKey)] = []
        var implicit: Set<Int64> = []
        while try st.step() {
            let id = st.columnInt(0)
            if out.last?.id != id {
                out.append((id, ForeignKey(
                    name: nil, columns: [], referencedTable: TableName(schema: table.schema, st.columnText(1) ?? ""), referencedColumns: [],
                    onDelete: ReferentialAction(catalog: st.columnText(5) ?? "") ?? .noAction,
                    onUpdate: ReferentialAction(catalog: st.columnText(4) ?? "") ?? .noAction)))
            }
            out[out.count - 1].fk.columns.append(st.columnText(2) ?? "")
            if let to = st.columnText(3) { out[out.count - 1].fk.referencedColumns.append(to) } else { implicit.insert(id) }
        }
        st.reset()
        for i in out.indices where implicit.contains(out[i].id) {
            let parent = out[i].fk.referencedTable
            let pk = try prepare("SELECT name FROM pragma_table_info(?1, ?2) WHERE pk > 0 ORDER BY pk")
            try pk.bind([.text(parent.name), .text(schemaName(parent))])
            var cols: [String] = []
            while try pk.step() { if let n = pk.columnText(0) { cols.append(n) } }
            pk.reset()
            out[i].fk.referencedColumns = cols
        }
        // The names SQLite keeps only in the CREATE TABLE text.
        let names = try foreignKeyNames(table)
        return out.map { item in
            var fk = item.fk
            fk.name = names[fk.columns.map { $0.lowercased() }]
            return fk
        }
    }

    /// `CONSTRAINT name FOREIGN KEY (cols)`, compiled once (an immutable regular expression).
    static let foreignKeyNamePattern: NSRegularExpression? = {
        let ident = #"("(?:[^"]|"")+"|\[[^\]]+\]|`[^`]+`|[A-Za-z_][A-Za-z0-9_$]*)"#
        return try? NSRegularExpression(pattern: #"CONSTRAINT\s+"# + ident + #"\s+FOREIGN\s+KEY\s*\(([^)]*)\)"#, options: [.caseInsensitive])
    }()

    /// `CONSTRAINT name FOREIGN KEY (cols)` of the table's CREATE TABLE, by column list.
    func foreignKeyNames(_ table: TableName) throws -> [[String]: String] {
        let st = try prepare("SELECT sql FROM \(dialect.quote(schemaName(table))).sqlite_schema WHERE type = 'table' AND name = ?1")
        try st.bind([.text(table.name)])
        defer { st.reset() }
        guard try st.step(), let sql = st.columnText(0), let re = Self.foreignKeyNamePattern else { return [:] }
        // Only a CREATE TABLE that names a constraint can hold one.
        guard sql.range(of: "CONSTRAINT", options: .caseInsensitive) != nil else { return [:] }
        var out: [[String]: String] = [:]
        let ns = sql as NSString
        for m in re.matches(in: sql, range: NSRange(location: 0, length: ns.length)) {
            let name = Self.unquote(ns.substring(with: m.range(at: 1)))
            let cols = ns.substring(with: m.range(at: 2)).split(separator: ",").map { Self.unquote(String($0)).lowercased() }
            out[cols] = name
        }
        return out
    }

    /// An identifier as written in SQL, without its quotes.
    static func unquote(_ s: String) -> String {
        let t = s.trimmingCharacters(in: .whitespacesAndNewlines)
        guard let first = t.first, let last = t.last, t.count >= 2 else { return t }
        switch (first, last) {
        case ("\"", "\""): return String(t.dropFirst().dropLast()).replacingOccurrences(of: "\"\"", with: "\"")
        case ("`", "`"): return String(t.dropFirst().dropLast()).replacingOccurrences(of: "``", with: "`")
        case ("[", "]"): return String(t.dropFirst().dropLast())
        default: return t
        }
    }

    /// A default as SQLite keeps it (SQL text): `'abc'`, `0`, `-1.5`, `TRUE`, `CURRENT_TIMESTAMP`, `(expr)`.
    static func parseDefault(_ text: String) -> ColumnDefault? {
        var s = text.trimmingCharacters(in: .whitespaces)
        while s.hasPrefix("("), s.hasSuffix(")"), s.count >= 2 { s = String(s.dropFirst().dropLast()).trimmingCharacters(in: .whitespaces) }
        switch s.uppercased() {
        case "NULL": return nil
        case "CURRENT_TIMESTAMP": return .currentTimestamp
        case "CURRENT_DATE": return .currentDate
        case "CURRENT_TIME": return .currentTime
        case "TRUE": return .boolean(true)
        case "FALSE": return .boolean(false)
        default: break
        }
        if s.count >= 2, s.hasPrefix("'"), s.hasSuffix("'") {
            let inner = String(s.dropFirst().dropLast())
            // One literal: every quote inside is doubled.
            if inner.replacingOccurrences(of: "''", with: "").contains("'") { return .expression(text) }
            return .text(inner.replacingOccurrences(of: "''", with: "'"))
        }
        if Double(s) != nil, s.allSatisfy({ $0.isNumber || "-+.eE".contains($0) }) { return .number(s) }
        return .expression(text)
    }

    /// The text after the WHERE of a CREATE INDEX (a partial index's predicate).
    static func wherePart(of sql: String) -> String? {
        let scrubbed = scrub(sql)
        guard let r = scrubbed.range(of: #"\bWHERE\b"#, options: [.regularExpression, .caseInsensitive]) else { return nil }
        let offset = scrubbed.distance(from: scrubbed.startIndex, to: r.upperBound)
        return String(sql.dropFirst(offset)).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The CHECK constraints of a CREATE TABLE, with their names when given (`CONSTRAINT n CHECK (…)`).
    static func checks(in sql: String) -> [CheckConstraint] {
        let chars = Array(sql)
        let scrubbed = Array(scrub(sql))
        var out: [CheckConstraint] = []
        var i = 0
        func word(at j: Int) -> String {
            var k = j
            var w = ""
            while k < scrubbed.count, scrubbed[k].isLetter || scrubbed[k] == "_" { w.append(scrubbed[k]); k += 1 }
            return w
        }
        while i < scrubbed.count {
            let boundary = i == 0 || !(scrubbed[i - 1].isLetter || scrubbed[i - 1].isNumber || scrubbed[i - 1] == "_")
            guard boundary, word(at: i).uppercased() == "CHECK" else { i += 1; continue }
            var j = i + 5
            while j < scrubbed.count, scrubbed[j].isWhitespace { j += 1 }
            guard j < scrubbed.count, scrubbed[j] == "(" else { i += 5; continue }
            var depth = 0
            var end = j
            while end < scrubbed.count {
                if scrubbed[end] == "(" { depth += 1 }
                if scrubbed[end] == ")" { depth -= 1; if depth == 0 { break } }
                end += 1
            }
            guard end < chars.count else { break }
            // `CONSTRAINT name` just before? (Positions in `chars` and `scrubbed` are the same.)
            var name: String?
            var k = i - 1
            while k >= 0, scrubbed[k].isWhitespace { k -= 1 }
            let nameEnd = k + 1
            if k >= 0, "\"`]".contains(scrubbed[k]) {
                // A quoted name: back to its opening quote (blanked inside by scrub).
                let close = scrubbed[k]
                let open: Character = close == "]" ? "[" : close
                k -= 1
                while k >= 0, scrubbed[k] != open { k -= 1 }
            } else {
                while k >= 0, scrubbed[k].isLetter || scrubbed[k].isNumber || scrubbed[k] == "_" { k -= 1 }
                k += 1
            }
            let nameStart = max(k, 0)
            var w = nameStart - 1
            while w >= 0, scrubbed[w].isWhitespace { w -= 1 }
            if nameStart < nameEnd, w >= 9, String(scrubbed[(w - 9)...w]).uppercased() == "CONSTRAINT" {
                name = Self.unquote(String(chars[nameStart..<nameEnd]))
            }
            out.append(CheckConstraint(name: name, expression: String(chars[j...end])))
            i = end + 1
        }
        return out
    }

    /// `sql` with the insides of quotes and comments blanked (same length), so keywords and
    /// parentheses can be found by position.
    static func scrub(_ sql: String) -> String {
        var out = ""
        var quote: Character?
        var lineComment = false
        var blockComment = false
        let chars = Array(sql)
        var i = 0
        while i < chars.count {
            let c = chars[i]
            let next: Character? = i + 1 < chars.count ? chars[i + 1] : nil
            i += 1
            if lineComment {
                if c == "\n" { lineComment = false; out.append(c) } else { out.append(" ") }
                continue
            }
            if blockComment {
                if c == "*" && next == "/" { blockComment = false; out.append("  "); i += 1 } else { out.append(c == "\n" ? c : " ") }
                continue
            }
            if let q = quote {
                out.append(c == q ? c : " ")
                if c == q { quote = nil }
                continue
            }
            switch c {
            case "'", "\"", "`": quote = c; out.append(c)
            case "[": quote = "]"; out.append(c)
            case "-" where next == "-": lineComment = true; out.append(" ")
            case "/" where next == "*": blockComment = true; out.append("  "); i += 1
            default: out.append(c)
            }
        }
        return out
    }

    /// Views, triggers and virtual tables of every schema: a copy of tables does not carry them.
    public func listOtherObjects() throws -> [OtherObject] {
        var out: [OtherObject] = []
        for schema in try schemas() {
            let st = try prepare(
                """
                SELECT CASE WHEN type = 'table' THEN 'virtual table' ELSE type END, name, tbl_name
                FROM \(dialect.quote(schema)).sqlite_schema
                WHERE (type IN ('view', 'trigger') OR (type = 'table' AND sql LIKE 'CREATE VIRTUAL%'))
                  AND name NOT LIKE '\(CopyEngine.internalPrefix.replacingOccurrences(of: "_", with: "\\_"))%' ESCAPE '\\'
                ORDER BY 1, 2
                """)
            for row in try st.rows() {
                let name = (schema == "main" ? "" : schema + ".") + (row[1] ?? "")
                out.append(OtherObject(kind: row[0] ?? "", name: name, table: row[0] == "trigger" ? row[2] : nil))
            }
        }
        return out
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
