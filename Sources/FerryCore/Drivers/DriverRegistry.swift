/// Maps URL schemes to drivers: the one place the CLI and the server find drivers.
public struct DriverRegistry: Sendable {
    private var byScheme: [String: any Driver] = [:]
    private var order: [String] = []
    /// Finds a driver for a scheme no registered driver serves (the CLI's driver plugins,
    /// `ferry-driver-SCHEME`); nil when there is none. Injected, so that the core spawns nothing.
    public var fallback: (@Sendable (String) throws -> (any Driver)?)?
    /// Says where drivers for unknown schemes were looked for, for the error.
    public var fallbackHint: String?

    public init(_ drivers: [any Driver] = []) {
        for d in drivers { register(d) }
    }

    /// Adds `driver` for each of its schemes; a later registration replaces an earlier one.
    public mutating func register(_ driver: any Driver) {
        for scheme in driver.schemes {
            if byScheme[scheme] == nil { order.append(scheme) }
            byScheme[scheme] = driver
        }
    }

    /// Schemes known, in registration order.
    public var schemes: [String] { order }

    public func driver(for endpoint: Endpoint) throws -> any Driver {
        if let d = byScheme[endpoint.scheme] { return d }
        if let fallback, let d = try fallback(endpoint.scheme) { return d }
        throw FerryError.unknownScheme(scheme: endpoint.scheme, known: order, hint: fallbackHint)
    }

    /// Parses `url` and connects with the driver serving its scheme.
    public func connect(_ url: String, role: ConnectionRole) throws -> any Connection {
        try connect(Endpoint(parsing: url), role: role)
    }

    public func connect(_ endpoint: Endpoint, role: ConnectionRole) throws -> any Connection {
        try driver(for: endpoint).connect(endpoint, role: role)
    }
}
