import FerryCore
import Foundation

/// Ferry's PostgreSQL form of every logical type, decided here once: the binary wire formats
/// of COPY … (FORMAT binary) that the reader decodes and the writer encodes (big-endian
/// integers, IEEE floats, numeric in base-10000 digits, dates as days and timestamps as
/// microseconds since 2000-01-01), which encoding a value gets for a target column's type, and
/// key values as SQL literals for key ranges.
enum PostgresValueCodec {
    /// 2000-01-01 minus 1970-01-01.
    static let epochDays: Int64 = 10_957
    static let epochMicros: Int64 = 946_684_800_000_000
    /// `PGCOPY\n\377\r\n\0`, flags, header extension length.
    static let header: [UInt8] = Array("PGCOPY\n".utf8) + [0xFF, 0x0D, 0x0A, 0x00] + [0, 0, 0, 0] + [0, 0, 0, 0]

    @inline(__always)
    static func int16(_ p: UnsafeRawPointer) -> Int16 { Int16(bitPattern: UInt16(bigEndian: p.loadUnaligned(as: UInt16.self))) }
    @inline(__always)
    static func int32(_ p: UnsafeRawPointer) -> Int32 { Int32(bitPattern: UInt32(bigEndian: p.loadUnaligned(as: UInt32.self))) }
    /// The length of the binary COPY header that starts the first message of `len` bytes at
    /// `p` (signature, flags, extension area); nil when it is not one.
    static func headerLength(_ p: UnsafeRawPointer, _ len: Int) -> Int? {
        guard len >= 19, memcmp(p, header, 11) == 0 else { return nil }
        let ext = Int(int32(p + 15))
        guard ext >= 0, 19 + ext <= len else { return nil }
        return 19 + ext
    }
    @inline(__always)
    static func int64(_ p: UnsafeRawPointer) -> Int64 { Int64(bitPattern: UInt64(bigEndian: p.loadUnaligned(as: UInt64.self))) }

    @inline(__always)
    static func put16(_ v: Int16, _ out: inout [UInt8]) {
        let u = UInt16(bitPattern: v)
        out.append(UInt8(u >> 8)); out.append(UInt8(u & 0xff))
    }
    @inline(__always)
    static func put32(_ v: Int32, _ out: inout [UInt8]) {
        let u = UInt32(bitPattern: v)
        out.append(UInt8(u >> 24)); out.append(UInt8((u >> 16) & 0xff)); out.append(UInt8((u >> 8) & 0xff)); out.append(UInt8(u & 0xff))
    }
    @inline(__always)
    static func put64(_ v: Int64, _ out: inout [UInt8]) {
        let u = UInt64(bitPattern: v)
        var shift: UInt64 = 56
        while true {
            out.append(UInt8((u >> shift) & 0xff))
            if shift == 0 { break }
            shift -= 8
        }
    }

    // MARK: numeric

    static let nanSign: UInt16 = 0xC000
    static let negSign: UInt16 = 0x4000
    static let pinfSign: UInt16 = 0xD000
    static let ninfSign: UInt16 = 0xF000

    /// Appends a numeric field's exact decimal text (with `dscale` fraction digits) to `column`,
    /// written in place: its length is known from the header, so no buffer or String per
    /// value (a String each was 1,100 instructions a value, callgrind). False when malformed.
    static func appendNumericText(_ p: UnsafeRawPointer, count: Int, to column: inout ColumnBuffer) -> Bool {
        guard count >= 8 else { return false }
        let ndigits = Int(int16(p))
        let weight = Int(int16(p + 2))
        let sign = UInt16(bitPattern: int16(p + 4))
        let dscale = Int(int16(p + 6))
        guard count >= 8 + ndigits * 2, ndigits >= 0, dscale >= 0 else { return false }
        func special(_ text: StaticString) -> Bool {
            column.append(bytes: UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
            return true
        }
        switch sign {
        case nanSign: return special("NaN")
        case pinfSign: return special("Infinity")
        case ninfSign: return special("-Infinity")
        default: break
        }
        @inline(__always) func digit(_ i: Int) -> Int { i >= 0 && i < ndigits ? Int(int16(p + 8 + i * 2)) : 0 }
        // Digits are base 10000; "-0" never: PostgreSQL prints a negative zero as 0.
        var nonZero = false
        for i in 0..<ndigits {
            let d = digit(i)
            guard d >= 0 && d < 10_000 else { return false }
            if d != 0 { nonZero = true }
        }
        let negative = sign == negSign && nonZero
        let first = weight < 0 ? 0 : digit(0)
        let firstWidth = first >= 1000 ? 4 : first >= 100 ? 3 : first >= 10 ? 2 : 1
        let integerWidth = weight < 0 ? 1 : firstWidth + 4 * weight
        let length = (negative ? 1 : 0) + integerWidth + (dscale > 0 ? 1 + dscale : 0)
        column.append(count: length) { out in
            var j = 0
            @inline(__always) func put(_ byte: Int) { out[j] = UInt8(truncatingIfNeeded: byte); j += 1 }
            if negative { put(45) }
            var d = first
            var k = firstWidth
            while k > 0 {
                k -= 1
                out[j + k] = UInt8(truncatingIfNeeded: 48 + d % 10)
                d /= 10
            }
            j += firstWidth
            if weight > 0 {
                for g in 1...weight {
                    let d = digit(g)
                    put(48 + d / 1000); put(48 + d / 100 % 10); put(48 + d / 10 % 10); put(48 + d % 10)
                }
            }
            guard dscale > 0 else { return }
            put(46)
            var written = 0
            var g = weight + 1
            while written < dscale {
                let d = digit(g)
                put(48 + d / 1000)
                if written + 1 < dscale { put(48 + d / 100 % 10) }
                if written + 2 < dscale { put(48 + d / 10 % 10) }
                if written + 3 < dscale { put(48 + d % 10) }
                written += 4
                g += 1
            }
        }
        return true
    }

    /// What `writeNumeric` made of a decimal text.
    enum NumericEncoding {
        /// `bytes` written (the field's length word included); `scale` fraction digits.
        case written(bytes: Int, scale: Int)
        case notDecimal
        /// More fraction digits (16,383) or integer digits (131,072) than PostgreSQL's numeric holds.
        case outOfRange
    }

    /// The most bytes `writeNumeric` writes for a text of `count` bytes: length word, header,
    /// and two bytes per base-10000 group (at most count / 4 + 2 of them).
    @inline(__always)
    static func numericBound(_ count: Int) -> Int { 12 + 2 * (count / 4 + 2) }

    /// Writes exact decimal text as a numeric field (length word first) at `p`, which has room
    /// for `numericBound(text.count)` bytes. No allocation: the base-10000 groups are read off
    /// the text where they lie.
    static func writeNumeric(_ text: UnsafeRawBufferPointer, to p: UnsafeMutableRawPointer) -> NumericEncoding {
        @inline(__always) func be16(_ v: Int, _ at: Int) { p.storeBytes(of: UInt16(truncatingIfNeeded: v).bigEndian, toByteOffset: at, as: UInt16.self) }
        var i = 0
        var negative = false
        if text.count > 0, text[0] == 45 || text[0] == 43 {
            negative = text[0] == 45
            i = 1
        }
        let rest = UnsafeRawBufferPointer(rebasing: text[i...])
        if rest.elementsEqual("NaN".utf8) && i == 0 || rest.elementsEqual("Infinity".utf8) {
            p.storeBytes(of: Int32(8).bigEndian, as: Int32.self)
            be16(0, 4); be16(0, 6)
            be16(Int(rest.count == 3 ? nanSign : (negative ? ninfSign : pinfSign)), 8)
            be16(0, 10)
            return .written(bytes: 12, scale: 0)
        }
        // [intStart, intStart + intCount) and [fracStart, fracStart + fracCount) are digits.
        let intStart = i
        while i < text.count, text[i] >= 48, text[i] <= 57 { i += 1 }
        let intCount = i - intStart
        var fracStart = i, fracCount = 0
        if i < text.count, text[i] == 46 {
            i += 1
            fracStart = i
            while i < text.count, text[i] >= 48, text[i] <= 57 { i += 1 }
            fracCount = i - fracStart
        }
        guard i == text.count, intCount + fracCount > 0 else { return .notDecimal }
        guard fracCount <= 16_383, intCount <= 131_072 else { return .outOfRange }
        // Groups aligned on the decimal point: the integer part padded on the left, the
        // fraction on the right.
        let pad = (4 - intCount % 4) % 4
        let intGroups = (intCount + pad) / 4
        let groups = intGroups + (fracCount + 3) / 4
        @inline(__always) func group(_ k: Int) -> Int {
            var v = 0
            for d in 0..<4 {
                let digit: Int
                if k < intGroups {
                    let j = k * 4 + d - pad
                    digit = j >= 0 ? Int(text[intStart + j] - 48) : 0
                } else {
                    let j = (k - intGroups) * 4 + d
                    digit = j < fracCount ? Int(text[fracStart + j] - 48) : 0
                }
                v = v * 10 + digit
            }
            return v
        }
        var first = 0
        while first < groups && group(first) == 0 { first += 1 }
        var end = groups
        while end > first && group(end - 1) == 0 { end -= 1 }
        let ndigits = end - first
        guard ndigits <= Int(Int16.max) else { return .outOfRange }
        let weight = ndigits == 0 ? 0 : intGroups - 1 - first
        p.storeBytes(of: Int32(8 + ndigits * 2).bigEndian, as: Int32.self)
        be16(ndigits, 4)
        be16(weight, 6)
        be16(Int(negative && ndigits > 0 ? negSign : 0), 8)
        be16(fracCount, 10)
        var at = 12
        for k in first..<end {
            be16(group(k), at)
            at += 2
        }
        return .written(bytes: at, scale: fracCount)
    }

    // MARK: Encoding for a target column

    /// How the writer encodes one column's values.
    enum Encoder {
        case bool
        case int(bytes: Int, range: ClosedRange<Int64>)
        case intAsNumeric
        case float8
        case float4
        /// numeric(p,s): the text must not have non-zero digits beyond `scale`.
        case numeric(scale: Int?)
        case text
        case jsonb
        case bytes
        case uuid
        case date
        case time
        case timestamp
    }

    /// `target` is the table as described or planned: each value is encoded for its column's
    /// type there, with no second look at the catalog.
    /// How a value of logical type `type` is sent to a column described as `target`, or nil when
    /// it cannot be stored there exactly.
    static func encoder(for type: LogicalType, into target: Column) -> Encoder? {
        func int(_ t: LogicalType) -> Encoder? {
            switch t {
            case .int16: return .int(bytes: 2, range: Int64(Int16.min)...Int64(Int16.max))
            case .int32: return .int(bytes: 4, range: Int64(Int32.min)...Int64(Int32.max))
            case .int64: return .int(bytes: 8, range: Int64.min...Int64.max)
            default: return nil
            }
        }
        switch (type, target.logicalType) {
        case (.boolean, .boolean): return .bool
        case (.int16, let t), (.int32, let t), (.int64, let t):
            if case .decimal = t { return .intAsNumeric }
            return int(t)
        case (.boolean, .int16): return .int(bytes: 2, range: 0...1)
        case (.boolean, .int32): return .int(bytes: 4, range: 0...1)
        case (.boolean, .int64): return .int(bytes: 8, range: 0...1)
        case (.float64, .float64), (.float32, .float64): return .float8
        case (.float32, .float32), (.float64, .float32): return .float4
        case (.decimal, .decimal(_, let scale)): return .numeric(scale: scale)
        case (.text, .text), (.enumeration, .text), (.json, .text), (.decimal, .text),
             (.enumeration, .enumeration), (.text, .enumeration):
            return .text
        case (.json, .json): return NativeTypeName(target.nativeType).base == "jsonb" ? .jsonb : .text
        case (.binary, .binary): return .bytes
        case (.uuid, .uuid): return .uuid
        case (.date, .date): return .date
        case (.time, .time): return .time
        case (.timestamp(_, let tz), .timestamp(_, let targetTZ)):
            // A zoned instant is not put into a column without a zone.
            return tz && !targetTZ ? nil : .timestamp
        default: return nil
        }
    }

    // MARK: Key literals

    /// Key values as SQL literals (COPY takes no parameters).
    static func literals(_ values: [Value], _ c: PostgresConnection) throws -> String {
        values.map { v -> String in
            if case .binary(let bytes) = v {
                return "'\\x" + bytes.map { String(format: "%02x", $0) }.joined() + "'::bytea"
            }
            guard let text = v.canonicalText else { return "NULL" }
            switch v {
            case .bool, .int: return text
            case .double: return c.pgDialect.literal(text) + "::float8"
            case .decimal: return c.pgDialect.literal(text) + "::numeric"
            case .date: return c.pgDialect.literal(text) + "::date"
            case .time: return c.pgDialect.literal(text) + "::time"
            case .timestamp: return c.pgDialect.literal(text) + "::timestamp"
            case .uuid: return c.pgDialect.literal(text) + "::uuid"
            default: return c.pgDialect.literal(text)
            }
        }.joined(separator: ", ")
    }
}
