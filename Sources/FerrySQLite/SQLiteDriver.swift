import FerryCore

extension Engine {
    public static let sqlite = Engine("sqlite")
}

/// The SQLite driver (scheme `sqlite:`), on the system's libsqlite3.
public struct SQLiteDriver: Driver {
    public static let name = Engine.sqlite.rawValue
    public init() {}
    public var name: String { Self.name }
    public var schemes: [String] { ["sqlite"] }
    public var dialect: any Dialect { SQLiteDialect() }

    public func connect(_ endpoint: Endpoint, role: ConnectionRole) throws -> any Connection {
        try SQLiteConnection(endpoint: endpoint, role: role)
    }
}
