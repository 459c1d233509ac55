import Foundation

/// Converts values from one logical type to another when a cast rule changes a column's type.
/// The rules are SQL `CAST`'s: text is cut to a shorter length, decimals are rounded to the
/// new scale (half away from zero), times lose digits beyond the new precision, a timestamp
/// cast to a date keeps its day. What has no meaning in the new type (`'abc'` as an integer,
/// 300 as int16, 2 as a boolean) is an error the copy reports with table, column and key.
public enum ValueConversion {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    public static func convert(_ value: Value, to type: LogicalType) throws -> Value {
        func fail(_ why: String) -> Failure { Failure(description: "\(value) cannot be cast to \(type): \(why)") }
        if case .null = value { return .null }
        switch type {
        case .text(let maxLength, _):
            var s = text(of: value)
            if let n = maxLength, s.count > n { s = String(s.prefix(n)) }
            return .text(s)
        case .enumeration, .unsupported:
            return .text(text(of: value))
        case .json:
            switch value {
            case .json(let s): return .json(s)
            case .text(let s):
                // Text holding JSON is carried as it is written; text that is not JSON has no JSON meaning.
                guard (try? JSONSerialization.jsonObject(with: Data(s.utf8), options: [.fragmentsAllowed])) != nil else {
                    throw fail("not JSON text")
                }
                return .json(s)
            case .bool, .int, .decimal: return .json(value.canonicalText ?? "null")
            case .double(let d):
                guard d.isFinite else { throw fail("JSON has no \(d)") }
                return .json(DecimalText.exact(d))
            default: return .json(jsonString(text(of: value)))
            }
        case .boolean:
            switch value {
            case .bool: return value
            case .int(let i):
                guard i == 0 || i == 1 else { throw fail("only 0 and 1 are booleans (use tinyint-to-boolean for 'any other integer is true')") }
                return .bool(i == 1)
            case .text(let s):
                switch s.lowercased().trimmingCharacters(in: .whitespaces) {
                case "true", "t", "1", "yes", "y", "on": return .bool(true)
                case "false", "f", "0", "no", "n", "off": return .bool(false)
                default: throw fail("not a boolean")
                }
            default: throw fail("no boolean form")
            }
        case .int16, .int32, .int64:
            let i: Int64
            switch value {
            case .int(let v): i = v
            case .bool(let b): i = b ? 1 : 0
            case .double(let d):
                guard d.isFinite, let v = Int64(exactly: d.rounded(.toNearestOrAwayFromZero)) else { throw fail("out of range") }
                i = v
            case .decimal(let s), .text(let s):
                let t = s.trimmingCharacters(in: .whitespaces)
                if let v = Int64(t) {
                    i = v
                } else if DecimalText.isValid(t), let r = Int64(DecimalText.rounded(t, scale: 0)) {
                    i = r
                } else {
                    throw fail("not an integer in range")
                }
            default: throw fail("no integer form")
            }
            guard let range = type.integerRange, range.contains(i) else { throw fail("out of range") }
            return .int(i)
        case .float32, .float64:
            switch value {
            case .double: return value
            case .int(let v): return .double(Double(v))
            case .bool(let b): return .double(b ? 1 : 0)
            case .decimal(let s), .text(let s):
                let t = s.trimmingCharacters(in: .whitespaces)
                switch t {
                case "NaN": return .double(.nan)
                case "Infinity", "+Infinity": return .double(.infinity)
                case "-Infinity": return .double(-.infinity)
                default:
                    guard DecimalText.isValid(t) || t.range(of: #"^[+-]?[0-9.]+[eE][+-]?[0-9]+$"#, options: .regularExpression) != nil,
                          let d = Double(t)
                    else { throw fail("not a number") }
                    return .double(d)
                }
            default: throw fail("no number form")
            }
        case .decimal(_, let scale):
            var s: String
            switch value {
            case .decimal(let v): s = v
            case .int(let v): s = String(v)
            case .bool(let b): s = b ? "1" : "0"
            case .double(let d): s = DecimalText.exact(d)
            case .text(let v):
                s = v.trimmingCharacters(in: .whitespaces)
                guard DecimalText.isValid(s) else { throw fail("not a decimal number") }
            default: throw fail("no decimal form")
            }
            if let scale { s = DecimalText.rounded(s, scale: scale) }
            return .decimal(s)
        case .date:
            switch value {
            case .date: return value
            case .timestamp(let us): return .date(floorDiv(us, 86_400_000_000))
            case .text(let s): return .date(try parse(fail) { try Temporal.parseDate(s) })
            default: throw fail("no date form")
            }
        case .time(let p):
            let us: Int64
            switch value {
            case .time(let v): us = v
            case .timestamp(let v): us = v - floorDiv(v, 86_400_000_000) * 86_400_000_000
            case .text(let s): us = try parse(fail) { try Temporal.parseTime(s) }
            default: throw fail("no time form")
            }
            return .time(truncate(us, precision: p))
        case .timestamp(let p, _):
            let us: Int64
            switch value {
            case .timestamp(let v): us = v
            case .date(let d):
                let (m, overflow) = d.multipliedReportingOverflow(by: 86_400_000_000)
                guard !overflow else { throw fail("out of range") }
                us = m
            case .text(let s): us = try parse(fail) { try Temporal.parseTimestamp(s).micros }
            default: throw fail("no timestamp form")
            }
            return .timestamp(truncate(us, precision: p))
        case .uuid:
            switch value {
            case .uuid: return value
            case .binary(let b) where b.count == 16: return .uuid(b)
            case .text(let s):
                guard let u = UUIDText.parse(s) else { throw fail("not a UUID") }
                return .uuid(u)
            default: throw fail("no UUID form")
            }
        case .binary(let maxLength):
            var b: [UInt8]
            switch value {
            case .binary(let v), .uuid(let v): b = v
            case .text(let s), .json(let s), .decimal(let s): b = Array(s.utf8)
            default: b = Array(text(of: value).utf8)
            }
            if let n = maxLength, b.count > n { b = Array(b.prefix(n)) }
            return .binary(b)
        }
    }

    /// Converts every row of one column of a batch; `row` of a failure is reported by the caller.
    public static func convert(
        _ column: ColumnBuffer, from: LogicalType, to: LogicalType, transforms: [CastTransform]
    ) throws -> ColumnBuffer {
        if transforms.isEmpty, let fast = try convertFast(column, from: from, to: to) { return fast }
        var out = ColumnBuffer(storage: to.storage, capacity: column.count)
        for r in 0..<column.count {
            var v = Value(column: column, row: r, type: from)
            for t in transforms { v = t.apply(v) }
            do {
                try convert(v, to: to).append(to: &out, as: to)
            } catch let f as Failure {
                throw BatchRowError(row: r, error: .invalidValue(table: nil, column: nil, key: nil, message: f.description))
            } catch let e as FerryError {
                throw BatchRowError(row: r, error: e)
            }
        }
        return out
    }

    /// Common conversions straight from buffer to buffer, without a `Value` per row; nil when
    /// the pair has no fast path. Results are the same as `convert(_:to:)`'s.
    static func convertFast(_ column: ColumnBuffer, from: LogicalType, to: LogicalType) throws -> ColumnBuffer? {
        var out = ColumnBuffer(storage: to.storage, capacity: column.count)
        func failure(_ r: Int) -> BatchRowError {
            let v = Value(column: column, row: r, type: from)
            var message = "\(v) cannot be cast to \(to)"
            do { _ = try convert(v, to: to) } catch { message = "\(error)" }
            return BatchRowError(row: r, error: .invalidValue(table: nil, column: nil, key: nil, message: message))
        }
        switch (from.storage, to) {
        case (.int64, .int16), (.int64, .int32), (.int64, .int64):
            guard from.integerRange != nil, from != .boolean, let range = to.integerRange else { return nil }
            for r in 0..<column.count {
                if column.isNull(r) { out.appendNull(); continue }
                let v = column.ints[r]
                guard range.contains(v) else { throw failure(r) }
                out.append(v)
            }
        case (.int64, .float32), (.int64, .float64):
            guard from.integerRange != nil, from != .boolean else { return nil }
            for r in 0..<column.count {
                if column.isNull(r) { out.appendNull() } else { out.append(Double(column.ints[r])) }
            }
        case (.double, .float32), (.double, .float64):
            for r in 0..<column.count {
                if column.isNull(r) { out.appendNull() } else { out.append(column.doubles[r]) }
            }
        case (.bytes, .float32), (.bytes, .float64):
            guard case .decimal = from else { return nil }
            for r in 0..<column.count {
                if column.isNull(r) { out.appendNull(); continue }
                let s = column.string(r)
                switch s {
                case "NaN": out.append(Double.nan)
                case "Infinity", "+Infinity": out.append(Double.infinity)
                case "-Infinity": out.append(-Double.infinity)
                default:
                    guard let d = Double(s) else { throw failure(r) }
                    out.append(d)
                }
            }
        case (.bytes, .text(let maxLength, _)):
            guard from.isTextual else { return nil }
            for r in 0..<column.count {
                if column.isNull(r) { out.appendNull(); continue }
                let range = column.range(r)
                // UTF-8 has at least one byte per character: short values need no counting.
                if let n = maxLength, range.count > n {
                    let s = column.string(r)
                    out.append(string: s.count > n ? String(s.prefix(n)) : s)
                } else {
                    column.withUnsafeArena { a in out.append(bytes: UnsafeRawBufferPointer(rebasing: a[range])) }
                }
            }
        default:
            return nil
        }
        return out
    }

    /// The value as text: canonical text, binary as `\x` and lowercase hex (PostgreSQL's form).
    static func text(of value: Value) -> String {
        if case .binary(let b) = value { return "\\x" + b.map { String(format: "%02x", $0) }.joined() }
        return value.canonicalText ?? ""
    }

    /// `s` as a JSON string literal (quotes, backslashes and control characters escaped).
    public static func jsonString(_ s: String) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if u.value < 0x20 { out += String(format: "\\u%04x", u.value) } else { out.unicodeScalars.append(u) }
            }
        }
        return out + "\""
    }

    static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
        let q = a / b
        return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
    }

    static func truncate(_ micros: Int64, precision: Int?) -> Int64 {
        guard let p = precision, p < 6 else { return micros }
        var unit: Int64 = 1
        for _ in p..<6 { unit *= 10 }
        return floorDiv(micros, unit) * unit
    }

    private static func parse(_ fail: (String) -> Failure, _ body: () throws -> Int64) throws -> Int64 {
        do { return try body() } catch let e as Temporal.ParseError { throw fail(e.description) }
    }
}
