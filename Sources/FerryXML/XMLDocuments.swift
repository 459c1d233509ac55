import FerryCore
import Foundation

/// Writers and readers for the protocol's documents (docs/xml-protocol.md).
public enum XMLDocuments {
    static let declaration = Array("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n".utf8)

    static func attr(_ name: String, _ value: String?, into out: inout [UInt8]) {
        guard let value else { return }
        out.append(32)
        out.append(contentsOf: name.utf8)
        out.append(contentsOf: [61, 34])
        XMLText.appendAttribute(value, into: &out)
        out.append(34)
    }

    // MARK: Table list

    /// `<tables><table name="…" schema="…" rows="…"/>…</tables>`
    public static func tables(_ list: [TableInfo]) -> Data {
        var out = declaration
        out.append(contentsOf: "<tables>".utf8)
        for t in list {
            out.append(contentsOf: "<table".utf8)
            attr("name", t.name.name, into: &out)
            attr("schema", t.name.schema, into: &out)
            attr("rows", t.rowEstimate.map(String.init), into: &out)
            out.append(contentsOf: "/>".utf8)
        }
        out.append(contentsOf: "</tables>\n".utf8)
        return Data(out)
    }

    public static func decodeTables(_ data: Data) throws -> [TableInfo] {
        let root = try XMLTree.parse(data)
        guard root.name == "tables" else { throw XMLWireError.unexpected("expected <tables>, got <\(root.name)>") }
        return try root.children("table").map { t in
            guard let name = t.attributes["name"] else { throw XMLWireError.unexpected("<table> without a name") }
            return TableInfo(name: TableName(schema: t.attributes["schema"], name), rowEstimate: t.attributes["rows"].flatMap { Int64($0) })
        }
    }

    // MARK: Schema

    /// `<table name engine rows><column name native type … nullable serial default generated>
    /// <label>…</label></column>…<primaryKey><c>…</c></primaryKey><unique><c>…</c></unique>
    /// <skipped column="…" reason="…"/></table>`
    public static func schema(_ s: TableSchema) -> Data {
        var out = declaration
        out.append(contentsOf: "<table".utf8)
        attr("name", s.name.name, into: &out)
        attr("schema", s.name.schema, into: &out)
        attr("engine", s.engine.rawValue, into: &out)
        attr("rows", s.rowEstimate.map(String.init), into: &out)
        out.append(62)
        for c in s.columns {
            out.append(contentsOf: "<column".utf8)
            attr("name", c.name, into: &out)
            attr("native", c.nativeType, into: &out)
            var labels: [String] = []
            for (k, v) in typeAttributes(c.logicalType, labels: &labels) { attr(k, v, into: &out) }
            attr("nullable", c.isNullable ? "true" : "false", into: &out)
            attr("serial", c.serial?.rawValue, into: &out)
            // Defaults travel as values or well-known functions, never as SQL text.
            let (kind, value) = defaultAttributes(c.defaultValue)
            attr("defaultKind", kind, into: &out)
            attr("default", value, into: &out)
            if c.generated { attr("generated", "true", into: &out) }
            if labels.isEmpty {
                out.append(contentsOf: "/>".utf8)
            } else {
                out.append(62)
                for l in labels {
                    out.append(contentsOf: "<label>".utf8)
                    XMLText.appendEscaped(l, into: &out)
                    out.append(contentsOf: "</label>".utf8)
                }
                out.append(contentsOf: "</column>".utf8)
            }
        }
        func key(_ element: String, _ cols: [String]) {
            out.append(contentsOf: "<\(element)>".utf8)
            for c in cols {
                out.append(contentsOf: "<c>".utf8)
                XMLText.appendEscaped(c, into: &out)
                out.append(contentsOf: "</c>".utf8)
            }
            out.append(contentsOf: "</\(element)>".utf8)
        }
        if !s.primaryKey.isEmpty { key("primaryKey", s.primaryKey) }
        for u in s.uniqueKeys { key("unique", u) }
        objects(indexes: s.indexes.filter(\.isStructured), foreignKeys: s.foreignKeys, into: &out)
        for w in withheld(s) {
            out.append(contentsOf: "<withheld".utf8)
            attr("kind", w.kind, into: &out)
            attr("name", w.name, into: &out)
            attr("reason", w.reason, into: &out)
            out.append(contentsOf: "/>".utf8)
        }
        for skip in s.unsupportedColumns {
            out.append(contentsOf: "<skipped".utf8)
            attr("column", skip.column, into: &out)
            attr("reason", skip.reason, into: &out)
            out.append(contentsOf: "/>".utf8)
        }
        out.append(contentsOf: "</table>\n".utf8)
        return Data(out)
    }

    /// `<index name unique><c desc>col</c>…</index>` and `<foreignKey name table schema onDelete
    /// onUpdate><c references="parentCol">col</c>…</foreignKey>`: structured objects only.
    static func objects(indexes: [IndexInfo], foreignKeys: [ForeignKey], into out: inout [UInt8]) {
        for index in indexes {
            out.append(contentsOf: "<index".utf8)
            attr("name", index.name, into: &out)
            if index.isUnique { attr("unique", "true", into: &out) }
            out.append(62)
            for c in index.columns {
                out.append(contentsOf: "<c".utf8)
                if c.descending { attr("desc", "true", into: &out) }
                out.append(62)
                XMLText.appendEscaped(c.name, into: &out)
                out.append(contentsOf: "</c>".utf8)
            }
            out.append(contentsOf: "</index>".utf8)
        }
        for fk in foreignKeys {
            out.append(contentsOf: "<foreignKey".utf8)
            attr("name", fk.name, into: &out)
            attr("table", fk.referencedTable.name, into: &out)
            attr("schema", fk.referencedTable.schema, into: &out)
            attr("onDelete", fk.onDelete.rawValue, into: &out)
            attr("onUpdate", fk.onUpdate.rawValue, into: &out)
            out.append(62)
            for (c, r) in zip(fk.columns, fk.referencedColumns) {
                out.append(contentsOf: "<c".utf8)
                attr("references", r, into: &out)
                out.append(62)
                XMLText.appendEscaped(c, into: &out)
                out.append(contentsOf: "</c>".utf8)
            }
            out.append(contentsOf: "</foreignKey>".utf8)
        }
    }

    /// `<objects>` with indexes and foreign keys: the body of the requests that create them.
    public static func objects(indexes: [IndexInfo], foreignKeys: [ForeignKey]) -> Data {
        var out = declaration
        out.append(contentsOf: "<objects>".utf8)
        objects(indexes: indexes, foreignKeys: foreignKeys, into: &out)
        out.append(contentsOf: "</objects>\n".utf8)
        return Data(out)
    }

    public static func decodeObjects(_ data: Data) throws -> (indexes: [IndexInfo], foreignKeys: [ForeignKey]) {
        let root = try XMLTree.parse(data)
        guard root.name == "objects" || root.name == "table" else { throw XMLWireError.unexpected("expected <objects>, got <\(root.name)>") }
        return try decodeObjects(root)
    }

    static func decodeObjects(_ root: XMLElementNode) throws -> (indexes: [IndexInfo], foreignKeys: [ForeignKey]) {
        let indexes = try root.children("index").map { e -> IndexInfo in
            guard let name = e.attributes["name"], !name.isEmpty else { throw XMLWireError.unexpected("<index> without a name") }
            let cols = e.children("c").map { IndexColumn($0.text, descending: $0.attributes["desc"] == "true") }
            guard !cols.isEmpty else { throw XMLWireError.unexpected("index \(name) has no columns") }
            return IndexInfo(name: name, columns: cols, isUnique: e.attributes["unique"] == "true")
        }
        let fks = try root.children("foreignKey").map { e -> ForeignKey in
            guard let table = e.attributes["table"], !table.isEmpty else { throw XMLWireError.unexpected("<foreignKey> without a table") }
            let cols = e.children("c")
            guard !cols.isEmpty, cols.allSatisfy({ $0.attributes["references"] != nil }) else {
                throw XMLWireError.unexpected("foreign key to \(table) needs <c references=…> for each column")
            }
            func action(_ k: String) throws -> ReferentialAction {
                guard let raw = e.attributes[k] else { return .noAction }
                guard let a = ReferentialAction(rawValue: raw) else { throw XMLWireError.unexpected("\(k) '\(raw.prefix(20))' is not a referential action") }
                return a
            }
            return ForeignKey(
                name: e.attributes["name"], columns: cols.map(\.text), referencedTable: TableName(schema: e.attributes["schema"], table),
                referencedColumns: cols.compactMap { $0.attributes["references"] }, onDelete: try action("onDelete"), onUpdate: try action("onUpdate"))
        }
        return (indexes, fks)
    }

    /// What a schema document leaves out because it is SQL text: checks, expression and
    /// partial indexes, expression defaults, MySQL's ON UPDATE.
    static func withheld(_ s: TableSchema) -> [SkippedObject] {
        let table = s.name.description
        let reason = "it is SQL text, which the XML service does not carry"
        var out = s.withheld
        for c in s.checks { out.append(SkippedObject(kind: "check", name: c.name ?? "(unnamed)", table: table, reason: reason)) }
        for i in s.indexes where !i.isStructured { out.append(SkippedObject(kind: "index", name: i.name, table: table, reason: reason)) }
        for c in s.columns {
            if case .expression? = c.defaultValue {
                out.append(SkippedObject(kind: "default", name: c.name, table: table, reason: "the default " + reason))
            }
            if c.updateExpression != nil {
                out.append(SkippedObject(kind: "on update", name: c.name, table: table, reason: "ON UPDATE " + reason))
            }
        }
        return out
    }

    static func defaultAttributes(_ d: ColumnDefault?) -> (String?, String?) {
        switch d {
        case nil, .expression?: return (nil, nil)
        case .text(let s)?: return ("text", s)
        case .number(let n)?: return ("number", n)
        case .boolean(let b)?: return ("boolean", b ? "true" : "false")
        case .currentTimestamp?: return ("current_timestamp", nil)
        case .currentDate?: return ("current_date", nil)
        case .currentTime?: return ("current_time", nil)
        }
    }

    static func decodeDefault(_ kind: String?, _ value: String?) throws -> ColumnDefault? {
        switch kind {
        case nil: return nil
        case "text": return .text(value ?? "")
        case "number":
            guard let v = value, Double(v) != nil, v.allSatisfy({ $0.isNumber || "-+.eE".contains($0) }) else {
                throw XMLWireError.unexpected("a number default must be a number, not '\((value ?? "").prefix(20))'")
            }
            return .number(v)
        case "boolean": return .boolean(value == "true")
        case "current_timestamp": return .currentTimestamp
        case "current_date": return .currentDate
        case "current_time": return .currentTime
        case let other?: throw XMLWireError.unexpected("unknown defaultKind '\(other.prefix(20))'")
        }
    }

    /// The attributes that spell a logical type: `type` plus its parameters.
    static func typeAttributes(_ t: LogicalType, labels: inout [String]) -> [(String, String?)] {
        func s(_ v: Int?) -> String? { v.map(String.init) }
        switch t {
        case .boolean: return [("type", "boolean")]
        case .int16: return [("type", "int16")]
        case .int32: return [("type", "int32")]
        case .int64: return [("type", "int64")]
        case .decimal(let p, let sc): return [("type", "decimal"), ("precision", s(p)), ("scale", s(sc))]
        case .float32: return [("type", "float32")]
        case .float64: return [("type", "float64")]
        case .text(let n, let fixed): return [("type", "text"), ("maxLength", s(n)), ("fixed", fixed ? "true" : nil)]
        case .binary(let n): return [("type", "binary"), ("maxLength", s(n))]
        case .date: return [("type", "date")]
        case .time(let p): return [("type", "time"), ("precision", s(p))]
        case .timestamp(let p, let tz): return [("type", "timestamp"), ("precision", s(p)), ("timeZone", tz ? "true" : "false")]
        case .uuid: return [("type", "uuid")]
        case .json: return [("type", "json")]
        case .enumeration(let l):
            labels = l
            return [("type", "enumeration")]
        case .unsupported(let native): return [("type", "unsupported"), ("unsupportedNative", native)]
        }
    }

    static func logicalType(_ e: XMLElementNode) throws -> LogicalType {
        let a = e.attributes
        func i(_ k: String) -> Int? { a[k].flatMap { Int($0) } }
        switch a["type"] ?? "" {
        case "boolean": return .boolean
        case "int16": return .int16
        case "int32": return .int32
        case "int64": return .int64
        case "decimal": return .decimal(precision: i("precision"), scale: i("scale"))
        case "float32": return .float32
        case "float64": return .float64
        case "text": return .text(maxLength: i("maxLength"), fixed: a["fixed"] == "true")
        case "binary": return .binary(maxLength: i("maxLength"))
        case "date": return .date
        case "time": return .time(precision: i("precision"))
        case "timestamp": return .timestamp(precision: i("precision"), timeZone: a["timeZone"] == "true")
        case "uuid": return .uuid
        case "json": return .json
        case "enumeration": return .enumeration(labels: e.children("label").map(\.text))
        case "unsupported": return .unsupported(native: a["unsupportedNative"] ?? "")
        case let other: throw XMLWireError.unexpected("unknown type '\(other)' for column \(a["name"] ?? "?")")
        }
    }

    public static func decodeSchema(_ data: Data) throws -> TableSchema {
        let root = try XMLTree.parse(data)
        guard root.name == "table", let name = root.attributes["name"] else {
            throw XMLWireError.unexpected("expected <table name=…>, got <\(root.name)>")
        }
        let columns = try root.children("column").map { c -> Column in
            guard let n = c.attributes["name"] else { throw XMLWireError.unexpected("<column> without a name") }
            return Column(
                name: n, nativeType: c.attributes["native"] ?? "", logicalType: try logicalType(c),
                isNullable: c.attributes["nullable"] != "false",
                defaultValue: try decodeDefault(c.attributes["defaultKind"], c.attributes["default"]),
                serial: c.attributes["serial"].flatMap { SerialKind(rawValue: $0) }, generated: c.attributes["generated"] == "true")
        }
        guard !columns.isEmpty else { throw XMLWireError.unexpected("table \(name) has no columns") }
        var schema = TableSchema(
            name: TableName(schema: root.attributes["schema"], name), engine: Engine(root.attributes["engine"] ?? "xml"),
            columns: columns, primaryKey: root.child("primaryKey")?.children("c").map(\.text) ?? [],
            uniqueKeys: root.children("unique").map { $0.children("c").map(\.text) },
            rowEstimate: root.attributes["rows"].flatMap { Int64($0) })
        let objects = try decodeObjects(root)
        schema.indexes = objects.indexes
        schema.foreignKeys = objects.foreignKeys
        schema.withheld = root.children("withheld").map { w in
            SkippedObject(kind: w.attributes["kind"] ?? "object", name: w.attributes["name"] ?? "", table: schema.name.description,
                          reason: w.attributes["reason"] ?? "not carried by the XML service")
        }
        return schema
    }

    /// `<applied k="n"…><skipped kind name reason/>…</applied>`: what a request did, and what it declined.
    public static func applied(_ counts: [(String, Int)], skipped: [SkippedObject]) -> Data {
        var out = declaration
        out.append(contentsOf: "<applied".utf8)
        for (k, v) in counts { attr(k, String(v), into: &out) }
        out.append(62)
        for s in skipped {
            out.append(contentsOf: "<skipped".utf8)
            attr("kind", s.kind, into: &out)
            attr("name", s.name, into: &out)
            attr("reason", s.reason, into: &out)
            out.append(contentsOf: "/>".utf8)
        }
        out.append(contentsOf: "</applied>\n".utf8)
        return Data(out)
    }

    public static func decodeSkipped(_ data: Data, table: TableName) throws -> [SkippedObject] {
        try XMLTree.parse(data).children("skipped").map {
            SkippedObject(kind: $0.attributes["kind"] ?? "object", name: $0.attributes["name"] ?? "", table: table.description,
                          reason: $0.attributes["reason"] ?? "declined by the service")
        }
    }

    /// `<objects><object kind name table/>…</objects>`: what a copy of tables does not carry.
    public static func otherObjects(_ list: [OtherObject]) -> Data {
        var out = declaration
        out.append(contentsOf: "<objects>".utf8)
        for o in list {
            out.append(contentsOf: "<object".utf8)
            attr("kind", o.kind, into: &out)
            attr("name", o.name, into: &out)
            attr("table", o.table, into: &out)
            out.append(contentsOf: "/>".utf8)
        }
        out.append(contentsOf: "</objects>\n".utf8)
        return Data(out)
    }

    public static func decodeOtherObjects(_ data: Data) throws -> [OtherObject] {
        try XMLTree.parse(data).children("object").map {
            OtherObject(kind: $0.attributes["kind"] ?? "object", name: $0.attributes["name"] ?? "", table: $0.attributes["table"])
        }
    }

    // MARK: Rows

    /// Streams a `<rows>` document: `begin`, then `append` per batch, then `end` with the key
    /// where the next page starts (keyset paging), if any.
    public struct RowsWriter {
        public let types: [LogicalType]
        /// Columns holding values in the served engine's stored form (cells written with `s`).
        public let stored: [Bool]
        public init(types: [LogicalType], stored: [Bool] = []) {
            self.types = types
            self.stored = stored
        }

        public func begin(table: TableName) -> [UInt8] {
            var out = declaration
            out.append(contentsOf: "<rows".utf8)
            attr("table", table.name, into: &out)
            attr("schema", table.schema, into: &out)
            out.append(contentsOf: ">\n".utf8)
            return out
        }

        /// Rows `range` of `batch` as `<r><v>…</v>…</r>` lines (the batch pinned once, each
        /// column's cell form decided once).
        public func rows(_ batch: RowBatch, range: Range<Int>? = nil, into out: inout [UInt8]) {
            let forms = WireValue.CellForm.forms(types, stored: stored)
            batch.withPinnedColumns { cols in
                for r in range ?? 0..<batch.count {
                    out.append(contentsOf: "<r>".utf8)
                    for c in forms.indices { WireValue.appendCell(cols[c], row: r, form: forms[c], into: &out) }
                    out.append(contentsOf: "</r>\n".utf8)
                }
            }
        }

        /// `<next>` (the last row's key, as cells) and `</rows>`.
        public func end(next: (batch: RowBatch, row: Int, keyColumns: [Int])? = nil) -> [UInt8] {
            var out: [UInt8] = []
            if let next {
                out.append(contentsOf: "<next>".utf8)
                for k in next.keyColumns { WireValue.appendCell(next.batch.columns[k], row: next.row, type: types[k], stored: k < stored.count && stored[k], into: &out) }
                out.append(contentsOf: "</next>\n".utf8)
            }
            out.append(contentsOf: "</rows>\n".utf8)
            return out
        }
    }

    // MARK: Errors

    /// `<error code="…" table="…">message</error>`
    public static func error(code: String, table: String?, message: String, row: Int? = nil, column: String? = nil) -> Data {
        var out = declaration
        out.append(contentsOf: "<error".utf8)
        attr("code", code, into: &out)
        attr("table", table, into: &out)
        attr("row", row.map(String.init), into: &out)
        attr("column", column, into: &out)
        out.append(62)
        XMLText.appendEscaped(message, into: &out)
        out.append(contentsOf: "</error>\n".utf8)
        return Data(out)
    }

    /// An `<error>` document: code, table, message, and for a refused value its row (1-based,
    /// in the request's rows) and column.
    public struct ErrorReport: Sendable {
        public var code: String
        public var table: String?
        public var message: String
        public var row: Int?
        public var column: String?
    }

    /// The `<error>` document in `data`, or nil when the body is not one.
    public static func decodeError(_ data: Data) -> ErrorReport? {
        guard let root = try? XMLTree.parse(data), root.name == "error" else { return nil }
        return ErrorReport(
            code: root.attributes["code"] ?? "error", table: root.attributes["table"], message: root.text,
            row: root.attributes["row"].flatMap { Int($0) }, column: root.attributes["column"])
    }
}
