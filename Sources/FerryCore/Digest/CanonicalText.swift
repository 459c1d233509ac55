import Foundation

/// Ferry's canonical text of a value: the form every engine's digest SQL reproduces.
///
/// booleans `1`/`0`; integers in decimal; decimals without trailing zeros (`12.5`, `0`);
/// floats (float4 widened to float8) in PostgreSQL's shortest round-trip form (`0.1`, `1e+100`); text, JSON and enum
/// labels as their UTF-8 bytes; binary as lowercase hex; UUIDs lowercase with hyphens; dates
/// `YYYY-MM-DD`; times `HH:MM:SS.ffffff`; timestamps `YYYY-MM-DD HH:MM:SS.ffffff` (UTC for
/// time-zone-aware ones). A row's text is, for each column in order, its field: `n` for NULL or
/// `v<byte length>:<text>`, or — for a column delimited on both sides of a comparison (its
/// type's text never holds a comma and is never empty: booleans, numbers, dates, times,
/// timestamps, UUIDs; see `isDelimited`) — the text and `,` (a NULL: `,` alone), which engines
/// compute without measuring the text. Each field ends where the column says, so different
/// rows never have the same text. A key's text (the MD5 key hash) always uses the first form.
public enum CanonicalText {
    /// True for types whose text never holds a comma and is never empty, so that a field can be
    /// the text and a comma.
    public static func isDelimited(_ type: borrowing LogicalType) -> Bool {
        switch type {
        case .boolean, .int16, .int32, .int64, .float32, .float64, .decimal, .date, .time, .timestamp, .uuid: return true
        case .text, .json, .enumeration, .binary, .unsupported: return false
        }
    }

    /// False for types whose canonical text is their bytes as they are (text, JSON, enum
    /// labels), so that nothing needs to be written to hash it.
    @inline(__always)
    static func hasOwnText(_ type: borrowing LogicalType) -> Bool {
        switch type {
        case .text, .json, .enumeration, .unsupported: return false
        default: return true
        }
    }

    /// A column whose field may be delimited: a delimitable type, read as that type.
    public static func isDelimitable(_ column: Column) -> Bool {
        isDelimited(column.logicalType) && !column.travelsNatively
    }

    /// Appends the field of row `row` of `columns[c]` typed `type` (`<text>,` or `n` or
    /// `v<len>:<text>`). The text is written in place and its length put in front of it (no
    /// buffer per field). Columns are reached through their array at every use: a ColumnBuffer
    /// held across an append to `out` is copied (five retains and releases) per field.
    @inline(__always)
    static func appendField(_ columns: [ColumnBuffer], _ c: Int, row: Int, type: borrowing LogicalType, delimited: Bool, into out: inout [UInt8]) {
        if delimited {
            if !columns[c].isNull(row) { append(columns, c, row: row, type: type, into: &out) }
            out.append(UInt8(ascii: ","))
            return
        }
        if columns[c].isNull(row) {
            out.append(UInt8(ascii: "n"))
            return
        }
        out.append(UInt8(ascii: "v"))
        let start = out.count
        append(columns, c, row: row, type: type, into: &out)
        var length = out.count - start
        var digits = 1
        while length >= 10 { length /= 10; digits += 1 }
        out.insert(contentsOf: repeatElement(UInt8(ascii: ":"), count: digits + 1), at: start)
        length = out.count - start - digits - 1
        for i in stride(from: start + digits - 1, through: start, by: -1) {
            out[i] = UInt8(ascii: "0") + UInt8(length % 10)
            length /= 10
        }
    }

    /// Appends the fields of the columns at `at` of row `row` (a key's or a row's text).
    /// `stored`: per column, true when its values are stored values taken as their bytes;
    /// `delimited`: per column, true for a `<text>,` field (none when empty).
    public static func appendFields(
        _ batch: RowBatch, row: Int, at: [Int], types: [LogicalType], stored: [Bool] = [], delimited: [Bool] = [], into out: inout [UInt8]
    ) {
        // Types used in place: a LogicalType taken out of its array is retained and released,
        // per field of every row.
        types.withUnsafeBufferPointer { types in
            for i in at {
                if i < stored.count && stored[i] {
                    appendBytesField(batch.columns, i, row: row, into: &out)
                } else {
                    appendField(batch.columns, i, row: row, type: types[i], delimited: i < delimited.count && delimited[i], into: &out)
                }
            }
        }
    }

    /// `n`, or `v<length>:` and the value's bytes as they are.
    @inline(__always)
    static func appendBytesField(_ columns: [ColumnBuffer], _ c: Int, row: Int, into out: inout [UInt8]) {
        if columns[c].isNull(row) {
            out.append(UInt8(ascii: "n"))
            return
        }
        let range = columns[c].range(row)
        out.append(UInt8(ascii: "v"))
        IntegerText.append(Int64(range.count), into: &out)
        out.append(UInt8(ascii: ":"))
        columns[c].withUnsafeArena { out.append(bytes: UnsafeRawBufferPointer(rebasing: $0[range])) }
    }

    /// Appends the canonical text of a non-NULL value.
    @inline(__always)
    static func append(_ columns: [ColumnBuffer], _ c: Int, row: Int, type: borrowing LogicalType, into out: inout [UInt8]) {
        switch type {
        case .boolean: out.append(columns[c].ints[row] != 0 ? UInt8(ascii: "1") : UInt8(ascii: "0"))
        case .int16, .int32, .int64: IntegerText.append(columns[c].ints[row], into: &out)
        // float4 widened to float8 (exact), so engines that print float4 with fewer digits agree.
        case .float32, .float64: appendFloat(columns[c].doubles[row], into: &out)
        case .decimal:
            let range = columns[c].range(row)
            columns[c].withUnsafeArena { DecimalText.appendNormalized(UnsafeRawBufferPointer(rebasing: $0[range]), into: &out) }
        case .date: Temporal.appendDate(columns[c].ints[row], into: &out)
        case .time: Temporal.appendTime(columns[c].ints[row], fractionDigits: 6, into: &out)
        case .timestamp: Temporal.appendTimestamp(columns[c].ints[row], fractionDigits: 6, into: &out)
        case .binary:
            let range = columns[c].range(row)
            columns[c].withUnsafeArena { appendHex(UnsafeRawBufferPointer(rebasing: $0[range]), into: &out) }
        case .uuid:
            let range = columns[c].range(row)
            columns[c].withUnsafeArena { UUIDText.append(UnsafeRawBufferPointer(rebasing: $0[range]), into: &out) }
        case .text, .json, .enumeration, .unsupported:
            let range = columns[c].range(row)
            columns[c].withUnsafeArena { out.append(bytes: UnsafeRawBufferPointer(rebasing: $0[range])) }
        }
    }

    /// Lowercase hex of `bytes`, written into `out` in one piece (two appends a byte cost more
    /// than the MD5 of the text).
    static func appendHex(_ bytes: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        guard !bytes.isEmpty else { return }
        let digits = hexDigits.utf8Start
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 2 * bytes.count) { o in
            var w = 0
            for b in bytes {
                o[w] = digits[Int(b >> 4)]
                o[w + 1] = digits[Int(b & 15)]
                w += 2
            }
            out.append(contentsOf: UnsafeBufferPointer(o))
        }
    }

    static let hexDigits: StaticString = "0123456789abcdef"

    /// PostgreSQL's text of a float: the shortest digits that read back as the same value,
    /// in exponent form when the decimal exponent is below -4 or at least 15 (6 for float4).
    public static func float(_ value: Double, float32: Bool) -> String {
        var out: [UInt8] = []
        appendFloat(value, float32: float32, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// `float` appended to `out`, from the bytes of Swift's shortest form (no Character work:
    /// a float's text was 40 % of a digest's instructions).
    public static func appendFloat(_ value: Double, float32: Bool = false, into out: inout [UInt8]) {
        if value.isNaN { return out.append(contentsOf: "NaN".utf8) }
        if value.isInfinite { return out.append(contentsOf: (value < 0 ? "-Infinity" : "Infinity").utf8) }
        if value == 0 { return out.append(contentsOf: (value.sign == .minus ? "-0" : "0").utf8) }
        var shortest = float32 ? Float(value).description : value.description
        shortest.withUTF8 { b in
            // Digits and decimal exponent of Swift's shortest form ("1.25e-07", "123.5", "1e+16").
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: b.count) { digits in
                var i = 0
                let negative = b[0] == UInt8(ascii: "-")
                if negative { i = 1 }
                var count = 0
                var pointAt = -1
                var exponent = 0
                while i < b.count {
                    let c = b[i]
                    if c == UInt8(ascii: ".") {
                        pointAt = count
                    } else if c == UInt8(ascii: "e") || c == UInt8(ascii: "E") {
                        var j = i + 1
                        var minus = false
                        if j < b.count && (b[j] == UInt8(ascii: "-") || b[j] == UInt8(ascii: "+")) {
                            minus = b[j] == UInt8(ascii: "-")
                            j += 1
                        }
                        while j < b.count { exponent = exponent * 10 + Int(b[j] &- UInt8(ascii: "0")); j += 1 }
                        if minus { exponent = -exponent }
                        break
                    } else {
                        digits[count] = c
                        count += 1
                    }
                    i += 1
                }
                if pointAt < 0 { pointAt = count }
                // value = 0.digits × 10^(pointAt + exponent); strip leading and trailing zeros.
                var scale = pointAt + exponent
                var start = 0
                while start < count - 1 && digits[start] == UInt8(ascii: "0") {
                    start += 1
                    scale -= 1
                }
                var end = count
                while end - start > 1 && digits[end - 1] == UInt8(ascii: "0") { end -= 1 }
                let x = scale - 1  // d1.d2… × 10^x
                let n = end - start
                func put(_ from: Int, _ to: Int) { out.append(contentsOf: UnsafeBufferPointer(rebasing: digits[from..<to])) }
                if negative { out.append(UInt8(ascii: "-")) }
                if x < -4 || x >= (float32 ? 6 : 15) {
                    put(start, start + 1)
                    if n > 1 {
                        out.append(UInt8(ascii: "."))
                        put(start + 1, end)
                    }
                    out.append(UInt8(ascii: "e"))
                    out.append(x < 0 ? UInt8(ascii: "-") : UInt8(ascii: "+"))
                    if abs(x) < 10 { out.append(UInt8(ascii: "0")) }
                    IntegerText.append(Int64(abs(x)), into: &out)
                } else if x >= 0 {
                    if n <= x + 1 {
                        put(start, end)
                        out.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: x + 1 - n))
                    } else {
                        put(start, start + x + 1)
                        out.append(UInt8(ascii: "."))
                        put(start + x + 1, end)
                    }
                } else {
                    out.append(UInt8(ascii: "0"))
                    out.append(UInt8(ascii: "."))
                    out.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: -x - 1))
                    put(start, end)
                }
            }
        }
    }
}
