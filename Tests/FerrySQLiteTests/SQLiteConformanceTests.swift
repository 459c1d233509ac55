import FerryCore
import FerryDriverTestKit
import FerrySQLite
import XCTest

final class SQLiteConformanceTests: XCTestCase {
    func testDriverConformance() throws {
        let folder = try TemporaryFolder()
        var n = 0
        var options = DriverConformance.Options()
        // SQLite turns NaN into NULL and stores -0.0 in REAL columns as 0: the driver refuses both.
        options.keepsNaN = false
        options.keepsNegativeZero = false
        // SQLite to SQLite keeps stored values as stored (the fidelity check).
        options.storedForm = .sqlite
        let kit = DriverConformance(options: options) {
            n += 1
            return try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + folder.path("db\(n).sqlite")), role: .target)
        }
        for check in kit.checks {
            do { try check.run() } catch { XCTFail("\(check.name): \(error)") }
        }
    }
}
