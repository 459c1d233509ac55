import FerryCore

/// The `csv:` driver: a folder of CSV files, one table per file (see `CSVConnection`).
///
/// | URL | folder |
/// |---|---|
/// | `csv:DIR` | `DIR` exactly as written, relative to the working folder or absolute |
/// | `csv:///abs/dir` | `/abs/dir` |
/// | `csv://host/dir` | `/dir`: the host (and any user or password) is ignored |
public struct CSVDriver: Driver {
    /// What the driver can do: everything but guarded multi-table pushes (a commit renames one
    /// file after another, which is not atomic across tables).
    public static let capabilities: Capabilities = [.source, .target, .keyedReads, .digests, .snapshots, .keyedWrites]

    public init() {}
    public var name: String { "csv" }
    public var schemes: [String] { ["csv"] }
    public var dialect: any Dialect { CSVDialect() }

    public func connect(_ endpoint: Endpoint, role: ConnectionRole) throws -> any Connection {
        try CSVConnection(endpoint: endpoint, directory: try Self.directory(of: endpoint), role: role)
    }

    /// The folder a URL names. Ferry hands the plugin the URL as written; for the opaque form
    /// (`csv:data/`) the path is everything after the colon, for `csv://…` it is the path after
    /// the host, from the root.
    public static func directory(of endpoint: Endpoint) throws -> String {
        let path = endpoint.isOpaque ? endpoint.path : "/" + endpoint.path
        guard !path.isEmpty, path != "/" else {
            throw FerryError.connectionFailed(
                endpoint: endpoint.redacted, reason: "the URL names no folder; write csv:DIR (relative or absolute) or csv:///absolute/dir")
        }
        return path
    }
}
