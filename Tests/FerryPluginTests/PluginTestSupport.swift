import FerryCore
import FerryDriverTestKit
import Foundation
import XCTest

/// Where the tests find Ferry and the plugins, and how they run the `ferry` binary.
enum PluginFixtures {
    /// The folder of the built products (the executables sit next to XCTest's bundle on Linux).
    static var products: URL {
        let bundle = Bundle.main.bundleURL
        if FileManager.default.fileExists(atPath: bundle.appendingPathComponent("ferry").path) { return bundle }
        return TestDatabases.packageRoot().appendingPathComponent(".build/debug")
    }
    static var ferry: URL { products.appendingPathComponent("ferry") }
    static var root: URL { TestDatabases.packageRoot() }
    /// The Python sample plugin's folder, and the misbehaving plugins'.
    static var jsonlFolder: String { root.appendingPathComponent("samples/plugins/jsonl").path }
    static var badFolder: String { root.appendingPathComponent("Tests/Fixtures/plugins").path }
    static var chinook: String { root.appendingPathComponent("samples/chinook.sqlite").path }

    struct Result {
        var code: Int32
        var out: String
        var err: String
        /// Ferry's own lines on stderr (a plugin's relayed lines start with its name).
        var ferryLines: [Substring] { err.split(separator: "\n").filter { !$0.hasPrefix("ferry-driver-") } }
    }

    /// Runs `ferry args` with `environment` added (FERRY_DRIVER_PATH, PATH, …).
    static func run(_ args: [String], environment: [String: String] = [:], timeout: TimeInterval = 300) throws -> Result {
        let p = Process()
        p.executableURL = ferry
        p.arguments = args
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }
        p.environment = env
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        let o = Locked(Data()), e = Locked(Data())
        let group = DispatchGroup()
        for (pipe, box) in [(out, o), (err, e)] {
            group.enter()
            DispatchQueue.global().async {
                let d = pipe.fileHandleForReading.readDataToEndOfFile()
                box.withLock { $0 = d }
                group.leave()
            }
        }
        if group.wait(timeout: .now() + timeout) == .timedOut {
            p.terminate()
            throw ConformanceFailure("ferry \(args.joined(separator: " ")) did not end within \(Int(timeout)) s")
        }
        p.waitUntilExit()
        return Result(code: p.terminationStatus, out: String(decoding: o.withLock { $0 }, as: UTF8.self), err: String(decoding: e.withLock { $0 }, as: UTF8.self))
    }

    /// Processes running a program from `folder` (plugins, and what their scripts started).
    static func processes(under folders: [String]) -> [String] {
        guard let pids = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
        return pids.compactMap { pid -> String? in
            guard Int(pid) != nil, let cmd = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return nil }
            let text = String(decoding: cmd.map { $0 == 0 ? 32 : $0 }, as: UTF8.self)
            return folders.contains(where: { text.contains($0) }) && text.contains("ferry-driver-") ? "\(pid): \(text)" : nil
        }
    }
}
