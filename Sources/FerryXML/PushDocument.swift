import FerryCore
import Foundation

/// The guarded push documents of `POST /v1/push` (docs/xml-protocol.md):
///
///     <push id="…">
///       <table name="t" schema="…" reset-serial="1">
///         <column name="id"/><column name="name"/>  <key name="id"/>
///         <insert><r>…</r></insert>
///         <update><r>expected…</r><r>new…</r></update>
///         <delete><r>expected…</r></delete>
///       </table>
///     </push>
///
/// Values are typed by the served table's columns, which the decoder asks for by name.
public enum PushDocument {
    public static func encode(_ push: GuardedPush) throws -> Data {
        var out = XMLDocuments.declaration
        out += Array("<push".utf8)
        XMLDocuments.attr("id", push.id, into: &out)
        out += Array(">\n".utf8)
        for t in push.tables {
            out += Array("<table".utf8)
            XMLDocuments.attr("name", t.table.name, into: &out)
            XMLDocuments.attr("schema", t.table.schema, into: &out)
            if t.resetSerial { XMLDocuments.attr("reset-serial", "1", into: &out) }
            out += Array(">\n".utf8)
            for c in t.columns {
                out += Array("<column".utf8)
                XMLDocuments.attr("name", c.name, into: &out)
                out += Array("/>".utf8)
            }
            for k in t.key {
                out += Array("<key".utf8)
                XMLDocuments.attr("name", k, into: &out)
                out += Array("/>".utf8)
            }
            out += Array("\n".utf8)
            let types = t.columns.map(\.logicalType)
            let writer = XMLDocuments.RowsWriter(types: types)
            func section(_ name: String, _ rows: [[Value]]) throws {
                guard !rows.isEmpty else { return }
                out += Array("<\(name)>\n".utf8)
                writer.rows(try RowBatch(rows: rows, types: types), into: &out)
                out += Array("</\(name)>\n".utf8)
            }
            try section("insert", t.inserts)
            try section("update", t.updates.flatMap { [$0.expected, $0.row] })
            try section("delete", t.deletes)
            out += Array("</table>\n".utf8)
        }
        out += Array("</push>\n".utf8)
        return Data(out)
    }

    /// Decodes a push; `columns(table, names)` gives the served table's columns of those names
    /// (and refuses a table that is not served or a column it does not have).
    public static func decode(
        _ data: Data, limits: XMLLimits = XMLLimits(), columns resolve: (TableName, [String]) throws -> [Column]
    ) throws -> GuardedPush {
        try XMLGuard.check(data, limits: limits)
        var push = GuardedPush(id: "", tables: [])
        try data.withUnsafeBytes { raw in
            var p = RowsParser(raw, limits: limits)
            var text: [UInt8] = []
            var index = 0
            let open = try p.start(root: "<push")
            guard let id = p.rootAttributes["id"], !id.isEmpty, id.utf8.count <= 64 else {
                throw XMLWireError.unexpected("<push> needs an id of 1 to 64 characters")
            }
            push.id = id
            guard open else { return }
            while true {
                try p.skipMisc()
                if p.eat("</push>") {
                    try p.skipMisc()
                    guard p.i == raw.count else { throw p.error("content after </push>") }
                    return
                }
                guard p.eat("<table") else { throw p.error("expected <table> or </push>") }
                let (attrs, selfClosing) = try p.attributes()
                guard let name = attrs["name"], !name.isEmpty else { throw p.error("<table> needs a name") }
                let table = TableName(schema: attrs["schema"], name)
                var names: [String] = []
                var key: [String] = []
                var changes: GuardedTableChanges?
                var types: [LogicalType] = []
                if selfClosing {
                    push.tables.append(GuardedTableChanges(table: table, columns: try resolve(table, []), key: []))
                    continue
                }
                func resolved() throws -> GuardedTableChanges {
                    if let changes { return changes }
                    guard !names.isEmpty, !key.isEmpty else { throw p.error("<table name=\"\(name)\"> needs its <column> and <key> elements first") }
                    guard Set(key).isSubset(of: names) else { throw p.error("a <key> of \(name) is not one of its <column> elements") }
                    guard Set(names).count == names.count else { throw p.error("a <column> of \(name) is given twice") }
                    let cols = try resolve(table, names)
                    types = cols.map(\.logicalType)
                    return GuardedTableChanges(table: table, columns: cols, key: key, resetSerial: attrs["reset-serial"] == "1")
                }
                while true {
                    try p.skipMisc()
                    if p.eat("</table>") { break }
                    let isColumn = p.eat("<column")
                    if isColumn || p.eat("<key") {
                        guard changes == nil else { throw p.error("<column> and <key> come before the rows") }
                        let (a, closed) = try p.attributes()
                        guard closed, let n = a["name"], !n.isEmpty else { throw p.error("expected <column name=\"…\"/> or <key name=\"…\"/>") }
                        if isColumn { names.append(n) } else { key.append(n) }
                        continue
                    }
                    let closing: StaticString
                    let kind: Int
                    if p.eat("<insert>") { (closing, kind) = ("</insert>", 0) } else if p.eat("<update>") { (closing, kind) = ("</update>", 1) } else if p.eat("<delete>") {
                        (closing, kind) = ("</delete>", 2)
                    } else {
                        throw p.error("expected <column>, <key>, <insert>, <update>, <delete> or </table>")
                    }
                    var t = try resolved()
                    var batch = RowBatch(types: types, capacity: 0)
                    while true {
                        try p.skipMisc()
                        if p.eat(closing) { break }
                        guard p.eat("<r>") else { throw p.error("expected <r>") }
                        try XMLRowsDecoder.row(&p, closing: "</r>", types: types, names: t.columns.map(\.name), index: index, text: &text, into: &batch)
                        index += 1
                    }
                    let rows = (0..<batch.count).map { batch.row($0, types: types) }
                    switch kind {
                    case 0: t.inserts += rows
                    case 1:
                        guard rows.count % 2 == 0 else { throw p.error("<update> holds pairs of rows (expected, new)") }
                        for i in stride(from: 0, to: rows.count, by: 2) { t.updates.append(.init(expected: rows[i], row: rows[i + 1])) }
                    default: t.deletes += rows
                    }
                    changes = t
                }
                push.tables.append(try resolved())
            }
        }
        return push
    }

    /// The answer to a push.
    public static func outcome(_ outcome: GuardedPushOutcome, id: String) -> Data {
        var out = XMLDocuments.declaration
        out += Array("<push".utf8)
        XMLDocuments.attr("id", id, into: &out)
        switch outcome {
        case .applied(let counts):
            XMLDocuments.attr("status", "applied", into: &out)
            out += Array(">\n".utf8)
            for (t, c) in counts.sorted(by: { $0.key.description < $1.key.description }) {
                out += Array("<table".utf8)
                XMLDocuments.attr("name", t.name, into: &out)
                XMLDocuments.attr("schema", t.schema, into: &out)
                for (k, v) in [("inserted", c.inserted), ("updated", c.updated), ("deleted", c.deleted)] { XMLDocuments.attr(k, "\(v)", into: &out) }
                out += Array("/>\n".utf8)
            }
        case .alreadyApplied:
            XMLDocuments.attr("status", "already-applied", into: &out)
            out += Array(">\n".utf8)
        case .changed(let rows):
            XMLDocuments.attr("status", "changed", into: &out)
            out += Array(">\n".utf8)
            for r in rows {
                out += Array("<changed".utf8)
                XMLDocuments.attr("table", r.table.name, into: &out)
                XMLDocuments.attr("schema", r.table.schema, into: &out)
                XMLDocuments.attr("key", r.key, into: &out)
                out += Array("/>\n".utf8)
            }
        }
        out += Array("</push>\n".utf8)
        return Data(out)
    }

    public static func decodeOutcome(_ data: Data) throws -> GuardedPushOutcome {
        let root = try XMLTree.parse(data)
        guard root.name == "push" else { throw XMLWireError.unexpected("expected <push>, got <\(root.name)>") }
        func table(_ e: XMLElementNode, _ attribute: String) -> TableName { TableName(schema: e.attributes["schema"], e.attributes[attribute] ?? "") }
        switch root.attributes["status"] {
        case "applied":
            var counts: [TableName: MergeCounts] = [:]
            for t in root.children("table") {
                func n(_ k: String) -> Int64 { t.attributes[k].flatMap { Int64($0) } ?? 0 }
                counts[table(t, "name")] = MergeCounts(inserted: n("inserted"), updated: n("updated"), deleted: n("deleted"))
            }
            return .applied(counts)
        case "already-applied":
            return .alreadyApplied
        case "changed":
            return .changed(root.children("changed").map { ChangedRow(table: table($0, "table"), key: $0.attributes["key"] ?? "") })
        case let other:
            throw XMLWireError.unexpected("<push> answered with status \(other ?? "(none)")")
        }
    }
}
