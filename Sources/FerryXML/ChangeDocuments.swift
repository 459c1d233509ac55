import FerryCore
import Foundation

/// The documents of replication through the service (docs/xml-protocol.md): a replica's
/// transaction (`POST /v1/replicas/NAME/transactions`) and a page of a source's change feed
/// (`GET /v1/feeds/NAME`). Both are sequences of sections, each one table's rows of one kind:
///
///     <upsert table="t" schema="…" staged="…"><column name="id"/><column name="v" native="1"/>
///       <key name="id"/><r><v>1</v><v>x</v></r>…</upsert>
///
/// Values are typed by the columns the reader resolves the names to (the served table's, or
/// the feed's); `native="1"` marks a column travelling in the served engine's stored form.
public enum ChangeDocuments {
    /// One section: a table's rows of one kind.
    public struct Section {
        public var tag: String
        public var table: TableName
        public var columns: [Column]
        public var key: [String]
        /// The rows (none when `staged`, or when the section was indexed: `rowsAt`).
        public var rows: RowBatch
        /// A staging table holding the rows instead (a large transaction's).
        public var staged: TableName?
        /// Where the section's rows start in the document, when they were checked and let go of
        /// rather than held (`decodeTransaction(holdingRows: false)`): `forEachBatch` reads them.
        public var rowsAt: Int?
        /// The section's rows (held or indexed).
        public var rowCount = 0

        /// The `</upsert>`, `</update>` or `</delete>` that ends a section of `tag`.
        static func closing(_ tag: String) -> StaticString {
            switch tag {
            case "upsert": return "</upsert>"
            case "update": return "</update>"
            default: return "</delete>"
            }
        }
    }

    /// Appends one section to `out`.
    public static func section(
        _ tag: String, table: TableName, columns: [Column], key: [String], rows: RowBatch?, staged: TableName? = nil, into out: inout [UInt8]
    ) {
        out += Array("<\(tag)".utf8)
        XMLDocuments.attr("table", table.name, into: &out)
        XMLDocuments.attr("schema", table.schema, into: &out)
        if let staged { XMLDocuments.attr("staged", staged.description, into: &out) }
        out += Array(">".utf8)
        for c in columns {
            out += Array("<column".utf8)
            XMLDocuments.attr("name", c.name, into: &out)
            if c.travelsNatively { XMLDocuments.attr("native", "1", into: &out) }
            out += Array("/>".utf8)
        }
        for k in key {
            out += Array("<key".utf8)
            XMLDocuments.attr("name", k, into: &out)
            out += Array("/>".utf8)
        }
        out += Array("\n".utf8)
        if let rows, !rows.isEmpty {
            XMLDocuments.RowsWriter(types: columns.map(\.logicalType), stored: columns.map(\.travelsNatively)).rows(rows, into: &out)
        }
        out += Array("</\(tag)>\n".utf8)
    }

    /// Reads a section's body after its start tag's attributes (`attrs`): column and key
    /// elements, then rows typed by `resolve(table, names, native)` — held, or (`holdingRows`
    /// false) every value decoded and checked, then let go of, and the rows' place kept.
    static func readSection(
        _ p: inout RowsParser, tag: String, attrs: [String: String], selfClosing: Bool, index: inout Int, text: inout [UInt8],
        holdingRows: Bool = true, passed: ((Range<Int>) -> Void)? = nil, resolve: (TableName, [String], Set<String>) throws -> [Column]
    ) throws -> Section {
        guard let name = attrs["table"], !name.isEmpty else { throw p.error("<\(tag)> needs a table") }
        let table = TableName(schema: attrs["schema"], name)
        let staged = attrs["staged"].map { TableName(parsing: $0) }
        var names: [String] = [], native: Set<String> = [], key: [String] = []
        var columns: [Column]?
        var batch = RowBatch(types: [], capacity: 0)
        var rowsAt: Int?
        var rowCount = 0
        func resolved() throws -> [Column] {
            if let columns { return columns }
            guard Set(names).count == names.count else { throw p.error("a <column> of \(name) is given twice") }
            let c = try resolve(table, names, native)
            guard c.count == names.count else { throw p.error("the columns of \(name) could not be resolved") }
            columns = c
            batch = RowBatch(types: c.map(\.logicalType), capacity: 0)
            return c
        }
        if !selfClosing {
            let closing = Array("</\(tag)>".utf8)
            while true {
                try p.skipMisc()
                if p.eatBytes(closing) { break }
                let isColumn = p.eat("<column")
                if isColumn || p.eat("<key") {
                    guard columns == nil else { throw p.error("<column> and <key> come before the rows") }
                    let (a, closed) = try p.attributes()
                    guard closed, let n = a["name"], !n.isEmpty else { throw p.error("expected <column name=\"…\"/> or <key name=\"…\"/>") }
                    if isColumn {
                        names.append(n)
                        if a["native"] == "1" { native.insert(n) }
                    } else {
                        key.append(n)
                    }
                    continue
                }
                guard p.peek("<r>") else { throw p.error("expected <column>, <key>, <r> or </\(tag)>") }
                guard staged == nil else { throw p.error("a staged <\(tag)> holds no rows") }
                let cols = try resolved()
                if !holdingRows {
                    // The rest of the section is rows, up to and with its end tag.
                    rowsAt = p.i
                    rowCount = try p.sectionRows(
                        closing: Section.closing(tag), types: cols.map(\.logicalType), names: names, index: &index, batchSize: 1_000, passed: passed) { _ in }
                    break
                }
                _ = p.eat("<r>")
                try XMLRowsDecoder.row(&p, closing: "</r>", types: cols.map(\.logicalType), names: names, index: index, text: &text, into: &batch)
                index += 1
                rowCount += 1
            }
        }
        let cols = try resolved()
        guard Set(key).isSubset(of: names) || tag == "delete" else { throw p.error("a <key> of \(name) is not one of its <column> elements") }
        return Section(tag: tag, table: table, columns: cols, key: key, rows: batch, staged: staged, rowsAt: rowsAt, rowCount: rowCount)
    }

    /// Hands an indexed section's rows (`rowsAt`) to `body` in batches of at most `batchSize`,
    /// decoded again from `raw`, the document they were indexed in; a held section's rows in one.
    public static func forEachBatch(
        of s: Section, in raw: UnsafeRawBufferPointer, limits: XMLLimits = XMLLimits(), batchSize: Int,
        passed: ((Range<Int>) -> Void)? = nil, _ body: (RowBatch) throws -> Void
    ) throws {
        guard let at = s.rowsAt else {
            if !s.rows.isEmpty { try body(s.rows) }
            return
        }
        var p = RowsParser(raw, limits: limits)
        p.i = at
        var index = 0
        _ = try p.sectionRows(
            closing: Section.closing(s.tag), types: s.columns.map(\.logicalType), names: s.columns.map(\.name), index: &index, batchSize: batchSize,
            passed: passed, body)
    }

    // MARK: A replica's transaction

    /// What a replica's transaction carries: sections applied in order (`upsert`: rows written
    /// whole by key; `update`: the columns given set in the rows of those keys; `delete`: the
    /// rows of those keys removed), then the replica's record, all in one transaction.
    public struct Transaction {
        public var sections: [Section] = []
        public var state: ReplicationState.Row?
        /// The target's foreign keys run their actions (the source's stream lacks cascades).
        public var repeatingCascades = false
    }

    public static func beginTransaction(repeatingCascades: Bool) -> [UInt8] {
        var out = XMLDocuments.declaration
        out += Array("<transaction".utf8)
        if repeatingCascades { XMLDocuments.attr("cascades", "repeat", into: &out) }
        out += Array(">\n".utf8)
        return out
    }

    public static func endTransaction(state: ReplicationState.Row?, into out: inout [UInt8]) {
        if let s = state { stateElement(s, into: &out) }
        out += Array("</transaction>\n".utf8)
    }

    static func stateElement(_ s: ReplicationState.Row, into out: inout [UInt8]) {
        out += Array("<state".utf8)
        for (k, v) in [("name", s.name), ("phase", s.phase), ("position", s.position), ("applied-rows", String(s.appliedRows)),
                       ("updated-at", s.updatedAt), ("source", s.source)] {
            XMLDocuments.attr(k, v, into: &out)
        }
        out += Array("/>\n".utf8)
    }

    static func state(_ a: [String: String]) throws -> ReplicationState.Row {
        guard let name = a["name"], let phase = a["phase"], let position = a["position"], let applied = a["applied-rows"].flatMap({ Int64($0) }) else {
            throw XMLWireError.unexpected("<state> needs name, phase, position and applied-rows")
        }
        guard name.utf8.count <= 63, phase.utf8.count <= 16, position.utf8.count <= 200 else {
            throw XMLWireError.unexpected("a <state> attribute is longer than a replica's record holds")
        }
        return ReplicationState.Row(
            name: name, phase: phase, position: position, appliedRows: applied, updatedAt: String((a["updated-at"] ?? "").prefix(40)),
            source: String((a["source"] ?? "").prefix(400)))
    }

    public static func decodeTransaction(
        _ data: Data, limits: XMLLimits = XMLLimits(), columns resolve: (TableName, [String], Set<String>) throws -> [Column]
    ) throws -> Transaction {
        try XMLGuard.check(data, limits: limits)
        return try data.withUnsafeBytes { raw in try decodeTransaction(raw, limits: limits, columns: resolve) }
    }

    /// Decodes a transaction where it lies (already through `XMLGuard`); `passed` is told each
    /// stretch of the document decoded (a mapped body's owner gives those pages back). With
    /// `holdingRows` false its sections' rows are checked and let go of, their place kept: read
    /// them with `forEachBatch` from the same bytes.
    public static func decodeTransaction(
        _ raw: UnsafeRawBufferPointer, limits: XMLLimits = XMLLimits(), holdingRows: Bool = true, passed: ((Range<Int>) -> Void)? = nil,
        columns resolve: (TableName, [String], Set<String>) throws -> [Column]
    ) throws -> Transaction {
        var t = Transaction()
        var p = RowsParser(raw, limits: limits)
        var text: [UInt8] = []
        var index = 0
        var from = 0
        defer { passed?(from..<p.i) }
        let open = try p.start(root: "<transaction")
        t.repeatingCascades = p.rootAttributes["cascades"] == "repeat"
        guard open else { return t }
        while true {
            try p.skipMisc()
            if p.eat("</transaction>") {
                try p.skipMisc()
                guard p.i == raw.count else { throw p.error("content after </transaction>") }
                return t
            }
            if p.eat("<state") {
                let (a, _) = try p.attributes()
                t.state = try state(a)
                continue
            }
            let tag: String
            if p.eat("<upsert") { tag = "upsert" } else if p.eat("<update") { tag = "update" } else if p.eat("<delete") { tag = "delete" } else {
                throw p.error("expected <upsert>, <update>, <delete>, <state> or </transaction>")
            }
            guard t.state == nil else { throw p.error("<state> comes after every change") }
            let (a, closed) = try p.attributes()
            var s = try readSection(
                &p, tag: tag, attrs: a, selfClosing: closed, index: &index, text: &text, holdingRows: holdingRows, passed: passed, resolve: resolve)
            if tag == "delete" { s.key = s.columns.map(\.name) }
            guard !s.key.isEmpty else { throw p.error("<\(tag) table=\"\(s.table.name)\"> needs its <key> elements") }
            t.sections.append(s)
            passed?(from..<p.i)
            from = p.i
        }
    }

    /// `<replica …/>`: a replica's record (`GET /v1/replicas/NAME`).
    public static func replica(_ row: ReplicationState.Row) -> Data {
        var out = XMLDocuments.declaration
        stateElement(row, into: &out)
        return Data(out)
    }

    public static func decodeReplica(_ data: Data) throws -> ReplicationState.Row {
        let root = try XMLTree.parse(data)
        guard root.name == "state" else { throw XMLWireError.unexpected("expected <state>, got <\(root.name)>") }
        return try state(root.attributes)
    }

    // MARK: A change feed

    /// `<feed-start position="…" snapshot="…" cascades="…"/>`: a capture made, the snapshot of
    /// the data before its stream, and whether the stream carries cascaded changes.
    public static func feedStart(position: String, snapshot: String, streamsCascades: Bool) -> Data {
        var out = XMLDocuments.declaration
        out += Array("<feed-start".utf8)
        XMLDocuments.attr("position", position, into: &out)
        XMLDocuments.attr("snapshot", snapshot, into: &out)
        XMLDocuments.attr("cascades", streamsCascades ? "streamed" : "not-streamed", into: &out)
        out += Array("/>\n".utf8)
        return Data(out)
    }

    public static func decodeFeedStart(_ data: Data) throws -> (position: String, snapshot: String, streamsCascades: Bool) {
        let root = try XMLTree.parse(data)
        guard root.name == "feed-start", let position = root.attributes["position"], let snapshot = root.attributes["snapshot"] else {
            throw XMLWireError.unexpected("expected <feed-start position=… snapshot=…>")
        }
        return (position, snapshot, root.attributes["cascades"] != "not-streamed")
    }

    /// `<feed-position position="…" cascades="…"/>` (`GET /v1/feeds/NAME/position`).
    public static func feedPosition(_ position: String, streamsCascades: Bool) -> Data {
        var out = XMLDocuments.declaration
        out += Array("<feed-position".utf8)
        XMLDocuments.attr("position", position, into: &out)
        XMLDocuments.attr("cascades", streamsCascades ? "streamed" : "not-streamed", into: &out)
        out += Array("/>\n".utf8)
        return Data(out)
    }

    public static func decodeFeedPosition(_ data: Data) throws -> (position: String, streamsCascades: Bool) {
        let root = try XMLTree.parse(data)
        guard root.name == "feed-position", let position = root.attributes["position"] else { throw XMLWireError.unexpected("expected <feed-position position=…>") }
        return (position, root.attributes["cascades"] != "not-streamed")
    }

    /// `<lag source-position="…" behind="…" unit="…" retained-bytes="…"/>`.
    public static func lag(_ l: ChangeLag) -> Data {
        var out = XMLDocuments.declaration
        out += Array("<lag".utf8)
        XMLDocuments.attr("source-position", l.sourcePosition, into: &out)
        XMLDocuments.attr("behind", String(l.behind), into: &out)
        XMLDocuments.attr("unit", l.unit, into: &out)
        XMLDocuments.attr("retained-bytes", l.retainedBytes.map { String($0) }, into: &out)
        out += Array("/>\n".utf8)
        return Data(out)
    }

    public static func decodeLag(_ data: Data) throws -> ChangeLag {
        let root = try XMLTree.parse(data)
        guard root.name == "lag", let position = root.attributes["source-position"], let behind = root.attributes["behind"].flatMap({ Int64($0) }) else {
            throw XMLWireError.unexpected("expected <lag source-position=… behind=…>")
        }
        return ChangeLag(sourcePosition: position, behind: behind, unit: root.attributes["unit"] ?? "", retainedBytes: root.attributes["retained-bytes"].flatMap { Int64($0) })
    }

    /// `<dropped><item>…</item></dropped>`: what removing a capture removed.
    public static func dropped(_ items: [String]) -> Data {
        var out = XMLDocuments.declaration
        out += Array("<dropped>\n".utf8)
        for i in items {
            out += Array("<item".utf8)
            XMLDocuments.attr("what", i, into: &out)
            out += Array("/>\n".utf8)
        }
        out += Array("</dropped>\n".utf8)
        return Data(out)
    }

    public static func decodeDropped(_ data: Data) throws -> [String] {
        let root = try XMLTree.parse(data)
        guard root.name == "dropped" else { throw XMLWireError.unexpected("expected <dropped>") }
        return root.children("item").compactMap { $0.attributes["what"] }
    }

    /// A page of a change feed: events in source commit order, a transaction never cut
    /// (`<begin/>` … `<commit position="…" at="…"/>`), then `<reached/>` when the source's
    /// position the client asked about (`goal=`) has been handed out.
    public static func beginFeed() -> [UInt8] { XMLDocuments.declaration + Array("<feed>\n".utf8) }

    /// Appends `event`; `columns` are the feed's columns of each table, `keys` its key columns
    /// (in the order a delete's batch holds them).
    public static func feedEvent(_ event: ChangeEvent, columns: [TableName: [Column]], keys: [TableName: [Column]], into out: inout [UInt8]) throws {
        func cols(_ t: TableName) throws -> [Column] {
            guard let c = columns[t] else { throw FerryError.notReady("the change feed has no columns of \(t)") }
            return c
        }
        func subset(_ t: TableName, _ names: [String]) throws -> [Column] {
            let all = try cols(t)
            return try names.map { n in
                guard let c = all.first(where: { $0.name == n }) else { throw FerryError.columnNotFound(table: t, column: n) }
                return c
            }
        }
        func key(_ t: TableName) throws -> [Column] {
            guard let k = keys[t] else { throw FerryError.noKey(table: t) }
            return k
        }
        switch event {
        case .begin: out += Array("<begin/>\n".utf8)
        case .upserts(let t, let b): section("upsert", table: t, columns: try cols(t), key: [], rows: b, into: &out)
        case .updates(let t, let names, let b): section("update", table: t, columns: try subset(t, names), key: [], rows: b, into: &out)
        case .partialUpserts(let t, let names, let b): section("partial-upsert", table: t, columns: try subset(t, names), key: [], rows: b, into: &out)
        case .deletes(let t, let b):
            // The key columns' names, in the order the batch holds them.
            let k = try key(t)
            section("delete", table: t, columns: k, key: [], rows: b, into: &out)
        case .truncate(let tables):
            out += Array("<truncate>".utf8)
            for t in tables {
                out += Array("<table".utf8)
                XMLDocuments.attr("name", t.name, into: &out)
                XMLDocuments.attr("schema", t.schema, into: &out)
                out += Array("/>".utf8)
            }
            out += Array("</truncate>\n".utf8)
        case .commit(let position, let at):
            out += Array("<commit".utf8)
            XMLDocuments.attr("position", position.text, into: &out)
            XMLDocuments.attr("at", at.map { ISOTime.string($0) }, into: &out)
            out += Array("/>\n".utf8)
        }
    }

    public static func endFeed(reached: Bool, into out: inout [UInt8]) {
        if reached { out += Array("<reached/>\n".utf8) }
        out += Array("</feed>\n".utf8)
    }

    /// Decodes a page; `resolve(table, names)` gives the feed's columns of those names (throws
    /// `ColumnsAdded` for a name it does not know), `layout(table)` the names a whole row has, in
    /// order (an `upsert` of other columns is handed out as a partial one). Returns the events
    /// and `<reached/>`.
    public static func decodeFeed(
        _ data: Data, limits: XMLLimits = XMLLimits(), columns resolve: (TableName, [String]) throws -> [Column],
        layout: (TableName) -> [String] = { _ in [] }
    ) throws -> (events: [ChangeEvent], reached: Bool) {
        try XMLGuard.check(data, limits: limits)
        var events: [ChangeEvent] = []
        var reached = false
        try data.withUnsafeBytes { raw in
            var p = RowsParser(raw, limits: limits)
            var text: [UInt8] = []
            var index = 0
            guard try p.start(root: "<feed") else { return }
            while true {
                try p.skipMisc()
                if p.eat("</feed>") {
                    try p.skipMisc()
                    guard p.i == raw.count else { throw p.error("content after </feed>") }
                    return
                }
                if p.eat("<begin/>") {
                    events.append(.begin)
                    continue
                }
                if p.eat("<reached/>") {
                    reached = true
                    continue
                }
                if p.eat("<commit") {
                    let (a, _) = try p.attributes()
                    guard let position = a["position"] else { throw p.error("<commit> needs a position") }
                    events.append(.commit(ChangePosition(position), at: a["at"].flatMap { ISOTime.date($0) }))
                    continue
                }
                if p.eat("<truncate>") {
                    var tables: [TableName] = []
                    while true {
                        try p.skipMisc()
                        if p.eat("</truncate>") { break }
                        guard p.eat("<table") else { throw p.error("expected <table/> in <truncate>") }
                        let (a, _) = try p.attributes()
                        guard let n = a["name"] else { throw p.error("<table> needs a name") }
                        tables.append(TableName(schema: a["schema"], n))
                    }
                    events.append(.truncate(tables))
                    continue
                }
                let tag: String
                if p.eat("<upsert") { tag = "upsert" } else if p.eat("<update") { tag = "update" } else if p.eat("<partial-upsert") { tag = "partial-upsert" } else if p.eat("<delete") {
                    tag = "delete"
                } else {
                    throw p.error("expected a change, <commit>, <reached/> or </feed>")
                }
                let (a, closed) = try p.attributes()
                let s = try readSection(&p, tag: tag, attrs: a, selfClosing: closed, index: &index, text: &text) { t, names, _ in try resolve(t, names) }
                let names = s.columns.map(\.name)
                switch tag {
                case "upsert" where names != layout(s.table): events.append(.partialUpserts(s.table, columns: names, s.rows))
                case "upsert": events.append(.upserts(s.table, s.rows))
                case "update": events.append(.updates(s.table, columns: names, s.rows))
                case "partial-upsert": events.append(.partialUpserts(s.table, columns: names, s.rows))
                default: events.append(.deletes(s.table, s.rows))
                }
            }
        }
        return (events, reached)
    }
}

extension RowsParser {
    @inline(__always) mutating func eatBytes(_ s: [UInt8]) -> Bool {
        guard i + s.count <= b.count else { return false }
        for k in 0..<s.count where b[i + k] != s[k] { return false }
        i += s.count
        return true
    }
}
