import FerryCore
import Foundation

/// `RowsStreamCore`'s reading of markup: a cell's start tag, attributes, references, and an
/// `<error>` the service put inside a page.
extension RowsStreamCore {
    /// What a `<v>` start tag says about its cell.
    struct CellTag {
        var null = false
        var base64 = false
        /// The storage class of a stored value (`s`), 0 when none is given.
        var stored: UInt8 = 0
        /// `n`: the value's length in bytes, 0 when not given.
        var length = 0
        var selfClosing = false
    }

    /// The start tags Ferry writes for most cells, recognised whole at `c.i` (just after `<v`):
    /// ` s="X">` for a stored value of class X, ` s="b" enc="b64">`, ` enc="b64">` and
    /// ` null="1"/>`. nil for anything else (other spacing, quotes or attributes, or a tag cut by
    /// the end of the bytes so far), which `cellTag` reads attribute by attribute.
    @inline(__always) static func commonCellTag(_ c: inout Cursor) -> CellTag? {
        guard let base = c.p.baseAddress, c.end - c.i >= 7 else { return nil }
        let p = base + c.i
        let n = c.end - c.i
        var tag = CellTag()
        @inline(__always) func matches(_ s: StaticString, at offset: Int) -> Bool {
            let k = s.utf8CodeUnitCount
            guard offset + k <= n else { return false }
            return s.withUTF8Buffer { q in
                for j in 0..<k where p[offset + j] != q[j] { return false }
                return true
            }
        }
        if matches(" s=\"", at: 0), p[5] == 34 {
            let s = p[4]
            guard s == StoredValue.integer || s == StoredValue.real || s == StoredValue.text || s == StoredValue.blob else { return nil }
            tag.stored = s
            if p[6] == 62 {
                c.i += 7
                return tag
            }
            let encoded: StaticString = " enc=\"b64\">"
            guard matches(encoded, at: 6) else { return nil }
            tag.base64 = true
            c.i += 6 + encoded.utf8CodeUnitCount
            return tag
        }
        let encoded: StaticString = " enc=\"b64\">", null: StaticString = " null=\"1\"/>"
        if matches(encoded, at: 0) {
            tag.base64 = true
            c.i += encoded.utf8CodeUnitCount
            return tag
        }
        if matches(null, at: 0) {
            tag.null = true
            tag.selfClosing = true
            c.i += null.utf8CodeUnitCount
            return tag
        }
        return nil
    }

    /// Where a run of a cell's plain text that starts at `k` ends: the first `<`, `&`, CR or
    /// control byte (TAB and LF are plain), or the end of the bytes. Eight bytes at a time, each
    /// word's first byte below 0x20, `<` or `&` found at once (bytes from 0x80 are plain here);
    /// the last few bytes one by one. Every byte it passes is OR-ed into `seen` (bit 7 set: the
    /// run holds a byte of a UTF-8 sequence, so the value's text must be checked; without it the
    /// run is ASCII).
    @inline(__always) static func plainRun(_ c: Cursor, from start: Int, seen: inout UInt64) -> Int {
        var k = start
        if let base = c.p.baseAddress {
            while k + 8 <= c.end {
                let w = UnsafeRawPointer(base).loadUnaligned(fromByteOffset: k, as: UInt64.self)
                let look = XMLText.valueLook(w)
                if look == 0 {
                    seen |= w
                    k += 8
                    continue
                }
                let first = look.trailingZeroBitCount >> 3
                // The bytes before it (a shift by 64 would be no shift: first is below 8 here).
                seen |= w & ((1 &<< (UInt64(first) &* 8)) &- 1)
                k += first
                let b = base[k]
                guard b == 9 || b == 10 else { return k }
                k += 1
            }
        }
        while k < c.end {
            let b = c.p[k]
            if b == 60 || b == 38 || b == 13 || (b < 32 && b != 9 && b != 10) { break }
            seen |= UInt64(b)
            k += 1
        }
        return k
    }

    /// The attributes of a `<v>` start tag, read without building names or a dictionary (one
    /// start tag per value); unknown attributes are skipped.
    mutating func cellTag(_ c: inout Cursor) throws -> CellTag {
        var tag = CellTag()
        var seen: UInt8 = 0
        var unknown: [UnsafeBufferPointer<UInt8>] = []
        while true {
            c.skipSpace()
            let b = try c.byte("unterminated tag")
            if b == 62 {
                c.i += 1
                return tag
            }
            if b == 47 {
                guard try c.eat("/>") else { throw error("expected /> or an attribute", c) }
                tag.selfClosing = true
                return tag
            }
            let (name, quote) = try attributeStart(&c)
            // Most values are a few plain bytes: compared where they are.
            var k = c.i
            while k < c.end, c.p[k] != quote, c.p[k] != 38, c.p[k] != 60, c.p[k] >= 32 { k += 1 }
            guard k < c.end else {
                if c.final { throw AtEnd(message: "unterminated attribute") }
                throw Incomplete()
            }
            let plain: UnsafeBufferPointer<UInt8>?
            if c.p[k] == quote {
                plain = UnsafeBufferPointer(rebasing: c.p[c.i..<k])
                c.i = k + 1
            } else {
                plain = nil
                if !attribute.isEmpty { attribute.removeAll(keepingCapacity: true) }
            }
            if plain == nil { try Self.attributeText(&c, quote: quote, into: &attribute) }
            let bit = try plain.map { try Self.classify(name, $0, into: &tag) }
                ?? attribute.withUnsafeBufferPointer { try Self.classify(name, $0, into: &tag) }
            guard let bit else {
                // Not a cell's attribute: skipped, but never given twice (XML's rule).
                if unknown.contains(where: { Self.same($0, name) }) { throw error("attribute \(String(decoding: name, as: UTF8.self)) given twice", c) }
                unknown.append(name)
                continue
            }
            guard seen & bit == 0 else { throw error("attribute \(String(decoding: name, as: UTF8.self)) given twice", c) }
            seen |= bit
        }
    }

    /// Notes what attribute `name` with `value` says about a cell; returns its bit (nil for an
    /// attribute cells do not have, which is skipped).
    @inline(__always) static func classify(_ name: UnsafeBufferPointer<UInt8>, _ value: UnsafeBufferPointer<UInt8>, into tag: inout CellTag) throws -> UInt8? {
        if same(name, "null") {
            tag.null = same(value, "1")
            return 1
        } else if same(name, "enc") {
            tag.base64 = same(value, "b64")
            return 2
        } else if same(name, "n") {
            tag.length = WireValue.parseInteger(UnsafeRawBufferPointer(value)).map { Int($0) } ?? 0
            return 4
        } else if same(name, "s") {
            guard value.count == 1, let s = value.first,
                  s == StoredValue.integer || s == StoredValue.real || s == StoredValue.text || s == StoredValue.blob else {
                throw XMLWireError.unexpected("s=\"\(String(decoding: value.prefix(20), as: UTF8.self))\" is no storage class (i, r, t or b)")
            }
            tag.stored = s
            return 8
        }
        return nil
    }

    static func same(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Bool {
        a.count == b.count && (0..<a.count).allSatisfy { a[$0] == b[$0] }
    }

    @inline(__always) static func same(_ bytes: UnsafeBufferPointer<UInt8>, _ s: StaticString) -> Bool {
        let n = s.utf8CodeUnitCount
        guard bytes.count == n else { return false }
        let q = s.utf8Start
        for k in 0..<n where bytes[k] != q[k] { return false }
        return true
    }

    /// An attribute's name, `=` and opening quote (the cursor left after the quote): the name's
    /// bytes where they are, and the quote that ends the value.
    func attributeStart(_ c: inout Cursor) throws -> (name: UnsafeBufferPointer<UInt8>, quote: UInt8) {
        let nameStart = c.i
        while c.i < c.end, c.p[c.i] != 61, c.p[c.i] != 32, c.p[c.i] != 62, c.p[c.i] != 47, c.p[c.i] != 9, c.p[c.i] != 10, c.p[c.i] != 13 { c.i += 1 }
        _ = try c.byte("unterminated tag")
        guard c.i > nameStart else { throw error("expected an attribute name", c) }
        let name = UnsafeBufferPointer(rebasing: c.p[nameStart..<c.i])
        c.skipSpace()
        guard try c.eat("=") else { throw error("expected = after attribute \(String(decoding: name, as: UTF8.self))", c) }
        c.skipSpace()
        let quote = try c.byte("unterminated tag")
        guard quote == 34 || quote == 39 else { throw error("expected a quoted value for attribute \(String(decoding: name, as: UTF8.self))", c) }
        c.i += 1
        return (name, quote)
    }

    /// Attributes up to `>` or `/>` (the tag must be complete in the bytes).
    func attributes(_ c: inout Cursor) throws -> ([String: String], Bool) {
        var attrs: [String: String] = [:]
        while true {
            c.skipSpace()
            let b = try c.byte("unterminated tag")
            if b == 62 {
                c.i += 1
                return (attrs, false)
            }
            if try c.eat("/>") { return (attrs, true) }
            let (nameBytes, quote) = try attributeStart(&c)
            let name = String(decoding: nameBytes, as: UTF8.self)
            var v: [UInt8] = []
            try Self.attributeText(&c, quote: quote, into: &v)
            guard attrs[name] == nil else { throw error("attribute \(name) given twice", c) }
            attrs[name] = String(decoding: v, as: UTF8.self)
        }
    }

    /// An attribute's value after its opening quote, up to the closing one, references decoded
    /// and whitespace normalised.
    static func attributeText(_ c: inout Cursor, quote: UInt8, into v: inout [UInt8]) throws {
        while true {
            let ch = try c.byte("unterminated attribute")
            if ch == quote {
                c.i += 1
                return
            }
            if ch == 60 { throw ReferenceError(message: "< inside an attribute") }
            if ch == 38 {
                try reference(&c, into: &v)
            } else {
                v.append(ch == 9 || ch == 10 || ch == 13 ? 32 : ch)  // attribute value normalisation
                c.i += 1
            }
        }
    }

    /// `&amp;` `&lt;` `&gt;` `&quot;` `&apos;` `&#NN;` `&#xNN;` (no other entity exists here).
    static func reference(_ c: inout Cursor, into out: inout [UInt8]) throws {
        if try c.eat("&amp;") { out.append(38); return }
        if try c.eat("&lt;") { out.append(60); return }
        if try c.eat("&gt;") { out.append(62); return }
        if try c.eat("&quot;") { out.append(34); return }
        if try c.eat("&apos;") { out.append(39); return }
        guard try c.eat("&#") else { throw ReferenceError(message: "unknown entity reference (only the five XML entities and character references)") }
        var hex = false
        if try c.byte("bad character reference") == 120 {
            hex = true
            c.i += 1
        }
        var v: UInt32 = 0
        var digits = 0
        while try c.byte("bad character reference") != 59 {
            let ch = c.p[c.i]
            let d: UInt32
            switch ch {
            case 48...57: d = UInt32(ch - 48)
            case 97...102 where hex: d = UInt32(ch - 87)
            case 65...70 where hex: d = UInt32(ch - 55)
            default: throw ReferenceError(message: "bad character reference")
            }
            v = v * (hex ? 16 : 10) + d
            digits += 1
            guard digits <= 8 else { throw ReferenceError(message: "bad character reference") }
            c.i += 1
        }
        guard digits > 0 else { throw ReferenceError(message: "bad character reference") }
        c.i += 1
        // XML 1.0 characters only: no NUL or other C0 controls but TAB, LF, CR; no surrogates.
        guard let scalar = Unicode.Scalar(v), v == 9 || v == 10 || v == 13 || (v >= 32 && v != 0xFFFE && v != 0xFFFF) else {
            throw ReferenceError(message: "character reference &#\(v); is not an XML character")
        }
        out.append(contentsOf: String(Character(scalar)).utf8)
    }

    struct ReferenceError: Error { var message: String }

    /// `<error code="…">message</error>` inside the rows: the service stopped after the
    /// response had started. The element is read once it is all here (at most 1 MiB).
    func serverError(_ c: inout Cursor) throws -> Never {
        var probe = c
        while true {
            guard probe.i + 8 <= c.end else {
                if c.final { throw error("unterminated <error>", c) }
                throw Incomplete()
            }
            if c.p[probe.i] == 60 && probe.match("</error>") == true { break }
            probe.i += 1
        }
        _ = try c.eat("<error")
        let (attrs, selfClosing) = try attributes(&c)
        var message: [UInt8] = []
        if !selfClosing {
            while !(try c.eat("</error>")) {
                let b = try c.byte("unterminated <error>")
                if b == 38 {
                    try Self.reference(&c, into: &message)
                } else {
                    message.append(b)
                    c.i += 1
                }
            }
        }
        throw XMLWireError.unexpected("the server stopped (\(attrs["code"] ?? "error")): \(String(decoding: message, as: UTF8.self))")
    }

    func error(_ message: String, _ c: Cursor) -> XMLWireError {
        .malformed(message, line: linesBefore + Self.lines(in: UnsafeBufferPointer(rebasing: c.p[0..<min(max(c.i, 0), c.end)])))
    }
}
