import FerryCore

extension Engine {
    public static let mysql = Engine("mysql")
}

/// The MySQL/MariaDB driver (schemes `mysql` and `mariadb`), on libmariadb (Connector/C).
public struct MySQLDriver: Driver {
    public static let name = Engine.mysql.rawValue
    public init() {}
    public var name: String { Self.name }
    public var options: [DriverOption] {
        [DriverOption(name: "zero-dates", summary: "null: read 0000-00-00 dates as NULL instead of failing"),
         DriverOption(name: "timeout", summary: "seconds a read from or write to the server may wait (a stalled connection fails)")]
    }
    public var schemes: [String] { ["mysql", "mariadb"] }
    public var dialect: any Dialect { MySQLDialect() }

    public func connect(_ endpoint: Endpoint, role: ConnectionRole) throws -> any Connection {
        try MySQLConnection(endpoint: endpoint, role: role)
    }
}
