import FerryCore
import Foundation

/// The client of Ferry's XML service (schemes `http` and `https`): a service URL works as a
/// source or a target like any database. The token comes from the file given as the
/// `token-file` driver option (`--token-file`), else the URL's password
/// (`http://:TOKEN@host:8080/`), else FERRY_TOKEN.
///
/// `HTTPDriver()` carries the requests on URLSession; `HTTPDriver.standard` (FerryHTTPClient)
/// on the platform's best transport — async-http-client on Linux — and is what Ferry uses.
public struct HTTPDriver: Driver {
    public static let name = Engine.http.rawValue
    let transport: @Sendable (Endpoint) throws -> any ProtocolTransport

    public init() {
        transport = { try URLSessionTransport(endpoint: $0) }
    }

    /// The driver with requests carried by the transport `transport` makes for an endpoint.
    public init(transport: @escaping @Sendable (Endpoint) throws -> any ProtocolTransport) {
        self.transport = transport
    }
    public var name: String { Self.name }
    public var options: [DriverOption] {
        [DriverOption(name: "token-file", summary: "read the bearer token from this file (first line)"),
         DriverOption(name: "ca-file", summary: "trust a service certificate signed by this CA (PEM), beside the system's CAs"),
         DriverOption(name: "timeout", summary: "seconds without a byte from the service before a request fails (default 300)"),
         DriverOption(name: "retries", summary: "times a request the service answered 503 (busy, unavailable) is asked again, with backoff (default 0)")]
    }
    public var schemes: [String] { ["http", "https"] }
    public var dialect: any Dialect { HTTPDialect() }

    public func connect(_ endpoint: Endpoint, role: ConnectionRole) throws -> any Connection {
        try HTTPConnection(transport: transport(endpoint))
    }
}

