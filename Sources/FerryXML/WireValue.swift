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
    /// Appends `<v>…</v>` (or `<v null="1"/>`, or `<v enc="b64">…</v>`) for one cell.
    public static func appendCell(_ column: ColumnBuffer, row: Int, type: LogicalType, into out: inout [UInt8]) {
        if column.isNull(row) {
            out.append(contentsOf: nullCell)
            return
        }
        switch type {
        case .boolean:
            out.append(contentsOf: column.ints[row] != 0 ? trueCell : falseCell)
        case .int16, .int32, .int64:
            out.append(contentsOf: open)
            out.append(contentsOf: String(column.ints[row]).utf8)
            out.append(contentsOf: close)
        case .float32, .float64:
            out.append(contentsOf: open)
            out.append(contentsOf: formatDouble(column.doubles[row]).utf8)
            out.append(contentsOf: close)
        case .date:
            out.append(contentsOf: open)
            Temporal.appendDate(column.ints[row], into: &out)
            out.append(contentsOf: close)
        case .time:
            out.append(contentsOf: open)
            Temporal.appendTime(column.ints[row], fractionDigits: nil, into: &out)
            out.append(contentsOf: close)
        case .timestamp(_, let tz):
            out.append(contentsOf: open)
            Temporal.appendTimestamp(column.ints[row], separator: 84, into: &out)
            if tz { out.append(90) }
            out.append(contentsOf: close)
        case .uuid:
            out.append(contentsOf: open)
            column.withUnsafeArena { UUIDText.append(UnsafeRawBufferPointer(rebasing: $0[column.range(row)]), into: &out) }
            out.append(contentsOf: close)
        case .binary:
            out.append(contentsOf: openB64)
            column.withUnsafeArena { XMLText.appendBase64(UnsafeRawBufferPointer(rebasing: $0[column.range(row)]), into: &out) }
            out.append(contentsOf: close)
        case .decimal, .text, .json, .enumeration, .unsupported:
            column.withUnsafeArena { arena in
                let bytes = UnsafeRawBufferPointer(rebasing: arena[column.range(row)])
                if XMLText.isRepresentable(bytes) {
                    out.append(contentsOf: open)
                    XMLText.appendEscaped(bytes, into: &out)
                } else {
                    out.append(contentsOf: openB64)
                    XMLText.appendBase64(bytes, into: &out)
                }
            }
            out.append(contentsOf: close)
        }
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
        return "\(d)"
    }

    static let open = Array("<v>".utf8)
    static let openB64 = Array("<v enc=\"b64\">".utf8)
    static let close = Array("</v>".utf8)
    static let nullCell = Array("<v null=\"1\"/>".utf8)
    static let trueCell = Array("<v>true</v>".utf8)
    static let falseCell = Array("<v>false</v>".utf8)

    /// `append(_:as:to:)` from bytes in place: text and binary values (the ones that can be
    /// large) go into the column without an intermediate copy.
    public static func append(raw bytes: UnsafeRawBufferPointer, as type: LogicalType, to column: inout ColumnBuffer) throws {
        switch type {
        case .text, .json, .enumeration, .unsupported:
            guard XMLText.isValidUTF8(bytes) else { throw WireValueError(message: "text is not valid UTF-8") }
            column.append(bytes: bytes)
        case .binary:
            column.append(bytes: bytes)
        default:
            try append(Array(bytes), as: type, to: &column)
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
            guard let v = Int64(text()), type.integerRange?.contains(v) != false else { throw bad("a \(type) integer") }
            column.append(v)
        case .float32, .float64:
            let t = text()
            switch t {
            case "NaN": column.append(Double.nan)
            case "Infinity": column.append(Double.infinity)
            case "-Infinity": column.append(-Double.infinity)
            default:
                // Only decimal forms: Double() alone would also take "nan", "inf" and hex floats.
                guard t.utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || $0 == 46 || $0 == 45 || $0 == 43 || $0 == 101 || $0 == 69 }),
                      let v = Double(t), v.isFinite
                else { throw bad("a number") }
                column.append(v)
            }
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
