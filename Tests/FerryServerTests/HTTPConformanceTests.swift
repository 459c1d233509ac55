import FerryCore
import FerryDriverTestKit
import FerrySQLite
import FerryHTTPClient
import FerryXML
import Foundation
import XCTest

/// The http driver runs the same conformance kit as the other drivers: every check talks to a
/// real `ferry serve` (in this process, on a loopback port) in front of a fresh SQLite file.
final class HTTPConformanceTests: XCTestCase {
    func testDriverConformanceThroughTheService() async throws {
        let folder = try TemporaryFolder()
        // The kit asks for a fresh database per check (and two for copies); each is its own service.
        var services: [RunningService] = []
        defer { services.forEach { $0.stop() } }
        for i in 0..<28 {
            services.append(try await RunningService(database: "sqlite:" + folder.path("kit\(i).db"), drivers: [SQLiteDriver()]))
        }
        let urls = services.map { $0.url() }
        var options = DriverConformance.Options()
        // What the SQLite file behind the service refuses (see SQLiteConformanceTests).
        options.keepsNaN = false
        options.keepsNegativeZero = false
        options.describesPlannedTypes = false
        // SQLite to SQLite keeps stored values as stored (the fidelity check).
        options.storedForm = .sqlite
        var used = 0
        let kit = DriverConformance(options: options) {
            guard used < urls.count else { throw ConformanceFailure("the test started \(urls.count) services; the kit asked for more") }
            used += 1
            return try HTTPDriver.standard.connect(Endpoint(parsing: urls[used - 1]), role: .target)
        }
        for check in kit.checks {
            do { try check.run() } catch { XCTFail("\(check.name): \(error)") }
        }
    }
}
