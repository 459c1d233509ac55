import FerryCore
import FerryDriverTestKit
import FerryPlugins
import Foundation
import XCTest

/// The driver conformance kit, run against driver plugins: Ferry's SQLite driver through the
/// plugin kit (which proves the transport against a driver the other tests know), and the
/// Python sample plugin (which proves the protocol, not Swift, is the contract). Each check
/// talks to real plugin processes over their pipes.
final class PluginConformanceTests: XCTestCase {
    func testSQLiteThroughThePluginKit() throws {
        let folder = try TemporaryFolder()
        let before = PluginFixtures.processes(under: [PluginFixtures.products.path])
        var options = DriverConformance.Options()
        // What SQLite refuses (see SQLiteConformanceTests); the plugin maps planned types itself.
        options.keepsNaN = false
        options.keepsNegativeZero = false
        options.describesPlannedTypes = false
        let driver = PluginDriver(scheme: "sqlitekit", path: PluginFixtures.products.appendingPathComponent("ferry-driver-sqlitekit").path)
        var n = 0
        let kit = DriverConformance(options: options) {
            n += 1
            return try driver.connect(Endpoint(parsing: "sqlitekit:" + folder.path("kit\(n).db")), role: .target)
        }
        XCTAssertEqual(kit.checks.count, 14, "every check applies to a plugin that declares everything")
        for check in kit.checks {
            do { try check.run() } catch { XCTFail("\(check.name): \(error)") }
        }
        XCTAssertEqual(PluginFixtures.processes(under: [PluginFixtures.products.path]), before, "every plugin process ended with its connections")
    }

    func testCSVPlugin() throws {
        let folder = try TemporaryFolder()
        var options = DriverConformance.Options()
        options.capabilities = [.source, .target, .keyedReads, .digests, .snapshots, .keyedWrites]
        options.describesPlannedTypes = false
        let driver = PluginDriver(scheme: "csv", path: PluginFixtures.products.appendingPathComponent("ferry-driver-csv").path)
        var n = 0
        let kit = DriverConformance(options: options) {
            n += 1
            return try driver.connect(Endpoint(parsing: "csv:" + folder.path("kit\(n)")), role: .target)
        }
        XCTAssertEqual(kit.checks.count, 14, "every check applies: the CSV plugin declares keyed reads and writes")
        for check in kit.checks {
            do { try check.run() } catch { XCTFail("\(check.name): \(error)") }
        }
        XCTAssertEqual(PluginFixtures.processes(under: [PluginFixtures.products.path]), [], "every plugin process ended with its connections")
    }

    func testPythonJSONLinesPlugin() throws {
        let folder = try TemporaryFolder()
        var options = DriverConformance.Options()
        options.describesPlannedTypes = false
        options.capabilities = [.source, .target]
        let driver = PluginDriver(scheme: "jsonl", path: PluginFixtures.jsonlFolder + "/ferry-driver-jsonl")
        var n = 0
        let kit = DriverConformance(options: options) {
            n += 1
            return try driver.connect(Endpoint(parsing: "jsonl:" + folder.path("kit\(n)")), role: .target)
        }
        XCTAssertEqual(kit.checks.count, 11, "the checks for a source and target without keyed reads or writes")
        for check in kit.checks {
            do { try check.run() } catch { XCTFail("\(check.name): \(error)") }
        }
        XCTAssertEqual(PluginFixtures.processes(under: [PluginFixtures.jsonlFolder]), [], "every plugin process ended with its connections")
    }
}
