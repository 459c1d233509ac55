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

    /// Decodes a push whole; `columns(table, names)` gives the served table's columns of those
    /// names (and refuses a table that is not served or a column it does not have).
    public static func decode(
        _ data: Data, limits: XMLLimits = XMLLimits(), columns resolve: (TableName, [String]) throws -> [Column]
    ) throws -> GuardedPush {
        try XMLGuard.check(data, limits: limits)
        return try data.withUnsafeBytes { raw in
            try GuardedPush(collecting: PushDocumentRows(raw, limits: limits, columns: resolve))
        }
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

/// A push document read where it lies (a request body mapped from its file): indexed once — its
/// tables, and where each section's rows are, every value decoded and checked on the way — then
/// decoded again, a batch at a time, each time the applier asks for a part of a table
/// (`GuardedPushRows`). Its rows are never held whole. `bytes` must stay valid while it is used;
/// `passed` is told the bytes each pass has gone through (pages the owner may give back).
public final class PushDocumentRows: GuardedPushRows {
    public let id: String
    public let tables: [GuardedTableChanges]
    /// One `<insert>`, `<update>` or `<delete>` of a table: where its first row starts.
    struct Section {
        var kind: Kind
        var start: Int
        var rows: Int
    }

    enum Kind {
        case insert, update, delete
        var closing: StaticString {
            switch self {
            case .insert: return "</insert>"
            case .update: return "</update>"
            case .delete: return "</delete>"
            }
        }
    }

    let sections: [[Section]]
    let bytes: UnsafeRawBufferPointer
    let limits: XMLLimits
    let passed: ((Range<Int>) -> Void)?

    /// Indexes the document in `bytes` (already through `XMLGuard`); `resolve(table, names)`
    /// gives the served table's columns of those names.
    public init(
        _ bytes: UnsafeRawBufferPointer, limits: XMLLimits = XMLLimits(), passed: ((Range<Int>) -> Void)? = nil,
        columns resolve: (TableName, [String]) throws -> [Column]
    ) throws {
        self.bytes = bytes
        self.limits = limits
        self.passed = passed
        var p = RowsParser(bytes, limits: limits)
        var tables: [GuardedTableChanges] = []
        var sections: [[Section]] = []
        var index = 0
        let open = try p.start(root: "<push")
        guard let id = p.rootAttributes["id"], !id.isEmpty, id.utf8.count <= 64 else {
            throw XMLWireError.unexpected("<push> needs an id of 1 to 64 characters")
        }
        self.id = id
        if open {
            reading: while true {
                try p.skipMisc()
                if p.eat("</push>") {
                    try p.skipMisc()
                    guard p.i == bytes.count else { throw p.error("content after </push>") }
                    break reading
                }
                guard p.eat("<table") else { throw p.error("expected <table> or </push>") }
                let (attrs, selfClosing) = try p.attributes()
                guard let name = attrs["name"], !name.isEmpty else { throw p.error("<table> needs a name") }
                let table = TableName(schema: attrs["schema"], name)
                if selfClosing {
                    tables.append(GuardedTableChanges(table: table, columns: try resolve(table, []), key: []))
                    sections.append([])
                    continue
                }
                var names: [String] = []
                var key: [String] = []
                var header: GuardedTableChanges?
                var found: [Section] = []
                func resolved() throws -> GuardedTableChanges {
                    if let header { return header }
                    guard !names.isEmpty, !key.isEmpty else { throw p.error("<table name=\"\(name)\"> needs its <column> and <key> elements first") }
                    guard Set(key).isSubset(of: names) else { throw p.error("a <key> of \(name) is not one of its <column> elements") }
                    guard Set(names).count == names.count else { throw p.error("a <column> of \(name) is given twice") }
                    let t = GuardedTableChanges(table: table, columns: try resolve(table, names), key: key, resetSerial: attrs["reset-serial"] == "1")
                    header = t
                    return t
                }
                while true {
                    try p.skipMisc()
                    if p.eat("</table>") { break }
                    let isColumn = p.eat("<column")
                    if isColumn || p.eat("<key") {
                        guard header == nil else { throw p.error("<column> and <key> come before the rows") }
                        let (a, closed) = try p.attributes()
                        guard closed, let n = a["name"], !n.isEmpty else { throw p.error("expected <column name=\"…\"/> or <key name=\"…\"/>") }
                        if isColumn { names.append(n) } else { key.append(n) }
                        continue
                    }
                    let kind: Kind
                    if p.eat("<insert>") { kind = .insert } else if p.eat("<update>") { kind = .update } else if p.eat("<delete>") {
                        kind = .delete
                    } else {
                        throw p.error("expected <column>, <key>, <insert>, <update>, <delete> or </table>")
                    }
                    let t = try resolved()
                    // Every value decoded once here, so that a malformed one is refused before
                    // anything is written; the rows are let go of as they are checked.
                    let start = p.i
                    let rows = try p.sectionRows(
                        closing: kind.closing, types: t.columns.map(\.logicalType), names: t.columns.map(\.name), index: &index, batchSize: 1_000,
                        passed: passed) { _ in }
                    let section = Section(kind: kind, start: start, rows: rows)
                    guard kind != .update || section.rows % 2 == 0 else { throw p.error("<update> holds pairs of rows (expected, new)") }
                    found.append(section)
                }
                tables.append(try resolved())
                sections.append(found)
            }
        }
        self.tables = tables
        self.sections = sections
    }

    public func hasRows(table index: Int) -> Bool { sections[index].contains { $0.rows > 0 } }

    public func forEach(_ part: GuardedPart, ofTable index: Int, batchSize: Int, _ body: (RowBatch) throws -> Void) throws {
        let t = tables[index]
        let types = t.columns.map(\.logicalType)
        let names = t.columns.map(\.name)
        let kind: Kind
        // Of an update's pairs, the first (expected) or the second (new) row.
        var pairs: Int?
        switch part {
        case .inserts: kind = .insert
        case .expected: (kind, pairs) = (.update, 0)
        case .updates: (kind, pairs) = (.update, 1)
        case .deletes: kind = .delete
        }
        var row = 0
        for s in sections[index] where s.kind == kind && s.rows > 0 {
            var p = RowsParser(bytes, limits: limits)
            p.i = s.start
            _ = try p.sectionRows(
                closing: kind.closing, types: types, names: names, index: &row, batchSize: batchSize,
                keep: pairs.map { half in { $0 % 2 == half } }, passed: passed, body)
        }
    }
}
