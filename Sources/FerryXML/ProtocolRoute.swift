import FerryCore
import Foundation

/// The protocol's endpoints (docs/xml-protocol.md), one list for both sides: the service maps
/// each onto its handler, the client builds its request targets from them, and a driver plugin
/// (docs/plugins.md) matches the requests it reads on stdin against them.
public enum ProtocolRoute: String, CaseIterable, Sendable {
    case capabilities, tables, createTable, schema, dropTable, count, readRows, insertRows, digests
    case createSnapshot, releaseSnapshot, objects, indexes, foreignKeys
    case merge, swap, apply, changes, resetSerial, push, pushStatus
    case startFeed, readFeed, feedPosition, feedLag, dropFeed
    case replicaState, applyReplica, dropReplica, addColumn

    /// The protocol version this build speaks (the `protocol` of `<capabilities>`).
    public static let version = 1

    /// HTTP method.
    public var method: String {
        switch self {
        case .capabilities, .tables, .schema, .count, .readRows, .digests, .objects, .pushStatus: return "GET"
        case .readFeed, .feedPosition, .feedLag, .replicaState: return "GET"
        case .dropTable, .releaseSnapshot, .dropFeed, .dropReplica: return "DELETE"
        default: return "POST"
        }
    }

    /// The path, with `:table` and `:id` where a parameter goes.
    public var pattern: String {
        switch self {
        case .capabilities: return "/v1/capabilities"
        case .tables, .createTable: return "/v1/tables"
        case .schema, .dropTable: return "/v1/tables/:table"
        case .count: return "/v1/tables/:table/count"
        case .readRows, .insertRows: return "/v1/tables/:table/rows"
        case .digests: return "/v1/tables/:table/digests"
        case .createSnapshot: return "/v1/snapshots"
        case .releaseSnapshot: return "/v1/snapshots/:id"
        case .objects: return "/v1/objects"
        case .indexes: return "/v1/tables/:table/indexes"
        case .foreignKeys: return "/v1/tables/:table/foreign-keys"
        case .merge: return "/v1/tables/:table/merge"
        case .swap: return "/v1/tables/:table/swap"
        case .apply: return "/v1/tables/:table/apply"
        case .changes: return "/v1/tables/:table/changes"
        case .resetSerial: return "/v1/tables/:table/reset-serial"
        case .push: return "/v1/push"
        case .pushStatus: return "/v1/push/:id"
        case .startFeed: return "/v1/feeds"
        case .readFeed, .dropFeed: return "/v1/feeds/:id"
        case .feedPosition: return "/v1/feeds/:id/position"
        case .feedLag: return "/v1/feeds/:id/lag"
        case .replicaState, .dropReplica: return "/v1/replicas/:id"
        case .applyReplica: return "/v1/replicas/:id/transactions"
        case .addColumn: return "/v1/tables/:table/columns"
        }
    }

    /// Requests a read-only caller may make: every GET, holding or releasing a read snapshot,
    /// and starting or removing a change feed (which the service allows only to a manage
    /// token, or to any with `ferry serve --allow-feed`).
    public var isRead: Bool { method == "GET" || [.createSnapshot, .releaseSnapshot, .startFeed, .dropFeed].contains(self) }

    /// The request target relative to the service's base (no leading `/`), parameters
    /// percent-encoded: `v1/tables/Artist/rows`.
    public func target(table: TableName? = nil, id: String? = nil) -> String {
        var out = pattern
        if let table { out = out.replacingOccurrences(of: ":table", with: Self.escape(table.description)) }
        if let id { out = out.replacingOccurrences(of: ":id", with: Self.escape(id)) }
        return String(out.dropFirst())
    }

    /// The route `method` and `path` (no query) name, with its parameters as they appear in the
    /// path (percent-encoded); nil when none does.
    public static func match(method: String, path: String) -> (route: ProtocolRoute, parameters: [String: String])? {
        let segments = path.split(separator: "/", omittingEmptySubsequences: true)
        routes: for route in allCases where route.method == method {
            let pattern = route.pattern.split(separator: "/")
            guard pattern.count == segments.count else { continue }
            var parameters: [String: String] = [:]
            for (p, s) in zip(pattern, segments) {
                if p.hasPrefix(":") {
                    parameters[String(p.dropFirst())] = String(s)
                } else if p != s {
                    continue routes
                }
            }
            return (route, parameters)
        }
        return nil
    }

    /// Whether some route serves `path` with another method (405 rather than 404).
    public static func servesPath(_ path: String) -> Bool {
        ["GET", "POST", "DELETE"].contains { match(method: $0, path: path) != nil }
    }

    /// Percent-encodes one path segment.
    public static func escape(_ segment: String) -> String {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "/?#%&=+;")
        return segment.addingPercentEncoding(withAllowedCharacters: allowed) ?? segment
    }

    /// `?a=1&b=2`, values percent-encoded ("" for no items).
    public static func query(_ items: [(String, String)]) -> String {
        var allowed = CharacterSet.urlQueryAllowed
        allowed.remove(charactersIn: "&=+?#;/")
        let parts = items.map { "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: allowed) ?? $0.1)" }
        return parts.isEmpty ? "" : "?" + parts.joined(separator: "&")
    }

    /// Splits a query string (without `?`) into decoded name/value pairs, in order.
    public static func parseQuery(_ query: Substring) -> [(String, String)] {
        query.split(separator: "&").map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ s: Substring) -> String { s.removingPercentEncoding ?? String(s) }
            return (decode(parts[0]), parts.count > 1 ? decode(parts[1]) : "")
        }
    }
}
