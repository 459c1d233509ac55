import CLibPQ
import FerryCore

/// Catalog queries from pg_catalog, kept together by purpose: tables, columns, keys. Names
/// travel as bound parameters; identifiers reach SQL only through `quote`.
extension PostgresConnection {
    /// Schemas a URL's `?schema=a,b` limits listing to (none: every user schema).
    var schemaFilter: [String] {
        endpoint.parameter("schema")?.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } ?? []
    }

    public func listTables() throws -> [TableInfo] {
        // Ordinary and partitioned tables; partitions are read through their parent, so they
        // are not listed (a partitioned table is copied once, as a whole).
        let r = try query(
            """
            SELECT n.nspname, c.relname,
                   CASE WHEN c.relkind = 'p'
                        THEN (SELECT sum(greatest(p.reltuples, 0))::bigint FROM pg_inherits i
                              JOIN pg_class p ON p.oid = i.inhrelid WHERE i.inhparent = c.oid)
                        ELSE c.reltuples::bigint END
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
              AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'
              AND c.relname NOT LIKE '\\_ferry\\_%'
              AND (cardinality($1::text[]) = 0 OR n.nspname = ANY($1::text[]))
            ORDER BY 1, 2
            """, [arrayLiteral(schemaFilter)])
        // A table never analyzed has no estimate (-1): count it (such tables are usually new and small).
        return (0..<r.count).map { i in
            let name = display(TableName(schema: r.string(i, 0), r.string(i, 1)))
            let estimate = r.int(i, 2).flatMap { $0 >= 0 ? $0 : nil }
            return TableInfo(name: name, rowEstimate: estimate ?? (try? countRows(name)))
        }
    }

    /// `public` stays implicit in names Ferry shows.
    func display(_ t: TableName) -> TableName { t.schema == "public" ? TableName(t.name) : t }

    /// A PostgreSQL text[] literal for a bound parameter.
    func arrayLiteral(_ items: [String]) -> String {
        "{" + items.map { "\"" + $0.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\"" }
            .joined(separator: ",") + "}"
    }

    /// The relation's oid (as text) when `table` names a table, a partitioned table, a view or a
    /// materialized view (views are never listed, but can be copied when named).
    func relationOID(_ table: TableName) throws -> String? {
        let r = try query(
            """
            SELECT c.oid::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
              AND n.nspname = coalesce($2, current_schema(), 'public')
            """, [table.name, table.schema])
        return r.count > 0 ? r.value(0, 0) : nil
    }

    public func tableExists(_ table: TableName) throws -> Bool {
        try relationOID(table) != nil
    }

    public func countRows(_ table: TableName) throws -> Int64 {
        guard try tableExists(table) else { throw FerryError.tableNotFound(table: table, endpoint: endpoint.redacted) }
        return try query("SELECT count(*) FROM \(dialect.quote(table))").int(0, 0) ?? 0
    }

    /// `resolved(attnum, typid, typmod)`: each column of relation `$1` with domains resolved to
    /// their base type (a domain over a domain too).
    static let resolvedTypesCTE = """
        WITH RECURSIVE base(attnum, typid, typmod, depth) AS (
            SELECT a.attnum, a.atttypid, a.atttypmod, 0 FROM pg_attribute a
            WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped
          UNION ALL
            SELECT b.attnum, t.typbasetype, t.typtypmod, b.depth + 1 FROM base b JOIN pg_type t ON t.oid = b.typid
            WHERE t.typtype = 'd'
        ), resolved AS (
            SELECT DISTINCT ON (attnum) attnum, typid, typmod FROM base ORDER BY attnum, depth DESC
        )
        """

    public func describe(_ table: TableName) throws -> TableSchema {
        guard let oid = try relationOID(table) else {
            throw FerryError.tableNotFound(table: table, endpoint: endpoint.redacted)
        }
        let meta = try query(
            """
            SELECT n.nspname, c.relkind, CASE WHEN c.relkind = 'p'
                THEN (SELECT sum(greatest(p.reltuples, 0))::bigint FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhrelid
                      WHERE i.inhparent = c.oid) ELSE c.reltuples::bigint END
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1::oid
            """, [oid])
        let schemaName = meta.string(0, 0)
        let estimate = meta.int(0, 2).flatMap { $0 >= 0 ? $0 : nil } ?? (try? countRows(table))

        // Columns, with domains resolved to their base type (a domain over a domain too).
        let cols = try query(
            """
            \(Self.resolvedTypesCTE)
            SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid),
                   a.attidentity, a.attgenerated, t.typname, tn.nspname, t.typtype, t.typcategory,
                   format_type(r.typid, r.typmod), r.typmod, t.oid::text
            FROM pg_attribute a
            JOIN pg_class c ON c.oid = a.attrelid
            JOIN resolved r ON r.attnum = a.attnum
            JOIN pg_type t ON t.oid = r.typid
            JOIN pg_namespace tn ON tn.oid = t.typnamespace
            LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped
            ORDER BY a.attnum
            """, [oid])
        var columns: [Column] = []
        for i in 0..<cols.count {
            let name = cols.string(i, 0)
            let declared = cols.string(i, 1)
            let defaultExpr = cols.value(i, 3)
            let identity = cols.string(i, 4)
            let generated = cols.string(i, 5)
            let base = PostgresTypeMap.BaseType(
                name: cols.string(i, 6), schema: cols.string(i, 7), typtype: cols.string(i, 8), category: cols.string(i, 9),
                formatted: cols.string(i, 10), typmod: Int(cols.int(i, 11) ?? -1), oid: cols.string(i, 12))
            var logical = PostgresTypeMap.logicalType(base)
            if case .enumeration = logical {
                let labels = try query("SELECT enumlabel FROM pg_enum WHERE enumtypid = $1::oid ORDER BY enumsortorder", [base.oid])
                logical = .enumeration(labels: (0..<labels.count).map { labels.string($0, 0) })
            }
            var serial: SerialKind?
            switch identity {
            case "a": serial = .identityAlways
            case "d": serial = .identityByDefault
            default:
                // serial: a nextval() default, on a sequence the column owns or (as in older dumps) not.
                if defaultExpr?.hasPrefix("nextval(") == true { serial = .sequence }
            }
            let kept = serial == nil ? defaultExpr : nil
            columns.append(Column(
                name: name, nativeType: declared, logicalType: logical, isNullable: !cols.bool(i, 2),
                defaultExpression: kept, defaultValue: kept.flatMap(Self.parseDefault), serial: serial,
                generated: generated == "s"))
        }

        // Primary key and unique keys: full (not partial), on plain columns, key columns only.
        let idx = try query(
            """
            SELECT i.indexrelid::text, i.indisprimary, a.attname
            FROM pg_index i
            CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
            JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
            WHERE i.indrelid = $1::oid AND i.indisunique AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL
              AND k.ord <= i.indnkeyatts
            ORDER BY i.indisprimary DESC, i.indexrelid, k.ord
            """, [oid])
        var primaryKey: [String] = []
        var uniqueKeys: [[String]] = []
        var current: (id: String, primary: Bool, cols: [String])?
        func flush() {
            guard let c = current else { return }
            if c.primary { primaryKey = c.cols } else if !uniqueKeys.contains(c.cols) && c.cols != primaryKey { uniqueKeys.append(c.cols) }
        }
        for r in 0..<idx.count {
            let id = idx.string(r, 0)
            if current?.id != id {
                flush()
                current = (id, idx.bool(r, 1), [])
            }
            current?.cols.append(idx.string(r, 2))
        }
        flush()
        var schema = TableSchema(
            name: display(TableName(schema: schemaName, table.name)), engine: .postgres, columns: columns,
            primaryKey: primaryKey, uniqueKeys: uniqueKeys, rowEstimate: estimate)
        schema.indexes = try indexes(oid, keys: [primaryKey] + uniqueKeys)
        schema.foreignKeys = try foreignKeys(oid)
        let checks = try query(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = $1::oid AND contype = 'c' ORDER BY conname", [oid])
        schema.checks = (0..<checks.count).map { r in
            CheckConstraint(name: checks.string(r, 0), expression: Self.checkExpression(checks.string(r, 1)))
        }
        return schema
    }

    /// Secondary indexes: every index but the primary key and the full unique indexes that are
    /// the table's unique keys. Indexes other than B-tree, and indexes over expressions, keep
    /// PostgreSQL's own definition (carried only to PostgreSQL).
    func indexes(_ oid: String, keys: [[String]]) throws -> [IndexInfo] {
        let r = try query(
            """
            SELECT c.relname, i.indisunique, pg_get_expr(i.indpred, i.indrelid), i.indexprs IS NOT NULL OR am.amname <> 'btree',
                   pg_get_indexdef(i.indexrelid), a.attname, (i.indoption[k.ord - 1] & 1) = 1
            FROM pg_index i
            JOIN pg_class c ON c.oid = i.indexrelid
            JOIN pg_am am ON am.oid = c.relam
            CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
            LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum AND k.attnum > 0
            WHERE i.indrelid = $1::oid AND NOT i.indisprimary AND i.indisvalid AND k.ord <= i.indnkeyatts
              AND NOT EXISTS (SELECT 1 FROM pg_constraint x WHERE x.conindid = i.indexrelid AND x.contype IN ('p', 'x'))
            ORDER BY c.relname, k.ord
            """, [oid])
        var out: [IndexInfo] = []
        for row in 0..<r.count {
            let name = r.string(row, 0)
            if out.last?.name != name {
                let expression = r.bool(row, 3) ? r.string(row, 4) : nil
                out.append(IndexInfo(name: name, columns: [], isUnique: r.bool(row, 1), predicate: r.value(row, 2), expression: expression))
            }
            // Columns are listed for every index (expression parts have none), so that a copy can
            // tell which columns a native definition uses.
            if let col = r.value(row, 5) { out[out.count - 1].columns.append(IndexColumn(col, descending: r.bool(row, 6))) }
        }
        // The unique keys are created with the table.
        return out.filter { !($0.isUnique && $0.isStructured && keys.contains($0.columns.map(\.name)) && $0.columns.allSatisfy { !$0.descending }) }
    }

    /// Foreign keys, column pairs in key order.
    func foreignKeys(_ oid: String) throws -> [ForeignKey] {
        let r = try query(
            """
            SELECT con.conname, rn.nspname, rc.relname, con.confdeltype, con.confupdtype, a.attname, fa.attname
            FROM pg_constraint con
            JOIN pg_class rc ON rc.oid = con.confrelid
            JOIN pg_namespace rn ON rn.oid = rc.relnamespace
            CROSS JOIN LATERAL unnest(con.conkey, con.confkey) WITH ORDINALITY AS k(att, fatt, ord)
            JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.att
            JOIN pg_attribute fa ON fa.attrelid = con.confrelid AND fa.attnum = k.fatt
            WHERE con.conrelid = $1::oid AND con.contype = 'f'
            ORDER BY con.conname, k.ord
            """, [oid])
        var out: [ForeignKey] = []
        for row in 0..<r.count {
            let name = r.string(row, 0)
            if out.last?.name != name {
                out.append(ForeignKey(
                    name: name, columns: [], referencedTable: display(TableName(schema: r.string(row, 1), r.string(row, 2))),
                    referencedColumns: [], onDelete: ReferentialAction(catalog: r.string(row, 3)) ?? .noAction,
                    onUpdate: ReferentialAction(catalog: r.string(row, 4)) ?? .noAction))
            }
            out[out.count - 1].columns.append(r.string(row, 5))
            out[out.count - 1].referencedColumns.append(r.string(row, 6))
        }
        return out
    }

    /// `CHECK ((price > 0)) NOT VALID` → `(price > 0)`.
    static func checkExpression(_ def: String) -> String {
        var s = def.trimmingCharacters(in: .whitespaces)
        if s.hasSuffix(" NOT VALID") { s.removeLast(" NOT VALID".count) }
        if s.hasPrefix("CHECK ") { s.removeFirst("CHECK ".count) }
        return s
    }

    /// A default as PostgreSQL prints it (`'a''b'::character varying`, `0`, `'-1'::integer`,
    /// `true`, `now()`, `CURRENT_TIMESTAMP`, `('now'::text)::date`) read as Ferry's model.
    static func parseDefault(_ text: String) -> ColumnDefault? {
        var s = text.trimmingCharacters(in: .whitespaces)
        if s.hasPrefix("NULL::") || s == "NULL" { return nil }
        switch s.lowercased() {
        case "now()", "current_timestamp", "transaction_timestamp()", "localtimestamp", "statement_timestamp()",
             "('now'::text)::timestamp without time zone", "('now'::text)::timestamp with time zone":
            return .currentTimestamp
        case "current_date", "('now'::text)::date": return .currentDate
        case "current_time", "localtime": return .currentTime
        case "true": return .boolean(true)
        case "false": return .boolean(false)
        default: break
        }
        if s.hasPrefix("'") {
            // 'text'::type — one quoted literal, then at most one cast to a plain type.
            var value = ""
            var i = s.index(after: s.startIndex)
            var closed = false
            while i < s.endIndex {
                let ch = s[i]
                i = s.index(after: i)
                if ch == "'" {
                    if i < s.endIndex, s[i] == "'" { value.append("'"); i = s.index(after: i); continue }
                    closed = true
                    break
                }
                value.append(ch)
            }
            guard closed else { return .expression(text) }
            let rest = s[i...]
            // Only a plain type name may follow: `::character varying`, `::numeric(10,2)`.
            let castIsPlain = rest.dropFirst(2).allSatisfy { $0.isLetter || $0.isNumber || " _(),\"".contains($0) }
            guard rest.isEmpty || (rest.hasPrefix("::") && castIsPlain) else { return .expression(text) }
            let cast = rest.dropFirst(2).lowercased()
            if ["integer", "bigint", "smallint", "numeric", "real", "double precision"].contains(where: { cast.hasPrefix($0) }),
               Double(value) != nil
            {
                return .number(value)
            }
            if cast == "boolean" { return value == "true" || value == "t" ? .boolean(true) : .boolean(false) }
            return .text(value)
        }
        if s.hasPrefix("(") && s.hasSuffix(")") { s = String(s.dropFirst().dropLast()) }
        if Double(s) != nil, s.allSatisfy({ $0.isNumber || "-+.eE".contains($0) }) { return .number(s) }
        return .expression(text)
    }

    /// Views, materialized views, foreign tables, sequences no column owns, partitions and
    /// triggers of the listed schemas: a copy of tables does not carry them.
    public func listOtherObjects() throws -> [OtherObject] {
        let r = try query(
            """
            SELECT CASE c.relkind WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' WHEN 'f' THEN 'foreign table'
                                  WHEN 'S' THEN 'sequence' ELSE 'partition' END,
                   n.nspname, c.relname, (SELECT p.relname FROM pg_inherits h JOIN pg_class p ON p.oid = h.inhparent WHERE h.inhrelid = c.oid LIMIT 1)
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE (c.relkind IN ('v', 'm', 'f') OR (c.relkind IN ('r', 'p') AND c.relispartition)
                   OR (c.relkind = 'S' AND NOT EXISTS (
                       SELECT 1 FROM pg_depend d WHERE (d.objid = c.oid AND d.deptype IN ('a', 'i'))
                          OR (d.refobjid = c.oid AND d.classid = 'pg_attrdef'::regclass))))
              AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'
              AND c.relname NOT LIKE '\\_ferry\\_%'
              AND (cardinality($1::text[]) = 0 OR n.nspname = ANY($1::text[]))
            UNION ALL
            SELECT 'trigger', n.nspname, t.tgname, c.relname
            FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE NOT t.tgisinternal AND n.nspname NOT IN ('pg_catalog', 'information_schema')
              AND (cardinality($1::text[]) = 0 OR n.nspname = ANY($1::text[]))
            ORDER BY 1, 2, 3
            """, [arrayLiteral(schemaFilter)])
        return (0..<r.count).map { i in
            OtherObject(kind: r.string(i, 0), name: display(TableName(schema: r.string(i, 1), r.string(i, 2))).description, table: r.value(i, 3))
        }
    }

    /// Whether reads say ONLY: plain tables are read with ONLY, so the rows of inheritance
    /// children (which are tables of their own) are not read twice; partitioned tables and views
    /// are read whole.
    func readsWithOnly(_ table: TableName) throws -> Bool {
        guard let oid = try relationOID(table) else { return false }
        return try query("SELECT relkind = 'r' FROM pg_class WHERE oid = $1::oid", [oid]).bool(0, 0)
    }
}
