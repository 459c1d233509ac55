import FerryCore
import Foundation

/// The short documents of the protocol besides schemas, tables and rows: counts, snapshots,
/// applied counts, digests, push status and capabilities, written by the service and read by
/// the client from one place.
extension XMLDocuments {
    /// `<count rows="N"/>`
    public static func count(_ rows: Int64) -> Data {
        Data("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<count rows=\"\(rows)\"/>\n".utf8)
    }

    public static func decodeCount(_ data: Data) throws -> Int64 {
        guard let n = try XMLTree.parse(data).attributes["rows"].flatMap({ Int64($0) }) else {
            throw XMLWireError.unexpected("<count> without rows")
        }
        return n
    }

    /// `<snapshot id="…" idle-seconds="…" lifetime-seconds="…"/>`
    public static func snapshot(id: String, idleSeconds: Int, lifetimeSeconds: Int) -> Data {
        var out = declaration
        out.append(contentsOf: "<snapshot".utf8)
        attr("id", id, into: &out)
        attr("idle-seconds", String(idleSeconds), into: &out)
        attr("lifetime-seconds", String(lifetimeSeconds), into: &out)
        out.append(contentsOf: "/>\n".utf8)
        return Data(out)
    }

    public static func decodeSnapshotID(_ data: Data) throws -> String {
        guard let id = try XMLTree.parse(data).attributes["id"], !id.isEmpty else { throw XMLWireError.unexpected("<snapshot> without id") }
        return id
    }

    /// `<applied k="n" …/>`: what a request did.
    public static func applied(_ counts: [(String, Int)]) -> Data {
        var out = declaration
        out.append(contentsOf: "<applied".utf8)
        for (k, v) in counts { attr(k, String(v), into: &out) }
        out.append(contentsOf: "/>\n".utf8)
        return Data(out)
    }

    /// The counts of an `<applied>` document (0 for one not given).
    public static func decodeApplied(_ data: Data) throws -> [String: Int64] {
        try XMLTree.parse(data).attributes.compactMapValues { Int64($0) }
    }

    /// `<digests modulus="M"><b n rows s0 s1/>…</digests>`, whole (tests, short answers).
    public static func digests(modulus: Int64, _ list: [BucketDigest]) -> Data {
        var out = Data()
        var writer = DigestsWriter(modulus: modulus, list)
        while let piece = writer.next() { out.append(contentsOf: piece) }
        return out
    }

    /// The buckets of a `<digests>` document.
    public static func decodeDigests(_ data: Data) throws -> [BucketDigest] {
        var decoder = DigestsStreamDecoder()
        try decoder.feed(data)
        return try decoder.finish()
    }

    /// `<push id="…" committed="true|false"/>`
    public static func pushStatus(id: String, committed: Bool) -> Data {
        var out = declaration
        out.append(contentsOf: "<push".utf8)
        attr("id", id, into: &out)
        attr("committed", String(committed), into: &out)
        out.append(contentsOf: "/>\n".utf8)
        return Data(out)
    }

    public static func decodePushStatus(_ data: Data) throws -> Bool {
        switch try XMLTree.parse(data).attributes["committed"] {
        case "true": return true
        case "false": return false
        default: throw XMLWireError.unexpected("<push> without committed=\"true|false\"")
        }
    }

    /// What a service or plugin announces: its protocol version, name, version and capabilities.
    public struct CapabilitiesReport: Sendable, Equatable {
        public var protocolVersion: Int
        public var name: String
        public var version: String
        public var capabilities: Capabilities
        /// Capability names this build of Ferry does not know (a newer plugin): kept, not used.
        public var unknown: [String]
        /// The engine whose stored form the served database reads and writes (`native=`
        /// columns, `Dialect.keepsStoredForm`): a copy from or into another database of that
        /// engine keeps every value as stored. nil when values travel in canonical forms only.
        public var storedForm: Engine?
        /// The largest request body the service takes, in bytes (`--max-body-mb`); nil when it
        /// does not say (clients then keep their requests well below 64 MiB, the default).
        public var maxBody: Int?
        /// The largest rows load one streamed `POST …/rows` may carry, in bytes
        /// (`--max-load-mb`): such a body is decoded and written as it arrives, never held, so
        /// its bound is the size of one transaction rather than memory. nil when the service
        /// does not say (its `max-body` then bounds loads too).
        public var maxLoad: Int?
        /// A driver plugin that keeps each response's body within the windows Ferry gives it
        /// (`flow-control="windows"`, docs/plugins.md): Ferry then asks it for pages of any size,
        /// since a stream it does not read holds at most its window in memory.
        public var windows: Bool
        public init(protocolVersion: Int = ProtocolRoute.version, name: String, version: String, capabilities: Capabilities, unknown: [String] = [],
                    storedForm: Engine? = nil, maxBody: Int? = nil, maxLoad: Int? = nil, windows: Bool = false) {
            self.protocolVersion = protocolVersion
            self.name = name
            self.version = version
            self.capabilities = capabilities
            self.unknown = unknown
            self.storedForm = storedForm
            self.maxBody = maxBody
            self.maxLoad = maxLoad
            self.windows = windows
        }
    }

    /// `<capabilities protocol="1" name version [stored-form="sqlite"] [max-body="N"] [max-load="N"]><capability name="…"/>…</capabilities>`
    public static func capabilities(_ report: CapabilitiesReport) -> Data {
        var out = declaration
        out.append(contentsOf: "<capabilities".utf8)
        attr("protocol", String(report.protocolVersion), into: &out)
        attr("name", report.name, into: &out)
        attr("version", report.version, into: &out)
        if let engine = report.storedForm { attr("stored-form", engine.rawValue, into: &out) }
        if let bytes = report.maxBody { attr("max-body", String(bytes), into: &out) }
        if let bytes = report.maxLoad { attr("max-load", String(bytes), into: &out) }
        if report.windows { attr("flow-control", "windows", into: &out) }
        out.append(contentsOf: ">\n".utf8)
        for name in report.capabilities.list + report.unknown {
            out.append(contentsOf: "  <capability".utf8)
            attr("name", name, into: &out)
            out.append(contentsOf: "/>\n".utf8)
        }
        out.append(contentsOf: "</capabilities>\n".utf8)
        return Data(out)
    }

    /// Reads a `<capabilities>` document; throws `XMLWireError` for anything else.
    public static func decodeCapabilities(_ data: Data) throws -> CapabilitiesReport {
        let root = try XMLTree.parse(data)
        guard root.name == "capabilities" else { throw XMLWireError.unexpected("<\(root.name)> where <capabilities> was expected") }
        guard let p = root.attributes["protocol"], let version = Int(p) else {
            throw XMLWireError.unexpected("<capabilities> without protocol=\"N\"")
        }
        var caps: Capabilities = []
        var unknown: [String] = []
        for c in root.children("capability") {
            let name = c.attributes["name"] ?? c.text
            if let known = Capabilities.names.first(where: { $0.0 == name }) { caps.insert(known.1) } else { unknown.append(name) }
        }
        return CapabilitiesReport(
            protocolVersion: version, name: root.attributes["name"] ?? "", version: root.attributes["version"] ?? "",
            capabilities: caps, unknown: unknown, storedForm: root.attributes["stored-form"].flatMap { $0.isEmpty ? nil : Engine($0) },
            maxBody: root.attributes["max-body"].flatMap { Int($0) }.flatMap { $0 > 0 ? $0 : nil },
            maxLoad: root.attributes["max-load"].flatMap { Int($0) }.flatMap { $0 > 0 ? $0 : nil },
            windows: root.attributes["flow-control"] == "windows")
    }
}
