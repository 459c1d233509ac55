import FerryCore
import FerryDriverTestKit
import FerryPlugins
import Foundation
import XCTest

/// The driver conformance kit, run against driver plugins: Ferry's SQLite driver through the
/// plugin kit (which proves the transport against a driver the other tests know), the CSV
/// sample, and the Python sample (which proves the protocol, not Swift, is the contract). Each
/// check talks to real plugin processes over their pipes.
final class PluginConformanceTests: XCTestCase {
    /// Runs every check `options.capabilities` allows against the plugin at `path`, each on a
    /// fresh database `SCHEME:folder/kitN`, and checks that no plugin process outlives the kit.
    func runKit(scheme: String, path: String, options: DriverConformance.Options, expectedChecks: Int,
                file: StaticString = #filePath, line: UInt = #line) throws {
        let folder = try TemporaryFolder()
        let driver = PluginDriver(scheme: scheme, path: path)
        var n = 0
        let kit = DriverConformance(options: options) {
            n += 1
            return try driver.connect(Endpoint(parsing: "\(scheme):" + folder.path("kit\(n)")), role: .target)
        }
        XCTAssertEqual(kit.checks.count, expectedChecks, "the checks for capabilities \(options.capabilities)", file: file, line: line)
        for check in kit.checks {
            do { try check.run() } catch { XCTFail("\(check.name): \(error)", file: file, line: line) }
        }
        let folderOfPlugin = (path as NSString).deletingLastPathComponent
        XCTAssertEqual(PluginFixtures.processes(under: [folderOfPlugin]), [], "every plugin process ended with its connections", file: file, line: line)
    }

    func testSQLiteThroughThePluginKit() throws {
        var options = DriverConformance.Options()
        // What SQLite refuses (see SQLiteConformanceTests); the plugin maps planned types itself.
        options.keepsNaN = false
        options.keepsNegativeZero = false
        options.describesPlannedTypes = false
        // SQLite to SQLite keeps stored values as stored (the fidelity check).
        options.storedForm = .sqlite
        try runKit(scheme: "sqlitekit", path: PluginFixtures.products.appendingPathComponent("ferry-driver-sqlitekit").path,
                   options: options, expectedChecks: 15)
    }

    func testCSVPlugin() throws {
        var options = DriverConformance.Options()
        options.capabilities = [.source, .target, .keyedReads, .digests, .snapshots, .keyedWrites]
        options.describesPlannedTypes = false
        try runKit(scheme: "csv", path: PluginFixtures.products.appendingPathComponent("ferry-driver-csv").path,
                   options: options, expectedChecks: 14)
    }

    func testPythonJSONLinesPlugin() throws {
        var options = DriverConformance.Options()
        options.describesPlannedTypes = false
        // A source and a target without keyed reads or writes.
        options.capabilities = [.source, .target]
        try runKit(scheme: "jsonl", path: PluginFixtures.jsonlFolder + "/ferry-driver-jsonl", options: options, expectedChecks: 11)
    }
}
