/// A setting a driver takes besides its URL (the file holding a service token, how to read
/// MySQL zero dates, …). Each driver declares the options it understands; the CLI and the
/// library hand them over as values on `Endpoint.options`, never inside the URL, so a URL Ferry
/// prints never carries them.
public struct DriverOption: Sendable, Hashable {
    /// The option's name as the command line spells it without dashes (`token-file`).
    public let name: String
    /// One line saying what it does, for help and errors.
    public let summary: String

    public init(name: String, summary: String) {
        self.name = name
        self.summary = summary
    }
}

extension Driver {
    /// No options unless the driver declares some.
    public var options: [DriverOption] { [] }
}

extension DriverRegistry {
    /// `endpoint` with those of `values` that its driver declares (`Driver.options`) set on
    /// `Endpoint.options`; the others are left out, so one `--token-file` can be given for a
    /// copy whose other side is not a service.
    public func applying(_ values: [String: String], to endpoint: Endpoint) throws -> Endpoint {
        let declared = Set(try driver(for: endpoint).options.map(\.name))
        var e = endpoint
        for (name, value) in values where declared.contains(name) { e.options[name] = value }
        return e
    }
}
