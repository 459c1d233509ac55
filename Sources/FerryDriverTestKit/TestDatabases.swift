import FerryCore
import Foundation

/// Test fixtures shared by every driver's tests.
public enum TestDatabases {
    /// The URL of a test server from the environment (set by scripts/test). Under CI=true a
    /// missing URL is a failure, not a skip: a test that needs a server must run in CI.
    /// Returns nil (skip) only outside CI.
    public static func serverURL(_ variable: String) throws -> String? {
        if let url = ProcessInfo.processInfo.environment[variable], !url.isEmpty { return url }
        if ProcessInfo.processInfo.environment["CI"] == "true" {
            throw ConformanceFailure("\(variable) is not set under CI=true: run the tests with scripts/test, which starts the servers")
        }
        return nil
    }

    /// ../shared/datasets, found from the package root or FERRY_DATASETS.
    public static func datasetsFolder(file: String = #filePath) -> URL? {
        if let env = ProcessInfo.processInfo.environment["FERRY_DATASETS"] { return URL(fileURLWithPath: env) }
        var dir = URL(fileURLWithPath: file).deletingLastPathComponent()
        for _ in 0..<6 {
            let candidate = dir.appendingPathComponent("../shared/datasets").standardized
            if FileManager.default.fileExists(atPath: candidate.path) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        return nil
    }

    /// The package root (the folder holding Package.swift).
    public static func packageRoot(file: String = #filePath) -> URL {
        var dir = URL(fileURLWithPath: file).deletingLastPathComponent()
        while dir.path != "/" {
            if FileManager.default.fileExists(atPath: dir.appendingPathComponent("Package.swift").path) { return dir }
            dir = dir.deletingLastPathComponent()
        }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
    }
}

/// A uniquely named temporary folder, removed when released.
public final class TemporaryFolder {
    public let url: URL

    public init(prefix: String = "ferry-test") throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    public func path(_ name: String) -> String { url.appendingPathComponent(name).path }

    deinit { try? FileManager.default.removeItem(at: url) }
}
