import FerryCore
import Foundation

/// Decodes a `<rows>` document as its bytes arrive: `append` each piece of the body as it comes
/// (a network chunk), and `next` hands out each batch as soon as it is full. Memory holds the
/// batch being filled, the value being decoded (its bytes, already unescaped or base64-decoded),
/// and the bytes appended but not parsed yet — never the document.
///
/// The grammar and the checks are those of `RowsParser` (the whole-document parser, still used
/// for change sets): the XML declaration and a BOM, comments and whitespace between elements,
/// entity and character references, CDATA in values; DOCTYPE/ENTITY declarations are refused.
/// A document is complete only at its closing `</rows>`: input that ends before it (a page cut
/// short) is an error, never a short page.
public final class XMLRowsStreamDecoder {
    /// The parser's state, a value: its fields are touched once per byte run and per cell, and
    /// a class's stored properties would cost a dynamic exclusivity check at every touch
    /// (a fifth of a stream's decoding time, measured with callgrind).
    private var core: RowsStreamCore

    public var types: [LogicalType] { core.types }
    public var names: [String] { core.names }
    public var batchSize: Int { core.batchSize }
    public var limits: XMLLimits { core.limits }
    /// Rows decoded so far (complete `<r>` elements).
    public var rows: Int { core.rows }
    /// The `<next>` key's cells (raw bytes: base64 cells decoded), once the page gave one.
    public var next: [[UInt8]]? { core.next }
    /// True once `</rows>` (or `<rows/>`) was read.
    public var isComplete: Bool { core.isComplete }
    /// Bytes appended and not parsed yet.
    public var buffered: Int { core.buffered }

    public convenience init(columns: [Column], batchSize: Int, limits: XMLLimits = XMLLimits()) {
        self.init(types: columns.map(\.logicalType), names: columns.map(\.name), batchSize: batchSize, limits: limits)
    }

    init(types: [LogicalType], names: [String], batchSize: Int, limits: XMLLimits) {
        core = RowsStreamCore(types: types, names: names, batchSize: batchSize, limits: limits)
    }

    /// Adds the next bytes of the document.
    public func append(_ bytes: UnsafeRawBufferPointer) { core.append(bytes) }

    public func append(_ data: Data) { core.append(data) }

    /// The next full batch from the bytes appended so far, or nil when more bytes are needed.
    /// With `final` (no more bytes will come): the last, partly filled batch, then nil — or an
    /// error when the document is not complete.
    public func next(final: Bool = false) throws -> RowBatch? { try core.next(final: final) }

    /// Decodes a whole document held in memory, without copying it.
    func decodeWhole(_ data: Data, onBatch: (RowBatch) throws -> Void) throws { try core.decodeWhole(data, onBatch: onBatch) }
}

/// `XMLRowsStreamDecoder`'s parser.
struct RowsStreamCore {
    public let types: [LogicalType]
    public let names: [String]
    public let batchSize: Int
    public let limits: XMLLimits

    /// Rows decoded so far (complete `<r>` elements).
    public internal(set) var rows = 0
    /// The `<next>` key's cells (raw bytes: base64 cells decoded), once the page gave one.
    public private(set) var next: [[UInt8]]?
    /// True once `</rows>` (or `<rows/>`) was read.
    public var isComplete: Bool { state == .afterRoot }

    /// Bytes appended and not parsed yet (`pos` is the first one not parsed).
    private var buf: [UInt8] = []
    private var pos = 0
    /// The line of `buf[0]`, for error messages.
    var linesBefore = 1
    var state: State = .start
    var batch: RowBatch
    /// The cell being read: its value's decoded bytes, and how they arrive.
    /// Per column, how its cells are read.
    let kinds: [WireValue.CellKind]
    private let value = ValueBuffer()
    /// The value's bytes while it is short (most are): a plain array, no class in between.
    var text = ByteArena()
    /// The value moved to `value` (longer than `ValueBuffer.largeBytes`).
    private var valueIsLarge = false
    /// Base64 decoded from one piece of text, before it joins the value.
    private var decoded: [UInt8] = []
    private var cellInRow = true
    private var cellNull = false
    private var cellBase64 = false
    /// False once the cell's text showed a byte from 0x80 (or came through CDATA or a character
    /// reference): only such text is checked for UTF-8 (ASCII is UTF-8), so the check costs
    /// nothing on the scan that finds the value's end.
    private var cellASCII = true
    /// The storage class a cell's `s` gave (0: none).
    private var cellStored: UInt8 = 0
    /// An attribute value being read (reused).
    var attribute: [UInt8] = []
    private var base64 = Base64Decoder()
    /// A CR ended the last piece of a value: an LF that starts the next piece belongs to it.
    private var pendingCR = false
    /// A reference's decoded bytes (reused).
    private var reference: [UInt8] = []
    /// Cells of the current row (or `<next>`) so far.
    var column = 0
    private var nextCells: [[UInt8]] = []
    /// Where a comment returns to.
    private var afterComment: State = .items

    enum State: Equatable {
        case start, declaration, beforeRoot, items, rowCells, nextCells, value, cdata, comment, afterRoot
    }

    init(types: [LogicalType], names: [String], batchSize: Int, limits: XMLLimits) {
        self.types = types
        kinds = types.map(WireValue.CellKind.init)
        self.names = names
        self.batchSize = max(batchSize, 1)
        self.limits = limits
        batch = RowBatch(types: types, capacity: 0)
    }

    /// Adds the next bytes of the document.
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        compact()
        buf.append(bytes: bytes)
    }

    public mutating func append(_ data: Data) {
        data.withUnsafeBytes { append($0) }
    }

    /// Bytes appended and not parsed yet.
    public var buffered: Int { buf.count - pos }

    /// The next full batch from the bytes appended so far, or nil when more bytes are needed.
    /// With `final` (no more bytes will come): the last, partly filled batch, then nil — or an
    /// error when the document is not complete.
    public mutating func next(final: Bool = false) throws -> RowBatch? {
        // The bytes are not changed while they are parsed: a second reference, not a copy.
        let held = buf
        let (end, full) = try held.withUnsafeBufferPointer { p in try parse(p, from: pos, final: final) }
        pos = end
        if full { return takeBatch() }
        if final {
            guard isComplete else { throw endedEarly(line: linesBefore + buf.withUnsafeBufferPointer { Self.lines(in: UnsafeBufferPointer(rebasing: $0[0..<pos])) }) }
            return batch.isEmpty ? nil : takeBatch()
        }
        return nil
    }

    /// Decodes a whole document held in memory, without copying it.
    mutating func decodeWhole(_ data: Data, onBatch: (RowBatch) throws -> Void) throws {
        try data.withUnsafeBytes { raw in
            let p = raw.bindMemory(to: UInt8.self)
            var at = 0
            while true {
                let (end, full) = try parse(p, from: at, final: true)
                at = end
                if full {
                    try onBatch(takeBatch())
                    continue
                }
                guard isComplete else { throw endedEarly(line: linesBefore + Self.lines(in: UnsafeBufferPointer(rebasing: p[0..<at]))) }
                if !batch.isEmpty { try onBatch(takeBatch()) }
                return
            }
        }
    }

    private mutating func takeBatch() -> RowBatch {
        let b = batch
        batch = RowBatch(sizedLike: b)
        return b
    }

    private mutating func compact() {
        guard pos > 0 else { return }
        linesBefore += buf.withUnsafeBufferPointer { Self.lines(in: UnsafeBufferPointer(rebasing: $0[0..<pos])) }
        if pos == buf.count {
            buf.removeAll(keepingCapacity: buf.capacity <= 1 << 20)
        } else {
            buf.removeSubrange(0..<pos)
        }
        pos = 0
    }

    static func lines(in p: UnsafeBufferPointer<UInt8>) -> Int {
        guard var at = p.baseAddress.map(UnsafeRawPointer.init) else { return 0 }
        var left = p.count
        var n = 0
        // memchr: lines are a row each, and the bytes between them are skipped in words.
        while left > 0, let found = memchr(at, 10, left) {
            n += 1
            let next = UnsafeRawPointer(found) + 1
            left -= next - at
            at = next
        }
        return n
    }

    /// The input ended before the document did.
    private func endedEarly(line: Int) -> XMLWireError {
        let what: String
        switch state {
        case .start, .declaration, .beforeRoot: what = "the document ends before <rows>"
        case .value, .cdata: what = "the document ends inside a value"
        case .comment: what = "the document ends inside a comment"
        default: what = "the document ends before </rows>"
        }
        return .malformed(what + ": it was cut short", line: line)
    }

    // MARK: Parsing

    /// Thrown inside a parse step that reached the end of the bytes: wait for more.
    struct Incomplete: Error {}
    /// Thrown where the input is final and a step needs bytes past its end.
    struct AtEnd: Error { var message: String }

    /// A position in the bytes being parsed.
    struct Cursor {
        let p: UnsafeBufferPointer<UInt8>
        var i: Int
        let final: Bool
        var end: Int { p.count }

        /// Whether the bytes at `i` are `s`: `nil` when they are a prefix of it and more may come.
        @inline(__always) func match(_ s: StaticString) -> Bool? {
            let n = s.utf8CodeUnitCount
            return s.withUTF8Buffer { q in
                let available = min(n, end - i)
                for k in 0..<available where p[i + k] != q[k] { return false }
                if available < n { return final ? false : nil }
                return true
            }
        }

        /// `match`, where "maybe" waits for more input.
        @inline(__always) func sees(_ s: StaticString) throws -> Bool {
            guard let m = match(s) else { throw Incomplete() }
            return m
        }

        @inline(__always) mutating func eat(_ s: StaticString) throws -> Bool {
            if try sees(s) {
                i += s.utf8CodeUnitCount
                return true
            }
            return false
        }

        /// The byte at `i`; at the end, waits for more (or fails when the input is final).
        @inline(__always) func byte(_ what: @autoclosure () -> String) throws -> UInt8 {
            guard i < end else {
                if final { throw AtEnd(message: what()) }
                throw Incomplete()
            }
            return p[i]
        }

        @inline(__always) mutating func skipSpace() {
            while i < end, p[i] == 32 || p[i] == 10 || p[i] == 13 || p[i] == 9 { i += 1 }
        }
    }

    /// Runs the state machine over `p` from `start` until a batch is full (true) or the bytes
    /// run out. Returns where parsing stopped; with `final`, the caller checks that the
    /// document is complete there.
    private mutating func parse(_ p: UnsafeBufferPointer<UInt8>, from start: Int, final: Bool) throws -> (Int, Bool) {
        var c = Cursor(p: p, i: start, final: final)
        // Where the current step began: a step cut by the end of the bytes restarts there.
        var mark = c.i
        // The longest a step may be (a tag, a reference; an <error> element is longer).
        var stepLimit = 1 << 16
        do {
            while true {
                mark = c.i
                stepLimit = 1 << 16
                switch state {
                case .start:
                    if try c.eat("\u{FEFF}") {}
                    state = try c.eat("<?xml") ? .declaration : .beforeRoot
                case .declaration:
                    while c.i + 1 < c.end && !(c.p[c.i] == 63 && c.p[c.i + 1] == 62) { c.i += 1 }
                    guard c.i + 1 < c.end else { return (c.i, false) }
                    c.i += 2
                    state = .beforeRoot
                case .beforeRoot:
                    guard try skipMisc(&c) else { continue }
                    if c.i >= c.end { return (c.i, false) }
                    guard try c.eat("<rows") else { throw XMLWireError.unexpected("no <rows> element") }
                    let (_, selfClosing) = try attributes(&c)
                    state = selfClosing ? .afterRoot : .items
                case .items:
                    guard try skipMisc(&c) else { continue }
                    if c.i >= c.end { return (c.i, false) }
                    if try c.eat("<r>") {
                        column = 0
                        state = .rowCells
                    } else if try c.eat("<next>") {
                        nextCells = []
                        state = .nextCells
                    } else if try c.eat("</rows>") {
                        state = .afterRoot
                    } else if try c.sees("<error") {
                        stepLimit = 1 << 20
                        try serverError(&c)
                    } else {
                        throw error("expected <r>, <next> or </rows>", c)
                    }
                case .rowCells, .nextCells:
                    let inRow = state == .rowCells
                    if inRow {
                        if try fastCells(&c) == .full { return (c.i, true) }
                        mark = c.i
                        if state != .rowCells { continue }
                    }
                    // Ferry writes a row's cells back to back: `<v` right here needs no look for
                    // space, comments or the end of the row.
                    if c.i + 2 < c.end && c.p[c.i] == 60 && c.p[c.i + 1] == 118 {
                        c.i += 2
                    } else {
                        guard try skipMisc(&c) else { continue }
                        if c.i >= c.end { return (c.i, false) }
                        if try c.eat(inRow ? "</r>" : "</next>") {
                            state = .items
                            if inRow {
                                guard column == types.count else {
                                    throw XMLWireError.unexpected("row \(rows + 1) has \(column) values for \(types.count) columns")
                                }
                                rows += 1
                                if batch.isFull(rows: batch.count, limit: batchSize) { return (c.i, true) }
                            } else {
                                next = nextCells
                            }
                            continue
                        }
                        guard try c.eat("<v") else { throw error("expected <v> or the end of the row", c) }
                    }
                    let after = try c.byte("unterminated tag")
                    guard after == 32 || after == 62 || after == 47 || after == 9 || after == 10 || after == 13 else {
                        throw error("expected <v> or the end of the row", c)
                    }
                    if inRow && column >= types.count {
                        throw XMLWireError.unexpected("row \(rows + 1) has more than \(types.count) values")
                    }
                    let tag = try Self.commonCellTag(&c) ?? cellTag(&c)
                    cellInRow = inRow
                    cellNull = tag.null
                    cellBase64 = tag.base64
                    cellStored = tag.stored
                    cellASCII = true
                    if tag.stored != 0 && inRow {
                        guard kinds[column] == .binary else {
                            throw XMLWireError.badValue(row: rows, column: names[column], message: "a stored value (s=) in a column not read in its stored form")
                        }
                    }
                    if tag.selfClosing {
                        resetValue()
                        try endCell()
                        continue
                    }
                    if !cellNull {
                        // The common case: the whole value is here, without references, CDATA or
                        // CR, and `</v>` follows it: decoded straight from the input.
                        var seen: UInt64 = 0
                        let k = Self.plainRun(c, from: c.i, seen: &seen)
                        if seen & XMLText.highBits != 0 { cellASCII = false }
                        if k + 4 <= c.end && c.p[k] == 60 && c.p[k + 1] == 47 && c.p[k + 2] == 118 && c.p[k + 3] == 62 {
                            let text = UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: c.p[c.i..<k]))
                            if cellBase64 {
                                decoded.removeAll(keepingCapacity: true)
                                var b64 = Base64Decoder()
                                guard b64.decode(UnsafeBufferPointer(rebasing: c.p[c.i..<k]), into: &decoded), b64.finish() else {
                                    throw XMLWireError.badValue(row: rows, column: cellInRow ? names[column] : "next", message: "invalid base64")
                                }
                                try decoded.withUnsafeBytes { try finishCell($0) }
                                if decoded.capacity > 1 << 20 { decoded = [] }
                            } else {
                                try finishCell(text)
                            }
                            c.i = k + 4
                            continue
                        }
                    }
                    base64 = Base64Decoder()
                    pendingCR = false
                    resetValue()
                    if tag.length > 0, tag.length <= limits.maxValueBytes {
                        // A large value says its length: room for it at once, not by doubling.
                        if tag.length > ValueBuffer.largeBytes {
                            value.reserve(tag.length)
                            valueIsLarge = true
                        } else {
                            text.reserveCapacity(tag.length)
                        }
                    }
                    state = .value
                case .value:
                    switch try valueText(&c) {
                    case .ended: try endCell()
                    case .cdata: state = .cdata
                    case .needMore: return (c.i, false)
                    }
                case .cdata:
                    // Copied as is up to `]]>`.
                    cellASCII = false
                    var k = c.i
                    while k + 2 < c.end && !(c.p[k] == 93 && c.p[k + 1] == 93 && c.p[k + 2] == 62) { k += 1 }
                    if k + 2 >= c.end {
                        if final { return (c.i, false) }
                        // Keep the last two bytes: they may start `]]>`.
                        let keep = max(c.i, c.end - 2)
                        try emit(UnsafeBufferPointer(rebasing: c.p[c.i..<keep]))
                        c.i = keep
                        return (c.i, false)
                    }
                    try emit(UnsafeBufferPointer(rebasing: c.p[c.i..<k]))
                    c.i = k + 3
                    state = .value
                case .comment:
                    var k = c.i
                    while k + 2 < c.end && !(c.p[k] == 45 && c.p[k + 1] == 45 && c.p[k + 2] == 62) { k += 1 }
                    if k + 2 >= c.end {
                        if !final { c.i = max(c.i, c.end - 2) }
                        return (c.i, false)
                    }
                    c.i = k + 3
                    state = afterComment
                case .afterRoot:
                    guard try skipMisc(&c) else { continue }
                    if c.i < c.end { throw error("content after </rows>", c) }
                    return (c.i, false)
                }
            }
        } catch is Incomplete {
            // A step (a tag, a reference, a keyword) is cut by the end of the bytes so far:
            // it starts again from its beginning when more bytes come.
            if c.end - mark > stepLimit { throw XMLWireError.limitExceeded("a tag or reference longer than \(stepLimit) bytes") }
            return (mark, false)
        } catch let e as AtEnd {
            throw error(e.message, c)
        } catch let e as ReferenceError {
            throw error(e.message, c)
        }
    }

    /// Skips whitespace and comments. Returns false when a comment starts (the state machine
    /// goes on in `.comment`, then comes back to the current state).
    private mutating func skipMisc(_ c: inout Cursor) throws -> Bool {
        c.skipSpace()
        guard c.i < c.end, c.p[c.i] == 60 else { return true }
        if try c.eat("<!--") {
            afterComment = state
            state = .comment
            return false
        }
        if try c.sees("<!") { throw XMLWireError.forbiddenDeclaration }
        return true
    }

    enum ValueStep { case ended, cdata, needMore }


    /// The text of a value up to `</v>`, decoded into `value` as it goes.
    private mutating func valueText(_ c: inout Cursor) throws -> ValueStep {
        if pendingCR {
            guard c.i < c.end else { return .needMore }
            if c.p[c.i] == 10 { c.i += 1 }
            pendingCR = false
        }
        while true {
            // A run of plain bytes, in one piece.
            var seen: UInt64 = 0
            let k = Self.plainRun(c, from: c.i, seen: &seen)
            if seen & XMLText.highBits != 0 { cellASCII = false }
            if k > c.i {
                try emit(UnsafeBufferPointer(rebasing: c.p[c.i..<k]))
                c.i = k
            }
            guard c.i < c.end else { return .needMore }
            let b = c.p[c.i]
            if b == 60 {
                guard let closing = c.match("</v>"), let cdata = c.match("<![CDATA[") else { return .needMore }
                if closing {
                    c.i += 4
                    return .ended
                }
                if cdata {
                    c.i += 9
                    return .cdata
                }
                throw error("markup inside a value", c)
            } else if b == 38 {
                if let named = Self.namedReference(c) {
                    // `&amp;` `&lt;` `&gt;` `&quot;` `&apos;`, whole in the bytes.
                    c.i += named.length
                    if !cellBase64 && !valueIsLarge && text.count < ValueBuffer.largeBytes {
                        text.append(named.byte)
                    } else {
                        var byte = named.byte
                        try withUnsafeBytes(of: &byte) { try emit($0.bindMemory(to: UInt8.self)) }
                    }
                    continue
                }
                let start = c.i
                cellASCII = false
                reference.removeAll(keepingCapacity: true)
                do { try Self.reference(&c, into: &reference) } catch is Incomplete {
                    c.i = start
                    return .needMore
                } catch let e as AtEnd {
                    throw error(e.message, c)
                }
                try reference.withUnsafeBufferPointer { try emit($0) }
            } else if b == 13 {
                // CR and CR LF are LF (XML's line-end rule); base64 skips it anyway.
                if !cellBase64 {
                    var lf = UInt8(10)
                    try withUnsafeBytes(of: &lf) { try appendValue($0) }
                }
                c.i += 1
                if c.i < c.end {
                    if c.p[c.i] == 10 { c.i += 1 }
                } else if !c.final {
                    pendingCR = true
                }
            } else {
                throw error("control character 0x\(String(b, radix: 16)) in text (such values travel as base64)", c)
            }
        }
    }

    /// Adds decoded text to the current value (through the base64 decoder for `enc="b64"`).
    @inline(__always) private mutating func emit(_ bytes: UnsafeBufferPointer<UInt8>) throws {
        guard !bytes.isEmpty else { return }
        if cellBase64 {
            decoded.removeAll(keepingCapacity: true)
            guard base64.decode(bytes, into: &decoded) else {
                throw XMLWireError.badValue(row: rows, column: cellInRow ? names[column] : "next", message: "invalid base64")
            }
            let piece = decoded
            try piece.withUnsafeBytes { try appendValue($0) }
            if decoded.capacity > 1 << 20 { decoded = [] }
        } else {
            try appendValue(UnsafeRawBufferPointer(bytes))
        }
    }

    /// Adds decoded bytes to the value: to `text` while it is short, to `value` (its own pages
    /// past a MiB) once it is long.
    @inline(__always) private mutating func appendValue(_ bytes: UnsafeRawBufferPointer) throws {
        if !valueIsLarge && text.count + bytes.count <= ValueBuffer.largeBytes {
            text.append(bytes: bytes)
            return
        }
        if !valueIsLarge {
            text.withUnsafeBytes { value.append($0) }
            text = ByteArena()
            valueIsLarge = true
        }
        value.append(bytes)
        if value.count > limits.maxValueBytes { throw XMLWireError.limitExceeded("a value longer than \(limits.maxValueBytes) bytes") }
    }

    /// Empties the value for the next cell.
    @inline(__always) private mutating func resetValue() {
        if valueIsLarge {
            value.reset()
            valueIsLarge = false
        }
        if !text.isEmpty { text.removeAll(keepingCapacity: true) }
    }

    /// One of the five named references when it is whole at `c.i` (which is `&`): its byte and
    /// its length.
    @inline(__always) static func namedReference(_ c: Cursor) -> (byte: UInt8, length: Int)? {
        let p = c.p, i = c.i
        guard i + 6 <= c.end else { return nil }
        switch p[i + 1] {
        case 97:  // a
            if p[i + 2] == 109 && p[i + 3] == 112 && p[i + 4] == 59 { return (38, 5) }
            if p[i + 2] == 112 && p[i + 3] == 111 && p[i + 4] == 115 && p[i + 5] == 59 { return (39, 6) }
        case 108:  // l
            if p[i + 2] == 116 && p[i + 3] == 59 { return (60, 4) }
        case 103:  // g
            if p[i + 2] == 116 && p[i + 3] == 59 { return (62, 4) }
        case 113:  // q
            if p[i + 2] == 117 && p[i + 3] == 111 && p[i + 4] == 116 && p[i + 5] == 59 { return (34, 6) }
        default:
            break
        }
        return nil
    }

    /// The end of a `<v>` cell: its value goes into the batch (or the `<next>` key).
    private mutating func endCell() throws {
        if cellBase64 && !cellNull && !base64.finish() {
            throw XMLWireError.badValue(row: rows, column: cellInRow ? names[column] : "next", message: "invalid base64")
        }
        if valueIsLarge {
            try value.withUnsafeBytes { try finishCell($0) }
        } else {
            let bytes = text
            try bytes.withUnsafeBytes { try finishCell($0) }
        }
        resetValue()
    }

    /// A cell's decoded value (`bytes`: unescaped, base64 decoded) into the batch, or into the
    /// `<next>` key (whose cells are kept as a column holds them: a stored value with its tag).
    @inline(__always) private mutating func finishCell(_ bytes: UnsafeRawBufferPointer) throws {
        if cellInRow {
            if cellNull {
                batch.columns[column].appendNull()
            } else {
                try cellValue(bytes, stored: cellStored, base64: cellBase64, ascii: cellASCII)
            }
            column += 1
            state = .rowCells
        } else {
            if cellStored != 0 && !cellNull {
                var key = ColumnBuffer(storage: .bytes, capacity: 1)
                do { try WireValue.append(stored: cellStored, raw: bytes, textUnchecked: !cellBase64 && !cellASCII, to: &key) } catch {
                    throw XMLWireError.badValue(row: rows, column: "next", message: "\(error)")
                }
                nextCells.append(key.bytes(0))
            } else {
                nextCells.append(Array(bytes))
            }
            state = .nextCells
        }
    }
}
