import Foundation

/// One value in its canonical form, for code where convenience matters more than speed
/// (sync, errors, tests, small writes). Batches hold the same data column by column.
///
/// Equality is exact: doubles compare by bit pattern (so -0.0 ≠ 0.0 and NaN == NaN),
/// decimals and text by their exact characters.
public enum Value: Sendable, Hashable, CustomStringConvertible {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    /// Exact decimal text (`-12.30`, `NaN`, `Infinity`).
    case decimal(String)
    case text(String)
    case binary([UInt8])
    /// Days since 1970-01-01.
    case date(Int64)
    /// Microseconds since midnight.
    case time(Int64)
    /// Microseconds since the epoch.
    case timestamp(Int64)
    /// 16 bytes.
    case uuid([UInt8])
    case json(String)

    public static func == (a: Value, b: Value) -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case let (.bool(x), .bool(y)): return x == y
        case let (.int(x), .int(y)): return x == y
        case let (.double(x), .double(y)): return x.bitPattern == y.bitPattern
        case let (.decimal(x), .decimal(y)): return x == y
        case let (.text(x), .text(y)): return x.utf8.elementsEqual(y.utf8)
        case let (.binary(x), .binary(y)): return x == y
        case let (.date(x), .date(y)): return x == y
        case let (.time(x), .time(y)): return x == y
        case let (.timestamp(x), .timestamp(y)): return x == y
        case let (.uuid(x), .uuid(y)): return x == y
        case let (.json(x), .json(y)): return x.utf8.elementsEqual(y.utf8)
        default: return false
        }
    }

    public func hash(into h: inout Hasher) {
        switch self {
        case .null: h.combine(0)
        case .bool(let v): h.combine(v)
        case .int(let v): h.combine(v)
        case .double(let v): h.combine(v.bitPattern)
        case .decimal(let v), .text(let v), .json(let v): h.combine(Array(v.utf8))
        case .binary(let v), .uuid(let v): h.combine(v)
        case .date(let v), .time(let v), .timestamp(let v): h.combine(v)
        }
    }

    public var isNull: Bool { if case .null = self { return true } else { return false } }

    /// The canonical text of the value (what SQL literals and key bounds are built from);
    /// nil for NULL and for binary, which has no text form.
    public var canonicalText: String? {
        switch self {
        case .null, .binary: return nil
        case .bool(let v): return v ? "true" : "false"
        case .int(let v): return String(v)
        case .double(let v): return v.isNaN ? "NaN" : v.isInfinite ? (v < 0 ? "-Infinity" : "Infinity") : "\(v)"
        case .decimal(let v), .text(let v), .json(let v): return v
        case .date(let v): return Temporal.formatDate(v)
        case .time(let v): return Temporal.formatTime(v)
        case .timestamp(let v): return Temporal.formatTimestamp(v)
        case .uuid(let v): return UUIDText.format(v)
        }
    }

    /// The value in one line, for messages: text quoted and cut at 60 characters, binary as hex.
    public var description: String {
        switch self {
        case .null: return "NULL"
        case .bool(let v): return v ? "true" : "false"
        case .int(let v): return String(v)
        case .double(let v): return String(v)
        case .decimal(let v): return v
        case .text(let v), .json(let v):
            let cut = v.count > 60 ? String(v.prefix(60)) + "…" : v
            return "'" + cut.replacingOccurrences(of: "'", with: "''") + "'"
        case .binary(let v):
            let hex = v.prefix(32).map { String(format: "%02x", $0) }.joined()
            return "x'" + hex + (v.count > 32 ? "…" : "") + "'"
        case .date(let v): return Temporal.formatDate(v)
        case .time(let v): return Temporal.formatTime(v)
        case .timestamp(let v): return Temporal.formatTimestamp(v)
        case .uuid(let v): return UUIDText.format(v)
        }
    }

    /// Reads row `row` of `column`, interpreting it as `type`.
    public init(column: ColumnBuffer, row: Int, type: LogicalType) {
        if column.isNull(row) {
            self = .null
            return
        }
        switch type {
        case .boolean: self = .bool(column.ints[row] != 0)
        case .int16, .int32, .int64: self = .int(column.ints[row])
        case .date: self = .date(column.ints[row])
        case .time: self = .time(column.ints[row])
        case .timestamp: self = .timestamp(column.ints[row])
        case .float32, .float64: self = .double(column.doubles[row])
        case .decimal: self = .decimal(column.string(row))
        case .text, .enumeration, .unsupported: self = .text(column.string(row))
        case .binary: self = .binary(column.bytes(row))
        case .uuid: self = .uuid(column.bytes(row))
        case .json: self = .json(column.string(row))
        }
    }

    /// Appends the value to `column` as `type`, refusing values that do not fit.
    public func append(to column: inout ColumnBuffer, as type: LogicalType) throws {
        func mismatch() -> FerryError {
            FerryError.invalidValue(table: nil, column: nil, key: nil, message: "\(self) is not a \(type) value")
        }
        if case .null = self {
            column.appendNull()
            return
        }
        switch (type, self) {
        case (.boolean, .bool(let v)): column.append(Int64(v ? 1 : 0))
        case (.int16, .int(let v)), (.int32, .int(let v)), (.int64, .int(let v)):
            guard let range = type.integerRange, range.contains(v) else {
                throw FerryError.invalidValue(table: nil, column: nil, key: nil, message: "\(v) does not fit \(type)")
            }
            column.append(v)
        case (.date, .date(let v)), (.time, .time(let v)), (.timestamp, .timestamp(let v)): column.append(v)
        case (.float32, .double(let v)), (.float64, .double(let v)): column.append(v)
        case (.decimal, .decimal(let v)): column.append(string: v)
        case (.decimal, .int(let v)): column.append(string: String(v))
        case (.text, .text(let v)), (.enumeration, .text(let v)), (.unsupported, .text(let v)), (.json, .json(let v)):
            column.append(string: v)
        case (.json, .text(let v)): column.append(string: v)
        case (.binary, .binary(let v)): column.append(bytes: v)
        case (.uuid, .uuid(let v)):
            guard v.count == 16 else { throw mismatch() }
            column.append(bytes: v)
        default: throw mismatch()
        }
    }
}

/// The 8-4-4-4-12 lowercase hex form of a UUID.
public enum UUIDText {

    public static func format(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(36)
        bytes.withUnsafeBytes { append($0, into: &out) }
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends the 36-character form of 16 bytes to `out` (written into a stack buffer and
    /// appended once: byte by byte into the array was 750 instructions a UUID).
    public static func append(_ bytes: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: maxTextBytes(bytes.count)) { buf in
            guard let p = buf.baseAddress else { return }
            out.append(contentsOf: UnsafeBufferPointer(start: p, count: write(bytes, to: p)))
        }
    }

    /// The most bytes `write` writes for `count` bytes.
    @inline(__always)
    public static func maxTextBytes(_ count: Int) -> Int { count * 2 + 4 }

    /// Writes the hyphenated hex of `bytes` at `p` (room for `maxTextBytes(bytes.count)`);
    /// returns its length.
    @inline(__always)
    public static func write(_ bytes: UnsafeRawBufferPointer, to p: UnsafeMutablePointer<UInt8>) -> Int {
        if bytes.count == 16, let from = bytes.baseAddress {
            // Four bytes at a time into eight digits (byte by byte was 400 instructions a UUID).
            let out = UnsafeMutableRawPointer(p)
            func put(_ digits: UInt64, _ at: Int) { out.storeBytes(of: digits.littleEndian, toByteOffset: at, as: UInt64.self) }
            func halves(_ digits: UInt64, _ at: Int, _ then: Int) {
                // Digit k is byte k of the value (its bits 8k…8k+7), whatever the machine's order.
                out.storeBytes(of: UInt32(truncatingIfNeeded: digits).littleEndian, toByteOffset: at, as: UInt32.self)
                out.storeBytes(of: UInt32(truncatingIfNeeded: digits >> 32).littleEndian, toByteOffset: then, as: UInt32.self)
            }
            put(hexDigits(from), 0)
            halves(hexDigits(from + 4), 9, 14)
            halves(hexDigits(from + 8), 19, 24)
            put(hexDigits(from + 12), 28)
            p[8] = 45; p[13] = 45; p[18] = 45; p[23] = 45
            return 36
        }
        var j = 0
        for i in 0..<bytes.count {
            if i == 4 || i == 6 || i == 8 || i == 10 {
                p[j] = 45
                j += 1
            }
            let b = bytes[i]
            let h = b >> 4, l = b & 15
            p[j] = h < 10 ? 48 + h : 87 + h
            p[j + 1] = l < 10 ? 48 + l : 87 + l
            j += 2
        }
        return j
    }

    /// The eight lowercase hex digits of the four bytes at `p`, in memory order once stored
    /// little-endian: each byte spread to two, nibbles split, then '0'-'9' or 'a'-'f' per byte.
    @inline(__always)
    static func hexDigits(_ p: UnsafeRawPointer) -> UInt64 {
        var x = UInt64(UInt32(littleEndian: p.loadUnaligned(as: UInt32.self)))
        x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF
        x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF
        let nibbles = ((x >> 4) & 0x000F_000F_000F_000F) | ((x & 0x000F_000F_000F_000F) << 8)
        let letters = ((nibbles &+ 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101
        return nibbles &+ 0x3030_3030_3030_3030 &+ letters &* 39
    }

    /// Parses hex with or without hyphens and braces; nil when it is not 16 bytes of hex.
    public static func parse(_ text: String) -> [UInt8]? {
        var t = text
        return t.withUTF8 { parse(UnsafeRawBufferPointer($0)) }
    }

    /// Parses UTF-8 bytes (see `parse(_: String)`).
    public static func parse(_ text: UnsafeRawBufferPointer) -> [UInt8]? {
        var u: Bytes = (0, 0)
        return parse(text, into: &u) ? withUnsafeBytes(of: &u) { Array($0) } : nil
    }

    /// Sixteen bytes in memory order (`withUnsafeBytes(of:)` gives them).
    public typealias Bytes = (UInt64, UInt64)

    /// Parses UTF-8 bytes (see `parse(_: String)`) into `out`, without an array (a reader
    /// appends them to its column; an array per value cost a malloc and a free, and the parse
    /// byte by byte ~670 instructions a UUID); false when `text` is not a UUID.
    public static func parse(_ text: UnsafeRawBufferPointer, into out: inout Bytes) -> Bool {
        withUnsafeMutableBytes(of: &out) { parse(text, into: $0) }
    }

    /// The value of a hex digit, or a value above 15.
    @inline(__always)
    private static func nibble(_ c: UInt8) -> UInt8 {
        let d = c &- 48
        if d < 10 { return d }
        let l = (c | 0x20) &- 97
        return l < 6 ? l &+ 10 : 0xFF
    }

    /// The four bytes spelled by the eight hex digits of `x` (the first digit in its lowest
    /// byte), in memory order once stored little-endian; nil when one is not a hex digit. Eight
    /// digits at once: digit by digit, a UUID took ~500 instructions.
    @inline(__always)
    static func hexQuad(_ x: UInt64) -> UInt32? {
        let high: UInt64 = 0x8080_8080_8080_8080, ones: UInt64 = 0x0101_0101_0101_0101
        guard x & high == 0 else { return nil }
        /// Bit 7 of each byte of `v` (all below 0x80) set where lo <= byte <= hi.
        func within(_ v: UInt64, _ lo: UInt64, _ hi: UInt64) -> UInt64 {
            (v &+ ones &* (0x80 - lo)) & ~(v &+ ones &* (0x80 - hi - 1)) & high
        }
        // Digits as they are; letters either case (only 'A'-'F' and 'a'-'f' reach 'a'-'f' by
        // setting bit 5).
        let lower = x | 0x2020_2020_2020_2020
        guard within(x, 0x30, 0x39) | within(lower, 0x61, 0x66) == high else { return nil }
        let v = (lower & 0x0F0F_0F0F_0F0F_0F0F) &+ ((lower & 0x4040_4040_4040_4040) >> 6) &* 9
        let pairs = ((v << 4) | (v >> 8)) & 0x00FF_00FF_00FF_00FF
        let quads = (pairs | (pairs >> 8)) & 0x0000_FFFF_0000_FFFF
        return UInt32(truncatingIfNeeded: quads | (quads >> 16))
    }

    /// Writes the 16 bytes `text` spells into `out` (16 bytes); false when it is not a UUID.
    /// The 36-character hyphenated form is read at its fixed places, eight digits at a time;
    /// any other (no hyphens, braces, hyphens elsewhere) digit by digit.
    @inline(__always)
    static func parse(_ text: UnsafeRawBufferPointer, into out: UnsafeMutableRawBufferPointer) -> Bool {
        guard out.count >= 16, let o = out.baseAddress, let p = text.baseAddress else { return false }
        if text.count == 36, p.load(fromByteOffset: 8, as: UInt8.self) == 45, p.load(fromByteOffset: 13, as: UInt8.self) == 45,
            p.load(fromByteOffset: 18, as: UInt8.self) == 45, p.load(fromByteOffset: 23, as: UInt8.self) == 45
        {
            func eight(_ at: Int) -> UInt64 { UInt64(littleEndian: p.loadUnaligned(fromByteOffset: at, as: UInt64.self)) }
            func four(_ at: Int) -> UInt64 { UInt64(UInt32(littleEndian: p.loadUnaligned(fromByteOffset: at, as: UInt32.self))) }
            guard let a = hexQuad(eight(0)), let b = hexQuad(four(9) | four(14) << 32), let c = hexQuad(four(19) | four(24) << 32),
                let d = hexQuad(eight(28))
            else { return false }
            o.storeBytes(of: a.littleEndian, toByteOffset: 0, as: UInt32.self)
            o.storeBytes(of: b.littleEndian, toByteOffset: 4, as: UInt32.self)
            o.storeBytes(of: c.littleEndian, toByteOffset: 8, as: UInt32.self)
            o.storeBytes(of: d.littleEndian, toByteOffset: 12, as: UInt32.self)
            return true
        }
        var n = 0
        var high: UInt8?
        for c in text {
            switch c {
            case 45, 123, 125: continue
            default: break
            }
            let v = nibble(c)
            guard v < 16 else { return false }
            if let h = high {
                guard n < 16 else { return false }
                o.storeBytes(of: h << 4 | v, toByteOffset: n, as: UInt8.self)
                n += 1
                high = nil
            } else {
                high = v
            }
        }
        return n == 16 && high == nil
    }
}
