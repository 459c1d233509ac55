import FerryCore
import FerryXML
import Foundation

/// Finds driver plugins (`ferry-driver-SCHEME` executables) the way git finds its remote
/// helpers: in the folders of `FERRY_DRIVER_PATH`, then on `PATH`; and decides whether one may
/// run (docs/plugins.md, "Discovery and trust").
public struct PluginDiscovery: Sendable {
    /// The folders of FERRY_DRIVER_PATH, in order.
    public var driverPath: [String]
    /// The folders of PATH, in order.
    public var path: [String]
    /// Schemes the user typed on the command line, or allowed with `--allow-plugin`: a plugin
    /// found on PATH runs only for these (one found in FERRY_DRIVER_PATH always may).
    public var trusted: Set<String>
    /// Seconds to wait for a handshake and for each answer (`--timeout`).
    public var timeout: Double

    public init(driverPath: [String], path: [String], trusted: Set<String>, timeout: Double = PluginDriver.defaultTimeout) {
        self.driverPath = driverPath
        self.path = path
        self.trusted = trusted
        self.timeout = timeout
    }

    /// From this process's environment.
    public static func fromEnvironment(trusted: Set<String>, timeout: Double = PluginDriver.defaultTimeout) -> PluginDiscovery {
        let env = ProcessInfo.processInfo.environment
        func folders(_ v: String?) -> [String] { (v ?? "").split(separator: ":").map(String.init).filter { !$0.isEmpty } }
        return PluginDiscovery(driverPath: folders(env["FERRY_DRIVER_PATH"]), path: folders(env["PATH"]), trusted: trusted, timeout: timeout)
    }

    public static let prefix = "ferry-driver-"

    /// A plugin found on disk.
    public struct Found: Sendable, Equatable {
        public var scheme: String
        public var path: String
        /// Found in FERRY_DRIVER_PATH (else on PATH).
        public var inDriverPath: Bool
    }

    /// Whether `scheme` can name an executable (`ferry-driver-` + letters, digits, `+ . -`).
    static func isPluginScheme(_ scheme: String) -> Bool {
        !scheme.isEmpty && scheme.first?.isLetter == true
            && scheme.allSatisfy { ($0.isASCII && ($0.isLetter || $0.isNumber)) || $0 == "+" || $0 == "." || $0 == "-" }
    }

    /// The first `ferry-driver-SCHEME` executable in FERRY_DRIVER_PATH, then PATH.
    public func find(_ scheme: String) -> Found? {
        guard Self.isPluginScheme(scheme) else { return nil }
        for (folders, inDriverPath) in [(driverPath, true), (path, false)] {
            for folder in folders {
                let candidate = (folder as NSString).appendingPathComponent(Self.prefix + scheme)
                var isDirectory: ObjCBool = false
                if FileManager.default.fileExists(atPath: candidate, isDirectory: &isDirectory), !isDirectory.boolValue,
                   FileManager.default.isExecutableFile(atPath: candidate) {
                    return Found(scheme: scheme, path: candidate, inDriverPath: inDriverPath)
                }
            }
        }
        return nil
    }

    /// The driver for `scheme`, or nil when no plugin serves it. Throws when one was found but
    /// may not run (a scheme from a file, not the command line).
    public func driver(for scheme: String) throws -> (any Driver)? {
        guard let found = find(scheme) else { return nil }
        guard found.inDriverPath || trusted.contains(scheme) else {
            throw FerryError.invalidOption(
                "\(found.path) would serve '\(scheme):', but that URL was not typed on the command line (it came from a file) and the plugin is not in FERRY_DRIVER_PATH: run it only if you trust it, with --allow-plugin \(scheme)")
        }
        return PluginDriver(scheme: scheme, path: found.path, timeout: timeout)
    }

    /// Every plugin on FERRY_DRIVER_PATH and PATH (the first of each scheme), for `ferry drivers`.
    public func all() -> [Found] {
        var seen: Set<String> = []
        var out: [Found] = []
        for (folders, inDriverPath) in [(driverPath, true), (path, false)] {
            for folder in folders {
                guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { continue }
                for name in names.sorted() where name.hasPrefix(Self.prefix) {
                    let scheme = String(name.dropFirst(Self.prefix.count))
                    guard !seen.contains(scheme), let found = find(scheme), found.path == (folder as NSString).appendingPathComponent(name) else { continue }
                    seen.insert(scheme)
                    out.append(Found(scheme: scheme, path: found.path, inDriverPath: inDriverPath))
                }
            }
        }
        return out
    }

    /// Starts the plugin only for its handshake and stops it: what it announces, or why it was
    /// refused.
    public func probe(_ found: Found) -> Result<XMLDocuments.CapabilitiesReport, FerryError> {
        do {
            let endpoint = try Endpoint(parsing: found.scheme + ":.")
            let process = try PluginProcess(name: Self.prefix + found.scheme, path: found.path, endpoint: endpoint, role: .source, timeout: min(timeout, 10))
            defer { process.stop() }
            guard let report = process.report else { return .failure(process.error()) }
            return .success(report)
        } catch let e as FerryError {
            return .failure(e)
        } catch {
            return .failure(FerryError.invalidOption("\(error)"))
        }
    }

    /// Where drivers were looked for, for "unknown scheme" errors.
    public var hint: String {
        "no \(Self.prefix)SCHEME plugin for it in FERRY_DRIVER_PATH or PATH (`ferry drivers` lists what is found)"
    }
}
