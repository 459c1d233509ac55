import FerryCore
import FerryDriverTestKit
@testable import FerryPlugins
@testable import FerryXML
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

    /// Flow control (docs/plugins.md): the kit announces windows, so Ferry reads a table from it
    /// in pages of any size; two streams of one plugin process read in step, then one read whole
    /// while the other waits unread, arrive exactly — and an unread answer waits in the plugin,
    /// never more than its window of it in Ferry.
    /// A SQLite file with table `t` of `rows` rows of about 200 bytes (made by the sqlite3 tool).
    func windowsTable(_ folder: TemporaryFolder, rows: Int) throws -> String {
        let file = folder.path("windows.sqlite")
        let sqlite = Process()
        sqlite.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        sqlite.arguments = [file, """
            CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL);
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(rows)) INSERT INTO t SELECT i, printf('%0200d', i) FROM n;
            """]
        try sqlite.run()
        sqlite.waitUntilExit()
        XCTAssertEqual(sqlite.terminationStatus, 0, "sqlite3 made the table (scripts/test installs the sqlite3 tool)")
        return file
    }

    /// The SQLite plugin kit started by hand on `file` (as Ferry starts it): the process, its
    /// stdin and a reader of the frames on its stdout.
    func startKit(file: String, role: String) throws -> (Process, Pipe, PluginFrameReader) {
        let plugin = Process()
        plugin.executableURL = PluginFixtures.products.appendingPathComponent("ferry-driver-sqlitekit")
        plugin.environment = ["FERRY_DRIVER_URL": "sqlitekit:" + file, "FERRY_DRIVER_ROLE": role, "FERRY_PROTOCOL": "1"]
        let input = Pipe(), output = Pipe()
        plugin.standardInput = input
        plugin.standardOutput = output
        try plugin.run()
        let fd = output.fileHandleForReading.fileDescriptor
        let reader = PluginFrameReader { buffer in
            while true {
                let n = read(fd, buffer.baseAddress, buffer.count)
                if n < 0 && errno == EINTR { continue }
                return max(n, 0)
            }
        }
        return (plugin, input, reader)
    }

    func testWindowsKeepUnreadAnswersInThePlugin() throws {
        let folder = try TemporaryFolder()
        let rows = 60_000  // ~13 MB of <rows>: three windows and more per stream
        let file = try windowsTable(folder, rows: rows)

        let driver = PluginDriver(scheme: "sqlitekit", path: PluginFixtures.products.appendingPathComponent("ferry-driver-sqlitekit").path)
        let endpoint = try Endpoint(parsing: "sqlitekit:" + file)
        let a = try driver.connect(endpoint, role: .source), b = try driver.connect(endpoint, role: .source)
        defer {
            a.close()
            b.close()
        }
        let connection = try XCTUnwrap(a as? HTTPConnection)
        let process = try XCTUnwrap(connection.client.transport as? PluginTransport).process
        XCTAssertIdentical(process, try XCTUnwrap((b as? HTTPConnection)?.client.transport as? PluginTransport).process, "one process for both")
        XCTAssertTrue(process.windows, "FerryPluginKit announces flow-control=\"windows\"")
        XCTAssertEqual(connection.pageBytes, HTTPConnection.largePageBytes)
        let table = try a.describe(TableName("t"))

        /// Reads batches from `reader` into `ids`/`texts` until `until` rows (or its end).
        func read(_ reader: any BatchReader, into seen: inout [Int64], until: Int) throws -> Bool {
            while seen.count < until {
                guard let batch = try reader.next() else { return false }
                for r in 0..<batch.count {
                    let id = batch.columns[0].ints[r]
                    XCTAssertEqual(batch.columns[1].string(r), String(repeating: "0", count: 200 - String(id).count) + String(id))
                    seen.append(id)
                }
            }
            return true
        }
        for inStep in [true, false] {
            let first = try a.reader(table: table, columns: table.columns, keyRange: nil, batchSize: 1_000)
            let second = try b.reader(table: table, columns: table.columns, keyRange: nil, batchSize: 1_000)
            var one: [Int64] = [], two: [Int64] = []
            if inStep {
                // As verify reads: a batch of one, a batch of the other.
                var going = true
                while going {
                    let more1 = try read(first, into: &one, until: one.count + 1)
                    let more2 = try read(second, into: &two, until: two.count + 1)
                    going = more1 || more2
                }
            } else {
                // The second answer is asked for, then left unread while the first is read whole.
                _ = try read(second, into: &two, until: 1)
                _ = try read(first, into: &one, until: Int.max)
                _ = try read(second, into: &two, until: Int.max)
            }
            first.close()
            second.close()
            XCTAssertEqual(one, (1...Int64(rows)).map { $0 }, "in step: \(inStep)")
            XCTAssertEqual(two, (1...Int64(rows)).map { $0 }, "in step: \(inStep)")
        }
        XCTAssertGreaterThan(process.peakBufferedBytes, PluginFrame.windowStep)
        XCTAssertLessThanOrEqual(process.peakBufferedBytes, PluginFrame.initialWindow, "an unread answer holds at most its window in Ferry")
    }

    /// The kit's side of flow control, frame by frame on its pipes: an answer asked with
    /// `Window:` stops at the window, goes on by exactly what a `window` frame allows, and a
    /// plugin whose answer waits for its window exits as soon as Ferry closes its stdin (the
    /// waiting answer dropped), not after the kit's 5 s grace or Ferry's kill.
    func testTheKitStopsAtItsWindowAndExitsWhenFerryIsDone() throws {
        let folder = try TemporaryFolder()
        let file = try windowsTable(folder, rows: 60_000)
        let (plugin, input, reader) = try startKit(file: file, role: "source")
        let hello = try XCTUnwrap(try reader.next())
        XCTAssertEqual(hello.kind, .hello)
        XCTAssertTrue(try XMLDocuments.decodeCapabilities(Data(hello.payload)).windows, "the kit announces flow-control=\"windows\"")
        let head = PluginFrame.requestHead(
            method: "GET", target: "/v1/tables/t/rows?limit=1000000&bytes=1073741824", headers: [(PluginFrame.windowHeader, String(PluginFrame.initialWindow))])
        input.fileHandleForWriting.write(Data(PluginFrame(.request, stream: 1, payload: head).encoded() + PluginFrame(.end, stream: 1).encoded()))
        /// Body bytes of stream 1 until `bytes` came (or the answer ended: fails the count).
        func body(upTo bytes: Int) throws -> Int {
            var got = 0
            while got < bytes, let frame = try reader.next() {
                XCTAssertEqual(frame.stream, 1)
                if frame.kind == .body { got += frame.payload.count }
                if frame.kind == .end { break }
            }
            return got
        }
        XCTAssertEqual(try body(upTo: PluginFrame.initialWindow), PluginFrame.initialWindow)
        input.fileHandleForWriting.write(Data(PluginFrame.window(stream: 1, bytes: 300_000).encoded()))
        // Exactly the window: a frame past it would make this count larger than asked.
        XCTAssertEqual(try body(upTo: 300_000), 300_000)
        let closedAt = Date()
        try input.fileHandleForWriting.close()
        plugin.waitUntilExit()
        XCTAssertEqual(plugin.terminationReason, .exit)
        XCTAssertEqual(plugin.terminationStatus, 0)
        XCTAssertLessThan(Date().timeIntervalSince(closedAt), 4, "the waiting answer was dropped at once (the kit waits up to 5 s for answers under way)")
    }

    /// A request's body has no window: the kit reads stdin no faster than the handler takes it.
    /// While another writer holds the target file locked, a load's handler takes about a MiB
    /// and waits, and the writing side of the pipe blocks after a few MiB instead of the plugin
    /// holding the body (a 256 MiB request piled up in it before). Released, the load completes
    /// exactly. A load whose handler fails at its first row is still read to its end and
    /// answered, and the plugin goes on serving.
    func testTheKitReadsARequestBodyNoFasterThanItIsWritten() throws {
        let folder = try TemporaryFolder()
        let file = folder.path("load.sqlite")
        let rows = 150_000  // ~30 MB of <rows>
        // The table, then a second writer holding the file's write lock until told.
        let locker = Process()
        locker.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        locker.arguments = [file]
        let lockInput = Pipe(), lockOutput = Pipe()
        locker.standardInput = lockInput
        locker.standardOutput = lockOutput
        try locker.run()
        lockInput.fileHandleForWriting.write(Data("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL);\nBEGIN IMMEDIATE;\nSELECT 'locked';\n".utf8))
        var said = Data()
        while !String(decoding: said, as: UTF8.self).contains("locked") {
            let more = lockOutput.fileHandleForReading.availableData
            XCTAssertFalse(more.isEmpty, "sqlite3 took the write lock (scripts/test installs the sqlite3 tool)")
            if more.isEmpty { return }
            said += more
        }

        let (plugin, input, reader) = try startKit(file: file, role: "target")
        XCTAssertEqual(try XCTUnwrap(try reader.next()).kind, .hello)

        /// A load on `stream`, written on a thread of its own, which counts the bytes it got into
        /// the pipe.
        let written = Locked(0)
        func load(stream: UInt64, refused: Bool) -> Worker {
            let sink = input.fileHandleForWriting
            let frames = Self.loadFrames(stream: stream, table: "t", rows: rows, refused: refused)
            return Worker(name: "load") {
                for frame in frames {
                    sink.write(Data(frame))
                    written.withLock { $0 += frame.count }
                }
            }
        }
        func answer(_ stream: UInt64) throws -> (Int, String) { try XCTUnwrap(try Self.answers(reader, count: 1)[stream]) }

        let loading = load(stream: 1, refused: false)
        // Until the writing side stops getting anywhere: the handler waits for the lock.
        var last = -1
        while written.withLock({ $0 }) != last {
            last = written.withLock { $0 }
            Thread.sleep(forTimeInterval: 0.5)
        }
        XCTAssertLessThan(last, 12 << 20, "the plugin stopped reading stdin: ~1 MiB in the handler, 4 MiB waiting for it, the pipes")
        lockInput.fileHandleForWriting.write(Data("COMMIT;\n.quit\n".utf8))
        locker.waitUntilExit()
        let (status, body) = try answer(1)
        loading.join()
        XCTAssertEqual(status, 200, body)
        XCTAssertTrue(body.contains("inserted=\"\(rows)\""), body)

        // Refused at its first row: the handler stops taking the body, which is read to its end.
        let refusing = load(stream: 3, refused: true)
        let (refusedStatus, refusedBody) = try answer(3)
        refusing.join()
        XCTAssertEqual(refusedStatus / 100, 4, refusedBody)
        input.fileHandleForWriting.write(Data(PluginFrame(.request, stream: 5, payload: PluginFrame.requestHead(method: "GET", target: "/v1/capabilities")).encoded()))
        input.fileHandleForWriting.write(Data(PluginFrame(.end, stream: 5).encoded()))
        XCTAssertEqual(try answer(5).0, 200, "the plugin goes on serving")
        try input.fileHandleForWriting.close()
        plugin.waitUntilExit()
        XCTAssertEqual(plugin.terminationStatus, 0)
    }

    /// The frames of a load of `rows` rows of about 200 bytes into `table` on `stream` (row 1's
    /// value NULL when `refused`): the request, its body in frames of about a MiB, the end.
    static func loadFrames(stream: UInt64, table: String, rows: Int, refused: Bool = false) -> [[UInt8]] {
        var frames = [PluginFrame(.request, stream: stream, payload: PluginFrame.requestHead(method: "POST", target: "/v1/tables/\(table)/rows")).encoded()]
        var document = Array("<rows>".utf8)
        for id in 1...rows {
            let value = refused && id == 1 ? "<v null=\"1\"/>" : "<v>\(String(repeating: "x", count: 180))\(id)</v>"
            document += Array("<r><v>\(id)</v>\(value)</r>".utf8)
            if document.count >= PluginFrame.maxPayload - 512 || id == rows {
                if id == rows { document += Array("</rows>".utf8) }
                frames.append(PluginFrame(.body, stream: stream, payload: document).encoded())
                document = []
            }
        }
        frames.append(PluginFrame(.end, stream: stream).encoded())
        return frames
    }

    /// The next `count` answers from `reader`, by stream: status and body.
    static func answers(_ reader: PluginFrameReader, count: Int) throws -> [UInt64: (Int, String)] {
        var status: [UInt64: Int] = [:]
        var bodies: [UInt64: Data] = [:]
        var done: [UInt64: (Int, String)] = [:]
        while done.count < count, let frame = try reader.next() {
            switch frame.kind {
            case .response: status[frame.stream] = try PluginFrame.parseStatus(frame.payload)
            case .body: bodies[frame.stream, default: Data()] += frame.payload
            case .end: done[frame.stream] = (status[frame.stream] ?? 0, String(decoding: bodies[frame.stream] ?? Data(), as: UTF8.self))
            default: XCTFail("a \(frame.kind) frame")
            }
        }
        XCTAssertEqual(done.count, count, "the plugin ended before answering")
        return done
    }

    /// Two loads into one SQLite file through one plugin, interleaved as Ferry may send them:
    /// the second's handler waits for the first's write lock, the first's for the rest of its
    /// body, which comes after the whole second body. The kit waits for a body only while its
    /// stream is the only one open, so it reads on, and both complete (waiting here would leave
    /// the second load to fail on the lock after SQLite's 10 s).
    func testTwoInterleavedLoadsIntoOneFileBothComplete() throws {
        let folder = try TemporaryFolder()
        let file = folder.path("two.sqlite")
        let sqlite = Process()
        sqlite.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        sqlite.arguments = [file, "CREATE TABLE a(id INTEGER PRIMARY KEY, v TEXT NOT NULL); CREATE TABLE b(id INTEGER PRIMARY KEY, v TEXT NOT NULL);"]
        try sqlite.run()
        sqlite.waitUntilExit()
        XCTAssertEqual(sqlite.terminationStatus, 0, "sqlite3 made the tables (scripts/test installs the sqlite3 tool)")
        let (plugin, input, reader) = try startKit(file: file, role: "target")
        XCTAssertEqual(try XCTUnwrap(try reader.next()).kind, .hello)
        let rows = 100_000  // ~20 MB each
        let first = Self.loadFrames(stream: 1, table: "a", rows: rows), second = Self.loadFrames(stream: 3, table: "b", rows: rows)
        let sink = input.fileHandleForWriting
        let writing = Worker(name: "loads") {
            // The first's request and 8 MiB of its body, the whole second load, the first's rest.
            for frame in first.prefix(9) + second + first.dropFirst(9) { sink.write(Data(frame)) }
        }
        let answers = try Self.answers(reader, count: 2)
        writing.join()
        for stream: UInt64 in [1, 3] {
            let (status, body) = try XCTUnwrap(answers[stream])
            XCTAssertEqual(status, 200, "stream \(stream): \(body)")
            XCTAssertTrue(body.contains("inserted=\"\(rows)\""), body)
        }
        try input.fileHandleForWriting.close()
        plugin.waitUntilExit()
        XCTAssertEqual(plugin.terminationStatus, 0)
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
