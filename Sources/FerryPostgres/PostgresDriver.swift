import FerryCore

extension Engine {
    public static let postgres = Engine("postgres")
}

/// The PostgreSQL driver (schemes `postgres` and `postgresql`), on libpq.
public struct PostgresDriver: Driver {
    public static let name = Engine.postgres.rawValue
    public init() {}
    public var name: String { Self.name }
    public var schemes: [String] { ["postgres", "postgresql"] }
    public var dialect: any Dialect { PostgresDialect() }

    public var options: [DriverOption] {
        [DriverOption(name: "timeout", summary: "seconds a wait for the server may last (an answer, the next rows, room to send): a stalled connection fails")]
    }

    public func connect(_ endpoint: Endpoint, role: ConnectionRole) throws -> any Connection {
        try PostgresConnection(endpoint: endpoint, role: role)
    }
}
