import FerryCore
import FerryDriverTestKit
import FerryMySQL
import FerryPostgres
import FerrySQLite
import FerrySync
import FerryXML
import Foundation
@testable import FerrySyncModel
import XCTest

final class SyncTests: XCTestCase {
    var folder: TemporaryFolder!
    override func setUpWithError() throws { folder = try TemporaryFolder() }

    func snapshot(_ origin: SyncOrigin, _ name: String) throws -> (Sync, SyncFile, Endpoint) {
        let sync = Sync(registry: origin.registry)
        let path = folder.path(name)
        let endpoint = try Endpoint(parsing: origin.url)
        _ = try sync.snapshot(origin: endpoint, to: path, options: SyncOrigin.options, progress: ProgressReporter(style: .quiet) { _ in })
        return (sync, try SyncFile.open(path), endpoint)
    }

    func localRows(_ file: SyncFile, _ table: String) throws -> [[String: Value]] { try SyncTestRows.read(file.db, table) }

    /// The seed systems' first failure: a row deleted offline came back on the next pull.
    func testADeleteMadeOfflineIsNeverBroughtBackByAPull() throws {
        for origin in try SyncOrigin.all(folder: folder) {
            try origin.reset(rows: 300)
            let (sync, file, endpoint) = try snapshot(origin, "del-\(origin.name).db")
            defer { file.close() }
            try SQLiteShell.run(file.path, "DELETE FROM ch WHERE tag = 'ch7'; DELETE FROM c WHERE a = 'k3' AND b = 3")
            // The origin changes other rows meanwhile: the pull reads their buckets.
            try origin.run("UPDATE ch SET v = 'origin' WHERE tag = 'ch8'; UPDATE c SET v = 'origin' WHERE b = 4")
            let pull = try sync.pull(file, origin: endpoint, policy: .fail)
            XCTAssertTrue(pull.applied, origin.name)
            XCTAssertEqual(pull.conflicts.count, 0, origin.name)
            let ch = try localRows(file, "ch")
            XCTAssertFalse(ch.contains { $0["tag"] == .text("ch7") }, "\(origin.name): the deleted row came back")
            XCTAssertEqual(ch.first { $0["tag"] == .text("ch8") }?["v"], .text("origin"), origin.name)
            XCTAssertFalse(try localRows(file, "c").contains { $0["a"] == .text("k3") && $0["b"] == .int(3) }, origin.name)
            XCTAssertEqual(try sync.status(file).pending, 2, origin.name)
            // Pushed, then gone at the origin too; a second pull changes nothing.
            let push = try sync.push(file, origin: endpoint, policy: .fail)
            XCTAssertEqual(push.tables.reduce(0) { $0 + $1.deleted }, 2, origin.name)
            XCTAssertFalse(try origin.rows("ch").contains { $0["tag"] == .text("ch7") }, origin.name)
            let again = try sync.pull(file, origin: endpoint, policy: .fail)
            XCTAssertEqual(again.tables.reduce(0) { $0 + $1.inserted + $1.updated + $1.deleted }, 0, origin.name)
            XCTAssertEqual(try sync.status(file).pending, 0, origin.name)
        }
    }

    /// The second: offline rows numbered max + 1 collided with rows the origin added meanwhile.
    func testOfflineInsertsIntoASerialTableAndOriginInsertsAreAllKept() throws {
        for origin in try SyncOrigin.all(folder: folder) {
            try origin.reset(rows: 50)
            let (sync, file, endpoint) = try snapshot(origin, "serial-\(origin.name).db")
            defer { file.close() }
            // Offline: a parent and two children referencing it, through the sqlite3 shell.
            try SQLiteShell.run(file.path, """
                INSERT INTO p (tag, v, n) VALUES ('offline-parent', 'x', 1);
                INSERT INTO ch (tag, p_id, v, n) VALUES ('offline-child-1', (SELECT id FROM p WHERE tag = 'offline-parent'), 'x', 1);
                INSERT INTO ch (tag, p_id, v, n) VALUES ('offline-child-2', last_insert_rowid() - last_insert_rowid() + (SELECT id FROM p WHERE tag = 'offline-parent'), 'x', 2);
                """)
            let localParent = try localRows(file, "p").first { $0["tag"] == .text("offline-parent") }?["id"]
            guard case .int(let localKey)? = localParent else { return XCTFail("no offline parent") }
            XCTAssertGreaterThan(localKey, 1 << 31, "\(origin.name): offline keys come from the snapshot's own range")
            // The origin adds rows too: they take max + 1 there.
            try origin.run("INSERT INTO p (tag, v, n) VALUES ('origin-parent', 'y', 2)")
            let push = try sync.push(file, origin: endpoint, policy: .fail)
            XCTAssertTrue(push.applied, origin.name)
            XCTAssertEqual(push.rekeyed.count, 3, "\(origin.name): \(push.rekeyed)")
            let pull = try sync.pull(file, origin: endpoint, policy: .fail)
            XCTAssertTrue(pull.applied, origin.name)
            let originParents = try origin.rows("p")
            XCTAssertEqual(originParents.count, 52, origin.name)
            guard let pid = originParents.first(where: { $0["tag"] == .text("offline-parent") })?["id"] else { return XCTFail("not pushed") }
            let children = try origin.rows("ch").filter { ($0["tag"].flatMap { if case .text(let t) = $0 { t } else { nil } } ?? "").hasPrefix("offline-child") }
            XCTAssertEqual(children.count, 2, origin.name)
            XCTAssertTrue(children.allSatisfy { $0["p_id"] == pid }, "\(origin.name): children reference the parent's new key")
            // The snapshot holds the same keys as the origin, and both parents.
            XCTAssertEqual(try localRows(file, "p").first { $0["tag"] == .text("offline-parent") }?["id"], pid, origin.name)
            XCTAssertTrue(try localRows(file, "ch").filter { $0["p_id"] == pid }.count == 2, origin.name)
            XCTAssertTrue(try localRows(file, "p").contains { $0["tag"] == .text("origin-parent") }, origin.name)
            // The origin's counter moved past the pushed rows: its next insert does not collide.
            try origin.run("INSERT INTO p (tag, v, n) VALUES ('origin-after', 'z', 3)")
            XCTAssertEqual(try origin.rows("p").count, 53, origin.name)
            XCTAssertTrue(try sync.pull(file, origin: endpoint, policy: .fail).applied, origin.name)
            try assertEqual(origin, file)
        }
    }

    /// The third: "the phone is always newest" overwrote the origin's edit of the same row.
    func testTheSameRowEditedOnBothSidesIsAConflictNotASilentOverwrite() throws {
        for origin in try SyncOrigin.all(folder: folder) {
            try origin.reset(rows: 40)
            let (sync, file, endpoint) = try snapshot(origin, "conflict-\(origin.name).db")
            defer { file.close() }
            try SQLiteShell.run(file.path, "UPDATE s SET v = 'local' WHERE tag = 's1'; UPDATE s SET n = 100 WHERE tag = 's2'; UPDATE s SET v = 'mine' WHERE tag = 's3'")
            try origin.run("UPDATE s SET v = 'origin' WHERE tag = 's1'; UPDATE s SET v = 'theirs' WHERE tag = 's2'")
            // fail: nothing applied, the conflict listed with all three values.
            let failed = try sync.push(file, origin: endpoint, policy: .fail)
            XCTAssertFalse(failed.applied, origin.name)
            XCTAssertEqual(failed.unresolved, 2, origin.name)
            let s1 = failed.conflicts.first { $0.key.contains("id=2") }
            XCTAssertEqual(s1?.columns.first { $0.column == "v" }.map { [$0.local, $0.base, $0.origin] }, ["'local'", "'v1'", "'origin'"], origin.name)
            XCTAssertEqual(try origin.rows("s").first { $0["tag"] == .text("s3") }?["v"], .text("v3"), "\(origin.name): nothing applied under fail")
            XCTAssertEqual(try sync.status(file).pending, 3, origin.name)
            // merge: s2 merges (different columns), s1 stays a conflict: still nothing applied.
            let merged = try sync.push(file, origin: endpoint, policy: .merge)
            XCTAssertFalse(merged.applied, origin.name)
            XCTAssertEqual(merged.unresolved, 1, origin.name)
            // Settle s1 locally in favour of the origin's row, then merge the rest.
            let pulled = try sync.pull(file, origin: endpoint, policy: .merge)
            XCTAssertFalse(pulled.applied, origin.name)
            try SQLiteShell.run(file.path, "UPDATE s SET v = 'origin' WHERE tag = 's1'")
            let push = try sync.push(file, origin: endpoint, policy: .merge)
            XCTAssertTrue(push.applied, "\(origin.name): \(push.conflicts.map(\.line))")
            let rows = try origin.rows("s")
            XCTAssertEqual(rows.first { $0["tag"] == .text("s2") }.map { [$0["v"], $0["n"]] }, [.text("theirs"), .int(100)], origin.name)
            XCTAssertEqual(rows.first { $0["tag"] == .text("s3") }?["v"], .text("mine"), origin.name)
            _ = try sync.pull(file, origin: endpoint, policy: .fail)
            try assertEqual(origin, file)
        }
    }

    func testBadInputIsOneClearErrorAndKeepsPendingChanges() throws {
        let notASnapshot = folder.path("plain.db")
        try SQLiteShell.run(notASnapshot, "CREATE TABLE t (id INTEGER PRIMARY KEY)")
        XCTAssertThrowsError(try SyncFile.open(notASnapshot)) { XCTAssertTrue("\($0)".contains("is not a Ferry snapshot"), "\($0)") }
        XCTAssertThrowsError(try SyncFile.open(folder.path("nothing.db"))) { XCTAssertTrue("\($0)".contains("no such file"), "\($0)") }

        let origin = try SyncOrigin.all(folder: folder)[1]  // PostgreSQL
        try origin.reset(rows: 10)
        let (sync, file, endpoint) = try snapshot(origin, "bad.db")
        defer { file.close() }
        try SQLiteShell.run(file.path, "UPDATE s SET v = 'pending' WHERE tag = 's1'; UPDATE ch SET v = 'pending' WHERE tag = 'ch1'")
        XCTAssertEqual(try sync.status(file).pending, 2)
        // An origin that is not there: a clear error, the change still pending.
        let gone = try Endpoint(parsing: "postgres://ferry@127.0.0.1:1/nowhere")
        do {
            let r = try sync.push(file, origin: gone, policy: .fail)
            XCTFail("pushed to nowhere: \(r)")
        } catch {
            XCTAssertTrue("\(error)".contains("127.0.0.1:1"), "\(error)")
        }
        XCTAssertEqual(try sync.status(file).pending, 2)
        // A snapshot refuses a table without a key, naming it.
        try origin.run("DROP TABLE IF EXISTS nokey; CREATE TABLE nokey (x INTEGER)")
        var withNokey = SyncOrigin.options
        withNokey.tables.append(TableName("nokey"))
        XCTAssertThrowsError(try sync.snapshot(origin: endpoint, to: folder.path("nokey.db"), options: withNokey, progress: ProgressReporter(style: .quiet) { _ in })) {
            XCTAssertTrue("\($0)".contains("nokey has no primary key"), "\($0)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: folder.path("nokey.db")))
        try origin.run("DROP TABLE nokey")
        // A table dropped at the origin: a pull, and a push with changes to it, stop naming it;
        // nothing pending is lost.
        try origin.run("DROP TABLE ch")
        for attempt in [{ _ = try sync.pull(file, origin: endpoint, policy: .fail) }, { _ = try sync.push(file, origin: endpoint, policy: .fail) }] {
            XCTAssertThrowsError(try attempt()) { XCTAssertTrue("\($0)".contains("no longer exists at the origin"), "\($0)") }
        }
        XCTAssertEqual(try sync.status(file).pending, 2)
        // A column dropped is drift too; a column added is taken.
        try origin.reset(rows: 10)
        let (sync2, file2, _) = try snapshot(origin, "drift.db")
        defer { file2.close() }
        try origin.run("ALTER TABLE s ADD COLUMN note VARCHAR(20) DEFAULT 'hello'")
        let pull = try sync2.pull(file2, origin: endpoint, policy: .fail)
        XCTAssertEqual(pull.tables.first { $0.name == "s" }?.columnsAdded, ["note"])
        XCTAssertEqual(try localRows(file2, "s").first?["note"], .text("hello"))
        try SQLiteShell.run(file2.path, "INSERT INTO s (tag, v, n, note) VALUES ('after', 'a', 1, 'local note')")
        XCTAssertTrue(try sync2.push(file2, origin: endpoint, policy: .fail).applied)
        XCTAssertEqual(try origin.rows("s").first { $0["tag"] == .text("after") }?["note"], .text("local note"))
        try origin.run("ALTER TABLE s DROP COLUMN v")
        XCTAssertThrowsError(try sync2.pull(file2, origin: endpoint, policy: .fail)) { XCTAssertTrue("\($0)".contains("column v was dropped"), "\($0)") }
    }

    /// Through `ferry serve`, on every engine behind it: snapshot and pull with a read-only
    /// token; a push with it is refused (nothing applied, pending kept); with a write token the
    /// push applies — offline parent and children re-keyed, a conflict under `fail` listed and
    /// nothing applied — and snapshot and origin end equal.
    func testSnapshotPullAndPushThroughTheService() async throws {
        for origin in try SyncOrigin.all(folder: folder) {
            try origin.reset(rows: 1_000)
            let service = try await RunningService(database: origin.url, drivers: SyncOrigin.drivers)
            defer { service.stop() }
            let sync = Sync(registry: origin.registry)
            let endpoint = try Endpoint(parsing: service.url(token: service.readOnly))
            let path = folder.path("served-\(origin.name).db")
            _ = try sync.snapshot(origin: endpoint, to: path, options: SyncOrigin.options, progress: ProgressReporter(style: .quiet) { _ in })
            let file = try SyncFile.open(path)
            defer { file.close() }
            XCTAssertFalse(try file.origin().contains(service.readOnly), "the token is never stored")
            try SQLiteShell.run(path, "DELETE FROM ch WHERE tag = 'ch5'; UPDATE s SET v = 'local' WHERE tag = 's9'")
            try origin.run("UPDATE s SET v = 'origin' WHERE tag = 's10'; DELETE FROM ch WHERE tag = 'ch6'; INSERT INTO p (tag, v, n) VALUES ('new', 'n', 1)")
            let pull = try sync.pull(file, origin: endpoint, policy: .fail)
            XCTAssertTrue(pull.applied, origin.name)
            XCTAssertEqual(pull.tables.map { $0.inserted + $0.updated + $0.deleted }.reduce(0, +), 3, origin.name)
            XCTAssertLessThan(pull.tables.map(\.rowsRead).reduce(0, +), 400, "\(origin.name): only differing ranges are read")
            let ch = try localRows(file, "ch")
            XCTAssertFalse(ch.contains { $0["tag"] == .text("ch5") || $0["tag"] == .text("ch6") }, origin.name)
            // A read-only token may not push.
            XCTAssertThrowsError(try sync.push(file, origin: endpoint, policy: .fail)) { XCTAssertTrue("\($0)".contains("may only read"), "\($0)") }
            XCTAssertEqual(try sync.status(file).pending, 2, origin.name)
            // A write token may; offline rows of serial tables are re-keyed through it.
            let writer = try Endpoint(parsing: service.url(token: service.write))
            try SQLiteShell.run(path, """
                INSERT INTO p (tag, v, n) VALUES ('offline-parent', 'x', 1);
                INSERT INTO ch (tag, p_id, v, n) VALUES ('offline-child', (SELECT id FROM p WHERE tag = 'offline-parent'), 'x', 1);
                """)
            let push = try sync.push(file, origin: writer, policy: .fail)
            XCTAssertTrue(push.applied, "\(origin.name): \(push.conflicts)")
            XCTAssertEqual(push.rekeyed.count, 2, origin.name)
            XCTAssertEqual(try sync.status(file).pending, 0, origin.name)
            // The same row changed on both sides: listed under fail, nothing applied.
            try SQLiteShell.run(path, "UPDATE s SET v = 'mine' WHERE tag = 's20'; UPDATE s SET v = 'also mine' WHERE tag = 's21'")
            try origin.run("UPDATE s SET v = 'theirs' WHERE tag = 's20'")
            let refused = try sync.push(file, origin: writer, policy: .fail)
            XCTAssertFalse(refused.applied, origin.name)
            XCTAssertEqual(refused.conflicts.count, 1, origin.name)
            XCTAssertNotEqual(try origin.rows("s").first { $0["tag"] == .text("s21") }?["v"], .text("also mine"), "\(origin.name): nothing applied")
            XCTAssertTrue(try sync.push(file, origin: writer, policy: .merge).applied == false, "\(origin.name): the same column stays open under merge")
            XCTAssertTrue(try sync.push(file, origin: writer, policy: .local).applied, origin.name)
            XCTAssertTrue(try sync.pull(file, origin: writer, policy: .fail).applied, origin.name)
            XCTAssertEqual(try origin.rows("s").first { $0["tag"] == .text("s20") }?["v"], .text("mine"), origin.name)
            try assertEqual(origin, file)
            XCTAssertEqual(try sync.status(file).pending, 0, origin.name)
        }
    }

    /// The guarded push every origin applies (directly, and through `ferry serve`): all tables
    /// or nothing; a row no longer as expected, or an insert whose key was taken, applies
    /// nothing and is named; the same id twice applies once.
    /// The guarded push reads the rows it checks by key list (`k IN (…)`, index lookups, 500
    /// keys a statement): on every engine, for a serial, a composite and a UUID key, more than
    /// two statements' worth, keys that do not exist, and inside a write transaction with the
    /// rows locked. Every row found equals the row a full read gives, field by field.
    func testRowsAreReadByKeyListOnEveryEngine() throws {
        for origin in try SyncOrigin.all(folder: folder) {
            try origin.reset(rows: 1_300)
            let c = try origin.connect()
            defer { c.close() }
            XCTAssertTrue(c.dialect.selectsByKeyList, origin.name)
            for (table, key) in [("s", ["id"]), ("c", ["a", "b"]), ("u", ["id"])] {
                let schema = try c.describe(TableName(table))
                let keyIndexes = key.compactMap { k in schema.columns.firstIndex { $0.name == k } }
                let all = try SyncTestRows.read(c, table).map { r in schema.columns.map { r[$0.name] ?? .null } }
                XCTAssertGreaterThanOrEqual(all.count, 1_300, "\(origin.name) \(table)")
                // Every other row, and keys no row has: 650 present, 600 absent (three statements).
                var wanted = stride(from: 0, to: all.count, by: 2).map { i in keyIndexes.map { all[i][$0] } }
                for i in 0..<600 {
                    switch table {
                    case "c": wanted.append([.text("absent\(i)"), .int(Int64(i))])
                    case "u":
                        // In the form the engine reads UUIDs in (bytes, or text).
                        let text = SyncOrigin.uuid(UInt64(i) + 9_000_000, 7)
                        if case .uuid = all[0][keyIndexes[0]] {
                            let hex = Array(text.replacingOccurrences(of: "-", with: ""))
                            wanted.append([.uuid(stride(from: 0, to: 32, by: 2).compactMap { UInt8(String(hex[$0...$0 + 1]), radix: 16) })])
                        } else {
                            wanted.append([.text(text)])
                        }
                    default: wanted.append([.int(Int64(10_000_000 + i))])
                    }
                }
                // The reader itself returns only the listed rows (not a scan filtered in Ferry).
                var range = KeyRange(key: [])
                range.keys = Array(wanted.prefix(RowValues.keysPerRead)) + Array(wanted.suffix(100))
                range.keyColumns = key
                let reader = try c.reader(table: schema, columns: schema.columns, keyRange: range, batchSize: 256)
                var returned = 0
                while let b = try reader.next() { returned += b.count }
                reader.close()
                XCTAssertEqual(returned, RowValues.keysPerRead, "\(origin.name) \(table): rows returned for \(RowValues.keysPerRead) present and 100 absent keys")
                for lock in [false, true] {
                    if lock { try c.begin() }
                    let found = try RowValues.rows(c, schema, columns: schema.columns, keyIndexes: keyIndexes, keys: wanted, lock: lock)
                    if lock { try c.rollback() }
                    XCTAssertEqual(found.count, (all.count + 1) / 2, "\(origin.name) \(table) lock \(lock)")
                    for i in stride(from: 0, to: all.count, by: 2) {
                        let k = keyIndexes.map { all[i][$0] }
                        XCTAssertTrue(RowValues.same(found[k], all[i]), "\(origin.name) \(table) \(k): \(String(describing: found[k])) ≠ \(all[i])")
                    }
                }
            }
        }
    }

    /// A SQLite database behind the service, a read snapshot held open by a write token (as a
    /// client killed mid-read leaves it; a read token may not hold one on a SQLite file in a
    /// rollback journal, `FaultTests`): a push waits the driver's busy timeout, then is answered 503 `busy`
    /// (not a 500), names no SQL or path, and applied nothing; once the snapshot ends the same
    /// push applies.
    func testAPushBlockedByAHeldSnapshotIsBusyAndAppliesNothing() async throws {
        let origin = try SyncOrigin.all(folder: folder)[0]
        try origin.reset(rows: 4)
        let service = try await RunningService(database: origin.url, drivers: SyncOrigin.drivers)
        defer { service.stop() }
        let (created, answer) = try service.request("POST", "v1/snapshots", token: service.write)
        XCTAssertEqual(created, 201, answer)
        let id = try XCTUnwrap(answer.range(of: "id=\"").map { String(answer[$0.upperBound...].prefix { $0 != "\"" }) })
        let (read, page) = try service.request("GET", "v1/tables/s/rows?limit=1&snapshot=" + id, token: service.write)
        XCTAssertEqual(read, 200, page)

        let c = try origin.registry.connect(try Endpoint(parsing: service.url(token: service.write)), role: .target)
        defer { c.close() }
        let s = try c.describe(TableName("s"))
        let row = try XCTUnwrap(try origin.rows("s").first { $0["tag"] == .text("s1") })
        let image = s.columns.map { row[$0.name] ?? .null }
        var changed = image
        if let v = s.columns.firstIndex(where: { $0.name == "v" }) { changed[v] = .text("pushed") }
        let push = GuardedPush(id: "busy-1", tables: [GuardedTableChanges(table: s.name, columns: s.columns, key: ["id"], updates: [.init(expected: image, row: changed)])])
        XCTAssertThrowsError(try c.applyGuardedPush(push)) { error in
            let text = "\(error)"
            XCTAssertTrue(text.contains("503") && text.contains("busy") && text.contains("try again"), text)
            XCTAssertFalse(text.contains("UPDATE") || text.contains("SELECT") || text.contains(origin.url.dropFirst("sqlite:".count)), text)
        }
        XCTAssertEqual(try origin.rows("s").first { $0["tag"] == .text("s1") }?["v"], row["v"])
        XCTAssertFalse(try c.pushCommitted("busy-1"))
        // The snapshot released: the same push applies.
        let (released, _) = try service.request("DELETE", "v1/snapshots/" + id, token: service.readOnly)
        XCTAssertEqual(released, 200)
        guard case .applied = try c.applyGuardedPush(push) else { return XCTFail("the push did not apply once the snapshot ended") }
        XCTAssertEqual(try origin.rows("s").first { $0["tag"] == .text("s1") }?["v"], .text("pushed"))
    }

    func testAGuardedPushAppliesAllTablesOrNothing() async throws {
        for origin in try SyncOrigin.all(folder: folder) {
            try origin.reset(rows: 10)
            let service = try await RunningService(database: origin.url, drivers: SyncOrigin.drivers)
            defer { service.stop() }
            for (via, url) in [("direct", origin.url), ("service", service.url(token: service.write))] {
                let what = "\(origin.name) \(via)"
                try origin.reset(rows: 10)
                let c = try origin.registry.connect(try Endpoint(parsing: url), role: .target)
                defer { c.close() }
                let s = try c.describe(TableName("s")), p = try c.describe(TableName("p"))
                func image(_ table: String, _ tag: String, _ schema: TableSchema) throws -> [Value] {
                    guard let row = try origin.rows(table).first(where: { $0["tag"] == .text(tag) }) else { throw ModelFailure(description: "no \(tag)") }
                    return schema.columns.map { row[$0.name] ?? .null }
                }
                func with(_ row: [Value], _ schema: TableSchema, _ column: String, _ value: Value) -> [Value] {
                    var row = row
                    if let i = schema.columns.firstIndex(where: { $0.name == column }) { row[i] = value }
                    return row
                }
                let s3 = try image("s", "s3", s), s4 = try image("s", "s4", s), s5 = try image("s", "s5", s)
                let newParent: [Value] = [.int(1_000), .text("guarded-parent"), .text("x"), .int(1)]
                func push(_ id: String, stale: Bool) -> GuardedPush {
                    var st = GuardedTableChanges(table: s.name, columns: s.columns, key: ["id"])
                    st.updates = [.init(expected: s3, row: with(s3, s, "v", .text("guarded")))]
                    if stale { st.updates.append(.init(expected: with(s4, s, "v", .text("not what it is")), row: with(s4, s, "v", .text("lost")))) }
                    st.deletes = [s5]
                    return GuardedPush(id: id, tables: [GuardedTableChanges(table: p.name, columns: p.columns, key: ["id"], inserts: [newParent]), st])
                }
                // A stale expectation: nothing of either table applied, the row named.
                let refused = try c.applyGuardedPush(push("gp-1", stale: true))
                let s4Key = s.columns.firstIndex { $0.name == "id" }.map { "id=\(s4[$0])" } ?? "?"
                XCTAssertEqual(refused, .changed([ChangedRow(table: s.name, key: s4Key)]), what)
                XCTAssertFalse(try origin.rows("p").contains { $0["tag"] == .text("guarded-parent") }, what)
                XCTAssertEqual(try image("s", "s3", s), s3, what)
                XCTAssertTrue(try origin.rows("s").contains { $0["tag"] == .text("s5") }, what)
                XCTAssertFalse(try c.pushCommitted("gp-1"), what)
                // As expected: everything applied, recorded under its id.
                guard case .applied(let counts) = try c.applyGuardedPush(push("gp-2", stale: false)) else { return XCTFail(what) }
                XCTAssertEqual(counts[s.name], MergeCounts(updated: 1, deleted: 1), what)
                XCTAssertEqual(counts[p.name], MergeCounts(inserted: 1), what)
                XCTAssertEqual(try image("s", "s3", s), with(s3, s, "v", .text("guarded")), what)
                XCTAssertFalse(try origin.rows("s").contains { $0["tag"] == .text("s5") }, what)
                XCTAssertTrue(try c.pushCommitted("gp-2"), what)
                // The same id again (a client that lost the answer): applied once.
                XCTAssertEqual(try c.applyGuardedPush(push("gp-2", stale: false)), .alreadyApplied, what)
                XCTAssertEqual(try origin.rows("p").filter { $0["tag"] == .text("guarded-parent") }.count, 1, what)
                // An insert whose key is taken now is no insert: nothing applied.
                let taken = try c.applyGuardedPush(GuardedPush(id: "gp-3", tables: [
                    GuardedTableChanges(table: p.name, columns: p.columns, key: ["id"], inserts: [with(newParent, p, "tag", .text("second"))]),
                ]))
                XCTAssertEqual(taken, .changed([ChangedRow(table: p.name, key: "id=1000")]), what)
                XCTAssertFalse(try origin.rows("p").contains { $0["tag"] == .text("second") }, what)
            }
        }
    }

    /// A guarded push of more rows of every part than two batches (the applier checks and
    /// writes 1,000 rows a statement batch; through `ferry serve` the document is kept in a
    /// temporary file and read again for each part): one stale expectation in its last batch
    /// applies nothing and is named alone; as expected, every insert, update and delete lands,
    /// value by value, directly and through the service, on every engine.
    func testALargeGuardedPushIsCheckedAndWrittenABatchAtATime() async throws {
        for origin in try SyncOrigin.all(folder: folder) {
            try origin.reset(rows: 2_500)
            let service = try await RunningService(database: origin.url, drivers: SyncOrigin.drivers)
            defer { service.stop() }
            for (via, url) in [("direct", origin.url), ("service", service.url(token: service.write))] {
                let what = "\(origin.name) \(via)"
                try origin.refill(rows: 2_500)
                let c = try origin.registry.connect(try Endpoint(parsing: url), role: .target)
                defer { c.close() }
                let s = try c.describe(TableName("s")), p = try c.describe(TableName("p")), ch = try c.describe(TableName("ch"))
                func images(_ table: String, _ schema: TableSchema) throws -> [[Value]] {
                    try origin.rows(table).map { row in schema.columns.map { row[$0.name] ?? .null } }
                        .sorted { $0[0].description.count != $1[0].description.count ? $0[0].description.count < $1[0].description.count : $0[0].description < $1[0].description }
                }
                let sBefore = try images("s", s), pBefore = try images("p", p), chBefore = try images("ch", ch)
                XCTAssertEqual(sBefore.count, 2_500, what)
                guard let v = s.columns.firstIndex(where: { $0.name == "v" }), let sId = s.columns.firstIndex(where: { $0.name == "id" }) else { return XCTFail(what) }
                let updated = sBefore.map { row -> [Value] in
                    var r = row
                    r[v] = .text("pushed \(row[sId])")
                    return r
                }
                let inserted: [[Value]] = (0..<2_200).map { i in [.int(Int64(10_000 + i)), .text("big-p\(i)"), .text("x"), .int(Int64(i))] }
                let deleted = Array(chBefore.prefix(1_100))
                func push(_ id: String, staleAt stale: Int?) -> GuardedPush {
                    var st = GuardedTableChanges(table: s.name, columns: s.columns, key: ["id"])
                    st.updates = zip(sBefore, updated).enumerated().map { i, pair in
                        var expected = pair.0
                        if i == stale { expected[v] = .text("not what it is") }
                        return .init(expected: expected, row: pair.1)
                    }
                    return GuardedPush(id: id, tables: [
                        GuardedTableChanges(table: p.name, columns: p.columns, key: ["id"], inserts: inserted), st,
                        GuardedTableChanges(table: ch.name, columns: ch.columns, key: ["id"], deletes: deleted),
                    ])
                }
                let refused = try c.applyGuardedPush(push("big-1", staleAt: 2_400))
                XCTAssertEqual(refused, .changed([ChangedRow(table: s.name, key: "id=\(sBefore[2_400][sId])")]), what)
                XCTAssertEqual(try images("s", s), sBefore, "\(what): nothing applied")
                XCTAssertEqual(try images("p", p), pBefore, "\(what): nothing applied")
                XCTAssertEqual(try images("ch", ch), chBefore, "\(what): nothing applied")
                guard case .applied(let counts) = try c.applyGuardedPush(push("big-2", staleAt: nil)) else { return XCTFail(what) }
                XCTAssertEqual(counts[p.name], MergeCounts(inserted: 2_200), what)
                XCTAssertEqual(counts[s.name], MergeCounts(updated: 2_500), what)
                XCTAssertEqual(counts[ch.name], MergeCounts(deleted: 1_100), what)
                XCTAssertEqual(try images("s", s), updated, what)
                XCTAssertEqual(try images("p", p), pBefore + inserted, what)
                XCTAssertEqual(try images("ch", ch), Array(chBefore.dropFirst(1_100)), what)
                XCTAssertTrue(try c.pushCommitted("big-2"), what)
            }
        }
    }

    /// Snapshot and origin hold the same rows (every column of every table).
    func assertEqual(_ origin: SyncOrigin, _ file: SyncFile, file f: StaticString = #filePath, line: UInt = #line) throws {
        for t in SyncOrigin.tables {
            func canon(_ rows: [[String: Value]]) -> [String] {
                rows.map { r in r.keys.sorted().map { "\($0)=\(r[$0]!.canonicalText ?? "NULL")" }.joined(separator: ",") }.sorted()
            }
            XCTAssertEqual(canon(try origin.rows(t)), canon(try localRows(file, t)), "\(origin.name) table \(t)", file: f, line: line)
        }
    }
}

