import Foundation

/// A table's qualified name: an optional schema (PostgreSQL schema, MySQL database,
/// SQLite attached database) and the table's own name, both exactly as the catalog spells them.
///
/// `schema == nil` means "the connection's default schema".
public struct TableName: Hashable, Sendable, Codable, CustomStringConvertible, Comparable {
    public var schema: String?
    public var name: String

    public init(schema: String? = nil, _ name: String) {
        self.schema = schema
        self.name = name
    }

    /// Parses what a user types: `name` or `schema.name`. A name holding a dot can be written
    /// with double quotes (`"my.table"`, `main."my.table"`), with `""` for a quote inside.
    public init(parsing text: String) {
        var parts: [String] = []
        var current = ""
        var quoted = false
        var chars = Array(text)[...]
        while let c = chars.popFirst() {
            if quoted {
                if c == "\"" {
                    if chars.first == "\"" { current.append("\""); chars.removeFirst() } else { quoted = false }
                } else {
                    current.append(c)
                }
            } else if c == "\"" && current.isEmpty {
                quoted = true
            } else if c == "." && parts.isEmpty {
                parts.append(current)
                current = ""
            } else {
                current.append(c)
            }
        }
        if parts.isEmpty {
            self.init(current)
        } else {
            self.init(schema: parts[0], current)
        }
    }

    /// `schema.name`, or `name` when the schema is the default one.
    public var description: String {
        func show(_ s: String) -> String {
            s.contains(".") || s.contains("\"") ? "\"" + s.replacingOccurrences(of: "\"", with: "\"\"") + "\"" : s
        }
        if let schema { return show(schema) + "." + show(name) }
        return show(name)
    }

    /// The same name with the schema dropped, for targets that place tables in their own default schema.
    public var unqualified: TableName { TableName(name) }

    public static func < (lhs: TableName, rhs: TableName) -> Bool {
        (lhs.schema ?? "", lhs.name) < (rhs.schema ?? "", rhs.name)
    }

    /// True when `pattern` (as a user typed it) names this table: `name` matches in any schema,
    /// `schema.name` matches exactly. Comparison is exact first, then case-insensitive.
    public func matches(_ pattern: TableName) -> Bool {
        if let ps = pattern.schema, ps != (schema ?? ps) { return false }
        return pattern.name == name
    }
}
