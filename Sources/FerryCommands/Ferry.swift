import ArgumentParser
import FerryCore
import Foundation

/// The `ferry` command: copies tables between SQLite, PostgreSQL, MySQL/MariaDB and Ferry's
/// XML service. Subcommands live in `Ferry+<Name>.swift`.
public struct Ferry: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "ferry",
        abstract: "Copy tables between databases, exactly.",
        discussion: """
            A database is named by a URL:
              sqlite:path/to/file.db   sqlite:///absolute/path.db
              postgres://user@host:5432/db   mysql://user@host:3306/db   http://host:8080/
              SCHEME:… for any other scheme, served by a driver plugin ferry-driver-SCHEME
              (ferry drivers lists them)

            Examples:
              ferry tables sqlite:samples/chinook.sqlite
              ferry describe sqlite:samples/chinook.sqlite Track
              ferry copy sqlite:samples/chinook.sqlite sqlite:/tmp/chinook-copy.db

            \(ExitStatus.table)
            """,
        version: "0.1.0",
        subcommands: [Tables.self, Describe.self, Copy.self, Plan.self, Run.self, Verify.self, Replicate.self, Serve.self, Snapshot.self, Status.self, Push.self, Pull.self, SyncCommand.self, Drivers.self]
    )

    public init() {}

    /// The drivers commands use; tests may swap in another registry.
    nonisolated(unsafe) public static var registry: DriverRegistry = .builtIn

    /// Parses and runs `arguments`, printing errors as one line on stderr, and returns the
    /// exit code (`ExitStatus`).
    public static func run(arguments: [String]) -> Int32 {
        enablePlugins(arguments: arguments)
        do {
            var command = try parseAsRoot(arguments)
            try command.run()
            return ExitStatus.ok.rawValue
        } catch let error as FerryError {
            Console.error("ferry: error: " + oneLine("\(error)"))
            return (error.isUsage ? ExitStatus.usage : .failed).rawValue
        } catch let code as ExitCode {
            return code.rawValue
        } catch {
            let code = exitCode(for: error)
            if code == .success {
                Console.out(fullMessage(for: error))
                return ExitStatus.ok.rawValue
            }
            if code == .validationFailure {
                Console.error(fullMessage(for: error))
                return ExitStatus.usage.rawValue
            }
            // One form for every failure: `ferry: error: …` (the parser's own prefix dropped).
            var message = fullMessage(for: error)
            if message.hasPrefix("Error: ") { message.removeFirst(7) }
            message = oneLine(message)
            Console.error(message.hasPrefix("ferry:") ? message : "ferry: error: \(message)")
            return ExitStatus.failed.rawValue
        }
    }

    /// An error as one line (a library's message may span several: libpq's do).
    static func oneLine(_ text: String) -> String {
        text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: " ")
    }
}

/// Writing to stdout and stderr without buffering surprises.
enum Console {
    static func out(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }
    static func error(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }
    static func json<T: Encodable>(_ value: T) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let data = try encoder.encode(value)
        out(String(decoding: data, as: UTF8.self))
    }
}

/// Options every command that prints results shares.
/// `--cast` and `--casts`, shared by copy, describe and verify.
struct CastOptions: ParsableArguments {
    @Option(name: .long, help: "A cast rule, e.g. 'type int[] to text' (repeatable; see ferry help copy).")
    var cast: [String] = []

    @Option(name: .long, help: "A file of cast rules, one per line (# comments).")
    var casts: [String] = []

    func rules() throws -> CastRuleSet { try CastRuleSet.load(options: cast, files: casts) }
}

/// Which tables a command works on, and the keys of tables without one (copy, verify).
struct TableOptions: ParsableArguments {
    @Option(name: .long, help: "Tables: --tables a,b or --tables a --tables b (default: all).")
    var tables: [String] = []

    @Option(name: .long, help: "Tables to leave out, comma-separated or repeated.")
    var exclude: [String] = []

    @Option(name: .long, help: "The key of a table without one: TABLE=COL1,COL2 (repeatable).")
    var key: [String] = []

    func validate() throws {
        for k in key where parseKeyOption(k) == nil {
            throw ValidationError("--key '\(k)' must look like TABLE=COL1,COL2")
        }
    }

    var named: [TableName] { splitNames(tables) }
    var excluded: [TableName] { splitNames(exclude) }
    var keys: [TableName: [String]] {
        var keys: [TableName: [String]] = [:]
        for k in key { if let (t, cols) = parseKeyOption(k) { keys[t] = cols } }
        return keys
    }
}

/// Settings the drivers take besides their URLs (every command that connects). They travel
/// as values on the endpoints (`Endpoint.options`, `Endpoint.password`), never in a URL Ferry prints.
struct DriverSettings: ParsableArguments {
    @Option(name: .long, help: "Bearer token file for http(s):// endpoints (else the URL's password or FERRY_TOKEN).")
    var tokenFile: String?

    @Option(name: .long, help: ArgumentHelp(
        "For https:// endpoints: also trust service certificates signed by this CA (PEM). Certificates are always verified.",
        valueName: "file"))
    var caFile: String?

    @Option(name: .long, help: ArgumentHelp(
        "File whose first line is the password for URLs that carry none (else PGPASSWORD/.pgpass, MYSQL_PWD).",
        valueName: "file"))
    var passwordFile: String?

    @Option(name: .long, help: "MySQL zero dates (0000-00-00) as read: error (default) or null.")
    var zeroDates: ZeroDates = .error

    @Option(name: .long, help: ArgumentHelp(
        "Let the driver plugin for SCHEME run although its URL came from a file (a snapshot's stored origin), not the command line.",
        valueName: "scheme"))
    var allowPlugin: [String] = []

    @Option(name: .long, help: ArgumentHelp(
        "Seconds a wait for the other side may last: a database's answer or next rows, room to send, a service's answer, a driver plugin's handshake and answers. A stalled connection fails after it (default: databases as long as they take, services and plugins 300).",
        valueName: "seconds"))
    var timeout: Double?

    @Option(name: .long, help: ArgumentHelp(
        "Ask again, at most N times each, what failed for a reason that passes: a request a service answered 503 (busy, unavailable: nothing was done); a copy's table whose PostgreSQL source connection was lost. Waits 0.5 s, then twice as long each time up to 8 s; each retry is said on stderr.",
        discussion: "Through a service, reads continue in the same read snapshot after the last key read; a streamed load of rows is not sent again (its rows are gone once sent): it fails, and its table with it, unchanged. From PostgreSQL, the table is read again on a new connection in the copy's exported snapshot (its target work rolled back first), which lives while the connection that exported it does; where that one is gone too (a server restart), or the source cannot share a snapshot (MySQL, SQLite), the table fails with one line saying why (rerun, with --resume to keep what was committed). Writes are never retried.",
        valueName: "N"))
    var retries: Int = 0

    func validate() throws {
        if let timeout { guard timeout > 0 else { throw ValidationError("--timeout must be a positive number of seconds") } }
        guard retries >= 0 && retries <= 100 else { throw ValidationError("--retries must be between 0 and 100, not \(retries)") }
    }

    enum ZeroDates: String, ExpressibleByArgument, CaseIterable {
        case error, null
    }

    /// `url`'s endpoint with the settings its driver declares, and the password of `passwordFile`
    /// (or `--password-file`) when the URL has none.
    func endpoint(_ url: String, registry: DriverRegistry, passwordFile: String? = nil) throws -> Endpoint {
        var values: [String: String] = [:]
        if let tokenFile { values["token-file"] = tokenFile }
        if let caFile { values["ca-file"] = caFile }
        if let timeout { values["timeout"] = String(timeout) }
        if retries > 0 { values["retries"] = String(retries) }
        if zeroDates == .null { values["zero-dates"] = "null" }
        var endpoint = try registry.applying(values, to: Endpoint(parsing: url))
        if endpoint.password == nil, let file = passwordFile ?? self.passwordFile {
            endpoint.password = try Self.password(in: file)
        }
        return endpoint
    }

    /// The first line of `file`: a password kept out of command lines and process lists.
    static func password(in file: String) throws -> String {
        guard let data = FileManager.default.contents(atPath: file) else {
            throw FerryError.invalidOption("--password-file \(file) cannot be read (does it exist, and may Ferry read it?)")
        }
        let text = String(decoding: data, as: UTF8.self)
        let line = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
        let password = line.hasSuffix("\r") ? String(line.dropLast()) : line
        guard !password.isEmpty else { throw FerryError.invalidOption("--password-file \(file) is empty; its first line is the password") }
        return password
    }

    /// The two endpoints with these settings, each given those its driver declares (as
    /// `Ferry.copy` and `Ferry.verify` do), and each its own password file when given.
    func endpoints(
        source: String, target: String, registry: DriverRegistry, passwords: PasswordFiles? = nil
    ) throws -> (source: Endpoint, target: Endpoint) {
        (try endpoint(source, registry: registry, passwordFile: passwords?.sourcePasswordFile),
         try endpoint(target, registry: registry, passwordFile: passwords?.targetPasswordFile))
    }
}

/// Commands with two databases (copy, verify): a password file for each.
struct PasswordFiles: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The source's password file, when source and target differ.", valueName: "file"))
    var sourcePasswordFile: String?

    @Option(name: .long, help: ArgumentHelp("The target's password file, when source and target differ.", valueName: "file"))
    var targetPasswordFile: String?
}

struct OutputOptions: ParsableArguments {
    @Flag(name: .long, help: "Print machine-readable JSON on stdout.")
    var json = false
}

extension TableName: ExpressibleByArgument {
    public init?(argument: String) {
        guard !argument.isEmpty else { return nil }
        self.init(parsing: argument)
    }
}

/// Renders rows as aligned columns.
func renderColumns(_ header: [String], _ rows: [[String]]) -> String {
    var widths = header.map(\.count)
    for r in rows { for (i, c) in r.enumerated() where i < widths.count { widths[i] = max(widths[i], c.count) } }
    func line(_ cells: [String]) -> String {
        cells.enumerated().map { i, c in i == cells.count - 1 ? c : c.padding(toLength: widths[i], withPad: " ", startingAt: 0) }
            .joined(separator: "  ")
    }
    return ([line(header)] + rows.map(line)).joined(separator: "\n")
}
