import FerryCore
import Foundation

/// How to reach a service from its http(s) URL, whatever carries the requests: the base that
/// request targets are appended to, the bearer token and whether answers may come compressed.
/// The token comes from the `token-file` driver option, else the URL's password, else
/// FERRY_TOKEN; it is never part of `base`.
public struct ServiceAddress: Sendable {
    public let endpoint: Endpoint
    /// `scheme://host[:port]/prefix/`.
    public let base: String
    public let token: String?
    /// Whether answers may come gzip-compressed (`compress=`; by default not from a loopback
    /// host, where compressing costs the service more time than the bytes it saves).
    public let compress: Bool
    /// A CA certificate file (PEM) the service's certificate may be signed by, trusted beside
    /// the system's (`--ca-file`, `ca-file=`): a service with a CA of its own is verified,
    /// never accepted unverified.
    public let caFile: String?

    public init(endpoint: Endpoint) throws {
        self.endpoint = endpoint
        guard let host = endpoint.host else {
            throw FerryError.invalidEndpoint(text: endpoint.redacted, reason: "no host: write http://host:8080/")
        }
        let hostPart = host.contains(":") ? "[\(host)]" : host
        var prefix = endpoint.path
        if !prefix.isEmpty && !prefix.hasSuffix("/") { prefix += "/" }
        base = "\(endpoint.scheme)://\(hostPart)" + (endpoint.port.map { ":\($0)" } ?? "") + "/" + prefix
        // An explicit token file wins, then the URL's password, then FERRY_TOKEN.
        var token: String?
        if let file = endpoint.options["token-file"] ?? endpoint.parameter("token-file") {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                throw FerryError.invalidOption("cannot read the token file \(file)")
            }
            token = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
                .first { !$0.isEmpty && !$0.hasPrefix("#") }
            guard token != nil else { throw FerryError.invalidOption("the token file \(file) holds no token") }
        }
        self.token = token ?? endpoint.password.flatMap { $0.isEmpty ? nil : $0 } ?? ProcessInfo.processInfo.environment["FERRY_TOKEN"]
        caFile = endpoint.options["ca-file"] ?? endpoint.parameter("ca-file")
        if let caFile {
            guard endpoint.scheme.lowercased() == "https" else {
                throw FerryError.invalidOption("--ca-file \(caFile) is for https:// services; \(endpoint.redacted) is not encrypted")
            }
            guard FileManager.default.isReadableFile(atPath: caFile) else {
                throw FerryError.invalidOption("cannot read the CA file \(caFile) (--ca-file: a PEM certificate)")
            }
        }
        switch endpoint.parameter("compress")?.lowercased() {
        case nil, "auto": compress = !Self.isLoopback(host)
        case "gzip": compress = true
        case "none": compress = false
        case let other?:
            throw FerryError.invalidOption("compress=\(other.prefix(20)) in \(endpoint.redacted): write compress=gzip, compress=none or compress=auto")
        }
    }

    /// `localhost`, 127.0.0.0/8 and ::1: a service on this machine.
    public static func isLoopback(_ host: String) -> Bool {
        let h = host.lowercased()
        if h == "localhost" || h == "::1" || h == "[::1]" || h.hasSuffix(".localhost") { return true }
        let parts = h.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    /// The headers of every request: what it accepts, its body's type, the token.
    public func headers(hasBody: Bool) -> [(String, String)] {
        var out = [("Accept", "application/xml")]
        if hasBody { out.append(("Content-Type", "application/xml; charset=utf-8")) }
        if let token { out.append(("Authorization", "Bearer \(token)")) }
        out.append(("Accept-Encoding", compress ? "gzip" : "identity"))
        return out
    }

    public var unauthorizedAdvice: String {
        "the service refused the token (401): give it as http://:TOKEN@host/, FERRY_TOKEN or --token-file"
    }

    public func unanswered(_ failure: HTTPTransportError?) -> FerryError {
        FerryError.connectionFailed(
            endpoint: endpoint.redacted,
            reason: "the service did not answer: \(failure?.reason ?? "no response"); \(failure?.advice ?? "check the URL and that `ferry serve` runs")")
    }
}
