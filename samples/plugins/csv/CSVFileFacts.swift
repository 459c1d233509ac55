import FerryCore
import Foundation

/// What the plugin process has learnt about files it wrote or read, keyed by the file's
/// identity (device, inode, size, modification time: a rename keeps it, any rewrite changes
/// it), so that a fact is never applied to another state of a file.
///
/// - row counts: `countRows` and `listTables` answer without reading the file again;
/// - a keyed file's last key: an append of rows in key order copies the file and adds the rows,
///   without reading the old ones;
/// - resume points: a keyed page that starts after the key a previous page ended on starts
///   reading at that page's last byte, not at the top of the file (Ferry pages a table by key,
///   one request per page);
/// - inferred schemas, so a file without sidecar is scanned once.
///
/// Shared by every connection of the process (the plugin serves a run's `--jobs` connections).
final class CSVFileFacts: @unchecked Sendable {  // unchecked: every field is used under `lock`
    static let shared = CSVFileFacts()

    private struct Facts {
        var rows: Int64?
        /// The key columns' signature and the last key, when known.
        var lastKey: (signature: String, key: CSVKey?)?
        var resume: [ResumeKey: CSVResumePoint] = [:]
        var inferred: TableSchema?
    }

    private struct ResumeKey: Hashable {
        var signature: String
        var key: CSVKey
    }

    private let lock = NSLock()
    private var facts: [CSVFileSystem.Identity: Facts] = [:]
    private static let maxFiles = 1024
    private static let maxResumePoints = 4096

    private func update(_ id: CSVFileSystem.Identity, _ body: (inout Facts) -> Void) {
        lock.withLock {
            if facts[id] == nil && facts.count >= Self.maxFiles {
                // Old states of files are what fills the table: forget them all, keep it simple.
                facts.removeAll()
            }
            body(&facts[id, default: Facts()])
        }
    }

    func rows(_ id: CSVFileSystem.Identity) -> Int64? { lock.withLock { facts[id]?.rows } }
    func setRows(_ id: CSVFileSystem.Identity, _ rows: Int64) { update(id) { $0.rows = rows } }

    /// The last key of a keyed file: `.some(nil)` when it is known to hold no rows.
    func lastKey(_ id: CSVFileSystem.Identity, signature: String) -> CSVKey?? {
        lock.withLock {
            guard let known = facts[id]?.lastKey, known.signature == signature else { return nil }
            return .some(known.key)
        }
    }
    func setLastKey(_ id: CSVFileSystem.Identity, signature: String, _ key: CSVKey?) {
        update(id) { $0.lastKey = (signature, key) }
    }

    func resumePoint(_ id: CSVFileSystem.Identity, signature: String, after key: CSVKey) -> CSVResumePoint? {
        lock.withLock { facts[id]?.resume[ResumeKey(signature: signature, key: key)] }
    }
    func setResumePoint(_ id: CSVFileSystem.Identity, signature: String, after key: CSVKey, _ point: CSVResumePoint) {
        update(id) {
            if $0.resume.count >= Self.maxResumePoints { $0.resume.removeAll() }
            $0.resume[ResumeKey(signature: signature, key: key)] = point
        }
    }

    func inferred(_ id: CSVFileSystem.Identity) -> TableSchema? { lock.withLock { facts[id]?.inferred } }
    func setInferred(_ id: CSVFileSystem.Identity, _ schema: TableSchema) { update(id) { $0.inferred = schema } }

    /// Files whose inferred schema was announced on stderr already (one line per file state).
    private var announced: Set<String> = []
    func firstAnnouncement(_ path: String, _ id: CSVFileSystem.Identity) -> Bool {
        lock.withLock { announced.insert("\(path)|\(id.inode)|\(id.size)|\(id.modifiedSeconds)|\(id.modifiedNanoseconds)").inserted }
    }

    /// The signature of a key: its columns and their types (a sidecar edited under an
    /// unchanged file changes it, and with it every fact about keys).
    static func signature(_ columns: [Column]) -> String {
        columns.map { "\($0.name):\($0.logicalType)" }.joined(separator: "|")
    }
}
