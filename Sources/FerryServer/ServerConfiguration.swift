import FerryCore
import FerryService
import Foundation

/// What `ferry serve` exposes and how: the database, who may read or write, limits, TLS.
public struct ServerConfiguration: Sendable {
    /// The database served (any registered driver).
    public var database: Endpoint
    public var registry: DriverRegistry
    /// Bearer tokens allowed everything: read, write rows, and create, drop or replace tables
    /// (scope `manage`; `--token-file`).
    public var readWriteTokens: [String]
    /// Bearer tokens allowed to read and write rows, change sets and pushes, but not to create,
    /// drop or replace served tables (scope `write`; `--write-token-file`).
    public var writeTokens: [String] = []
    /// Bearer tokens allowed to read only (scope `read`).
    public var readOnlyTokens: [String]
    /// The files the tokens came from, with their scope: read again when one changes (a token
    /// is rotated without a restart). Empty: the tokens are fixed.
    public var tokenFiles: [(path: String, scope: TokenScope)] = []
    /// Labels of tokens (token → label) from `LABEL TOKEN` lines.
    public var tokenLabels: [String: String] = [:]

    /// Every token with its scope.
    var scopedTokens: [(String, TokenScope)] {
        readWriteTokens.map { ($0, .manage) } + writeTokens.map { ($0, .write) } + readOnlyTokens.map { ($0, .read) }
    }
    /// Tables served (empty: every table the catalog lists).
    public var tables: [TableName]
    public var host: String
    public var port: Int
    public var tlsCertificate: String?
    public var tlsKey: String?
    /// Largest request body accepted (413 beyond) — of a document the service holds whole.
    public var maxBodyBytes: Int
    /// Largest rows load one streamed `POST …/rows` may carry (413 beyond; never held whole).
    public var maxLoadBytes: Int
    /// Rows per page when the client does not ask, and the most it may ask for.
    public var defaultPageRows: Int
    public var maxPageRows: Int
    /// Bytes of rows after which a page ends early (with `<next>`), whatever its row limit, so
    /// that neither side holds more than about this much plus one row per request.
    public var pageBytes: Int
    /// Read snapshots held for clients at once, and when an unused or old one ends.
    public var maxSnapshots = 16
    public var snapshotIdleSeconds: Double = 300
    public var snapshotLifetimeSeconds: Double = 3_600
    /// A client's transient staging table unused for this long is dropped (`--staging-idle-limit`).
    public var stagingIdleSeconds: Double = 1_800
    /// Any token may start and remove a change feed (`--allow-feed`), not only manage tokens.
    public var allowFeed = false
    /// Database connections requests hold at once (`--max-connections`; 0: no limit), and how
    /// long a request waits in line for one (`--connection-wait`) before 503 busy.
    public var maxConnections = 16
    /// Read snapshots one token may hold at once (`--max-snapshots-per-token`).
    public var maxSnapshotsPerToken = 8
    public var connectionWaitSeconds: Double = 30
    /// A client connection without a complete request for this long is closed (`--idle-timeout`).
    public var idleSeconds: Double = 300
    /// Whole request bodies held at once by all requests (`--max-bodies-mb`).
    public var maxHeldBodyBytes = 64 << 20
    /// Requests one token (one label) may have under way at once, their answers' bodies
    /// included (`--max-requests-per-token`; 0: no limit); more are answered 503 busy.
    public var maxRequestsPerToken = 0
    /// The served database has a change capture (PostgreSQL, MariaDB, SQLite): the service
    /// announces `change-feed`.
    public var followable = true

    public init(
        database: Endpoint, registry: DriverRegistry, readWriteTokens: [String], readOnlyTokens: [String] = [],
        writeTokens: [String] = [], tables: [TableName] = [], host: String = "127.0.0.1", port: Int = 8080, tlsCertificate: String? = nil, tlsKey: String? = nil,
        maxBodyBytes: Int = 64 << 20, maxLoadBytes: Int = 1 << 30, defaultPageRows: Int = 50_000, maxPageRows: Int = 1_000_000,
        pageBytes: Int = 8 << 20
    ) {
        self.pageBytes = pageBytes
        self.database = database
        self.registry = registry
        self.readWriteTokens = readWriteTokens
        self.readOnlyTokens = readOnlyTokens
        self.writeTokens = writeTokens
        self.tables = tables
        self.host = host
        self.port = port
        self.tlsCertificate = tlsCertificate
        self.tlsKey = tlsKey
        self.maxBodyBytes = maxBodyBytes
        self.maxLoadBytes = maxLoadBytes
        self.defaultPageRows = defaultPageRows
        self.maxPageRows = maxPageRows
    }

    /// Reads tokens from a file: one per line; blank lines and `#` comments ignored.
    public static func tokens(fromFile path: String) throws -> [String] {
        try labeledTokens(fromFile: path).map(\.token)
    }

    /// Reads a token file whose lines are `TOKEN` or `LABEL TOKEN`: a label names who holds the
    /// token (`laptop-anna`) in the audit log and owns that holder's loads, so that a token
    /// rotated under the same label keeps them. Labels are 1–64 letters, digits, `.`, `_`, `@`
    /// or `-`; a bare token's label is its fingerprint.
    public static func labeledTokens(fromFile path: String) throws -> [(token: String, label: String?)] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw FerryError.invalidOption("cannot read the token file \(path)")
        }
        var out: [(token: String, label: String?)] = []
        for (n, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !line.isEmpty, !line.hasPrefix("#") else { continue }
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            switch fields.count {
            case 1: out.append((fields[0], nil))
            case 2:
                guard isLabel(fields[0]) else {
                    throw FerryError.invalidOption("\(path):\(n + 1): a label is 1–64 letters, digits, '.', '_', '@' or '-' (LABEL TOKEN)")
                }
                out.append((fields[1], fields[0]))
            default:
                throw FerryError.invalidOption("\(path):\(n + 1): a line holds a token, or a label and a token (LABEL TOKEN)")
            }
        }
        guard !out.isEmpty else { throw FerryError.invalidOption("the token file \(path) holds no token") }
        guard out.allSatisfy({ $0.token.count >= 16 }) else {
            throw FerryError.invalidOption("tokens in \(path) must be at least 16 characters (e.g. `openssl rand -hex 24`)")
        }
        return out
    }

    static func isLabel(_ text: String) -> Bool {
        (1...64).contains(text.count) && text.unicodeScalars.allSatisfy { c in
            c.isASCII && (CharacterSet.alphanumerics.contains(c) || "._@-".unicodeScalars.contains(c))
        }
    }

    /// What the protocol's handlers serve.
    var service: ServiceConfiguration {
        let writable = !readWriteTokens.isEmpty || !writeTokens.isEmpty
        var c = ServiceConfiguration(
            database: database, registry: registry, writable: writable, tables: tables,
            maxBodyBytes: maxBodyBytes, maxLoadBytes: maxLoadBytes, defaultPageRows: defaultPageRows, maxPageRows: maxPageRows, pageBytes: pageBytes,
            maxSnapshots: maxSnapshots, snapshotIdleSeconds: snapshotIdleSeconds, snapshotLifetimeSeconds: snapshotLifetimeSeconds,
            name: "ferry serve", version: ServerConfiguration.version,
            // Served with read-only tokens only: nothing can be written through it.
            capabilities: (writable ? .all : Capabilities.all.subtracting([.target, .keyedWrites, .atomicPush, .replicaApply, .applyWatermark]))
                .subtracting(followable ? [] : .changeFeed),
            allowFeed: allowFeed)
        c.stagingIdleSeconds = stagingIdleSeconds
        c.maxConnections = maxConnections
        c.maxSnapshotsPerToken = maxSnapshotsPerToken
        c.maxHeldBodyBytes = maxHeldBodyBytes
        c.connectionWaitSeconds = connectionWaitSeconds
        return c
    }

    /// Ferry's version, as `GET /v1/capabilities` announces it.
    public static let version = "0.1.0"

    /// True when the service listens beyond this machine without TLS.
    public var exposedWithoutTLS: Bool {
        !(host == "127.0.0.1" || host == "::1" || host == "localhost") && tlsCertificate == nil
    }
}
