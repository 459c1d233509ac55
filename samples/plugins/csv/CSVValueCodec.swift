import FerryCore
import FerryXML
import Foundation

/// A value's field in the file, both ways.
///
/// Values are written in the protocol's text forms (`WireValue.keyText`: exact decimals,
/// shortest round-trip floats with `NaN`, `Infinity`, `-0.0`, ISO dates and times, timestamps
/// with `Z` when they carry a time zone, lowercase UUIDs, `true`/`false`, base64 for binary).
/// A backslash at the start of a field is an escape, so that every value comes back byte for
/// byte and NULL stays apart from the empty string:
///
/// | field | value |
/// |---|---|
/// | `\N` | NULL |
/// | `\b` + base64 | these bytes: text that is not UTF-8, or holds CR or NUL (which CSV tools mangle) |
/// | `\\…` | the text after the first backslash |
/// | anything else starting with `\` | an error naming table, column and row |
///
/// An empty field is the empty string in a text or binary column and NULL in any other (a
/// hand-written file's way of leaving a number out); the driver writes an empty string as `""`.
enum CSVValueCodec {
    static let nullField = "\\N"
    private static let backslash: UInt8 = 0x5C

    // MARK: Writing

    /// The field of row `row` of `column` (values typed `type`) for a column stored as `stored`.
    static func field(_ column: ColumnBuffer, row: Int, type: LogicalType, stored: LogicalType) -> String {
        if column.isNull(row) { return nullField }
        switch type {
        case .text, .json, .enumeration, .unsupported:
            // From the bytes: a Value would repair text that is not UTF-8.
            return column.withUnsafeArena { textField(UnsafeRawBufferPointer(rebasing: $0[column.range(row)])) }
        default:
            return escaped(WireValue.keyText(Value(column: column, row: row, type: type), type: stored))
        }
    }

    /// The field of a text value given as UTF-8 bytes (or not UTF-8 at all).
    static func textField(_ bytes: UnsafeRawBufferPointer) -> String {
        if !XMLText.isValidUTF8(bytes) || bytes.contains(0x0D) || bytes.contains(0) {
            return base64Field(bytes)
        }
        let text = String(decoding: bytes, as: UTF8.self)
        guard isWritable(text) else { return base64Field(bytes) }
        return escaped(text)
    }

    private static func base64Field(_ bytes: UnsafeRawBufferPointer) -> String {
        "\\b" + Data(bytes).base64EncodedString()
    }

    /// A text that starts with a backslash gets one more in front.
    static func escaped(_ text: String) -> String {
        text.utf8.first == backslash ? "\\" + text : text
    }

    /// True when CSV.swift writes `text` literally. Its writer finds and doubles `"` by
    /// characters, not by Unicode scalars, so a quote followed by a combining mark (one
    /// character, `"́`) would be left single and end the field early. Such text is written as
    /// `\b` + base64.
    static func isWritable(_ text: String) -> Bool {
        // Only a quote followed by a non-ASCII scalar can be joined to it (marks are not ASCII):
        // the fast path looks at bytes, the characters are counted only then.
        var quoteThenNonASCII = false
        var afterQuote = false
        for b in text.utf8 {
            if afterQuote && b >= 0x80 {
                quoteThenNonASCII = true
                break
            }
            afterQuote = b == 0x22
        }
        guard quoteThenNonASCII else { return true }
        let scalars = text.utf8.reduce(0) { $0 + ($1 == 0x22 ? 1 : 0) }
        return text.reduce(0) { $0 + ($1 == "\"" ? 1 : 0) } == scalars
    }

    /// `field` in a form CSV.swift writes literally: a field parsed from a file (and written
    /// again by a merge) that holds such a quote is turned into its `\b` form.
    static func writable(_ field: String) -> String {
        guard !isWritable(field) else { return field }
        var text = field
        if text.utf8.first == backslash {
            // `\\…`: the text is what follows the first backslash (`\N` and `\b…` hold no quote).
            text = String(text.dropFirst())
        }
        var bytes = Array(text.utf8)
        return bytes.withUnsafeMutableBytes { base64Field(UnsafeRawBufferPointer($0)) }
    }

    /// Fields that must be quoted: empty ones too, so that a one-column row holding the empty
    /// string is `""`, never a blank line.
    static func needsQuotes(_ field: String) -> Bool {
        field.isEmpty || field.utf8.contains { $0 == 0x22 || $0 == 0x2C || $0 == 0x0A || $0 == 0x0D }
    }

    /// The field of `column`'s default, for a row written without it; nil when it has none
    /// (or one the type cannot hold). Current date and time are taken now, as an engine would.
    static func defaultField(for column: Column) -> String? {
        guard let d = column.defaultValue else { return nil }
        let type = column.logicalType
        let now = Int64(Date().timeIntervalSince1970 * 1_000_000)
        let day = Temporal.microsPerDay
        let text: String?
        switch d {
        case .text(let s): text = escaped(s)
        case .number(let n): text = type == .boolean ? (n == "0" ? "false" : n == "1" ? "true" : nil) : n
        case .boolean(let b): text = type == .boolean ? (b ? "true" : "false") : type.isNumeric ? (b ? "1" : "0") : nil
        case .currentTimestamp: text = WireValue.keyText(.timestamp(now), type: type)
        case .currentDate: text = WireValue.keyText(.date(now >= 0 ? now / day : (now + 1) / day - 1), type: type)
        case .currentTime: text = WireValue.keyText(.time(((now % day) + day) % day), type: type)
        case .expression: text = nil
        }
        guard let text else { return nil }
        var probe = ColumnBuffer(storage: type.storage, capacity: 1)
        guard (try? append(text, as: type, to: &probe)) != nil else { return nil }
        return text
    }

    // MARK: Reading

    /// Appends the value of `field`, read as `type`, to `column`. The error says what is
    /// wrong with the text; the caller adds table, column and row.
    static func append(_ field: String, as type: LogicalType, to column: inout ColumnBuffer) throws {
        var f = field
        try f.withUTF8 { try append(UnsafeRawBufferPointer($0), as: type, to: &column) }
    }

    static func append(_ bytes: UnsafeRawBufferPointer, as type: LogicalType, to column: inout ColumnBuffer) throws {
        if bytes.first == backslash {
            switch try escape(bytes) {
            case .null:
                column.appendNull()
            case .bytes(let raw):
                switch type {
                case .text, .json, .enumeration, .unsupported, .binary: column.append(bytes: raw)
                default: try WireValue.append(raw, as: type, to: &column)
                }
            case .text(let rest):
                try plain(rest, as: type, to: &column)
            }
            return
        }
        if bytes.isEmpty {
            switch type {
            case .text, .json, .enumeration, .unsupported, .binary: column.append(bytes: bytes)
            default: column.appendNull()
            }
            return
        }
        try plain(bytes, as: type, to: &column)
    }

    /// What a field starting with a backslash stands for.
    private enum Escape {
        case null
        case bytes([UInt8])
        case text(UnsafeRawBufferPointer)
    }

    private static func escape(_ bytes: UnsafeRawBufferPointer) throws -> Escape {
        if bytes.count == 2 && bytes[1] == 0x4E { return .null }  // \N
        if bytes.count >= 2 && bytes[1] == 0x62 {  // \b
            guard let raw = Data(base64Encoded: String(decoding: bytes.dropFirst(2), as: UTF8.self)) else {
                throw CSVValueError("'\(preview(bytes))' is not \\b followed by base64")
            }
            return .bytes(Array(raw))
        }
        if bytes.count >= 2 && bytes[1] == backslash { return .text(UnsafeRawBufferPointer(rebasing: bytes[1...])) }
        throw CSVValueError("'\(preview(bytes))' starts with a backslash but is not \\N (NULL), \\b… (base64 bytes) or \\\\… (a text starting with a backslash)")
    }

    private static func plain(_ bytes: UnsafeRawBufferPointer, as type: LogicalType, to column: inout ColumnBuffer) throws {
        switch type {
        case .text, .json, .enumeration, .unsupported:
            column.append(bytes: bytes)
        case .binary:
            guard let raw = Data(base64Encoded: String(decoding: bytes, as: UTF8.self)) else {
                throw CSVValueError("'\(preview(bytes))' is not base64 (binary values are written in base64)")
            }
            column.append(bytes: raw)
        default:
            try WireValue.append(raw: bytes, as: type, to: &column)
        }
    }

    /// Appends the text of a field's value (a `textForm` read): the field unescaped, NULL for
    /// `\N` (and for an empty field of a non-text column).
    static func appendText(_ field: String, stored: LogicalType, to column: inout ColumnBuffer) throws {
        var f = field
        try f.withUTF8 { raw in
            let bytes = UnsafeRawBufferPointer(raw)
            if bytes.first == backslash {
                switch try escape(bytes) {
                case .null: column.appendNull()
                case .bytes(let b): column.append(bytes: b)
                case .text(let rest): column.append(bytes: rest)
                }
            } else if bytes.isEmpty {
                switch stored {
                case .text, .json, .enumeration, .unsupported, .binary: column.append(bytes: bytes)
                default: column.appendNull()
                }
            } else {
                column.append(bytes: bytes)
            }
        }
    }

    /// Appends the JSON form of a field's value (a `jsonForm` read): numbers and booleans as
    /// they are, everything else as a JSON string; NULL stays NULL.
    static func appendJSON(_ field: String, stored: LogicalType, to column: inout ColumnBuffer) throws {
        var text = ColumnBuffer(storage: .bytes, capacity: 1)
        try appendText(field, stored: stored, to: &text)
        if text.isNull(0) {
            column.appendNull()
            return
        }
        let value = text.string(0)
        switch stored {
        case .boolean, .int16, .int32, .int64, .decimal, .float32, .float64:
            if Double(value)?.isFinite == true {
                column.append(string: value)
                return
            }
        case .json:
            column.append(string: value)
            return
        default:
            break
        }
        column.append(string: ValueConversion.jsonString(value))
    }

    /// The start of a field, for messages.
    static func preview(_ bytes: UnsafeRawBufferPointer) -> String {
        let text = String(decoding: bytes.prefix(60), as: UTF8.self)
        return bytes.count > 60 ? text + "…" : text
    }
}

/// A field whose text is not a value of its column's type.
struct CSVValueError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
