import Foundation

/// A parsed database URL: `sqlite:path/to/file.db`, `sqlite:///abs/path.db`,
/// `postgres://user:pw@host:5432/db?sslmode=require`, `mysql://user@host:3306/db`,
/// `http://:token@host:8080/`. The password is kept, but never printed: `description` and
/// `redacted` mask it.
public struct Endpoint: Sendable, Hashable, CustomStringConvertible {
    /// Lowercased scheme without the colon (`sqlite`, `postgres`, …).
    public var scheme: String
    public var user: String?
    public var password: String?
    public var host: String?
    public var port: Int?
    /// For sqlite: the file path. For servers: the path after the host, without its leading `/`
    /// (the database name).
    public var path: String
    /// Query parameters in the order given.
    public var parameters: [(String, String)] {
        get { parameterPairs.map { ($0.name, $0.value) } }
        set { parameterPairs = newValue.map { Parameter(name: $0.0, value: $0.1) } }
    }
    private var parameterPairs: [Parameter] = []
    /// Driver options given as values (`DriverOption`), not part of the URL: never printed.
    public var options: [String: String] = [:]
    /// The URL exactly as written, for a scheme no built-in driver parses (a driver plugin's:
    /// `csv:data/`, `jsonl://host/x?opt=1`), handed to the plugin as it is. Never printed.
    public var raw: String?
    /// True for a URL without `//` after its scheme (`csv:data/`): only `raw` says what it means.
    public var isOpaque = false

    /// Schemes whose URLs always name a host (`scheme://host…`): a URL of one without `//` is a
    /// mistake to report, not an opaque URL for a plugin.
    public static let hostSchemes: Set<String> = ["postgres", "postgresql", "mysql", "mariadb", "http", "https"]

    private struct Parameter: Hashable, Sendable {
        var name: String
        var value: String
    }

    public init(
        scheme: String, user: String? = nil, password: String? = nil, host: String? = nil, port: Int? = nil,
        path: String, parameters: [(String, String)] = []
    ) {
        self.scheme = scheme
        self.user = user
        self.password = password
        self.host = host
        self.port = port
        self.path = path
        self.parameters = parameters
    }

    /// The first value of query parameter `name`.
    public func parameter(_ name: String) -> String? {
        parameterPairs.first { $0.name == name }?.value
    }

    /// Parses a URL as users write them. Throws `FerryError.invalidEndpoint` with the text
    /// redacted.
    public init(parsing text: String) throws {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard let colon = trimmed.firstIndex(of: ":"), colon != trimmed.startIndex else {
            throw FerryError.invalidEndpoint(
                text: Endpoint.redact(trimmed),
                reason: "no scheme; write sqlite:\(trimmed) for a SQLite file or a full URL for a server")
        }
        let scheme = trimmed[..<colon].lowercased()
        guard scheme.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "+" || $0 == "-" || $0 == "." }),
              scheme.first?.isLetter == true
        else {
            throw FerryError.invalidEndpoint(text: Endpoint.redact(trimmed), reason: "'\(scheme)' is not a URL scheme")
        }
        let rest = trimmed[trimmed.index(after: colon)...]
        if scheme == "sqlite" || scheme == "file" {
            // sqlite:relative/path, sqlite:/abs, sqlite:///abs, sqlite://relative (host-less forms)
            var path = String(rest)
            if path.hasPrefix("///") { path.removeFirst(2) } else if path.hasPrefix("//") { path.removeFirst(2) }
            var params: [(String, String)] = []
            if let q = path.firstIndex(of: "?") {
                params = Endpoint.parseQuery(String(path[path.index(after: q)...]))
                path = String(path[..<q])
            }
            path = path.removingPercentEncoding ?? path
            guard !path.isEmpty else {
                throw FerryError.invalidEndpoint(text: trimmed, reason: "no file path after 'sqlite:'")
            }
            self.init(scheme: "sqlite", path: path, parameters: params)
            return
        }
        guard rest.hasPrefix("//") else {
            guard !Endpoint.hostSchemes.contains(scheme) else {
                throw FerryError.invalidEndpoint(
                    text: Endpoint.redact(trimmed), reason: "expected \(scheme)://host after the scheme")
            }
            // Opaque (`csv:data/`): a plugin's to read.
            guard !rest.isEmpty else {
                throw FerryError.invalidEndpoint(text: trimmed, reason: "nothing after '\(scheme):'")
            }
            var path = String(rest)
            var params: [(String, String)] = []
            if let q = path.firstIndex(of: "?") {
                params = Endpoint.parseQuery(String(path[path.index(after: q)...]))
                path = String(path[..<q])
            }
            self.init(scheme: scheme, path: path, parameters: params)
            raw = trimmed
            isOpaque = true
            return
        }
        var remainder = String(rest.dropFirst(2))
        var params: [(String, String)] = []
        if let q = remainder.firstIndex(of: "?") {
            params = Endpoint.parseQuery(String(remainder[remainder.index(after: q)...]))
            remainder = String(remainder[..<q])
        }
        var authority = remainder
        var path = ""
        if let slash = remainder.firstIndex(of: "/") {
            authority = String(remainder[..<slash])
            path = String(remainder[remainder.index(after: slash)...])
        }
        var user: String?
        var password: String?
        var hostPort = authority
        if let at = authority.lastIndex(of: "@") {
            let userInfo = authority[..<at]
            hostPort = String(authority[authority.index(after: at)...])
            if let c = userInfo.firstIndex(of: ":") {
                user = String(userInfo[..<c]).removingPercentEncoding
                password = String(userInfo[userInfo.index(after: c)...]).removingPercentEncoding
            } else {
                user = String(userInfo).removingPercentEncoding
            }
            if user == "" { user = nil }
        }
        var host = hostPort
        var port: Int?
        if hostPort.hasPrefix("[") {  // [::1]:5432
            guard let close = hostPort.firstIndex(of: "]") else {
                throw FerryError.invalidEndpoint(text: Endpoint.redact(trimmed), reason: "unclosed '[' in the host")
            }
            host = String(hostPort[hostPort.index(after: hostPort.startIndex)..<close])
            let after = hostPort[hostPort.index(after: close)...]
            if after.hasPrefix(":") {
                guard let p = Int(after.dropFirst()), (1...65535).contains(p) else {
                    throw FerryError.invalidEndpoint(text: Endpoint.redact(trimmed), reason: "the port must be a number from 1 to 65535")
                }
                port = p
            }
        } else if let c = hostPort.lastIndex(of: ":") {
            host = String(hostPort[..<c])
            let portText = hostPort[hostPort.index(after: c)...]
            if !portText.isEmpty {
                guard let p = Int(portText), (1...65535).contains(p) else {
                    throw FerryError.invalidEndpoint(
                        text: Endpoint.redact(trimmed), reason: "the port '\(portText)' must be a number from 1 to 65535")
                }
                port = p
            }
        }
        self.init(
            scheme: scheme, user: user, password: password, host: host.isEmpty ? nil : host.removingPercentEncoding,
            port: port, path: path.removingPercentEncoding ?? path, parameters: params)
        if !Endpoint.hostSchemes.contains(scheme) { raw = trimmed }
    }

    private static func parseQuery(_ q: String) -> [(String, String)] {
        q.split(separator: "&").map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1)
            let name = String(parts[0]).removingPercentEncoding ?? String(parts[0])
            let value = parts.count > 1 ? (String(parts[1]).removingPercentEncoding ?? String(parts[1])) : ""
            return (name, value)
        }
    }

    /// Masks a password in URL text that may not even parse (for error messages).
    public static func redact(_ text: String) -> String {
        guard let schemeEnd = text.range(of: "://") else { return text }
        let afterScheme = text[schemeEnd.upperBound...]
        let authorityEnd = afterScheme.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? afterScheme.endIndex
        let authority = afterScheme[..<authorityEnd]
        guard let at = authority.lastIndex(of: "@"), let colon = authority[..<at].firstIndex(of: ":") else { return text }
        return String(text[..<authority.index(after: colon)]) + "****" + String(text[at...])
    }

    /// The URL with the password replaced by `****`: the only form Ferry ever prints.
    public var redacted: String {
        if isOpaque { return scheme + ":" + path + maskedQuery }
        if scheme == "sqlite" {
            let q = parameterPairs.isEmpty ? "" : "?" + parameterPairs.map { "\($0.name)=\($0.value)" }.joined(separator: "&")
            return "sqlite:" + path + q
        }
        var s = scheme + "://"
        if user != nil || password != nil {
            s += user ?? ""
            if password != nil { s += ":****" }
            s += "@"
        }
        if let host { s += host.contains(":") ? "[\(host)]" : host }
        if let port { s += ":\(port)" }
        s += "/" + path
        return s + maskedQuery
    }

    /// `?name=value&…` with the values of secret parameters masked ("" without parameters).
    private var maskedQuery: String {
        let visible = parameterPairs.map { p -> String in
            let secret = ["password", "sslpassword", "token"].contains(p.name.lowercased())
            return "\(p.name)=\(secret ? "****" : p.value)"
        }
        return visible.isEmpty ? "" : "?" + visible.joined(separator: "&")
    }

    public var description: String { redacted }

    public static func == (a: Endpoint, b: Endpoint) -> Bool {
        a.scheme == b.scheme && a.user == b.user && a.password == b.password && a.host == b.host
            && a.port == b.port && a.path == b.path && a.parameterPairs == b.parameterPairs && a.options == b.options
            && a.raw == b.raw
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(scheme)
        hasher.combine(host)
        hasher.combine(port)
        hasher.combine(path)
    }
}

extension Endpoint {
    /// Where a mirror's digests of this server are computed (`?digests=`): true for `read` —
    /// every row's hash read or listed to Ferry, the default for a server on this machine
    /// (`onThisMachine`: a loopback host or a Unix socket), where that costs no network — false
    /// for `sql`, digests in the server's SQL, the default for another host, so that no table
    /// crosses the network. `engine` names the server in the refusal of any other value.
    public func digestsBesideFerry(onThisMachine: Bool, engine: String) throws -> Bool {
        switch parameter("digests")?.lowercased() {
        case "read": return true
        case "sql": return false
        case nil: return onThisMachine
        case let other?:
            throw FerryError.invalidEndpoint(
                text: redacted, reason: "digests=\(other) is not a choice: digests=read (rows' hashes read beside Ferry) or digests=sql (digests in \(engine)'s SQL)")
        }
    }

    /// True for a host name or address on this machine (`localhost`, 127.x.x.x, ::1).
    public static func isLoopback(_ host: String) -> Bool {
        let h = host.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return h == "localhost" || h == "::1" || h.hasPrefix("127.")
    }
}
