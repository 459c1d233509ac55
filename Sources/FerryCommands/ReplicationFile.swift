import ArgumentParser
import FerryCore
import Foundation
import Yams

/// A replication file (`ferry run FILE.yaml`): source, target, defaults, tables and a
/// `replicate:` job, turned into the command lines of `ferry copy` and `ferry replicate` — the
/// options the commands have, checked by the same parser, so the file and the command line
/// share one option model. `${NAME}` takes an environment variable (percent-encoded inside a
/// URL); a secret is never written back or printed.
struct ReplicationFile {
    /// One command the file runs, in order: a copy of some tables (tables sharing their
    /// run-wide options run together), or the replicate job.
    struct Step {
        var command: String
        var arguments: [String]
        /// What the step covers, for messages: its tables.
        var tables: [String]
    }

    var source: String
    var target: String
    var steps: [Step]

    /// A mistake in the file: `FILE:LINE:COLUMN: message`.
    struct Mistake: Error, CustomStringConvertible {
        var description: String
    }

    /// Keys of a table entry (and of `defaults:`) and the `ferry copy` option each becomes.
    /// Table-scoped ones take the table's name (`--key orders=id`); the others are options of
    /// the whole run, and tables with the same ones run in one copy.
    static let tableScoped: [String: String] = ["key": "--key", "where": "--where", "incremental": "--incremental", "columns": "--columns"]
    static let runWide: [String: String] = [
        "mode": "--mode", "casts": "--cast", "resume": "--resume", "chunk-rows": "--chunk-rows", "batch-size": "--batch-size",
        "incremental-lookback": "--incremental-lookback", "indexes": "--no-indexes", "foreign-keys": "--no-foreign-keys",
        "max-delete": "--max-delete", "allow-empty-source": "--allow-empty-source", "jobs": "--jobs", "schema": "--schema", "verify": "--verify",
    ]
    /// Keys that cut a copy into work units (`ferry plan`'s options): tables with `shards: N`
    /// run as the N units of a plan, prepared, run in turn and finished.
    static let shardKeys: [String: String] = ["shards": "--shards", "sample-above": "--sample-above"]
    /// Keys of `replicate:` and the `ferry replicate` option each becomes.
    static let replicateKeys: [String: String] = [
        "tables": "--tables", "exclude": "--exclude", "casts": "--cast", "schema": "--schema", "jobs": "--jobs",
        "until-caught-up": "--until-caught-up", "on-schema-change": "--on-schema-change", "resync": "--resync", "metrics": "--metrics",
        "key": "--key",
    ]
    static let topKeys = ["source", "target", "source-password", "target-password", "token-file", "defaults", "tables", "replicate"]

    let file: String
    let environment: [String: String]

    init(path: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        file = path
        self.environment = environment
        source = ""
        target = ""
        steps = []
        guard let data = FileManager.default.contents(atPath: path) else {
            throw Mistake(description: "\(path): cannot be read (does it exist, and may Ferry read it?)")
        }
        guard let text = String(data: data, encoding: .utf8) else { throw Mistake(description: "\(path): is not UTF-8 text") }
        let root: Node?
        do {
            root = try Yams.compose(yaml: text)
        } catch let e as YamlError {
            throw Mistake(description: "\(path): not YAML: \(Self.describe(e))")
        }
        guard let top = root?.mapping else { throw Mistake(description: "\(path):1:1: a replication file is a mapping with source, target and tables (see docs/replication-files.md)") }
        try parse(top, root: root)
    }

    static func describe(_ e: YamlError) -> String {
        "\(e)".split(separator: "\n").first.map(String.init) ?? "\(e)"
    }

    func at(_ node: Node?, _ message: String) -> Mistake {
        let m = node?.mark
        return Mistake(description: "\(file):\(m?.line ?? 1):\(m?.column ?? 1): \(message)")
    }

    private mutating func parse(_ top: Node.Mapping, root: Node?) throws {
        var seen: [String: Node] = [:]
        for (k, v) in top {
            guard let key = k.string, Self.topKeys.contains(key) else {
                throw at(k, "unknown key '\(k.string ?? "?")' (known: \(Self.topKeys.joined(separator: ", ")))")
            }
            guard seen[key] == nil else { throw at(k, "'\(key)' appears twice") }
            seen[key] = v
        }
        guard let s = seen["source"] else { throw at(root, "no source: (the database to read from, a URL)") }
        guard let t = seen["target"] else { throw at(root, "no target: (the database to write to, a URL)") }
        source = try url(s, "source", password: seen["source-password"])
        target = try url(t, "target", password: seen["target-password"])
        var common: [String] = []
        if let tokenFile = seen["token-file"] { common += ["--token-file", try scalar(tokenFile, "token-file")] }

        var defaults: [(String, Node, Node)] = []
        if let d = seen["defaults"] {
            guard let m = d.mapping else { throw at(d, "defaults: is a mapping of copy options (mode, key, casts, …)") }
            for (k, v) in m {
                guard let key = k.string, Self.runWide[key] != nil || Self.shardKeys[key] != nil || (Self.tableScoped[key] != nil && key != "key" && key != "columns") else {
                    throw at(k, "unknown key '\(k.string ?? "?")' in defaults (known: \(Self.optionKeys(defaults: true)))")
                }
                defaults.append((key, k, v))
            }
        }
        var groups: [[String]: (tables: [String], arguments: [String])] = [:]
        /// Where each sharded group's `shards:` was given (its mistakes are placed there).
        var shardNodes: [[String]: Node] = [:]
        var order: [[String]] = []
        if let ts = seen["tables"] {
            guard let list = ts.sequence else { throw at(ts, "tables: is a list of tables, each `- name: TABLE` with its options") }
            for (i, item) in list.enumerated() {
                var entry: [(String, Node, Node)] = []
                var name: String?
                if let n = item.string {
                    name = n
                } else if let m = item.mapping {
                    for (k, v) in m {
                        guard let key = k.string else { throw at(k, "a key is text") }
                        if key == "name" {
                            name = try scalar(v, "name")
                        } else if Self.runWide[key] != nil || Self.tableScoped[key] != nil || Self.shardKeys[key] != nil {
                            entry.append((key, k, v))
                        } else {
                            throw at(k, "unknown key '\(key)' in tables[\(i)] (known: name, \(Self.optionKeys(defaults: false)))")
                        }
                    }
                } else {
                    throw at(item, "tables[\(i)] is a table's name or a mapping with name: and its options")
                }
                guard let table = name, !table.isEmpty else { throw at(item, "tables[\(i)] has no name:") }
                // Defaults first, the table's own keys after (the last of a run-wide option wins).
                var runWide: [String] = []
                var scoped: [String] = []
                let own = Set(entry.map(\.0))
                for (key, k, v) in defaults where !own.contains(key) {
                    try add(key, k, v, table: table, runWide: &runWide, scoped: &scoped)
                }
                for (key, k, v) in entry { try add(key, k, v, table: table, runWide: &runWide, scoped: &scoped) }
                if groups[runWide] == nil { order.append(runWide) }
                if let n = (entry + defaults).first(where: { $0.0 == "shards" }) { shardNodes[runWide] = shardNodes[runWide] ?? n.2 }
                groups[runWide, default: ([], [])].tables.append(table)
                groups[runWide]?.arguments += ["--tables", table] + scoped
            }
        }
        for key in order {
            guard let g = groups[key] else { continue }
            let arguments = [source, target] + common + key + g.arguments
            if let node = shardNodes[key] {
                // `ferry plan`'s options: what it does not take does not go with shards.
                do {
                    _ = try Ferry.Plan.parse(arguments)
                } catch {
                    throw at(node, "shards: runs these tables as the units of `ferry plan`, which refuses the rest of their options: "
                        + Ferry.Copy.message(for: error).replacingOccurrences(of: "Error: ", with: ""))
                }
                steps.append(Step(command: "shards", arguments: arguments, tables: g.tables))
            } else {
                steps.append(Step(command: "copy", arguments: arguments, tables: g.tables))
            }
        }
        if let r = seen["replicate"] {
            var arguments = [source, target] + common
            if let m = r.mapping {
                for (k, v) in m {
                    guard let key = k.string, let flag = Self.replicateKeys[key] else {
                        throw at(k, "unknown key '\(k.string ?? "?")' in replicate (known: \(Self.replicateKeys.keys.sorted().joined(separator: ", ")))")
                    }
                    let given: [String]
                    if key == "key" {
                        guard let keys = v.mapping else { throw at(v, "replicate.key is a mapping TABLE: [COLUMN, …]") }
                        given = try keys.flatMap { kk, vv in [flag, (try scalar(kk, "a table")) + "=" + (try list(vv, "key")).joined(separator: ",")] }
                    } else {
                        given = try flags(flag, v, key)
                    }
                    try check("replicate", given, at: v)
                    arguments += given
                }
            } else if r.bool != true {
                throw at(r, "replicate: is true or a mapping of ferry replicate options (tables, until-caught-up, metrics, …)")
            }
            steps.append(Step(command: "replicate", arguments: arguments, tables: []))
        }
        guard !steps.isEmpty else { throw at(root, "nothing to do: list tables: to copy, or a replicate: job") }
    }

    static func optionKeys(defaults: Bool) -> String {
        (Array(runWide.keys) + Array(shardKeys.keys) + tableScoped.keys.filter { !defaults || ($0 != "key" && $0 != "columns") }).sorted().joined(separator: ", ")
    }

    /// One key of a table entry as the options it gives, each checked by `ferry copy`'s parser.
    private func add(_ key: String, _ k: Node, _ v: Node, table: String, runWide: inout [String], scoped: inout [String]) throws {
        if let flag = Self.tableScoped[key] {
            let value = key == "key" || key == "columns" ? (try list(v, key)).joined(separator: ",") : try scalar(v, key)
            let given = [flag, table + "=" + value]
            try check("copy", given, at: v)
            scoped += given
            return
        }
        if let flag = Self.shardKeys[key] {
            let given = [flag, try scalar(v, key)]
            do {
                _ = try Ferry.Plan.parse(["sqlite:a", "sqlite:b"] + (key == "shards" ? [] : ["--shards", "1"]) + given)
            } catch {
                throw at(v, Ferry.Copy.message(for: error).replacingOccurrences(of: "Error: ", with: ""))
            }
            runWide += given
            return
        }
        guard let flag = Self.runWide[key] else { throw at(k, "unknown key '\(key)'") }
        let given: [String]
        if key == "casts" {
            // Each rule parsed here, so that a mistake names its line.
            for item in v.sequence.map(Array.init) ?? [v] {
                let text = try scalar(item, key)
                do { _ = try CastRule(parsing: text, origin: "casts") } catch let e as FerryError { throw at(item, "\(e)") }
            }
        }
        if key == "indexes" || key == "foreign-keys" {
            // `indexes: false` is --no-indexes; true is the default.
            guard let b = v.bool else { throw at(v, "\(key): is true or false") }
            given = b ? [] : [flag]
        } else {
            given = try flags(flag, v, key)
        }
        try check("copy", given, at: v)
        runWide += given
    }

    /// A value as options: true → the flag, false → nothing, a list → the flag per item, else the flag and the text.
    private func flags(_ flag: String, _ v: Node, _ key: String) throws -> [String] {
        if let items = v.sequence { return try items.flatMap { [flag, try scalar($0, key)] } }
        if v.scalar != nil, v.scalar?.style == .plain, let b = v.bool { return b ? [flag] : [] }
        return [flag, try scalar(v, key)]
    }

    /// Checks options with the command's own parser, the mistake placed where the value is.
    private func check(_ command: String, _ arguments: [String], at node: Node) throws {
        guard !arguments.isEmpty else { return }
        do {
            if command == "copy" {
                _ = try Ferry.Copy.parse(["sqlite:a", "sqlite:b"] + arguments)
            } else {
                _ = try Ferry.Replicate.parse(["sqlite:a", "sqlite:b"] + arguments)
            }
        } catch {
            throw at(node, Ferry.Copy.message(for: error).replacingOccurrences(of: "Error: ", with: ""))
        }
    }

    /// A scalar's text, `${NAME}` taken from the environment.
    func scalar(_ v: Node, _ key: String, encode: Bool = false) throws -> String {
        guard let s = v.scalar else { throw at(v, "\(key): is a single value, not a \(v.mapping != nil ? "mapping" : "list")") }
        return try interpolate(s.string, at: v, encode: encode)
    }

    /// A list of scalars (or one scalar, as a list of one).
    func list(_ v: Node, _ key: String) throws -> [String] {
        if let items = v.sequence { return try items.map { try scalar($0, key) } }
        return [try scalar(v, key)]
    }

    /// A URL, its `${NAME}`s percent-encoded, with `password` (a `${NAME}`) put in its user part.
    func url(_ v: Node, _ key: String, password: Node?) throws -> String {
        var text = try scalar(v, key, encode: true)
        guard let password else { return text }
        let secret = try scalar(password, key + "-password", encode: true)
        guard let scheme = text.range(of: "://"), let at = text[scheme.upperBound...].firstIndex(of: "@") else {
            throw self.at(password, "\(key)-password needs a user in the \(key) URL (scheme://USER@host/…)")
        }
        let user = text[scheme.upperBound..<at]
        guard !user.contains(":") else { throw self.at(password, "the \(key) URL has a password already; give it in one place") }
        text.insert(contentsOf: ":" + secret, at: at)
        return text
    }

    /// `${NAME}` → the variable's value (percent-encoded where it lands in a URL); `$${` is a
    /// literal `${`. An unset variable is a mistake, placed at its value.
    func interpolate(_ text: String, at node: Node, encode: Bool) throws -> String {
        var out = ""
        var rest = Substring(text)
        while let dollar = rest.firstIndex(of: "$") {
            out += rest[..<dollar]
            let after = rest[rest.index(after: dollar)...]
            if after.hasPrefix("${") {
                out += "${"
                rest = after.dropFirst(2)
                continue
            }
            guard after.hasPrefix("{"), let close = after.firstIndex(of: "}") else {
                out.append("$")
                rest = after
                continue
            }
            let name = String(after[after.index(after: after.startIndex)..<close])
            guard let first = name.first, first == "_" || first.isLetter, name.allSatisfy({ $0 == "_" || $0.isLetter || $0.isNumber }) else {
                throw self.at(node, "'${\(name)}' is not an environment variable's name")
            }
            guard let value = environment[name] else { throw self.at(node, "${\(name)} is not set in the environment") }
            out += encode ? Self.percentEncoded(value) : value
            rest = after[after.index(after: close)...]
        }
        return out + rest
    }

    /// Every byte but the unreserved ones (RFC 3986) as %XX: safe anywhere in a URL.
    static func percentEncoded(_ s: String) -> String {
        var out = ""
        for b in s.utf8 {
            if (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2D || b == 0x2E || b == 0x5F || b == 0x7E {
                out.append(Character(UnicodeScalar(b)))
            } else {
                out += String(format: "%%%02X", b)
            }
        }
        return out
    }
}
