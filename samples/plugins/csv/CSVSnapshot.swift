import FerryCore
import Foundation

/// A read snapshot of the folder: a hard link to every table's current files in a private
/// folder. Writers never change a file, they rename a new one over it, so the links keep the
/// state of the moment the snapshot began for as long as it lasts, without copying a byte.
///
/// The private folder must be on the folder's file system (hard links cannot cross one): in
/// the system's temporary folder when that is the same file system, else a hidden
/// `.ferry-snapshot-…` folder inside the folder itself. It is removed when the snapshot ends.
final class CSVSnapshot {
    /// The private folder holding the links.
    let directory: String
    private var linked: [String] = []

    init(catalog: CSVCatalog) throws {
        let tmp = FileManager.default.temporaryDirectory.path
        let parent: String
        if let here = CSVFileSystem.device(of: catalog.directory), CSVFileSystem.device(of: tmp) == here {
            parent = tmp
        } else {
            parent = catalog.directory
        }
        let prefix = parent == catalog.directory ? ".ferry-snapshot-" : "ferry-csv-snapshot-"
        directory = try CSVFileSystem.makeTemporaryDirectory(in: parent, prefix: prefix)
        Self.live.add(self)
        do {
            for stem in try catalog.stems() {
                // The sidecar first: a table whose rows are linked has the schema they were written with
                // (a commit renames the sidecar before the rows).
                for (from, to) in [(catalog.schemaPath(stem), catalog.schemaPath(stem, in: directory)),
                                   (catalog.csvPath(stem), catalog.csvPath(stem, in: directory))] {
                    guard CSVFileSystem.exists(from) else { continue }
                    guard CSVFileSystem.link(from, to) else {
                        if !CSVFileSystem.exists(from) { continue }  // dropped meanwhile
                        throw CSVFileError(
                            "cannot hold a snapshot of \(catalog.directory): hard-linking \(from) into \(directory) failed (\(CSVFileSystem.lastError())); "
                                + "copy with --jobs 1, which needs no snapshot")
                    }
                    linked.append(to)
                }
            }
        } catch {
            release()
            throw error
        }
    }

    deinit { release() }

    /// Removes the links and the private folder.
    func release() {
        Self.live.remove(self)
        removeFiles()
    }

    private func removeFiles() {
        for path in linked { CSVFileSystem.remove(path) }
        linked = []
        CSVFileSystem.removeDirectory(directory)
    }

    /// Snapshots not ended yet. The plugin kit ends a run's snapshots on a background queue and
    /// exits at once when Ferry closes stdin, so the private folders are also removed at exit.
    private static let live = Registry()

    private final class Registry: @unchecked Sendable {  // unchecked: `snapshots` only under `lock`
        private let lock = NSLock()
        private var snapshots: [ObjectIdentifier: CSVSnapshot] = [:]
        private var hooked = false

        func add(_ s: CSVSnapshot) {
            lock.withLock {
                snapshots[ObjectIdentifier(s)] = s
                if !hooked {
                    hooked = true
                    atexit { CSVSnapshot.live.removeAll() }
                }
            }
        }

        func remove(_ s: CSVSnapshot) {
            _ = lock.withLock { snapshots.removeValue(forKey: ObjectIdentifier(s)) }
        }

        func removeAll() {
            let all = lock.withLock { () -> [CSVSnapshot] in
                defer { snapshots = [:] }
                return Array(snapshots.values)
            }
            for s in all { s.removeFiles() }
        }
    }
}
