import FerryDriverTestKit
import Foundation

/// The table the sync and replicate runs change: `notes (id BIGINT PRIMARY KEY, name, qty,
/// note)`, kept beside the databases as a model the runner updates exactly as the SQL it
/// sends does, so every database can be compared with what it must hold.
struct Notes: Equatable {
    struct Row: Equatable {
        var name: String
        var qty: Int
        var note: String?
    }
    var rows: [Int: Row] = [:]
    /// The rows it started with: bursts keep it near that size (`plan`).
    var baseline = 0

    static let schema = "CREATE TABLE notes (id BIGINT PRIMARY KEY, name TEXT NOT NULL, qty BIGINT NOT NULL, note TEXT);"

    /// Rows 1…n, and the SQLite statement that inserts the same.
    static func initial(_ n: Int) -> (Notes, String) {
        var m = Notes()
        m.baseline = n
        for i in 1...n { m.rows[i] = Row(name: "n-\(i)", qty: i * 7919 % 1_000_003, note: i % 5 == 0 ? nil : "ñote \(i) ✓") }
        let sql = """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(n))
            INSERT INTO notes SELECT i, 'n-' || i, i * 7919 % 1000003, CASE WHEN i % 5 = 0 THEN NULL ELSE 'ñote ' || i || ' ✓' END FROM n;
            """
        return (m, sql)
    }

    /// One change's SQL, applied to the model too: ids of `parity` (0 even, 1 odd; nil any) in
    /// [from, from + span) updated or deleted, or new rows inserted at the ids given.
    enum Change {
        case update(from: Int, span: Int, parity: Int?, tag: String, delta: Int)
        case delete(from: Int, span: Int, parity: Int?)
        case insert(ids: [Int], tag: String)
    }

    static func filter(_ from: Int, _ span: Int, _ parity: Int?) -> String {
        "id >= \(from) AND id < \(from + span)" + (parity.map { " AND id % 2 = \($0)" } ?? "")
    }

    func ids(_ from: Int, _ span: Int, _ parity: Int?) -> [Int] {
        rows.keys.filter { $0 >= from && $0 < from + span && (parity == nil || $0 % 2 == parity) }
    }

    /// Applies `change` to the model and returns its SQL (portable to SQLite, PostgreSQL, MariaDB).
    mutating func apply(_ change: Change) -> String {
        switch change {
        case .update(let from, let span, let parity, let tag, let delta):
            for id in ids(from, span, parity) {
                rows[id]?.name = tag
                rows[id]?.qty += delta
                rows[id]?.note = id % 3 == 0 ? nil : "\(tag) ü"
            }
            return "UPDATE notes SET name = '\(tag)', qty = qty + \(delta), note = CASE WHEN id % 3 = 0 THEN NULL ELSE '\(tag) ü' END WHERE \(Self.filter(from, span, parity));"
        case .delete(let from, let span, let parity):
            for id in ids(from, span, parity) { rows[id] = nil }
            return "DELETE FROM notes WHERE \(Self.filter(from, span, parity));"
        case .insert(let ids, let tag):
            var values: [String] = []
            for id in ids {
                let row = Row(name: tag, qty: id % 1000, note: id % 4 == 0 ? nil : "\(tag) é \(id)")
                rows[id] = row
                values.append("(\(id), '\(row.name)', \(row.qty), \(row.note.map { "'\($0)'" } ?? "NULL"))")
            }
            var sql = ""
            var i = 0
            while i < values.count {
                sql += "INSERT INTO notes (id, name, qty, note) VALUES " + values[i..<min(i + 500, values.count)].joined(separator: ", ") + ";\n"
                i += 500
            }
            return sql
        }
    }

    /// A burst of changes to ids of `parity` (or any): a window of about `size` rows updated, a
    /// quarter as many deleted, `size / 2` rows inserted from `next` (stepping 2 when a parity
    /// is kept) — or, once the table grew a fifth past `baseline`, about `size` deleted and
    /// `size / 8` inserted. Planned on this model; apply it to each model it should change.
    func plan(size: Int, parity: Int?, tag: String, delta: Int, next: inout Int, _ rng: inout SplitMix64) -> [Change] {
        let top = max(1, rows.keys.max() ?? 1)
        let span = max(4, size * (parity == nil ? 1 : 2))
        // A table a fifth past its first size loses more than it gains: each check reads every
        // row back, and a measured run of 1,000 slowed from 8 to under 5 runs a minute as its
        // tables grew by about half a burst a run. The delete's window widens as the ids thin out.
        let grown = baseline > 0 && rows.count > baseline + baseline / 5
        let density = max(0.05, Double(rows.count) / Double(top))
        var out: [Change] = [
            .update(from: 1 + rng.next(top), span: span, parity: parity, tag: tag, delta: delta),
            .delete(from: 1 + rng.next(top), span: grown ? Int(Double(span) / density) : span / 4, parity: parity),
        ]
        let step = parity == nil ? 1 : 2
        if let parity, next % 2 != parity { next += 1 }
        var ids: [Int] = []
        for _ in 0..<max(1, grown ? size / 8 : size / 2) {
            ids.append(next)
            next += step
        }
        out.append(.insert(ids: ids, tag: tag))
        return out
    }

    /// Applies `changes`, each its own transaction; returns the SQL.
    mutating func transactions(_ changes: [Change]) -> [String] {
        changes.map { "BEGIN;\n" + apply($0) + "\nCOMMIT;" }
    }

    /// The rows as normalized lines `id|name|qty|note` (a NULL note as `~`), by id.
    var lines: [String] {
        rows.sorted { $0.key < $1.key }.map { id, r in "\(id)|\(r.name)|\(r.qty)|\(r.note ?? "~")" }
    }

    /// What `direct` holds in `notes`, as `lines` (nil: no table).
    static func read(_ direct: Direct) throws -> [String]? {
        guard try direct.hasTable("notes") else { return nil }
        let text = try direct.run("SELECT id, name, qty, note FROM notes ORDER BY id;")
        return text.split(separator: "\n", omittingEmptySubsequences: true).map { line in
            // psql -A and sqlite3 separate by '|', mariadb -B by tabs; a NULL is empty or NULL.
            let f = line.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "|" || $0 == "\t" }).map(String.init)
            guard f.count == 4 else { return String(line) }
            return "\(f[0])|\(f[1])|\(f[2])|\(f[3].isEmpty || f[3] == "NULL" ? "~" : f[3])"
        }
    }

    /// Nil when `seen` holds these rows; else how it differs, in one line.
    func difference(_ seen: [String]?) -> String? {
        guard let seen else { return "no table notes" }
        let want = lines
        if seen == want { return nil }
        let a = Set(want), b = Set(seen)
        let missing = want.filter { !b.contains($0) }, extra = seen.filter { !a.contains($0) }
        return "\(seen.count) rows, not \(want.count): \(missing.count) missing (\(missing.prefix(2).joined(separator: ", "))), \(extra.count) not expected (\(extra.prefix(2).joined(separator: ", ")))"
    }
}
