import Foundation

/// A native type name taken apart for matching cast rules: `tinyint(1) unsigned` →
/// base `tinyint`, parameters [1], unsigned. Spelling variants of the same type are folded
/// to one base name (`int4`, `int`, `integer` → `integer`; `character varying` → `varchar`;
/// `timestamp with time zone` → `timestamptz`), so a rule written in either engine's words
/// matches what `ferry describe` prints.
public struct NativeTypeName: Sendable, Hashable, CustomStringConvertible {
    /// Lowercased, folded, without parameters or signedness; arrays keep their `[]`.
    public var base: String
    /// The numbers in the first parentheses: length, width, precision (and scale).
    public var parameters: [Int]
    public var unsigned: Bool

    public init(_ text: String) {
        var t = text.lowercased().trimmingCharacters(in: .whitespaces)
        var arraySuffix = ""
        while t.hasSuffix("[]") {
            arraySuffix += "[]"
            t = String(t.dropLast(2)).trimmingCharacters(in: .whitespaces)
        }
        var params: [Int] = []
        if let open = t.firstIndex(of: "("), let close = t[open...].firstIndex(of: ")") {
            let inside = t[t.index(after: open)..<close]
            let numbers = inside.split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
            if numbers.allSatisfy({ $0 != nil }) { params = numbers.compactMap { $0 } }
            t = String(t[..<open]) + " " + String(t[t.index(after: close)...])
        }
        var words = t.split(separator: " ").map(String.init)
        unsigned = words.contains("unsigned")
        words.removeAll { $0 == "unsigned" || $0 == "signed" || $0 == "zerofill" }
        let joined = words.joined(separator: " ")
        base = (Self.aliases[joined] ?? joined) + arraySuffix
        parameters = params
    }

    public var description: String {
        base + (parameters.isEmpty ? "" : "(" + parameters.map(String.init).joined(separator: ",") + ")")
            + (unsigned ? " unsigned" : "")
    }

    /// Other spellings of one type, folded to the name on the right.
    static let aliases: [String: String] = [
        "int": "integer", "int4": "integer",
        "int8": "bigint", "int2": "smallint",
        "character varying": "varchar",
        "character": "char", "bpchar": "char",
        "bool": "boolean",
        "float8": "double", "double precision": "double",
        "float4": "real",
        "decimal": "numeric",
        "timestamp without time zone": "timestamp", "timestamp with time zone": "timestamptz",
        "time without time zone": "time", "time with time zone": "timetz",
        "bit varying": "varbit",
    ]

    /// True for text that can only be a type name: words, one parenthesised list of
    /// numbers, `[]` — never quotes, semicolons or comments. Native types a cast names are
    /// written into the target's DDL, so nothing else gets through.
    public static func isPlainDeclaration(_ text: String) -> Bool {
        text.range(
            of: #"^[A-Za-z][A-Za-z0-9_]*( [A-Za-z][A-Za-z0-9_]*)*( ?\( ?[0-9]+( ?, ?[0-9]+)? ?\))?( [A-Za-z][A-Za-z0-9_]*)*(\[\])*$"#,
            options: .regularExpression) != nil
    }
}
