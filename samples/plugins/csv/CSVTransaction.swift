import FerryCore
import Foundation

/// One transaction's changes, copy-on-write: every write makes a new temporary file in the
/// folder (`.NAME.csv.tmp-…`) holding the table's whole new state; the table's own files are
/// untouched until `commit` renames the new ones over them (a rename replaces a file at once:
/// a reader sees the old file or the new one, never a part). `rollback` deletes the temporary
/// files, so a load that fails midway leaves the table as it was.
///
/// Creating, dropping and swapping tables take effect at commit too. Within the transaction,
/// the connection reads its own changes (`changes`).
final class CSVTransaction {
    /// A table's state at the end of the transaction.
    enum Change {
        /// Rows in the temporary file `csv`, schema `schema`; `newSchema` when the sidecar must
        /// be written (a created or swapped table).
        case written(csv: String, schema: TableSchema, newSchema: Bool)
        case dropped
    }

    private(set) var changes: [String: Change] = [:]
    /// Tables in the order first changed (commit renames in this order).
    private var order: [String] = []
    /// The committed file of each changed table when the transaction first touched it (nil:
    /// none): a commit that finds another state there refuses, rather than lose that write.
    private var bases: [String: CSVFileSystem.Identity?] = [:]
    /// Temporary files made by the transaction that are not renamed into place yet.
    private var temporaries: Set<String> = []
    let catalog: CSVCatalog

    init(catalog: CSVCatalog) {
        self.catalog = catalog
    }

    /// Notes table `stem`'s committed state before the transaction changes it: `base` when
    /// the change was prepared from that state earlier (a writer made before `begin`), else
    /// the state now.
    func touch(_ stem: String, base: CSVFileSystem.Identity?? = nil) {
        guard bases[stem] == nil else { return }
        bases[stem] = base ?? .some(CSVFileSystem.identity(path: catalog.csvPath(stem)))
        order.append(stem)
    }

    /// Takes `path` as one of the transaction's temporary files.
    func adopt(_ path: String) {
        temporaries.insert(path)
    }

    /// Sets table `stem`'s new state. A temporary file it replaces is deleted at once.
    func set(_ stem: String, _ change: Change) {
        touch(stem)
        if case .written(let old, _, _)? = changes[stem] {
            if case .written(let new, _, _) = change, new == old {} else {
                CSVFileSystem.remove(old)
                temporaries.remove(old)
            }
        }
        if case .written(let csv, _, _) = change { temporaries.insert(csv) }
        changes[stem] = change
    }

    /// Renames every new file over the table's, in the order the tables were first changed
    /// (sidecar before rows, so a new table never shows without its schema), then deletes
    /// dropped tables' files. Refuses, changing nothing, when another writer committed to one
    /// of the tables since this transaction read it.
    func commit() throws {
        for stem in order {
            guard let base = bases[stem] else { continue }
            let now = CSVFileSystem.identity(path: catalog.csvPath(stem))
            if now != base {
                rollback()
                throw CSVConflictError(
                    message: "\(catalog.csvPath(stem)) was replaced by another writer during this transaction; nothing was changed; run the work again")
            }
        }
        defer { removeTemporaries() }
        for stem in order {
            guard case .written(let csv, let schema, let newSchema)? = changes[stem] else { continue }
            let sidecar = catalog.schemaPath(stem)
            if newSchema || !CSVFileSystem.exists(sidecar) {
                // A table without sidecar (its schema inferred) gets one when written: its
                // schema no longer changes with its rows.
                let temporary = catalog.temporaryPath(stem, "schema.xml.tmp")
                temporaries.insert(temporary)
                try catalog.writeSidecar(schema, to: temporary)
                try CSVFileSystem.rename(temporary, sidecar)
                temporaries.remove(temporary)
            }
            try CSVFileSystem.rename(csv, catalog.csvPath(stem))
            temporaries.remove(csv)
        }
        for stem in order {
            guard case .dropped? = changes[stem] else { continue }
            CSVFileSystem.remove(catalog.csvPath(stem))
            CSVFileSystem.remove(catalog.schemaPath(stem))
        }
        CSVFileSystem.syncDirectory(catalog.directory)
        changes = [:]
        order = []
        bases = [:]
    }

    /// Deletes every temporary file: the tables stay as they were.
    func rollback() {
        removeTemporaries()
        changes = [:]
        order = []
        bases = [:]
    }

    private func removeTemporaries() {
        for path in temporaries { CSVFileSystem.remove(path) }
        temporaries = []
    }
}

/// Another writer replaced a table's file while a transaction changed it: answered as busy
/// (the same work can succeed when run again).
struct CSVConflictError: Error, DatabaseBusyError, CustomStringConvertible {
    var message: String
    var isBusy: Bool { true }
    var description: String { message }
}
