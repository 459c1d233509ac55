import Foundation

/// The engine-neutral type a column's values travel as. Each driver maps its native types
/// to these (from its catalog) and these back to native DDL.
public enum LogicalType: Hashable, Sendable {
    case boolean
    case int16, int32, int64
    /// Exact decimal; nil precision means unconstrained (PostgreSQL `numeric`).
    case decimal(precision: Int?, scale: Int?)
    case float32, float64
    /// Character data; `maxLength` in characters, `fixed` for CHAR(n).
    case text(maxLength: Int?, fixed: Bool)
    case binary(maxLength: Int?)
    /// Days since 1970-01-01.
    case date
    /// Microseconds since midnight; precision is fractional-second digits.
    case time(precision: Int?)
    /// Microseconds since the epoch; `timeZone` true means the instant is UTC (timestamptz).
    case timestamp(precision: Int?, timeZone: Bool)
    case uuid
    case json
    case enumeration(labels: [String])
    /// A type Ferry cannot carry; such columns are skipped and reported.
    case unsupported(native: String)

    /// Unbounded text.
    public static let text = LogicalType.text(maxLength: nil, fixed: false)

    /// How values of this type are held in a `ColumnBuffer`.
    public var storage: ColumnStorage {
        switch self {
        case .boolean, .int16, .int32, .int64, .date, .time, .timestamp: return .int64
        case .float32, .float64: return .double
        case .decimal, .text, .binary, .uuid, .json, .enumeration, .unsupported: return .bytes
        }
    }

    /// Integers, decimals and floats.
    public var isNumeric: Bool {
        switch self {
        case .int16, .int32, .int64, .decimal, .float32, .float64: return true
        default: return false
        }
    }

    public var isSupported: Bool {
        if case .unsupported = self { return false }
        return true
    }

    /// Inclusive bounds of the integer types, used to refuse values that would not fit.
    public var integerRange: ClosedRange<Int64>? {
        switch self {
        case .boolean: return 0...1
        case .int16: return Int64(Int16.min)...Int64(Int16.max)
        case .int32: return Int64(Int32.min)...Int64(Int32.max)
        case .int64: return Int64.min...Int64.max
        default: return nil
        }
    }
}

extension LogicalType: CustomStringConvertible {
    /// The name used in `ferry describe`, plans and docs, e.g. `decimal(10,2)`, `text(120)`,
    /// `timestamp(6) with time zone`, `enum('a','b')`.
    public var description: String {
        func p(_ v: Int?) -> String { v.map { "(\($0))" } ?? "" }
        switch self {
        case .boolean: return "boolean"
        case .int16: return "int16"
        case .int32: return "int32"
        case .int64: return "int64"
        case .decimal(let precision, let scale):
            switch (precision, scale) {
            case (let p?, let s?): return "decimal(\(p),\(s))"
            case (let p?, nil): return "decimal(\(p))"
            default: return "decimal"
            }
        case .float32: return "float32"
        case .float64: return "float64"
        case .text(let n, let fixed): return (fixed ? "char" : "text") + p(n)
        case .binary(let n): return "binary" + p(n)
        case .date: return "date"
        case .time(let n): return "time" + p(n)
        case .timestamp(let n, let tz): return "timestamp" + p(n) + (tz ? " with time zone" : "")
        case .uuid: return "uuid"
        case .json: return "json"
        case .enumeration(let labels):
            return "enum(" + labels.map { "'" + $0.replacingOccurrences(of: "'", with: "''") + "'" }.joined(separator: ",") + ")"
        case .unsupported(let native): return "unsupported(\(native))"
        }
    }
}

extension LogicalType: Codable {
    // Encoded as its description-like parts so the JSON is readable and stable.
    private enum CodingKeys: String, CodingKey { case kind, precision, scale, maxLength, fixed, timeZone, labels, native }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .boolean: try c.encode("boolean", forKey: .kind)
        case .int16: try c.encode("int16", forKey: .kind)
        case .int32: try c.encode("int32", forKey: .kind)
        case .int64: try c.encode("int64", forKey: .kind)
        case .decimal(let p, let s):
            try c.encode("decimal", forKey: .kind)
            try c.encodeIfPresent(p, forKey: .precision)
            try c.encodeIfPresent(s, forKey: .scale)
        case .float32: try c.encode("float32", forKey: .kind)
        case .float64: try c.encode("float64", forKey: .kind)
        case .text(let n, let fixed):
            try c.encode("text", forKey: .kind)
            try c.encodeIfPresent(n, forKey: .maxLength)
            if fixed { try c.encode(true, forKey: .fixed) }
        case .binary(let n):
            try c.encode("binary", forKey: .kind)
            try c.encodeIfPresent(n, forKey: .maxLength)
        case .date: try c.encode("date", forKey: .kind)
        case .time(let p):
            try c.encode("time", forKey: .kind)
            try c.encodeIfPresent(p, forKey: .precision)
        case .timestamp(let p, let tz):
            try c.encode("timestamp", forKey: .kind)
            try c.encodeIfPresent(p, forKey: .precision)
            try c.encode(tz, forKey: .timeZone)
        case .uuid: try c.encode("uuid", forKey: .kind)
        case .json: try c.encode("json", forKey: .kind)
        case .enumeration(let labels):
            try c.encode("enumeration", forKey: .kind)
            try c.encode(labels, forKey: .labels)
        case .unsupported(let native):
            try c.encode("unsupported", forKey: .kind)
            try c.encode(native, forKey: .native)
        }
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let kind = try c.decode(String.self, forKey: .kind)
        switch kind {
        case "boolean": self = .boolean
        case "int16": self = .int16
        case "int32": self = .int32
        case "int64": self = .int64
        case "decimal":
            self = .decimal(
                precision: try c.decodeIfPresent(Int.self, forKey: .precision),
                scale: try c.decodeIfPresent(Int.self, forKey: .scale))
        case "float32": self = .float32
        case "float64": self = .float64
        case "text":
            self = .text(
                maxLength: try c.decodeIfPresent(Int.self, forKey: .maxLength),
                fixed: try c.decodeIfPresent(Bool.self, forKey: .fixed) ?? false)
        case "binary": self = .binary(maxLength: try c.decodeIfPresent(Int.self, forKey: .maxLength))
        case "date": self = .date
        case "time": self = .time(precision: try c.decodeIfPresent(Int.self, forKey: .precision))
        case "timestamp":
            self = .timestamp(
                precision: try c.decodeIfPresent(Int.self, forKey: .precision),
                timeZone: try c.decodeIfPresent(Bool.self, forKey: .timeZone) ?? false)
        case "uuid": self = .uuid
        case "json": self = .json
        case "enumeration": self = .enumeration(labels: try c.decode([String].self, forKey: .labels))
        case "unsupported": self = .unsupported(native: try c.decode(String.self, forKey: .native))
        default:
            throw DecodingError.dataCorruptedError(
                forKey: .kind, in: c, debugDescription: "unknown logical type '\(kind)'")
        }
    }
}

extension LogicalType {
    /// The logical type names a user may write (cast targets), as in `ferry describe`.
    public static let parseableNames =
        "boolean, int16, int32, int64, decimal[(p[,s])], float32, float64, text[(n)], char(n), binary[(n)], "
        + "date, time[(p)], timestamp[(p)] [with time zone], uuid, json"

    /// Parses a logical type as `description` prints it (enumerations and unsupported types
    /// excepted); nil for anything else.
    public init?(parsing text: String) {
        var t = text.lowercased().split(separator: " ").joined(separator: " ")
        var timeZone = false
        for suffix in [" with time zone", " without time zone"] where t.hasSuffix(suffix) {
            timeZone = suffix == " with time zone"
            t = String(t.dropLast(suffix.count))
        }
        if t == "timestamptz" {
            t = "timestamp"
            timeZone = true
        }
        var name = t
        var params: [Int] = []
        if let open = t.firstIndex(of: "(") {
            guard t.hasSuffix(")") else { return nil }
            name = String(t[..<open]).trimmingCharacters(in: .whitespaces)
            let inside = t[t.index(after: open)..<t.index(before: t.endIndex)]
            let numbers = inside.split(separator: ",", omittingEmptySubsequences: false)
                .map { Int($0.trimmingCharacters(in: .whitespaces)) }
            guard !numbers.isEmpty, numbers.count <= 2, numbers.allSatisfy({ ($0 ?? -1) >= 0 }) else { return nil }
            params = numbers.compactMap { $0 }
        }
        if timeZone && name != "timestamp" { return nil }
        switch (name, params.count) {
        case ("boolean", 0): self = .boolean
        case ("int16", 0): self = .int16
        case ("int32", 0): self = .int32
        case ("int64", 0): self = .int64
        case ("decimal", 0): self = .decimal(precision: nil, scale: nil)
        case ("decimal", 1): self = .decimal(precision: params[0], scale: 0)
        case ("decimal", 2): self = .decimal(precision: params[0], scale: params[1])
        case ("float32", 0): self = .float32
        case ("float64", 0): self = .float64
        case ("text", 0): self = .text
        case ("text", 1): self = .text(maxLength: params[0], fixed: false)
        case ("char", 1): self = .text(maxLength: params[0], fixed: true)
        case ("binary", 0): self = .binary(maxLength: nil)
        case ("binary", 1): self = .binary(maxLength: params[0])
        case ("date", 0): self = .date
        case ("time", 0): self = .time(precision: nil)
        case ("time", 1): self = .time(precision: params[0])
        case ("timestamp", 0): self = .timestamp(precision: nil, timeZone: timeZone)
        case ("timestamp", 1): self = .timestamp(precision: params[0], timeZone: timeZone)
        case ("uuid", 0): self = .uuid
        case ("json", 0): self = .json
        default: return nil
        }
    }

    /// True for text, character, enumeration and JSON: types whose values travel as text.
    public var isTextual: Bool {
        switch self {
        case .text, .enumeration, .json: return true
        default: return false
        }
    }
}
