import FerryCore
import Foundation

/// The canonical text of each logical type on the wire (docs/xml-protocol.md), both ways.
///
/// | type | text |
/// |---|---|
/// | boolean | `true` / `false` |
/// | int16/32/64 | decimal digits |
/// | decimal | the exact decimal text (`NaN`, `Infinity`, `-Infinity` allowed) |
/// | float32/64 | shortest round-trip form (`1.5`, `1e-07`, `-0.0`, `NaN`, `Infinity`, `-Infinity`) |
/// | text, json, enum | the text; base64 (`enc="b64"`) when XML 1.0 cannot hold it |
/// | binary | base64, always |
/// | date | `YYYY-MM-DD` |
/// | time | `HH:MM:SS[.ffffff]` |
/// | timestamp | `YYYY-MM-DDTHH:MM:SS[.ffffff]`, with `Z` for `with time zone` |
/// | uuid | 8-4-4-4-12 lowercase hex |
public enum WireValue {
    /// Appends `<v>…</v>` (or `<v null="1"/>`, or `<v enc="b64">…</v>`) for one cell. `stored`:
    /// the column holds values in the served engine's stored form (`StoredValue`), written in
    /// their own form (`<v s="t">…</v>`, below) rather than as binary.
    public static func appendCell(_ column: ColumnBuffer, row: Int, type: LogicalType, stored: Bool = false, into out: inout [UInt8]) {
        let form = CellForm(type, stored: stored)
        column.withPinned { appendCell($0, row: row, form: form, into: &out) }
    }

    /// `appendCell` on a pinned column, its form decided once per column: the encoder's loop
    /// (no buffer retained, no LogicalType copied, per value).
    @inline(__always)
    static func appendCell<Out: ByteAppending>(_ column: PinnedColumn, row: Int, form: CellForm, into out: inout Out) {
        if column.isNull(row) {
            out.appendASCII("<v null=\"1\"/>")
            return
        }
        switch form {
        case .boolean:
            out.appendASCII(column.int(row) != 0 ? "<v>true</v>" : "<v>false</v>")
        case .integer:
            out.appendASCII("<v>")
            let v = column.int(row)
            out.write(maxBytes: IntegerText.maxBytes) { IntegerText.write(v, to: $0) }
            out.appendASCII("</v>")
        case .float:
            out.appendASCII("<v>")
            out.append(utf8: formatDouble(column.double(row)))
            out.appendASCII("</v>")
        case .date:
            out.appendASCII("<v>")
            let days = column.int(row)
            out.write(maxBytes: Temporal.maxTextBytes) { Temporal.write(date: days, to: $0) }
            out.appendASCII("</v>")
        case .time:
            out.appendASCII("<v>")
            let micros = column.int(row)
            out.write(maxBytes: Temporal.maxTextBytes) { Temporal.write(time: micros, fractionDigits: nil, to: $0) }
            out.appendASCII("</v>")
        case .timestamp(let zone):
            out.appendASCII("<v>")
            let micros = column.int(row)
            out.write(maxBytes: Temporal.maxTextBytes) { Temporal.write(timestamp: micros, separator: 84, to: $0) }
            if zone { out.append(90) }
            out.appendASCII("</v>")
        case .uuid:
            out.appendASCII("<v>")
            let bytes = column.bytes(row)
            out.write(maxBytes: UUIDText.maxTextBytes(bytes.count)) { UUIDText.write(bytes, to: $0) }
            out.appendASCII("</v>")
        case .stored:
            appendStoredCell(column.bytes(row), into: &out)
        case .binary:
            out.appendASCII("<v enc=\"b64\">")
            XMLText.base64(column.bytes(row), into: &out)
            out.appendASCII("</v>")
        case .text:
            let bytes = column.bytes(row)
            out.appendASCII("<v>")
            if !XMLText.escapedIfRepresentable(bytes, into: &out) {
                out.truncate(to: out.count - 1)
                out.appendASCII(" enc=\"b64\">")
                XMLText.base64(bytes, into: &out)
            }
            out.appendASCII("</v>")
        }
    }

    /// How a column's cells are written, from its logical type and whether it holds stored
    /// values.
    enum CellForm: Equatable {
        case boolean, integer, float, date, time, timestamp(zone: Bool), uuid, binary, stored, text

        init(_ type: LogicalType, stored: Bool) {
            switch type {
            case .boolean: self = .boolean
            case .int16, .int32, .int64: self = .integer
            case .float32, .float64: self = .float
            case .date: self = .date
            case .time: self = .time
            case .timestamp(_, let zone): self = .timestamp(zone: zone)
            case .uuid: self = .uuid
            case .binary: self = stored ? .stored : .binary
            case .decimal, .text, .json, .enumeration, .unsupported: self = .text
            }
        }

        /// Each column's form: `types`, and `stored` (shorter than `types` when the last columns
        /// hold no stored values).
        static func forms(_ types: [LogicalType], stored: [Bool]) -> [CellForm] {
            types.enumerated().map { c, t in CellForm(t, stored: c < stored.count && stored[c]) }
        }

        /// Cells that are the value's bytes, escaped or in base64 (the others are short):
        /// a long one goes out in slices.
        var sliceable: Bool {
            switch self {
            case .binary, .stored, .text: return true
            default: return false
            }
        }
    }

    /// A value in its engine's stored form (`StoredValue`: a tag byte, then the payload) as a
    /// cell saying its storage class with `s`: `<v s="i">-42</v>` INTEGER, `<v s="t">12:00:00.500000</v>`
    /// TEXT (escaped; base64 with `enc="b64"` when XML cannot hold it), `<v s="b" enc="b64">…</v>`
    /// BLOB. A REAL, and bytes that are no stored value, go as plain binary (`<v enc="b64">`, the
    /// tag byte and the payload), which decoders take as the same stored value: a REAL's eight
    /// bytes cost no decimal conversion on either side (the shortest round-trip text, which
    /// decoders also take as `<v s="r">1.5</v>`, cost about 1,100 instructions a value to write
    /// and read, against 250 for the base64).
    static func appendStoredCell<Out: ByteAppending>(_ bytes: UnsafeRawBufferPointer, into out: inout Out) {
        let tag = bytes.first ?? 0
        let payload = bytes.count > 1 ? UnsafeRawBufferPointer(start: bytes.baseAddress.map { $0 + 1 }, count: bytes.count - 1) : UnsafeRawBufferPointer(start: nil, count: 0)
        switch tag {
        case StoredValue.integer where payload.count == 8:
            out.appendASCII("<v s=\"i\">")
            let v = Int64(bitPattern: bigEndianWord(payload))
            out.write(maxBytes: IntegerText.maxBytes) { IntegerText.write(v, to: $0) }
        case StoredValue.text:
            out.appendASCII("<v s=\"t\">")
            if !XMLText.escapedIfRepresentable(payload, into: &out) {
                out.truncate(to: out.count - 1)  // `<v s="t">` becomes `<v s="t" enc="b64">`
                out.appendASCII(" enc=\"b64\">")
                XMLText.base64(payload, into: &out)
            }
        case StoredValue.blob:
            out.appendASCII("<v s=\"b\" enc=\"b64\">")
            XMLText.base64(payload, into: &out)
        default:
            out.appendASCII("<v enc=\"b64\">")
            XMLText.base64(bytes, into: &out)
        }
        out.appendASCII("</v>")
    }

    @inline(__always) static func bigEndianWord(_ b: UnsafeRawBufferPointer) -> UInt64 {
        var w: UInt64 = 0
        for k in 0..<8 { w = w << 8 | UInt64(b[k]) }
        return w
    }

    /// Parses a float cell: decimal forms (what `formatDouble` writes, and exponents), `NaN`,
    /// `Infinity`, `-Infinity`; nil for anything else (`Double()` alone would also take `nan`,
    /// `inf` and hex floats) and for a finite text too large for a double.
    static func parseDouble(_ b: UnsafeRawBufferPointer) -> Double? {
        guard !b.isEmpty else { return nil }
        var decimal = true
        for ch in b where !((ch >= 48 && ch <= 57) || ch == 46 || ch == 45 || ch == 43 || ch == 101 || ch == 69) {
            decimal = false
            break
        }
        guard decimal else {
            if b.elementsEqual("NaN".utf8) { return .nan }
            if b.elementsEqual("Infinity".utf8) { return .infinity }
            if b.elementsEqual("-Infinity".utf8) { return -.infinity }
            return nil
        }
        if let v = DecimalFastPath.parse(b) { return v }
        // The general case (more than 15 or so significant digits, as most shortest forms of a
        // random double have): the C library's correctly rounded conversion on a copy with its
        // NUL (no String built), where the process's numeric locale reads `.` as the decimal point.
        guard b.count < 400, DecimalFastPath.pointIsDot else { return Double(String(decoding: b, as: UTF8.self)).flatMap { $0.isFinite ? $0 : nil } }
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: b.count + 1) { buf -> Double? in
            guard let base = buf.baseAddress else { return nil }
            b.withMemoryRebound(to: CChar.self) { src in _ = buf.initialize(from: src) }
            buf[b.count] = 0
            var end: UnsafeMutablePointer<CChar>? = nil
            let v = strtod(base, &end)
            guard end == base + b.count, v.isFinite else { return nil }
            return v
        }
    }

    /// Parses decimal digits with an optional sign (what `Int64(String)` takes), without a String.
    @inline(__always) static func parseInteger(_ b: UnsafeRawBufferPointer) -> Int64? {
        var i = 0
        var negative = false
        if let first = b.first, first == 45 || first == 43 {
            negative = first == 45
            i = 1
        }
        guard i < b.count else { return nil }
        var v: UInt64 = 0
        while i < b.count {
            let d = b[i] &- 48
            guard d < 10 else { return nil }
            let (m, o1) = v.multipliedReportingOverflow(by: 10)
            let (s, o2) = m.addingReportingOverflow(UInt64(d))
            guard !o1 && !o2 else { return nil }
            v = s
            i += 1
        }
        if negative {
            guard v <= UInt64(Int64.max) + 1 else { return nil }
            return v == UInt64(Int64.max) + 1 ? Int64.min : -Int64(v)
        }
        guard v <= UInt64(Int64.max) else { return nil }
        return Int64(v)
    }

    /// A key value as the `after=` query parameter carries it: the cell's text (unescaped:
    /// the URL escapes it), binary as base64.
    public static func keyText(_ value: Value, type: LogicalType) -> String {
        switch value {
        case .null: return ""
        case .bool(let b): return b ? "true" : "false"
        case .int(let i): return String(i)
        case .double(let d): return formatDouble(d)
        case .decimal(let s), .text(let s), .json(let s): return s
        case .binary(let b): return Data(b).base64EncodedString()
        case .uuid(let b): return UUIDText.format(b)
        case .date(let d): return Temporal.formatDate(d)
        case .time(let t): return Temporal.formatTime(t)
        case .timestamp(let t):
            var out: [UInt8] = []
            Temporal.appendTimestamp(t, separator: 84, into: &out)
            if case .timestamp(_, true) = type { out.append(90) }
            return String(decoding: out, as: UTF8.self)
        }
    }

    /// The `after=` text of a `<next>` cell, given the cell's decoded bytes.
    public static func keyText(cell: [UInt8], type: LogicalType) -> String {
        if case .binary = type { return Data(cell).base64EncodedString() }
        return String(decoding: cell, as: UTF8.self)
    }

    /// Appends the value of an `after=` parameter (the inverse of `keyText`) to `column`.
    public static func appendKey(_ text: String, as type: LogicalType, to column: inout ColumnBuffer) throws {
        if case .binary = type {
            guard let raw = Data(base64Encoded: text) else {
                throw WireValueError(message: "'\(text.prefix(60))' is not base64 (binary keys travel as base64)")
            }
            return try append(Array(raw), as: type, to: &column)
        }
        try append(Array(text.utf8), as: type, to: &column)
    }

    /// Shortest round-trip text, with the protocol's names for the special values.
    public static func formatDouble(_ d: Double) -> String {
        if d.isNaN { return "NaN" }
        if d.isInfinite { return d < 0 ? "-Infinity" : "Infinity" }
        // The same digits as "\(d)" without an interpolation's buffer: 90 ns a value against 120
        // (a million random doubles, -O).
        return d.description
    }

    static let close = Array("</v>".utf8)

    /// `append(_:as:to:)` from bytes in place: text and binary values (the ones that can be
    /// large) go into the column without an intermediate copy, integers, booleans and temporal
    /// values are parsed from the bytes.
    public static func append(raw bytes: UnsafeRawBufferPointer, as type: LogicalType, to column: inout ColumnBuffer) throws {
        switch type {
        case .text, .json, .enumeration, .unsupported:
            guard XMLText.isValidUTF8(bytes) else { throw WireValueError(message: "text is not valid UTF-8") }
            column.append(bytes: bytes)
        case .binary:
            column.append(bytes: bytes)
        case .int16, .int32, .int64:
            guard let v = parseInteger(bytes), type.integerRange?.contains(v) != false else {
                throw WireValueError(message: "'\(String(decoding: bytes.prefix(60), as: UTF8.self))' is not a \(type) integer")
            }
            column.append(v)
        case .float32, .float64:
            guard let v = parseDouble(bytes) else {
                throw WireValueError(message: "'\(String(decoding: bytes.prefix(60), as: UTF8.self))' is not a number")
            }
            column.append(v)
        case .boolean where bytes.count == 4 && bytes.elementsEqual("true".utf8):
            column.append(Int64(1))
        case .boolean where bytes.count == 5 && bytes.elementsEqual("false".utf8):
            column.append(Int64(0))
        case .date:
            do { column.append(try Temporal.parseDate(bytes)) } catch { throw WireValueError(message: "\(error)") }
        case .time:
            do { column.append(try Temporal.parseTime(bytes)) } catch { throw WireValueError(message: "\(error)") }
        case .timestamp:
            do { column.append(try Temporal.parseTimestamp(bytes).micros) } catch { throw WireValueError(message: "\(error)") }
        case .uuid:
            var u: UUIDText.Bytes = (0, 0)
            guard UUIDText.parse(bytes, into: &u) else { throw WireValueError(message: "'\(String(decoding: bytes.prefix(60), as: UTF8.self))' is not a UUID") }
            withUnsafeBytes(of: &u) { column.append(bytes: $0) }
        default:
            try append(Array(bytes), as: type, to: &column)
        }
    }

    /// How a cell's text becomes a value of its column, decided once per column: a
    /// `LogicalType` carries payloads (labels, lengths) whose copy at every cell costs retains.
    public enum CellKind: Sendable {
        case text, binary, int16, int32, int64, float, boolean, date, time, timestamp, other

        public init(_ type: LogicalType) {
            switch type {
            case .text, .json, .enumeration, .unsupported: self = .text
            case .binary: self = .binary
            case .int16: self = .int16
            case .int32: self = .int32
            case .int64: self = .int64
            case .float32, .float64: self = .float
            case .boolean: self = .boolean
            case .date: self = .date
            case .time: self = .time
            case .timestamp: self = .timestamp
            case .decimal, .uuid: self = .other
            }
        }
    }

    /// `append(raw:as:to:)` for a column of `kind` (not `.other`, which needs the type).
    /// `knownUTF8`: the caller saw the text is UTF-8 (all ASCII) and it is not checked again.
    @inline(__always) public static func append(raw bytes: UnsafeRawBufferPointer, kind: CellKind, knownUTF8: Bool = false, to column: inout ColumnBuffer) throws {
        switch kind {
        case .text:
            guard knownUTF8 || XMLText.isValidUTF8(bytes) else { throw WireValueError(message: "text is not valid UTF-8") }
            column.append(bytes: bytes)
        case .binary:
            column.append(bytes: bytes)
        case .int16, .int32, .int64:
            guard let v = parseInteger(bytes),
                  kind == .int64 || (kind == .int32 ? Int64(Int32.min)...Int64(Int32.max) : Int64(Int16.min)...Int64(Int16.max)).contains(v) else {
                let type: LogicalType = kind == .int64 ? .int64 : kind == .int32 ? .int32 : .int16
                throw WireValueError(message: "'\(String(decoding: bytes.prefix(60), as: UTF8.self))' is not a \(type) integer")
            }
            column.append(v)
        case .float:
            try append(raw: bytes, as: .float64, to: &column)
        case .boolean:
            try append(raw: bytes, as: .boolean, to: &column)
        case .date:
            try append(raw: bytes, as: .date, to: &column)
        case .time:
            try append(raw: bytes, as: .time(precision: nil), to: &column)
        case .timestamp:
            try append(raw: bytes, as: .timestamp(precision: nil, timeZone: false), to: &column)
        case .other:
            throw WireValueError(message: "internal: a cell of kind other needs its type")
        }
    }

    /// Appends a cell written with `s` (`appendStoredCell`) to a column read in its stored form:
    /// `tag` is the storage class, `bytes` the cell's text (base64 already decoded). `checked`:
    /// the text came as XML text and was not checked for UTF-8 yet.
    public static func append(stored tag: UInt8, raw bytes: UnsafeRawBufferPointer, textUnchecked: Bool, to column: inout ColumnBuffer) throws {
        switch tag {
        case StoredValue.text:
            if textUnchecked && !XMLText.isValidUTF8(bytes) { throw WireValueError(message: "text is not valid UTF-8") }
            column.append(tag: tag, bytes: bytes)
        case StoredValue.blob:
            column.append(tag: tag, bytes: bytes)
        case StoredValue.integer:
            guard let v = parseInteger(bytes) else {
                throw WireValueError(message: "'\(String(decoding: bytes.prefix(60), as: UTF8.self))' is not an INTEGER")
            }
            var word = UInt64(bitPattern: v).bigEndian
            withUnsafeBytes(of: &word) { column.append(tag: tag, bytes: $0) }
        case StoredValue.real:
            guard let d = parseDouble(bytes) else {
                throw WireValueError(message: "'\(String(decoding: bytes.prefix(60), as: UTF8.self))' is not a REAL")
            }
            var word = d.bitPattern.bigEndian
            withUnsafeBytes(of: &word) { column.append(tag: tag, bytes: $0) }
        default:
            throw WireValueError(message: "s=\"\(String(decoding: [tag], as: UTF8.self))\" is no storage class (i, r, t or b)")
        }
    }

    /// Parses one cell's text (already unescaped or base64-decoded into `bytes`) into `column`.
    /// Throws a message (without row/column: the caller adds them).
    public static func append(_ bytes: [UInt8], as type: LogicalType, to column: inout ColumnBuffer) throws {
        func text() -> String { String(decoding: bytes, as: UTF8.self) }
        func bad(_ what: String) -> WireValueError { WireValueError(message: "'\(text().prefix(60))' is not \(what)") }
        switch type {
        case .boolean:
            switch text() {
            case "true", "1": column.append(Int64(1))
            case "false", "0": column.append(Int64(0))
            default: throw bad("a boolean (true or false)")
            }
        case .int16, .int32, .int64:
            guard let v = bytes.withUnsafeBytes({ parseInteger($0) }), type.integerRange?.contains(v) != false else { throw bad("a \(type) integer") }
            column.append(v)
        case .float32, .float64:
            guard let v = bytes.withUnsafeBytes({ parseDouble($0) }) else { throw bad("a number") }
            column.append(v)
        case .decimal:
            guard DecimalText.isValid(text()) else { throw bad("a decimal number") }
            column.append(bytes: bytes)
        case .text, .json, .enumeration, .unsupported:
            guard bytes.withUnsafeBytes({ XMLText.isValidUTF8($0) }) else {
                throw WireValueError(message: "text is not valid UTF-8")
            }
            column.append(bytes: bytes)
        case .binary:
            column.append(bytes: bytes)
        case .uuid:
            guard let u = UUIDText.parse(text()) else { throw bad("a UUID") }
            column.append(bytes: u)
        case .date:
            do { column.append(try Temporal.parseDate(text())) } catch { throw WireValueError(message: "\(error)") }
        case .time:
            do { column.append(try Temporal.parseTime(text())) } catch { throw WireValueError(message: "\(error)") }
        case .timestamp:
            do { column.append(try Temporal.parseTimestamp(text()).micros) } catch { throw WireValueError(message: "\(error)") }
        }
    }
}

/// A cell's text that does not parse as its type.
public struct WireValueError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}

extension Array where Element == UInt8 {
    /// Appends the bytes of an ASCII literal (no array built for it): byte by byte, which for
    /// the few bytes of a tag costs less than a call of `append(contentsOf:)`.
    @inline(__always) mutating func appendASCII(_ s: StaticString) {
        // One capacity check and a copy (appending byte by byte checked each byte).
        s.withUTF8Buffer { append(contentsOf: $0) }
    }
}

/// Decimal text to a double without the C library where the result is exact by construction
/// (Clinger's fast path: at most 2^53 as an integer of digits, times or over a power of ten up to
/// 10^22, both exact doubles, so one rounding) — the amounts and short fractions most data holds.
enum DecimalFastPath {
    static let powers: [Double] = (0...22).map { e in (0..<e).reduce(1.0) { r, _ in r * 10 } }

    /// True when `strtod` reads `.` as the decimal point (the C locale, unless the process set
    /// another numeric locale; looked at once).
    static let pointIsDot: Bool = {
        guard let conv = localeconv(), let point = conv.pointee.decimal_point else { return false }
        return String(cString: point) == "."
    }()

    /// The value of `[+-]digits[.digits][(e|E)[+-]digits]`, or nil when the fast path does not
    /// hold (or the text is not such a number).
    @inline(__always) static func parse(_ b: UnsafeRawBufferPointer) -> Double? {
        var i = 0
        let n = b.count
        var negative = false
        if b[0] == 45 || b[0] == 43 {
            negative = b[0] == 45
            i = 1
        }
        var mantissa: UInt64 = 0
        var digits = 0
        var exponent = 0
        var sawDigit = false
        while i < n, b[i] >= 48 && b[i] <= 57 {
            if mantissa != 0 || b[i] != 48 { digits += 1 }
            guard digits <= 19 else { return nil }
            mantissa = mantissa &* 10 &+ UInt64(b[i] - 48)
            sawDigit = true
            i += 1
        }
        if i < n && b[i] == 46 {
            i += 1
            while i < n, b[i] >= 48 && b[i] <= 57 {
                if mantissa != 0 || b[i] != 48 { digits += 1 }
                guard digits <= 19 else { return nil }
                mantissa = mantissa &* 10 &+ UInt64(b[i] - 48)
                exponent -= 1
                sawDigit = true
                i += 1
            }
        }
        guard sawDigit else { return nil }
        if i < n && (b[i] == 101 || b[i] == 69) {
            i += 1
            var expNegative = false
            if i < n && (b[i] == 45 || b[i] == 43) {
                expNegative = b[i] == 45
                i += 1
            }
            var e = 0
            var expDigits = 0
            while i < n, b[i] >= 48 && b[i] <= 57 {
                e = e * 10 + Int(b[i] - 48)
                expDigits += 1
                guard e < 100_000 else { return nil }
                i += 1
            }
            guard expDigits > 0 else { return nil }
            exponent += expNegative ? -e : e
        }
        guard i == n, mantissa <= 1 << 53 else { return nil }
        var v = Double(mantissa)
        if mantissa != 0 {
            guard exponent >= -22 && exponent <= 22 else { return nil }
            v = exponent < 0 ? v / powers[-exponent] : v * powers[exponent]
        }
        return negative ? -v : v
    }
}
