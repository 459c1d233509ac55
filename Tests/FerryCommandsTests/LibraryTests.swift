import FerryDriverTestKit
import FerryKit
import FerrySQLite
import Foundation
import XCTest

/// FerryKit, the library façade, as an app uses it: typed outcomes, progress events,
/// cancellation; and the sample program in samples/embedding, built with the package, run.
final class LibraryTests: XCTestCase {
    func testCopyVerifyDescribeWithEventsAndTypedOutcomes() async throws {
        let folder = try TemporaryFolder()
        let chinook = "sqlite:" + TestDatabases.packageRoot().appendingPathComponent("samples/chinook.sqlite").path
        let target = "sqlite:" + folder.path("copy.db")
        let events = EventLog()
        var options = CopyOptions()
        options.tables = [TableName("Artist"), TableName("Album"), TableName("Track")]
        options.batchSize = 500
        let outcome = try await Ferry.copy(from: chinook, to: target, options: options) { events.add($0) }
        XCTAssertTrue(outcome.succeeded)
        XCTAssertEqual(outcome.tables.map(\.status), [.ok, .ok, .ok])
        XCTAssertEqual(outcome.rowsCopied, 275 + 347 + 3503)
        let log = events.all
        XCTAssertEqual(log.filter { if case .started = $0 { return true } else { return false } }.count, 3)
        let advanced = log.reduce(0) { n, e in if case let .advanced(_, rows) = e { return n + rows } else { return n } }
        XCTAssertEqual(advanced, 275 + 347 + 3503, "progress events add up to the rows copied")
        XCTAssertTrue(log.contains(.finished(table: "Track", rows: 3503, seconds: log.compactMap { e -> Double? in
            if case let .finished("Track", _, s, _) = e { return s } else { return nil } }.first ?? -1, error: nil)))

        var verifyOptions = Verifier.Options()
        verifyOptions.tables = options.tables
        let report = try await Ferry.verify(chinook, against: target, options: verifyOptions)
        XCTAssertTrue(report.equal)
        XCTAssertEqual(report.tables.map(\.status), [.equal, .equal, .equal])

        let schemas = try await Ferry.describe(target, tables: ["Track"])
        XCTAssertEqual(schemas.first?.primaryKey, ["TrackId"])

        // A failed table is an outcome, not a throw; its error is one line naming the table.
        options.mode = .create
        do {
            _ = try await Ferry.copy(from: chinook, to: target, options: options)
            XCTFail("create into existing tables did not fail")
        } catch let e as FerryError {
            XCTAssertTrue("\(e)".contains("Artist"), "\(e)")
        }
        // A bad URL throws one line.
        do {
            _ = try await Ferry.copy(from: "nosuch:x", to: target)
            XCTFail("an unknown scheme did not fail")
        } catch let e as FerryError {
            XCTAssertTrue(e.isUsage)
            XCTAssertFalse("\(e)".contains("\n"))
        }
        XCTAssertTrue(Ferry.drivers.schemes.contains("sqlite") && Ferry.drivers.schemes.contains("http"))
    }

    func testCancellingTheTaskRollsTheTableBack() async throws {
        let folder = try TemporaryFolder()
        let source = folder.path("big.db")
        let db = try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + source), role: .target)
        let columns = [Column(name: "id", nativeType: "", logicalType: .int64, isNullable: false), Column(name: "v", nativeType: "", logicalType: .text)]
        try db.begin()
        try db.createTable(TableSchema(name: TableName("big"), engine: Engine("test"), columns: columns, primaryKey: ["id"]), named: TableName("big"))
        let w = try db.writer(into: try db.describe(TableName("big")), columns: columns)
        for chunk in 0..<40 {
            try w.write(RowBatch(rows: (0..<10_000).map { [.int(Int64(chunk * 10_000 + $0)), .text("row \($0)")] }, types: [.int64, .text]))
        }
        try db.commit()
        db.close()

        let target = "sqlite:" + folder.path("cancelled.db")
        let started = Semaphore()
        let task = Task {
            var options = CopyOptions()
            options.batchSize = 100
            return try await Ferry.copy(from: "sqlite:" + source, to: target, options: options) { event in
                if case .advanced = event { started.signal() }
            }
        }
        await started.wait()
        task.cancel()
        let outcome = try await task.value
        XCTAssertEqual(outcome.tables.first?.status, .cancelled, "\(outcome.tables)")
        XCTAssertFalse(outcome.succeeded)
        // The SQLite driver removes a target file it created and left empty; else the table is gone.
        if FileManager.default.fileExists(atPath: folder.path("cancelled.db")) {
            let after = try SQLiteDriver().connect(Endpoint(parsing: target), role: .source)
            defer { after.close() }
            XCTAssertFalse(try after.tableExists(TableName("big")), "the cancelled table was rolled back")
        }
    }

    /// The blocking session `ferry copy` runs on: a plan that touches nothing, the run, and a
    /// comparison against the snapshot the copy read while the source goes on changing.
    func testCopySessionPlansRunsAndVerifiesAgainstItsSnapshot() throws {
        let folder = try TemporaryFolder()
        let sourcePath = folder.path("source.db")
        try FileManager.default.copyItem(atPath: TestDatabases.packageRoot().appendingPathComponent("samples/chinook.sqlite").path, toPath: sourcePath)
        let writer = try XCTUnwrap(try SQLiteDriver().connect(Endpoint(parsing: "sqlite:" + sourcePath), role: .target) as? SQLiteConnection)
        defer { writer.close() }
        try writer.run("PRAGMA journal_mode = WAL")  // a writer beside the session's open read snapshot
        let source = try Endpoint(parsing: "sqlite:" + sourcePath), target = try Endpoint(parsing: "sqlite:" + folder.path("copy.db"))

        let session = try CopySession(source: source, target: target)
        defer { session.close() }
        var options = CopyOptions()
        options.tables = [TableName("Artist"), TableName("Album")]
        options.keepSourceSnapshot = true
        let plan = try session.plan(options)
        XCTAssertEqual(plan.tables.map(\.source.name), ["Artist", "Album"])
        XCTAssertFalse(try session.target.tableExists(TableName("Album")), "planning creates nothing")
        let summary = session.run(plan, options: options)
        XCTAssertTrue(summary.ok, "\(summary.tables.compactMap(\.error))")
        XCTAssertEqual(summary.totalRows, 275 + 347)

        try writer.run("DELETE FROM Album WHERE AlbumId = 1")
        let kept = try session.verify(plan, options: options)
        XCTAssertTrue(kept.equal, "compared with the snapshot the copy read: \(kept.tables)")
        var now = Verifier.Options()
        now.tables = options.tables
        var said: [String] = []
        let changed = try Verifier.compare(source, with: target, options: now, say: { said.append($0) })
        XCTAssertEqual(changed.tables.map(\.status), [.equal, .different], "a new comparison reads the source as it is now")
        XCTAssertEqual(said, [])
    }

    func testTheEmbeddingSampleBuildsAndRuns() throws {
        let products = CLITests.binaryURL.deletingLastPathComponent()
        let sample = products.appendingPathComponent("ferry-embedding-sample")
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: sample.path), "the sample was not built at \(sample.path)")
        let folder = try TemporaryFolder()
        let chinook = "sqlite:" + TestDatabases.packageRoot().appendingPathComponent("samples/chinook.sqlite").path
        let r = try CLITests.run(sample, [chinook, "sqlite:" + folder.path("sample.db")])
        XCTAssertEqual(r.code, 0, r.out + r.err)
        XCTAssertTrue(r.out.contains("copied 15607 rows in 11 tables; verify: equal"), r.out)
        XCTAssertTrue(r.out.contains("Track: 3503 rows"), r.out)
    }
}

/// Events gathered from the copy's threads.
final class EventLog: @unchecked Sendable {
    private let lock = NSLock()
    private var events: [ProgressReporter.Event] = []
    func add(_ e: ProgressReporter.Event) { lock.lock(); events.append(e); lock.unlock() }
    var all: [ProgressReporter.Event] { lock.lock(); defer { lock.unlock() }; return events }
}

/// Signalled once from any thread, awaited from a task.
final class Semaphore: @unchecked Sendable {
    private let lock = NSLock()
    private var signalled = false
    private var waiter: CheckedContinuation<Void, Never>?
    func signal() {
        lock.lock()
        guard !signalled else { lock.unlock(); return }
        signalled = true
        let w = waiter
        waiter = nil
        lock.unlock()
        w?.resume()
    }
    func wait() async {
        await withCheckedContinuation { c in
            lock.lock()
            if signalled { lock.unlock(); c.resume(); return }
            waiter = c
            lock.unlock()
        }
    }
}
