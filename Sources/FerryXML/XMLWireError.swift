import FerryCore

/// What can be wrong with an XML document of Ferry's protocol. Each case is one line naming
/// where (element, row, column) and what.
public enum XMLWireError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Not well-formed XML (the parser's message and line).
    case malformed(String, line: Int)
    /// A DOCTYPE or entity declaration: never accepted (no DTDs, no external entities, no expansion).
    case forbiddenDeclaration
    /// Too deep, too many elements, or too large.
    case limitExceeded(String)
    /// Well-formed XML that does not follow the protocol.
    case unexpected(String)
    /// A value whose text is not a valid form of its column's type.
    case badValue(row: Int, column: String, message: String)

    public var description: String {
        switch self {
        case let .malformed(m, line): return "malformed XML at line \(line): \(m)"
        case .forbiddenDeclaration: return "XML with a DOCTYPE or ENTITY declaration is refused (no DTDs, no external entities)"
        case let .limitExceeded(m): return "XML document refused: \(m)"
        case let .unexpected(m): return "unexpected XML: \(m)"
        case let .badValue(row, column, message): return "row \(row + 1), column \(column): \(message)"
        }
    }
}

/// Bounds the decoder enforces on every document.
public struct XMLLimits: Sendable {
    public var maxDepth = 16
    public var maxElements = 50_000_000
    public var maxValueBytes = 256 << 20
    public init() {}
}
