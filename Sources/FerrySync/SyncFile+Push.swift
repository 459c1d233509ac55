import FerryCore
import FerrySQLite
import Foundation

extension SyncFile {
    /// The base (or pushed) table of `table` as Ferry's SQLite writer takes it: the marker
    /// columns, then the table's own columns as planned.
    func bookkeepingSchema(_ table: SyncedTable, pushed: Bool) -> (schema: TableSchema, columns: [Column]) {
        let marker = { (n: String) in Column(name: n, nativeType: "INTEGER", logicalType: .int64, isNullable: false) }
        let markers = pushed ? [marker(Self.existed), marker(Self.setLocal)] : [marker(Self.existed)]
        let schema = TableSchema(
            name: TableName(pushed ? Self.pushed(table.local) : Self.base(table.local)), engine: .sqlite,
            columns: markers + table.localSchema.columns, primaryKey: table.key)
        return (schema, markers + Self.readColumns(table))
    }

    /// A full-width image of a row that does not exist: its key, NULL elsewhere.
    static func keyOnly(_ table: SyncedTable, key: [Value]) -> [Value] {
        var row = [Value](repeating: .null, count: table.origin.columns.count)
        for (i, k) in table.key.enumerated() {
            if let c = table.origin.columns.firstIndex(where: { $0.name == k }) { row[c] = key[i] }
        }
        return row
    }

    /// Records a push before the origin commits it: the images that become the bases, the
    /// keys offline rows get, and the push's id (committed locally, so a push killed after the
    /// origin's commit is finished by the next one).
    func recordInflight(_ id: String, work: [TableWork], rekeys: [String: [Int64: Int64]]) throws {
        try quietly {
            for w in work {
                let (schema, columns) = bookkeepingSchema(w.table, pushed: true)
                try db.query("DELETE FROM \(q(Self.pushed(w.table.local)))")
                let rows = w.pushed.map { p -> [Value] in
                    [.int(p.image == nil ? 0 : 1), .int(p.setLocal ? 1 : 0)] + (p.image ?? Self.keyOnly(w.table, key: p.key))
                }
                for chunk in stride(from: 0, to: rows.count, by: 1_000) {
                    let batch = try RowBatch(rows: Array(rows[chunk..<min(chunk + 1_000, rows.count)]), types: columns.map(\.logicalType))
                    _ = try db.upsertRows(into: schema, columns: columns, key: w.table.key, rows: batch)
                }
            }
            try db.query("DELETE FROM \(q(Self.rekeys))")
            for (table, map) in rekeys {
                for (old, new) in map {
                    try db.query("INSERT INTO \(q(Self.rekeys)) (tbl, old, new) VALUES (?1, ?2, ?3)", [.text(table), .int(old), .int(new)])
                }
            }
            try setMeta("push_inflight", id)
        }
    }

    /// The largest key of serial table `t` that came from the origin (below the offline
    /// range), in the table and in its bases; 0 when there is none.
    func largestOriginKey(_ t: SyncedTable) throws -> Int64 {
        guard let serial = t.serial, let base = t.localKeyBase else { return 0 }
        let k = q(serial)
        let rows = try db.query(
            "SELECT max(m) FROM (SELECT max(\(k)) AS m FROM \(q(t.local)) WHERE \(k) <= ?1 UNION ALL SELECT max(\(k)) FROM \(q(Self.base(t.local))) WHERE \(k) <= ?1)",
            [.int(base)])
        if case .int(let m)? = rows.first?.first { return m }
        return 0
    }

    /// Forgets a push the origin never committed.
    func abandonInflight() throws {
        try quietly {
            for t in tables { try db.query("DELETE FROM \(q(Self.pushed(t.local)))") }
            try db.query("DELETE FROM \(q(Self.rekeys))")
            try setMeta("push_inflight", nil)
        }
    }

    /// Once the origin committed a push: offline rows and their references take their new
    /// keys, the pushed images become the bases (local rows too where the origin's row won or
    /// rows merged), and bases that now equal their rows are dropped — one local transaction.
    func finalizePush(at time: Date) throws {
        try quietly {
            for row in try db.query("SELECT tbl, old, new FROM \(q(Self.rekeys))") {
                guard case .text(let name) = row[0], let t = tables.first(where: { $0.local == name }), let serial = t.serial else { continue }
                try db.query("UPDATE \(q(t.local)) SET \(q(serial)) = ?2 WHERE \(q(serial)) = ?1", [row[1], row[2]])
                try db.query("UPDATE OR REPLACE \(q(Self.base(t.local))) SET \(q(serial)) = ?2 WHERE \(q(serial)) = ?1", [row[1], row[2]])
                for child in tables {
                    for fk in child.localSchema.foreignKeys
                    where fk.columns.count == 1 && fk.referencedTable.name == t.local && fk.referencedColumns == [serial] {
                        try db.query("UPDATE \(q(child.local)) SET \(q(fk.columns[0])) = ?2 WHERE \(q(fk.columns[0])) = ?1", [row[1], row[2]])
                    }
                }
            }
            for t in tables {
                let cols = Self.readColumns(t).map { q($0.name) }
                let list = cols.joined(separator: ", ")
                let pushed = q(Self.pushed(t.local))
                let keyMatch = t.key.map { "\(q(t.local)).\(q($0)) = p.\(q($0))" }.joined(separator: " AND ")
                try db.run("""
                    INSERT OR REPLACE INTO \(q(Self.base(t.local))) (\(q(Self.existed)), \(list))
                      SELECT \(q(Self.existed)), \(list) FROM \(pushed);
                    DELETE FROM \(q(t.local)) WHERE EXISTS (SELECT 1 FROM \(pushed) p WHERE p.\(q(Self.setLocal)) = 1 AND p.\(q(Self.existed)) = 0 AND \(keyMatch));
                    INSERT OR REPLACE INTO \(q(t.local)) (\(list))
                      SELECT \(list) FROM \(pushed) WHERE \(q(Self.setLocal)) = 1 AND \(q(Self.existed)) = 1;
                    DELETE FROM \(pushed);
                    """)
                try prune(t)
            }
            try db.query("DELETE FROM \(q(Self.rekeys))")
            try setMeta("push_inflight", nil)
            try setMeta("last_push", Sync.timestamp(time))
        }
    }

    /// Drops the base entries that record no change: a row as its base had it, or a row that
    /// neither existed nor exists.
    func prune(_ t: SyncedTable) throws {
        let b = q(Self.base(t.local))
        let join = t.key.map { "r.\(q($0)) = b.\(q($0))" }.joined(separator: " AND ")
        let present = "r.\(q(t.key[0])) IS NOT NULL"
        let equal = Self.readColumns(t).map { "r.\(q($0.name)) IS b.\(q($0.name))" }.joined(separator: " AND ")
        try db.run("""
            DELETE FROM \(b) WHERE rowid IN (
              SELECT b.rowid FROM \(b) b LEFT JOIN \(q(t.local)) r ON \(join)
              WHERE (b.\(q(Self.existed)) = 0 AND NOT \(present)) OR (b.\(q(Self.existed)) = 1 AND \(present) AND \(equal)))
            """)
    }
}
