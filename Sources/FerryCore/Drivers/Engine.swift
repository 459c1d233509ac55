/// Which engine a schema, a dialect or a driver belongs to (`sqlite`, `postgres`, `mysql`,
/// `http`, or a plugin's own): a typed name, so code compares engines, never loose strings.
/// Each driver declares its own constant (`Engine.sqlite` lives in FerrySQLite); nothing
/// outside a driver branches on which engine it is — it asks the `Dialect` instead.
public struct Engine: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ name: String) { self.rawValue = name }
    public var description: String { rawValue }
}
