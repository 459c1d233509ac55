import ArgumentParser
import FerryCore
import FerryPlugins
import FerryXML
import Foundation

extension Ferry {
    /// `ferry drivers`: the built-in drivers and every driver plugin found.
    struct Drivers: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the built-in drivers and the driver plugins found.",
            discussion: """
                A URL whose scheme no built-in driver serves (csv:data/) is handed to an
                executable ferry-driver-SCHEME, looked for in the folders of FERRY_DRIVER_PATH,
                then on PATH; it speaks Ferry's protocol over its stdin and stdout (see
                docs/plugins.md). Each plugin found is started for its handshake only, to show
                its version and capabilities, or why it was refused.

                A plugin found only on PATH runs for a URL typed on the command line; for one
                read from a file (a snapshot's stored origin) it needs --allow-plugin SCHEME.

                Examples:
                  ferry drivers
                  FERRY_DRIVER_PATH=$PWD/.build/debug ferry drivers
                  ferry drivers --json
                """)

        @Option(name: .long, help: "Seconds to wait for each plugin's handshake.")
        var timeout: Double = 10

        @OptionGroup var output: OutputOptions

        struct Row: Encodable {
            var scheme: String
            var kind: String
            var driver: String
            var path: String?
            var version: String?
            var capabilities: [String]
            var refused: String?
        }

        func run() throws {
            var rows: [Row] = []
            let registry = Ferry.registry
            for scheme in registry.schemes {
                guard let d = try? registry.driver(for: Endpoint(scheme: scheme, path: "")) else { continue }
                rows.append(Row(scheme: scheme, kind: "built-in", driver: d.name, capabilities: Capabilities.all.list))
            }
            let discovery = PluginDiscovery.fromEnvironment(trusted: [], timeout: timeout)
            for found in discovery.all() {
                var row = Row(
                    scheme: found.scheme, kind: found.inDriverPath ? "plugin (FERRY_DRIVER_PATH)" : "plugin (PATH)",
                    driver: PluginDiscovery.prefix + found.scheme, path: found.path, capabilities: [])
                if registry.schemes.contains(found.scheme) {
                    row.refused = "a built-in driver serves \(found.scheme):, so this plugin is never used"
                } else {
                    switch discovery.probe(found) {
                    case .success(let report):
                        row.version = report.version
                        row.capabilities = report.capabilities.list + report.unknown.map { $0 + " (unknown)" }
                    case .failure(let error):
                        row.refused = "\(error)"
                    }
                }
                rows.append(row)
            }
            if output.json {
                try Console.json(rows)
                return
            }
            Console.out(renderColumns(
                ["SCHEME", "KIND", "VERSION", "CAPABILITIES", "PATH"],
                rows.map { r in
                    [r.scheme, r.kind, r.version ?? (r.kind == "built-in" ? "" : "-"),
                     r.refused.map { "refused: " + $0 } ?? r.capabilities.joined(separator: ","), r.path ?? ""]
                }))
            if !rows.contains(where: { $0.kind != "built-in" }) {
                Console.out("no driver plugins found (ferry-driver-SCHEME in FERRY_DRIVER_PATH or PATH; see docs/plugins.md)")
            }
        }
    }

    /// Lets the registry start driver plugins for schemes it lacks. A plugin found only on PATH
    /// runs for the schemes of URLs typed in `arguments` and those `--allow-plugin` names, never
    /// for a URL read from a file someone else may have written (a snapshot's stored origin).
    static func enablePlugins(arguments: [String]) {
        var trusted = Set<String>()
        var timeout = PluginDriver.defaultTimeout
        var i = 0
        while i < arguments.count {
            let a = arguments[i]
            for option in ["--allow-plugin", "--timeout"] {
                var value: String?
                if a == option, i + 1 < arguments.count { value = arguments[i + 1] }
                if a.hasPrefix(option + "=") { value = String(a.dropFirst(option.count + 1)) }
                guard let value else { continue }
                if option == "--timeout" {
                    if let t = Double(value), t > 0 { timeout = t }
                } else {
                    trusted.formUnion(value.split(separator: ",").map { $0.lowercased() })
                }
            }
            if let colon = a.firstIndex(of: ":"), a.first?.isLetter == true, !a.hasPrefix("-") {
                let scheme = a[..<colon].lowercased()
                if scheme.allSatisfy({ $0.isLetter || $0.isNumber || "+.-".contains($0) }) { trusted.insert(scheme) }
            }
            i += 1
        }
        let discovery = PluginDiscovery.fromEnvironment(trusted: trusted, timeout: timeout)
        registry.fallback = { try discovery.driver(for: $0) }
        registry.fallbackHint = discovery.hint
        atexit { PluginDriver.stopAll() }
    }
}
