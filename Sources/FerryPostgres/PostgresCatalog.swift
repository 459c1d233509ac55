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
            columns.append(Column(
                name: name, nativeType: declared, logicalType: logical, isNullable: !cols.bool(i, 2),
                defaultExpression: serial == nil ? defaultExpr : nil, serial: serial, generated: generated == "s"))
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
        return TableSchema(
            name: display(TableName(schema: schemaName, table.name)), engine: .postgres, columns: columns,
            primaryKey: primaryKey, uniqueKeys: uniqueKeys, rowEstimate: estimate)
    }

    /// Whether reads say ONLY: plain tables are read with ONLY, so the rows of inheritance
    /// children (which are tables of their own) are not read twice; partitioned tables and views
    /// are read whole.
    func readsWithOnly(_ table: TableName) throws -> Bool {
        guard let oid = try relationOID(table) else { return false }
        return try query("SELECT relkind = 'r' FROM pg_class WHERE oid = $1::oid", [oid]).bool(0, 0)
    }
}
