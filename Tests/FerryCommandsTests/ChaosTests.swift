import FerryDriverTestKit
import Foundation
import XCTest

/// The failure-injection suite's short run (issue 32): `ferry-chaos` breaks 36 runs in flight —
/// 12 copies (every engine on both sides, the service and a plugin), 12 pushes, pulls and syncs
/// of offline snapshots, 12 `ferry replicate` runs (servers, ferry, the service and the plugin
/// killed, connections cut and stalled, SQLite files that cannot grow) — and checks each
/// outcome. `scripts/chaos --runs 1000` is the measured run.
final class ChaosTests: XCTestCase {
    func testBrokenCopiesSyncsAndFollowersDamageNothing() throws {
        _ = try TestDatabases.serverURL("FERRY_TEST_POSTGRES_URL")
        _ = try TestDatabases.serverURL("FERRY_TEST_MYSQL_URL")
        guard ProcessInfo.processInfo.environment["FERRY_TEST_STATE"] != nil else {
            return XCTFail("FERRY_TEST_STATE is not set: run the tests with scripts/test, which starts the servers the suite kills and restarts")
        }
        let products = CLITests.binaryURL.deletingLastPathComponent()
        let runner = products.appendingPathComponent("ferry-chaos")
        guard FileManager.default.isExecutableFile(atPath: runner.path) else {
            return XCTFail("no ferry-chaos beside ferry in \(products.path): build it with `swift build --build-tests` (scripts/test does)")
        }
        var args = ["--runs", "36", "--rows", "60000", "--products", products.path]
        if let seed = ProcessInfo.processInfo.environment["FERRY_CHAOS_SEED"] { args += ["--seed", seed] }
        let r = try CLITests.run(runner, args)
        print(r.out)
        XCTAssertEqual(r.code, 0, r.out + r.err)
        XCTAssertTrue(r.out.contains("No damaged target, lost or doubled row, bad exit, hang or leftover."), r.out)
    }
}
