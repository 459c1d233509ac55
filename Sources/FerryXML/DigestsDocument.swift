import FerryCore
import Foundation

/// Writes a `<digests>` answer a piece at a time: a first level of 2^20 buckets is about 60 MB
/// of XML, which neither side holds whole. `next()` gives the pieces in order (each a fresh
/// array of about 64 KiB), nil after `</digests>`.
public struct DigestsWriter: IteratorProtocol {
    static let piece = 64 * 1024
    private let modulus: Int64
    private let list: [BucketDigest]
    private var position = 0
    private var done = false

    /// The document `<digests modulus="M"><b n rows s0 s1/>…</digests>` of `list`.
    public init(modulus: Int64, _ list: [BucketDigest]) {
        self.modulus = modulus
        self.list = list
    }

    public mutating func next() -> [UInt8]? {
        guard !done else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(Self.piece + 128)
        if position == 0 {
            out.appendASCII("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<digests modulus=\"")
            IntegerText.append(modulus, into: &out)
            out.appendASCII("\">\n")
        }
        while position < list.count && out.count < Self.piece {
            let d = list[position]
            out.appendASCII("<b n=\"")
            IntegerText.append(d.bucket, into: &out)
            out.appendASCII("\" rows=\"")
            IntegerText.append(d.rows, into: &out)
            out.appendASCII("\" s0=\"")
            IntegerText.append(d.sum, into: &out)
            out.appendASCII("\" s1=\"0\"/>\n")
            position += 1
        }
        if position == list.count {
            out.appendASCII("</digests>\n")
            done = true
        }
        return out
    }
}

/// Reads a `<digests>` answer as its pieces arrive, straight into bucket digests: no element
/// tree and no whole document (see `DigestsWriter`). Takes the declaration, comments and
/// whitespace between elements, attributes in any order and either quote; refuses DOCTYPE,
/// anything but `<b>` elements with whole-number attributes, and content after `</digests>`.
public struct DigestsStreamDecoder {
    private var pending: [UInt8] = []
    private var started = false
    private var ended = false
    public private(set) var modulus: Int64?
    private var digests: [BucketDigest] = []
    /// The most an unfinished element may take before it is refused.
    static let maxPending = 1 << 20

    /// `expected`: room for this many buckets, reserved at once (a first level's count).
    public init(expected: Int = 0) {
        digests.reserveCapacity(min(max(expected, 0), 1 << 20))
    }

    /// Takes the next piece of the answer.
    public mutating func feed(_ piece: Data) throws {
        pending.append(contentsOf: piece)
        // Parse up to the last `>`: every element before it is whole (their attributes are
        // whole numbers, so no `>` sits inside a value; a comment's is looked at below).
        guard var last = pending.lastIndex(of: 62) else {
            guard pending.count <= Self.maxPending else { throw XMLWireError.limitExceeded("a digest element of more than \(Self.maxPending) bytes") }
            return
        }
        // A comment may hold a `>`: one still open at `last` waits for its end.
        if let open = pending[...last].ranges(of: Array("<!--".utf8)).last?.lowerBound,
            pending[open...last].firstRange(of: Array("-->".utf8)) == nil
        {
            guard let before = pending[..<open].lastIndex(of: 62) else {
                guard pending.count <= Self.maxPending else { throw XMLWireError.limitExceeded("a comment of more than \(Self.maxPending) bytes") }
                return
            }
            last = before
        }
        if !started {
            // The root start tag must be whole before the prolog is read.
            guard let root = pending.firstRange(of: Array("<digests".utf8))?.lowerBound, pending[root...].contains(62) else {
                guard pending.count <= Self.maxPending else { throw XMLWireError.unexpected("no <digests> element") }
                return
            }
        }
        let consumed = try pending.withUnsafeBytes { all -> Int in
            var p = RowsParser(UnsafeRawBufferPointer(rebasing: all[0...last]), limits: XMLLimits())
            if !started {
                let open = try p.start(root: "<digests")
                started = true
                guard let m = p.rootAttributes["modulus"].flatMap({ Int64($0) }) else {
                    throw XMLWireError.unexpected("<digests> without a whole-number modulus")
                }
                modulus = m
                if !open { ended = true }
            }
            while true {
                try p.skipMisc()
                if p.i == p.b.count { break }
                if ended { throw p.error("content after </digests>") }
                if p.eat("<b") {
                    digests.append(try Self.bucket(&p))
                } else if p.eat("</digests>") {
                    ended = true
                } else if p.eat("<error") {
                    let (attrs, selfClosing) = try p.attributes()
                    var message: [UInt8] = []
                    if !selfClosing { message = try p.text(until: "</error>") }
                    throw XMLWireError.unexpected("the server stopped (\(attrs["code"] ?? "error")): \(String(decoding: message, as: UTF8.self))")
                } else {
                    throw p.error("expected <b> or </digests>")
                }
            }
            return p.i
        }
        pending.removeFirst(consumed)
    }

    /// The buckets, once the whole answer has been fed.
    public mutating func finish() throws -> [BucketDigest] {
        guard ended else { throw XMLWireError.unexpected(started ? "the digests end early (no </digests>)" : "no <digests> element") }
        guard pending.allSatisfy({ $0 == 32 || $0 == 10 || $0 == 13 || $0 == 9 }) else { throw XMLWireError.unexpected("content after </digests>") }
        defer { digests = [] }
        return digests
    }

    /// One `<b n rows s0 s1/>` (its name already read).
    private static func bucket(_ p: inout RowsParser) throws -> BucketDigest {
        var n: Int64?, rows: Int64?, s0: Int64?, s1: Int64?
        while true {
            p.skipSpace()
            if p.eat("/>") { break }
            let nameStart = p.i
            while p.i < p.b.count, p.b[p.i] != 61, p.b[p.i] != 32, p.b[p.i] != 62, p.b[p.i] != 47, p.b[p.i] > 13 { p.i += 1 }
            let name = UnsafeRawBufferPointer(rebasing: p.b[nameStart..<p.i])
            p.skipSpace()
            guard p.eat("=") else { throw p.error("expected = in <b>") }
            p.skipSpace()
            guard p.i < p.b.count, p.b[p.i] == 34 || p.b[p.i] == 39 else { throw p.error("expected a quoted value in <b>") }
            let quote = p.b[p.i]
            p.i += 1
            let valueStart = p.i
            while p.i < p.b.count, p.b[p.i] != quote { p.i += 1 }
            guard p.i < p.b.count else { throw p.error("unterminated attribute in <b>") }
            let value = Self.integer(UnsafeRawBufferPointer(rebasing: p.b[valueStart..<p.i]))
            p.i += 1
            guard let value else { throw p.error("<b> holds an attribute that is not a whole number") }
            func named(_ s: StaticString) -> Bool {
                s.withUTF8Buffer { name.elementsEqual($0) }
            }
            if named("n"), n == nil {
                n = value
            } else if named("rows"), rows == nil {
                rows = value
            } else if named("s0"), s0 == nil {
                s0 = value
            } else if named("s1"), s1 == nil {
                s1 = value
            } else {
                throw p.error("<b> with an unknown or repeated attribute")
            }
        }
        guard let n, let rows, let s0 else { throw p.error("<b> without n, rows and s0") }
        // s1 is 0 in the digests' second form (it held a second 32-bit sum in the first).
        guard s1 ?? 0 == 0 else { throw p.error("<b> with s1 other than 0 (digests of the first form)") }
        return BucketDigest(bucket: n, rows: rows, sum: s0)
    }

    /// A decimal whole number that fits 64 bits, signed; nil for anything else.
    static func integer(_ text: UnsafeRawBufferPointer) -> Int64? {
        var k = 0
        let negative = text.first == 45
        if negative { k = 1 }
        guard k < text.count else { return nil }
        var value: Int64 = 0
        while k < text.count {
            let c = text[k]
            guard c >= 48, c <= 57 else { return nil }
            let (m, o1) = value.multipliedReportingOverflow(by: 10)
            let (a, o2) = negative ? m.subtractingReportingOverflow(Int64(c - 48)) : m.addingReportingOverflow(Int64(c - 48))
            guard !o1, !o2 else { return nil }
            value = a
            k += 1
        }
        return value
    }
}
