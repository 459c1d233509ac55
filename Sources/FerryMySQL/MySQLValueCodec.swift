import FerryCore

/// Ferry's MySQL form of every logical type, decided here once: which encoding a value gets
/// for a target column's type (LOAD DATA text or, for keyed statements, SQL literals), the
/// escaping both use, and key values as SQL literals for key ranges. (The reader's decoding of
/// the text protocol is in MySQLReader.)
enum MySQLValueCodec {
    /// How the writer encodes one column's values.
    enum Encoder {
        case int(range: ClosedRange<Int64>?)
        case bool
        case double(float: Bool)
        case decimal(scale: Int?)
        case text
        case binary
        case uuidText
        case uuidBinary
        case date
        case time
        case timestamp
    }

    static func encoder(from type: LogicalType, to target: Column) -> Encoder? {
        let base = MySQLTypeMap.ColumnType(target.nativeType)
        switch (type, target.logicalType) {
        case (.boolean, .boolean): return .bool
        case (.boolean, .int16), (.boolean, .int32), (.boolean, .int64): return .bool
        case (.int16, let t), (.int32, let t), (.int64, let t):
            switch t {
            case .int16, .int32, .int64: return .int(range: t.integerRange.map { base.unsigned ? max(0, $0.lowerBound)...$0.upperBound : $0 })
            case .decimal: return .int(range: nil)
            case .boolean: return .int(range: 0...1)
            default: return nil
            }
        case (.float32, .float32), (.float64, .float32): return .double(float: true)
        case (.float32, .float64), (.float64, .float64): return .double(float: false)
        case (.decimal, .decimal(_, let s)): return .decimal(scale: s)
        case (.text, .text), (.enumeration, .text), (.enumeration, .enumeration), (.text, .enumeration), (.json, .json), (.json, .text),
             (.decimal, .text):
            return .text
        case (.binary, .binary): return .binary
        case (.uuid, .uuid): return .uuidText
        case (.uuid, .text(let n, _)) where (n ?? 36) >= 36: return .uuidText
        case (.uuid, .binary(let n)) where n == 16: return .uuidBinary
        case (.date, .date): return .date
        case (.time, .time): return .time
        case (.timestamp, .timestamp): return .timestamp
        default: return nil
        }
    }

    static let hexDigits = Array("0123456789ABCDEF".utf8)

    /// `appendEscaped` of the bytes of `b`.
    @inline(__always)
    static func appendEscaped(_ b: [UInt8], insert: Bool, into out: inout [UInt8]) {
        b.withUnsafeBytes { appendEscaped($0, insert: insert, into: &out) }
    }

    /// Appends bytes escaped for LOAD DATA (`\\`, tab, newline, NUL) or, for INSERT, a quoted literal.
    @inline(__always)
    static func appendEscaped(_ b: UnsafeRawBufferPointer, insert: Bool, into out: inout [UInt8]) {
        if insert { out.append(39) }
        // Runs of bytes that need no escape are appended in one piece (byte by byte into the
        // array was a uniqueness and capacity check per byte).
        var start = 0
        for i in 0..<b.count {
            let c = b[i]
            let escape: UInt8
            switch c {
            case 92: escape = 92
            case 9: escape = 116
            case 10: escape = 110
            case 13 where insert: escape = 114
            case 0: escape = 48
            case 39 where insert: escape = 39
            case 26 where insert: escape = 90
            default: continue
            }
            if i > start { out.append(bytes: UnsafeRawBufferPointer(rebasing: b[start..<i])) }
            out.append(92)
            out.append(escape)
            start = i + 1
        }
        if start < b.count { out.append(bytes: UnsafeRawBufferPointer(rebasing: b[start...])) }
        if insert { out.append(39) }
    }

    /// True when decimal text has non-zero digits more than `scale` places after the point.
    static func fractionDigits(_ text: UnsafeRawBufferPointer, beyond scale: Int) -> Bool {
        guard let dot = text.firstIndex(of: 46) else { return false }
        var i = dot + 1 + scale
        while i < text.count {
            if text[i] != 48 { return true }
            i += 1
        }
        return false
    }

    /// Key values as SQL literals, for key ranges.
    static func literals(_ values: [Value], _ c: MySQLConnection) -> String {
        values.map { v -> String in
            switch v {
            case .null: return "NULL"
            case .binary(let b): return "X'" + b.map { String(format: "%02X", $0) }.joined() + "'"
            case .bool, .int, .double: return v.canonicalText ?? "NULL"
            // A quoted decimal would be compared with a DECIMAL column as a double (MySQL's
            // comparison rules), losing digits: a validated decimal goes unquoted.
            case .decimal(let d) where DecimalText.isValid(d) && !d.contains(where: { $0.isLetter }): return d
            default: return c.myDialect.literal(v.canonicalText ?? "")
            }
        }.joined(separator: ", ")
    }
}
