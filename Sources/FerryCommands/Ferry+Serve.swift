import ArgumentParser
import FerryCore
import FerryServer
import FerryService
import Foundation
import Logging

extension Ferry {
    /// `HOST:PORT` (`[::1]:PORT` for IPv6) as a host and a port 0–65535, or nil.
    static func hostAndPort(_ text: String) -> (String, Int)? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return host.isEmpty ? nil : (host, port)
    }

    /// `ferry serve DATABASE-URL`: the XML-over-HTTP data service.
    struct Serve: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Expose a database through Ferry's XML-over-HTTP service.",
            discussion: """
                Every request needs a bearer token. Each token file gives its tokens a scope:
                  --read-only-token-file  read tables, rows and digests (snapshot and pull)
                  --write-token-file      also write rows: copies that append, upsert or mirror
                                          into existing tables, change sets, sync pushes; may
                                          create and drop only its own loads' staging tables
                  --token-file            also create, drop and replace tables (manage)
                A line of a token file is a token, or a label and a token (`laptop-anna TOKEN`):
                the audit log (a line per write request) names the label, never the token, and a
                load's staging tables belong to the label, so a token rotated under the same
                label keeps them. A token file rewritten while the service runs is read again within a second
                (rotate a token without a restart; a file left empty or with a short token is
                not taken, and the service says so). No endpoint takes SQL text. Stop with Ctrl-C (graceful). The protocol is
                described in docs/xml-protocol.md.

                Examples:
                  openssl rand -hex 24 > tokens.txt
                  ferry serve sqlite:samples/chinook.sqlite --listen 127.0.0.1:8080 --token-file tokens.txt
                  ferry copy http://:$(cat tokens.txt)@127.0.0.1:8080/ sqlite:chinook-copy.db
                  ferry replicate http://:$(cat tokens.txt)@127.0.0.1:8080/ sqlite:replica.db --until-caught-up
                  ferry serve postgres://app@db/shop --token-file admin.txt --write-token-file laptops.txt
                  ferry serve postgres://app@db/shop --token-file admin.txt --max-connections 8 --metrics 127.0.0.1:9188
                  ferry serve postgres://app@db/shop --listen 0.0.0.0:8443 --token-file rw.txt \\
                      --read-only-token-file ro.txt --tables artist,album --tls-cert cert.pem --tls-key key.pem
                """)

        @Argument(help: "The database to serve (URL).")
        var url: String

        @Option(name: .long, help: "Address and port to listen on.")
        var listen: String = "127.0.0.1:8080"

        @Option(name: .long, help: "File of tokens that may read, write and manage tables (create, drop, replace), one per line.")
        var tokenFile: String?

        @Option(name: .long, help: "File of tokens that may read and write rows (not create, drop or replace tables), one per line.")
        var writeTokenFile: String?

        @Option(name: .long, help: "File of read-only tokens, one per line.")
        var readOnlyTokenFile: String?

        @Option(name: .long, help: "Serve only these tables (comma-separated).")
        var tables: [String] = []

        @Option(name: .long, help: "TLS certificate chain (PEM).")
        var tlsCert: String?

        @Option(name: .long, help: "TLS private key (PEM).")
        var tlsKey: String?

        @Option(name: .long, help: "Largest request document the service takes whole (a change set, a push, a replica's transaction), in MB.")
        var maxBodyMb: Int = 64

        @Option(name: .long, help: ArgumentHelp(
            "Request documents kept by all requests together, in MB (at least --max-body-mb).",
            discussion: "Bounds what many clients sending documents at once can make the service keep: change sets and pushes in temporary files (TMPDIR, read where they lie, a batch at a time), replica transactions and digest requests in memory. Past it a request is answered 503 busy (nothing done; clients with --retries ask again). Rows loads are streamed and not counted."))
        var maxBodiesMb: Int = 64

        @Option(name: .long, help: ArgumentHelp(
            "Largest rows load one request may stream, in MB.",
            discussion: "Rows are written as they arrive, never held: this bounds one transaction, not memory. Clients send longer loads in several requests of at most half of it."))
        var maxLoadMb: Int = 1024

        @Option(name: .long, help: ArgumentHelp(
            "Seconds after which a client's unused staging table (an append, upsert or replica load in flight) is taken for abandoned and dropped.",
            discussion: "A client killed mid-load leaves its staging table; the service drops it once unused this long, and drops those of a stopped or killed ferry serve (its lease in _ferry_leases expired) when it starts. Resumable loads' staging tables (_ferry_load_…) wait for --resume instead.",
            valueName: "seconds"))
        var stagingIdleLimit: Int = 1_800

        func validate() throws {
            guard tokenFile != nil || writeTokenFile != nil || readOnlyTokenFile != nil else {
                throw ValidationError("give at least one of --token-file, --write-token-file and --read-only-token-file: no token, no data")
            }
            guard (tlsCert == nil) == (tlsKey == nil) else { throw ValidationError("--tls-cert and --tls-key go together") }
            guard parseListen() != nil else { throw ValidationError("--listen must be HOST:PORT, e.g. 127.0.0.1:8080") }
            guard maxBodyMb >= 1 else { throw ValidationError("--max-body-mb must be at least 1") }
            guard maxBodiesMb >= maxBodyMb else { throw ValidationError("--max-bodies-mb (\(maxBodiesMb)) must be at least --max-body-mb (\(maxBodyMb)): one body of the largest size must fit") }
            guard maxLoadMb >= 1 && maxLoadMb <= 1 << 20 else { throw ValidationError("--max-load-mb must be between 1 and 1048576") }
            guard stagingIdleLimit >= 1 else { throw ValidationError("--staging-idle-limit is a number of seconds, at least 1") }
            guard maxConnections == 0 || maxConnections >= 2 else {
                throw ValidationError("--max-connections must be at least 2 (a merge reads on a second connection while it writes), or 0 for no limit")
            }
            guard connectionWait > 0 else { throw ValidationError("--connection-wait is a number of seconds above 0") }
            guard idleTimeout >= 1 else { throw ValidationError("--idle-timeout is a number of seconds, at least 1") }
            guard maxRequestsPerToken >= 0 else { throw ValidationError("--max-requests-per-token is a number of requests, or 0 for no limit") }
            guard maxSnapshots >= 1, maxSnapshotsPerToken >= 1 else { throw ValidationError("--max-snapshots and --max-snapshots-per-token must be at least 1") }
            if let metrics, Ferry.hostAndPort(metrics) == nil { throw ValidationError("--metrics must be HOST:PORT, e.g. 127.0.0.1:9188") }
        }

        func parseListen() -> (String, Int)? { Ferry.hostAndPort(listen) }

        @Option(name: .long, help: ArgumentHelp(
            "Database connections requests may hold at once (at least 2; 0: no limit); more wait in line.",
            discussion: "Keeps many clients from exhausting the database's connection limit (PostgreSQL's max_connections). A request waits up to --connection-wait seconds for a connection, then is answered 503 busy (clients retry it). Read snapshots (--max-snapshots) and change feeds hold connections of their own, outside this limit."))
        var maxConnections: Int = 16

        @Option(name: .long, help: ArgumentHelp("Seconds a request waits in line for a database connection before 503 busy.", valueName: "seconds"))
        var connectionWait: Double = 30

        @Option(name: .long, help: ArgumentHelp(
            "Read snapshots held for clients at once (each holds a database connection and, on PostgreSQL, old row versions), and how many one token may hold.",
            discussion: "A snapshot unused for 300 s, or older than an hour, ends whatever its client does. Past either limit POST /v1/snapshots is answered 503 busy (clients with --retries ask again)."))
        var maxSnapshots: Int = 16

        @Option(name: .long, help: "Read snapshots one token may hold at once (at most --max-snapshots).")
        var maxSnapshotsPerToken: Int = 8

        @Option(name: .long, help: ArgumentHelp(
            "Requests one token may have under way at once, answers being sent included (0, the default: no limit).",
            discussion: "Keeps one client (a token, or every token under one label) from taking the whole service with many connections at once; its further requests are answered 503 busy, which clients with --retries ask again — except a streamed load of rows, whose rows are gone once sent: its copy fails. Give each application its own token or label before setting it; many clients sharing one token share its limit."))
        var maxRequestsPerToken: Int = 0

        @Option(name: .long, help: ArgumentHelp(
            "Seconds a client connection may stay open without a complete request (between requests, or sending half of one) before it is closed.",
            discussion: "Keeps clients that open connections and send nothing, or a request a byte at a time (slowloris), from holding the service's sockets.",
            valueName: "seconds"))
        var idleTimeout: Double = 300

        @Option(name: .long, help: ArgumentHelp(
            "Serve Prometheus metrics at http://HOST:PORT/metrics (requests, errors, bytes, connections in use and waiting, snapshots held), e.g. 127.0.0.1:9188; port 0 picks a free one.",
            discussion: "On an address of its own, without a token: listen on loopback or a network only monitoring reaches. GET /healthz on the service's own address answers 200 or 503 (database unreachable) without a token.",
            valueName: "host:port"))
        var metrics: String?

        @Flag(name: .long, help: ArgumentHelp(
            "Let any token start and remove change feeds (ferry replicate from this service).",
            discussion: "A feed keeps WAL (a PostgreSQL slot), binlog reads or a change log at the served database until it is removed; without this flag only manage tokens may start, read (which moves what the feed keeps) or remove one."))
        var allowFeed = false

        @Option(name: .long, help: ArgumentHelp("File whose first line is the served database's password (else PGPASSWORD/.pgpass, MYSQL_PWD).", valueName: "file"))
        var passwordFile: String?

        func run() throws {
            ProcessMemory.useOneArena()
            var parsed = try Endpoint(parsing: url)
            if parsed.password == nil, let passwordFile { parsed.password = try DriverSettings.password(in: passwordFile) }
            let endpoint = parsed
            let registry = Ferry.registry
            // Open once now: a wrong URL fails before the service starts.
            let probe = try registry.connect(endpoint, role: tokenFile == nil && writeTokenFile == nil ? .source : .target)
            let followable = (try? probe.changeCapture()) != nil
            probe.close()
            guard let (host, port) = parseListen() else { throw FerryError.invalidOption("--listen must be HOST:PORT") }
            var config = ServerConfiguration(
                database: endpoint, registry: registry,
                readWriteTokens: try tokenFile.map { try ServerConfiguration.tokens(fromFile: $0) } ?? [],
                readOnlyTokens: try readOnlyTokenFile.map { try ServerConfiguration.tokens(fromFile: $0) } ?? [],
                writeTokens: try writeTokenFile.map { try ServerConfiguration.tokens(fromFile: $0) } ?? [],
                tables: tables.flatMap { $0.split(separator: ",") }.map { TableName(parsing: String($0)) },
                host: host, port: port, tlsCertificate: tlsCert, tlsKey: tlsKey, maxBodyBytes: maxBodyMb << 20,
                maxLoadBytes: maxLoadMb << 20)
            config.allowFeed = allowFeed
            config.maxHeldBodyBytes = maxBodiesMb << 20
            for file in [tokenFile, writeTokenFile, readOnlyTokenFile].compactMap({ $0 }) {
                for t in try ServerConfiguration.labeledTokens(fromFile: file) { if let label = t.label { config.tokenLabels[t.token] = label } }
            }
            config.tokenFiles = [(tokenFile, TokenScope.manage), (writeTokenFile, .write), (readOnlyTokenFile, .read)].compactMap { f, s in f.map { ($0, s) } }
            config.stagingIdleSeconds = Double(stagingIdleLimit)
            config.followable = followable
            config.maxConnections = maxConnections
            config.idleSeconds = idleTimeout
            config.maxSnapshots = maxSnapshots
            config.maxSnapshotsPerToken = maxSnapshotsPerToken
            config.maxRequestsPerToken = maxRequestsPerToken
            config.connectionWaitSeconds = connectionWait
            if let metrics, let (mhost, mport) = Ferry.hostAndPort(metrics) {
                do {
                    try FerryMetrics.bootstrap().serve(host: mhost, port: mport) { bound in
                        Console.error("ferry: metrics on http://\(mhost):\(bound)/metrics")
                    }
                } catch {
                    throw FerryError.invalidOption("--metrics \(metrics): cannot listen there (\(error)); give a free HOST:PORT")
                }
            }
            let scheme = config.tlsCertificate == nil ? "http" : "https"
            if config.exposedWithoutTLS {
                Console.error("ferry: warning: listening on \(host) without TLS: tokens and data cross the network in clear text; use --tls-cert and --tls-key")
            }
            var logger = Logger(label: "ferry.serve")
            logger.logLevel = .info
            let service = XMLService(configuration: config)
            let app = try service.application(logger: logger) { bound in
                Console.error("ferry: serving \(endpoint) on \(scheme)://\(host):\(bound)/")
            }
            let failure = Locked<(any Error)?>(nil)
            let done = DispatchSemaphore(value: 0)
            Task {
                do { try await app.runService() } catch { failure.withLock { $0 = error } }
                done.signal()
            }
            done.wait()
            if let error = failure.withLock({ $0 }) { throw FerryError.connectionFailed(endpoint: "\(host):\(port)", reason: "\(error)") }
        }
    }
}
