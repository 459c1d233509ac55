import FerryCore
import Foundation

/// A hand-written parser for `<rows>` documents, the one hot path of the protocol: it scans
/// bytes once, decodes entity and character references, CDATA, comments and the XML
/// declaration, and refuses DOCTYPE/ENTITY declarations, processing instructions elsewhere and
/// anything outside the rows grammar. It replaces Foundation's XMLParser there because that
/// parser was the ceiling of the XML path (it builds a String per callback); it is fuzzed by
/// `XMLWireFormatTests`.
struct RowsParser {
    let b: UnsafeRawBufferPointer
    var i = 0
    let limits: XMLLimits
    /// The attributes of the root element, once `start(root:)` has read it.
    var rootAttributes: [String: String] = [:]

    init(_ bytes: UnsafeRawBufferPointer, limits: XMLLimits) {
        b = bytes
        self.limits = limits
    }

    enum Item {
        case row
        case next
        case end
    }

    func error(_ message: String) -> XMLWireError {
        var line = 1
        for k in 0..<min(i, b.count) where b[k] == 10 { line += 1 }
        return .malformed(message, line: line)
    }

    @inline(__always) func peek(_ s: StaticString) -> Bool {
        let n = s.utf8CodeUnitCount
        guard i + n <= b.count else { return false }
        return s.withUTF8Buffer { p in
            for k in 0..<n where b[i + k] != p[k] { return false }
            return true
        }
    }

    @inline(__always) mutating func eat(_ s: StaticString) -> Bool {
        if peek(s) {
            i += s.utf8CodeUnitCount
            return true
        }
        return false
    }

    @inline(__always) mutating func skipSpace() {
        while i < b.count, b[i] == 32 || b[i] == 10 || b[i] == 13 || b[i] == 9 { i += 1 }
    }

    /// Whitespace and comments between elements.
    mutating func skipMisc() throws {
        while true {
            skipSpace()
            if peek("<!--") {
                i += 4
                while i + 2 < b.count && !(b[i] == 45 && b[i + 1] == 45 && b[i + 2] == 62) { i += 1 }
                guard i + 2 < b.count else { throw error("unterminated comment") }
                i += 3
            } else if peek("<!") {
                throw XMLWireError.forbiddenDeclaration
            } else {
                return
            }
        }
    }

    /// The prolog and the `<rows …>` start tag. Returns false for an empty `<rows/>`.
    mutating func start() throws -> Bool {
        try start(root: "<rows")
    }

    /// The prolog and the root start tag (`<rows`, `<changes`). Returns false when it is empty (`/>`).
    mutating func start(root: StaticString) throws -> Bool {
        if eat("\u{FEFF}") {}
        if peek("<?xml") {
            while i + 1 < b.count && !(b[i] == 63 && b[i + 1] == 62) { i += 1 }
            guard i + 1 < b.count else { throw error("unterminated XML declaration") }
            i += 2
        }
        try skipMisc()
        guard eat(root) else { throw XMLWireError.unexpected("no \(root)> element") }
        let (attrs, selfClosing) = try attributes()
        rootAttributes = attrs
        return !selfClosing
    }

    /// The next row, `<next>`, or the end of the document.
    mutating func nextItem() throws -> Item {
        try skipMisc()
        if eat("<r>") { return .row }
        if eat("<next>") { return .next }
        if eat("</rows>") {
            try skipMisc()
            guard i == b.count else { throw error("content after </rows>") }
            return .end
        }
        if eat("<error") {
            let (attrs, selfClosing) = try attributes()
            var message: [UInt8] = []
            if !selfClosing { message = try text(until: "</error>") }
            throw XMLWireError.unexpected("the server stopped (\(attrs["code"] ?? "error")): \(String(decoding: message, as: UTF8.self))")
        }
        throw error(i >= b.count ? "the document ends early" : "expected <r>, <next> or </rows>")
    }

    /// One `<v>` cell of the current row or next element; nil at `</r>` / `</next>`. `stored`
    /// is the storage class of a value in the served engine's stored form (`s="t"`), else 0.
    mutating func cell(closing: StaticString, into text: inout [UInt8]) throws -> (null: Bool, base64: Bool, stored: UInt8)? {
        try skipMisc()
        if eat(closing) { return nil }
        guard eat("<v") else { throw error("expected <v> or the end of the row") }
        let (attrs, selfClosing) = try attributes()
        text.removeAll(keepingCapacity: true)
        if !selfClosing { text = try self.text(until: "</v>", reusing: &text) }
        var stored: UInt8 = 0
        if let s = attrs["s"] {
            guard s.utf8.count == 1, let tag = s.utf8.first else { throw error("s= is one letter (i, r, t or b)") }
            stored = tag
        }
        return (attrs["null"] == "1", attrs["enc"] == "b64", stored)
    }

    /// Attributes up to `>` or `/>`.
    mutating func attributes() throws -> ([String: String], Bool) {
        var attrs: [String: String] = [:]
        while true {
            skipSpace()
            guard i < b.count else { throw error("unterminated tag") }
            if b[i] == 62 { i += 1; return (attrs, false) }
            if eat("/>") { return (attrs, true) }
            let nameStart = i
            while i < b.count, b[i] != 61, b[i] != 32, b[i] != 62, b[i] != 47, b[i] != 9, b[i] != 10, b[i] != 13 { i += 1 }
            guard i > nameStart else { throw error("expected an attribute name") }
            let name = String(decoding: UnsafeRawBufferPointer(rebasing: b[nameStart..<i]), as: UTF8.self)
            skipSpace()
            guard eat("=") else { throw error("expected = after attribute \(name)") }
            skipSpace()
            guard i < b.count, b[i] == 34 || b[i] == 39 else { throw error("expected a quoted value for attribute \(name)") }
            let quote = b[i]
            i += 1
            var value: [UInt8] = []
            while true {
                guard i < b.count else { throw error("unterminated attribute \(name)") }
                let c = b[i]
                if c == quote { i += 1; break }
                if c == 60 { throw error("< inside attribute \(name)") }
                if c == 38 { try reference(into: &value) } else {
                    value.append(c == 9 || c == 10 || c == 13 ? 32 : c)  // attribute value normalisation
                    i += 1
                }
            }
            guard attrs[name] == nil else { throw error("attribute \(name) given twice") }
            attrs[name] = String(decoding: value, as: UTF8.self)
        }
    }

    mutating func text(until closing: StaticString) throws -> [UInt8] {
        var out: [UInt8] = []
        return try text(until: closing, reusing: &out)
    }

    /// Character data up to `closing`, with references decoded, CDATA copied and line ends
    /// normalised (CR LF and lone CR become LF, as XML requires).
    mutating func text(until closing: StaticString, reusing out: inout [UInt8]) throws -> [UInt8] {
        out.removeAll(keepingCapacity: true)
        while true {
            guard i < b.count else { throw error("unterminated value") }
            let c = b[i]
            if c == 60 {
                if eat(closing) { return out }
                if eat("<![CDATA[") {
                    while i + 2 < b.count && !(b[i] == 93 && b[i + 1] == 93 && b[i + 2] == 62) {
                        out.append(b[i])
                        i += 1
                    }
                    guard i + 2 < b.count else { throw error("unterminated CDATA section") }
                    i += 3
                    continue
                }
                throw error("markup inside a value")
            } else if c == 38 {
                try reference(into: &out)
            } else if c == 13 {
                out.append(10)
                i += 1
                if i < b.count && b[i] == 10 { i += 1 }
            } else if c < 32 && c != 9 && c != 10 {
                throw error("control character 0x\(String(c, radix: 16)) in text (such values travel as base64)")
            } else {
                out.append(c)
                i += 1
            }
            if out.count > limits.maxValueBytes { throw XMLWireError.limitExceeded("a value longer than \(limits.maxValueBytes) bytes") }
        }
    }

    /// `&amp;` `&lt;` `&gt;` `&quot;` `&apos;` `&#NN;` `&#xNN;` (no other entity exists here).
    mutating func reference(into out: inout [UInt8]) throws {
        if eat("&amp;") { out.append(38); return }
        if eat("&lt;") { out.append(60); return }
        if eat("&gt;") { out.append(62); return }
        if eat("&quot;") { out.append(34); return }
        if eat("&apos;") { out.append(39); return }
        guard eat("&#") else { throw error("unknown entity reference (only the five XML entities and character references)") }
        var hex = false
        if i < b.count && b[i] == 120 { hex = true; i += 1 }
        var v: UInt32 = 0
        var digits = 0
        while i < b.count, b[i] != 59 {
            let c = b[i]
            let d: UInt32
            switch c {
            case 48...57: d = UInt32(c - 48)
            case 97...102 where hex: d = UInt32(c - 87)
            case 65...70 where hex: d = UInt32(c - 55)
            default: throw error("bad character reference")
            }
            v = v * (hex ? 16 : 10) + d
            digits += 1
            guard digits <= 8 else { throw error("bad character reference") }
            i += 1
        }
        guard i < b.count, digits > 0 else { throw error("bad character reference") }
        i += 1
        // XML 1.0 characters only: no NUL or other C0 controls but TAB, LF, CR; no surrogates.
        guard let scalar = Unicode.Scalar(v), v == 9 || v == 10 || v == 13 || (v >= 32 && v != 0xFFFE && v != 0xFFFF) else {
            throw error("character reference &#\(v); is not an XML character")
        }
        out.append(contentsOf: String(Character(scalar)).utf8)
    }
}

extension RowsParser {
    /// The `<r>` rows of a section (its start tag just read) up to `closing`, decoded as `types`:
    /// those `keep` wants (all, without it) handed to `body` in batches of at most `batchSize`
    /// rows, and each stretch of the document behind a handed-out batch told to `passed` (a
    /// mapped body's owner gives those pages back). `index` numbers the rows for messages.
    /// Returns the rows the section holds. How push documents and change sets are read where
    /// they lie, a batch at a time.
    mutating func sectionRows(
        closing: StaticString, types: [LogicalType], names: [String], index: inout Int, batchSize: Int,
        keep: ((Int) -> Bool)? = nil, passed: ((Range<Int>) -> Void)?, _ body: (RowBatch) throws -> Void
    ) throws -> Int {
        var batch = RowBatch(types: types, capacity: 0)
        var skipped = RowBatch(types: types, capacity: 0)
        var text: [UInt8] = []
        var from = i
        var n = 0
        while true {
            try skipMisc()
            if eat(closing) { break }
            guard eat("<r>") else { throw error("expected <r> or the end of the section") }
            if let keep, !keep(n) {
                try XMLRowsDecoder.row(&self, closing: "</r>", types: types, names: names, index: index, text: &text, into: &skipped)
                if skipped.count >= 1_000 { skipped = RowBatch(types: types, capacity: 0) }
            } else {
                try XMLRowsDecoder.row(&self, closing: "</r>", types: types, names: names, index: index, text: &text, into: &batch)
            }
            n += 1
            index += 1
            if batch.isFull(rows: batch.count, limit: max(batchSize, 1)) {
                try body(batch)
                batch = RowBatch(types: types, capacity: 0)
                passed?(from..<i)
                from = i
            }
        }
        if !batch.isEmpty { try body(batch) }
        passed?(from..<i)
        return n
    }
}
