import FerryCore
import FerryDriverTestKit
@testable import FerrySyncModel
import Foundation
import XCTest

/// The randomized model test (`FerrySyncModel`): random interleavings of local and origin
/// edits, pushes and pulls under random policies, kills, each step checked against a reference
/// model that shares no code with FerrySync. A failure prints its seed:
/// `FERRY_SYNC_SEED=N FERRY_SYNC_SCENARIOS=1 swift test --filter SyncModelTests/…` replays it.
///
/// The scenarios against SQLite (10,000), PostgreSQL and MySQL (300 each) run in the optimized
/// `ferry-sync-model` runner, which scripts/test builds; those through the service (300) run
/// here, in the test process, beside a `ferry serve` of its own.
final class SyncModelTests: XCTestCase {
    /// Scenarios per origin: FERRY_SYNC_SCENARIOS (default: CI's count).
    static func scenarios(_ defaultCount: Int) -> Int {
        ProcessInfo.processInfo.environment["FERRY_SYNC_SCENARIOS"].flatMap(Int.init) ?? defaultCount
    }

    static var firstSeed: UInt64? { ProcessInfo.processInfo.environment["FERRY_SYNC_SEED"].flatMap(UInt64.init) }

    /// Through `ferry serve` (a write token) in front of a SQLite database, with kills in one
    /// scenario of four: the service finishes a request whose client was killed, and the model
    /// waits for it.
    func testRandomScenariosThroughTheService() async throws {
        let folder = try TemporaryFolder()
        let origin = try SyncOrigin.all(folder: folder)[0]
        try origin.reset(rows: 4)
        let service = try await RunningService(database: origin.url, drivers: SyncOrigin.drivers)
        defer { service.stop() }
        try run(origin: 0, count: Self.scenarios(300), folder: folder,
                setup: { ModelSetup(origin: $0, folder: $1, syncURL: service.url(token: service.write), killEvery: 4,
                                    afterKill: { service.waitIdle(endingAbandonedSnapshots: true) }) },
                via: " through the service")
    }

    /// The optimized runner (`swift build -c release --product ferry-sync-model`; scripts/test
    /// builds it): the same model code, 6× faster than this unoptimized test process.
    static var runner: URL { TestDatabases.packageRoot().appendingPathComponent(".build/release/ferry-sync-model") }

    /// Starts the runner against `origin` (its summary line is printed when it ends).
    func startRunner(origin: String, scenarios: Int, killEvery: Int? = nil) throws -> (Subprocess, [String]) {
        guard FileManager.default.isExecutableFile(atPath: Self.runner.path) else {
            throw ModelFailure(description: "the sync model runner is missing at \(Self.runner.path): build it with `swift build -c release --product ferry-sync-model` (scripts/test does)")
        }
        var arguments = ["--origin", origin, "--scenarios", String(Self.scenarios(scenarios))]
        if let killEvery { arguments += ["--kill-every", String(killEvery)] }
        if let seed = Self.firstSeed { arguments += ["--seed", String(seed)] }
        return (try Subprocess(Self.runner.path, arguments, captureErrors: false, captureOutput: true, inheritErrors: true), arguments)
    }

    func finish(_ started: (Subprocess, [String])) {
        let (status, _, output) = started.0.wait()
        print(output, terminator: "")
        XCTAssertEqual(status, 0, "ferry-sync-model \(started.1.joined(separator: " ")) failed: the error above names the seed that replays it")
    }

    /// 10,000 scenarios against a SQLite origin (one worker per core), kills in one scenario of
    /// twenty (some 500): SIGKILL of a `ferry push`/`ferry pull` subprocess at a random moment.
    func testTenThousandScenariosAgainstASQLiteOrigin() throws {
        finish(try startRunner(origin: "sqlite", scenarios: 10_000, killEvery: 20))
    }

    /// 300 scenarios each against PostgreSQL and MySQL, side by side (each mostly waits for its
    /// server).
    func testRandomScenariosAgainstPostgreSQLAndMySQL() throws {
        let postgres = try startRunner(origin: "postgres", scenarios: 300)
        let mysql = try startRunner(origin: "mysql", scenarios: 300)
        finish(postgres)
        finish(mysql)
    }

    func run(origin index: Int, count: Int, folder given: TemporaryFolder? = nil,
             setup make: ((SyncOrigin, TemporaryFolder) -> ModelSetup)? = nil, via: String = "",
             replayFilter: String = "SyncModelTests/testRandomScenariosThroughTheService") throws {
        let folder = try given ?? TemporaryFolder()
        let origin = try SyncOrigin.all(folder: folder)[index]
        let setup = make?(origin, folder) ?? ModelSetup(origin: origin, folder: folder)
        let first = Self.firstSeed ?? UInt64(index * 1_000_003 + 17)
        do {
            let stats = try setup.run(count: count, first: first, replay: "FERRY_SYNC_SEED={seed} FERRY_SYNC_SCENARIOS=1 scripts/test --filter \(replayFilter)")
            print("sync model \(origin.name)\(via): \(stats)")
        } catch {
            XCTFail("\(error)")
        }
    }
}
