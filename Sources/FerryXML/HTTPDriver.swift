import FerryCore
import Foundation

/// The client of Ferry's XML service (schemes `http` and `https`): a service URL works as a
/// source or a target like any database. The token comes from the file given as the
/// `token-file` driver option (`--token-file`), else the URL's password
/// (`http://:TOKEN@host:8080/`), else FERRY_TOKEN.
public struct HTTPDriver: Driver {
    public static let name = Engine.http.rawValue
    public init() {}
    public var name: String { Self.name }
    public var options: [DriverOption] {
        [DriverOption(name: "token-file", summary: "read the bearer token from this file (first line)")]
    }
    public var schemes: [String] { ["http", "https"] }
    public var dialect: any Dialect { HTTPDialect() }

    public func connect(_ endpoint: Endpoint, role: ConnectionRole) throws -> any Connection {
        try HTTPConnection(endpoint: endpoint)
    }
}

