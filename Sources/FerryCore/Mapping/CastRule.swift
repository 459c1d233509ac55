import Foundation

/// A user's override of the type map, pgloader-style: one `--cast` option or one line of a
/// `--casts FILE`.
///
///     type NATIVE [when GUARD [and GUARD]…] to TARGET [using TRANSFORM[,TRANSFORM]…]
///     column TABLE.COLUMN to TARGET [using TRANSFORM[,TRANSFORM]…]
///
/// NATIVE is the source type as `ferry describe` prints it (spellings of one type match each
/// other: `int4` = `integer` = `int`); with parameters (`tinyint(1)`) they must match too.
/// GUARDs: `unsigned`, `signed`, `serial`, `not serial`, `nullable`, `not null`, and
/// `width|length|precision|scale [OP] N` with OP one of `= != < <= > >=` (`=` when left out).
/// TARGET: a logical type (`boolean`, `int64`, `decimal(12,2)`, `text`, `text(40)`, `json`,
/// `timestamp(3) with time zone`, …), `skip`, or a native type of the target (`varchar(20)`,
/// `jsonb`, `mediumtext`). Types Ferry has no logical type for (arrays, ranges, geometry,
/// tsvector, …) cast to `text` or `json` travel in the source engine's own text or JSON form;
/// other types are converted value by value (`ValueConversion`).
public struct CastRule: Sendable, Hashable, Codable, CustomStringConvertible {
    public enum Subject: Sendable, Hashable, Codable {
        case type(String)
        case column(table: TableName, column: String)
    }

    public enum Target: Sendable, Hashable, Codable, CustomStringConvertible {
        case skip
        case logical(LogicalType)
        /// A type of the target engine, written into its DDL as given (checked to be a plain name).
        case native(String)

        public var description: String {
            switch self {
            case .skip: return "skip"
            case .logical(let t): return t.description
            case .native(let n): return n
            }
        }
    }

    public enum Measure: String, Sendable, Hashable, Codable, CaseIterable {
        case width, length, precision, scale
    }

    public enum Comparison: String, Sendable, Hashable, Codable, CaseIterable {
        case equal = "=", notEqual = "!=", less = "<", lessOrEqual = "<=", greater = ">", greaterOrEqual = ">="
        func holds(_ a: Int, _ b: Int) -> Bool {
            switch self {
            case .equal: return a == b
            case .notEqual: return a != b
            case .less: return a < b
            case .lessOrEqual: return a <= b
            case .greater: return a > b
            case .greaterOrEqual: return a >= b
            }
        }
    }

    public enum Guard: Sendable, Hashable, Codable {
        case unsigned(Bool)
        case serial(Bool)
        case nullable(Bool)
        case compare(Measure, Comparison, Int)
    }

    /// The rule as the user wrote it.
    public var text: String
    /// Where it came from: `--cast #2`, `casts.txt:7`.
    public var origin: String
    public var subject: Subject
    public var guards: [Guard]
    public var target: Target
    public var transforms: [CastTransform]

    public var description: String { "\(origin) '\(text)'" }

    // MARK: Parsing

    public init(parsing text: String, origin: String) throws {
        let ruleText = text.trimmingCharacters(in: .whitespaces)
        func bad(_ why: String) -> FerryError {
            .invalidOption(
                "cast rule \(origin) '\(ruleText)': \(why) (form: type NATIVE [when GUARD] to TARGET [using TRANSFORM], "
                    + "or column TABLE.COLUMN to TARGET [using TRANSFORM]; see ferry help copy)")
        }
        let words = Self.tokenize(ruleText)
        guard let first = words.first?.lowercased() else { throw bad("the rule is empty") }
        func index(of keyword: String, from: Int) -> Int? {
            words.indices.dropFirst(from).first { words[$0].lowercased() == keyword }
        }
        guard let to = index(of: "to", from: 1) else { throw bad("it has no 'to TARGET'") }
        let using = index(of: "using", from: to + 1)
        let when = index(of: "when", from: 1).flatMap { $0 < to ? $0 : nil }

        let subject0: Subject
        switch first {
        case "type":
            let native = words[1..<(when ?? to)].joined(separator: " ")
            guard !native.isEmpty else { throw bad("'type' names no type") }
            subject0 = .type(native)
        case "column":
            guard to == 2, when == nil else { throw bad("'column' takes one TABLE.COLUMN and no guard") }
            let parts = Self.dottedParts(words[1])
            guard parts.count == 2 || parts.count == 3, parts.allSatisfy({ !$0.isEmpty }) else {
                throw bad("'\(words[1])' is not TABLE.COLUMN or SCHEMA.TABLE.COLUMN")
            }
            let table = parts.count == 3 ? TableName(schema: parts[0], parts[1]) : TableName(parts[0])
            subject0 = .column(table: table, column: parts[parts.count - 1])
        default:
            throw bad("it starts with '\(words[0])', not 'type' or 'column'")
        }

        var guards: [Guard] = []
        if let when {
            let clauses = Self.split(Array(words[(when + 1)..<to]), on: "and")
            for clause in clauses {
                guards.append(try Self.parseGuard(clause.map { $0.lowercased() }, bad))
            }
        }
        let targetWords = words[(to + 1)..<(using ?? words.count)]
        guard !targetWords.isEmpty else { throw bad("'to' names no target") }
        let target = try Self.parseTarget(targetWords.joined(separator: " "), bad)

        var transforms: [CastTransform] = []
        if let using {
            let names = words[(using + 1)...].joined(separator: " ").split(separator: ",")
                .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            guard !names.isEmpty else { throw bad("'using' names no transform") }
            for n in names {
                guard let t = CastTransform(rawValue: n) else {
                    throw bad("unknown transform '\(n)'; known: \(CastTransform.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                transforms.append(t)
            }
        }
        if case .skip = target, !transforms.isEmpty { throw bad("a skipped column takes no transform") }
        self.text = ruleText
        self.origin = origin
        self.subject = subject0
        self.guards = guards
        self.target = target
        self.transforms = transforms
    }

    /// Words, with parentheses kept whole (`numeric(10, 2)` is one word) and double-quoted
    /// names kept whole.
    static func tokenize(_ text: String) -> [String] {
        var words: [String] = []
        var current = ""
        var depth = 0
        var quoted = false
        for ch in text {
            if ch == "\"" { quoted.toggle() }
            if !quoted {
                if ch == "(" { depth += 1 }
                if ch == ")" { depth = max(0, depth - 1) }
                if ch.isWhitespace {
                    if depth == 0 {
                        if !current.isEmpty { words.append(current) }
                        current = ""
                    }
                    continue
                }
            }
            current.append(ch)
        }
        if !current.isEmpty { words.append(current) }
        // `numeric (10,2)`: glue a parenthesised word to the word before it.
        var glued: [String] = []
        for w in words {
            if w.hasPrefix("("), let last = glued.last, !last.isEmpty, last.lowercased() != "to", last.lowercased() != "type" {
                glued[glued.count - 1] = last + w
            } else {
                glued.append(w)
            }
        }
        return glued
    }

    /// `a.b.c` → [a, b, c]; a part in double quotes may hold dots (`""` is a quote).
    static func dottedParts(_ text: String) -> [String] {
        var parts: [String] = [""]
        var quoted = false
        var chars = Array(text)[...]
        while let c = chars.popFirst() {
            if c == "\"" {
                if quoted, chars.first == "\"" {
                    parts[parts.count - 1].append("\"")
                    chars.removeFirst()
                } else {
                    quoted.toggle()
                }
            } else if c == ".", !quoted {
                parts.append("")
            } else {
                parts[parts.count - 1].append(c)
            }
        }
        return parts
    }

    static func split(_ words: [String], on keyword: String) -> [[String]] {
        var parts: [[String]] = [[]]
        for w in words {
            if w.lowercased() == keyword { parts.append([]) } else { parts[parts.count - 1].append(w) }
        }
        return parts
    }

    static func parseGuard(_ w: [String], _ bad: (String) -> FerryError) throws -> Guard {
        switch w {
        case ["unsigned"]: return .unsigned(true)
        case ["signed"]: return .unsigned(false)
        case ["serial"]: return .serial(true)
        case ["not", "serial"]: return .serial(false)
        case ["nullable"], ["null"]: return .nullable(true)
        case ["not", "null"]: return .nullable(false)
        default: break
        }
        // `length > 255`, `width 1`, `precision<=18`.
        let joined = w.joined()
        guard let measure = Measure.allCases.first(where: { joined.hasPrefix($0.rawValue) }) else {
            throw bad("unknown guard '\(w.joined(separator: " "))'; guards: unsigned, signed, serial, not serial, nullable, not null, "
                + "width|length|precision|scale [= != < <= > >=] N")
        }
        var rest = Substring(joined.dropFirst(measure.rawValue.count))
        var comparison = Comparison.equal
        for c in Comparison.allCases.sorted(by: { $0.rawValue.count > $1.rawValue.count }) where rest.hasPrefix(c.rawValue) {
            comparison = c
            rest = rest.dropFirst(c.rawValue.count)
            break
        }
        guard let n = Int(rest), n >= 0 else { throw bad("guard '\(w.joined(separator: " "))' needs a whole number") }
        return .compare(measure, comparison, n)
    }

    static func parseTarget(_ text: String, _ bad: (String) -> FerryError) throws -> Target {
        if text.lowercased() == "skip" { return .skip }
        if let logical = LogicalType(parsing: text) { return .logical(logical) }
        guard NativeTypeName.isPlainDeclaration(text) else {
            throw bad("'\(text)' is neither a logical type (\(LogicalType.parseableNames)) nor a plain native type name")
        }
        return .native(text)
    }

    // MARK: Matching

    /// True when the rule applies to `column` of `table`.
    public func matches(_ column: Column, in table: TableName) -> Bool {
        switch subject {
        case .column(let t, let c):
            let sameTable = table.name.lowercased() == t.name.lowercased()
                && (t.schema == nil || t.schema?.lowercased() == table.schema?.lowercased())
            guard sameTable else { return false }
            guard column.name == c || column.name.lowercased() == c.lowercased() else { return false }
        case .type(let native):
            let want = NativeTypeName(native)
            let have = NativeTypeName(column.nativeType)
            guard want.base == have.base else { return false }
            if !want.parameters.isEmpty && want.parameters != have.parameters { return false }
            if want.unsigned && !have.unsigned { return false }
        }
        return guards.allSatisfy { holds($0, column) }
    }

    func holds(_ g: Guard, _ column: Column) -> Bool {
        let native = NativeTypeName(column.nativeType)
        switch g {
        case .unsigned(let want): return native.unsigned == want
        case .serial(let want): return column.isSerial == want
        case .nullable(let want): return column.isNullable == want
        case .compare(let measure, let op, let n):
            guard let v = Self.measure(measure, of: column, native: native) else { return false }
            return op.holds(v, n)
        }
    }

    static func measure(_ m: Measure, of column: Column, native: NativeTypeName) -> Int? {
        let first = native.parameters.first
        switch (m, column.logicalType) {
        case (.width, _): return first
        case (.length, .text(let n, _)), (.length, .binary(let n)): return n ?? first
        case (.length, _): return first
        case (.precision, .decimal(let p, _)): return p ?? first
        case (.precision, .time(let p)), (.precision, .timestamp(let p, _)): return p ?? first
        case (.precision, _): return first
        case (.scale, .decimal(_, let s)): return s ?? native.parameters.dropFirst().first
        case (.scale, _): return native.parameters.dropFirst().first
        }
    }
}

/// Named value transforms a cast may ask for with `using`.
public enum CastTransform: String, Sendable, Hashable, Codable, CaseIterable {
    /// MySQL `0000-00-00` dates and timestamps (and ones with a zero month or day) become NULL.
    case zeroDatesToNull = "zero-dates-to-null"
    /// 0 becomes false, any other integer true.
    case tinyintToBoolean = "tinyint-to-boolean"
    /// Spaces, tabs and line breaks removed from both ends of text.
    case trim
    /// Spaces, tabs and line breaks removed from the end of text (CHAR padding).
    case rightTrim = "right-trim"
    /// Empty text becomes NULL.
    case emptyStringToNull = "empty-string-to-null"
    /// NUL characters (U+0000), which PostgreSQL text refuses, are removed.
    case removeNullCharacters = "remove-null-characters"

    /// One line for help and docs.
    public var summary: String {
        switch self {
        case .zeroDatesToNull: return "MySQL zero dates (0000-00-00, a zero month or day) are NULL"
        case .tinyintToBoolean: return "0 becomes false, any other integer true"
        case .trim: return "whitespace removed from both ends of text"
        case .rightTrim: return "whitespace removed from the end of text (CHAR padding)"
        case .emptyStringToNull: return "empty text becomes NULL"
        case .removeNullCharacters: return "NUL characters (U+0000) removed from text"
        }
    }

    /// Whether the transform takes values of `type` (as read from the source).
    public func accepts(_ type: LogicalType) -> Bool {
        switch (self, type) {
        case (.zeroDatesToNull, .date), (.zeroDatesToNull, .timestamp): return true
        case (.tinyintToBoolean, .int16), (.tinyintToBoolean, .int32), (.tinyintToBoolean, .int64), (.tinyintToBoolean, .boolean): return true
        case (.trim, _), (.rightTrim, _), (.emptyStringToNull, _), (.removeNullCharacters, _):
            switch type {
            case .text, .json, .enumeration: return true
            default: return false
            }
        default: return false
        }
    }

    /// The transformed value (NULL stays NULL).
    public func apply(_ v: Value) -> Value {
        switch (self, v) {
        case (.tinyintToBoolean, .int(let i)): return .bool(i != 0)
        case (.trim, .text(let s)): return .text(Self.trimmed(s, leading: true))
        case (.rightTrim, .text(let s)): return .text(Self.trimmed(s, leading: false))
        case (.trim, .json(let s)): return .json(Self.trimmed(s, leading: true))
        case (.rightTrim, .json(let s)): return .json(Self.trimmed(s, leading: false))
        case (.emptyStringToNull, .text(let s)), (.emptyStringToNull, .json(let s)): return s.isEmpty ? .null : v
        case (.removeNullCharacters, .text(let s)): return .text(s.replacingOccurrences(of: "\u{0}", with: ""))
        case (.removeNullCharacters, .json(let s)): return .json(s.replacingOccurrences(of: "\u{0}", with: ""))
        default: return v  // zero-dates-to-null acts in the reader; NULL and other values pass
        }
    }

    static func trimmed(_ s: String, leading: Bool) -> String {
        let ws: Set<Unicode.Scalar> = [" ", "\t", "\n", "\r"]
        var scalars = Substring(s).unicodeScalars
        while let l = scalars.last, ws.contains(l) { scalars.removeLast() }
        if leading { while let f = scalars.first, ws.contains(f) { scalars.removeFirst() } }
        return String(scalars)
    }
}
