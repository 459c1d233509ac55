import FerryCore
import Foundation

/// Sorts rows by key with bounded memory: rows are gathered up to `chunkRows` rows or
/// `chunkBytes` bytes, sorted, and written to a run file next to the table; `merge` then
/// streams every run (and any source already sorted) through a k-way merge into the output.
/// Two rows with one key are refused, naming the key.
final class CSVExternalSort {
    /// A row to sort: its key and its fields (encoded, in the table's column order).
    struct Row {
        var key: CSVKey
        var fields: [String]
    }

    private let catalog: CSVCatalog
    private let stem: String
    private let table: TableName
    private let keyReader: CSVKeyReader
    private let chunkRows: Int
    private let chunkBytes: Int
    private var chunk: [Row] = []
    private var chunkSize = 0
    private(set) var runs: [String] = []

    init(catalog: CSVCatalog, stem: String, table: TableName, keyReader: CSVKeyReader, chunkRows: Int = 100_000, chunkBytes: Int = 32 << 20) {
        self.catalog = catalog
        self.stem = stem
        self.table = table
        self.keyReader = keyReader
        self.chunkRows = chunkRows
        self.chunkBytes = chunkBytes
    }

    deinit { discard() }

    func add(_ row: Row) throws {
        chunkSize += row.fields.reduce(64) { $0 + $1.utf8.count + 16 }
        chunk.append(row)
        if chunk.count >= chunkRows || chunkSize >= chunkBytes { try spill() }
    }

    /// Writes the gathered rows, sorted, to a new run file.
    private func spill() throws {
        guard !chunk.isEmpty else { return }
        chunk.sort { CSVKey.compare($0.key, $1.key) < 0 }
        let sink = try CSVRowSink(path: catalog.temporaryPath(stem, "csv.run"))
        runs.append(sink.path)
        for row in chunk { try sink.write(row.fields) }
        try sink.finish()
        chunk.removeAll(keepingCapacity: true)
        chunkSize = 0
    }

    /// Merges `sorted` (sources already in key order, e.g. the table's own file) and every
    /// row added into `sink`, in key order. Returns the last key written (nil when none).
    func merge(_ sorted: [CSVRowSource], into sink: CSVRowSink) throws -> CSVKey? {
        try spill()
        var sources = sorted
        for run in runs {
            let s = try CSVRowSource(path: run, table: table, readsHeader: false)
            s.skipsBlankLines = false
            sources.append(s)
        }
        defer { for s in sources { s.close() } }
        let reader = keyReader
        // A binary heap of (key, source, fields), smallest key on top.
        var heap: [(key: CSVKey, source: Int, fields: [String])] = []
        func push(_ item: (key: CSVKey, source: Int, fields: [String])) {
            heap.append(item)
            var i = heap.count - 1
            while i > 0 {
                let parent = (i - 1) / 2
                guard CSVKey.compare(heap[i].key, heap[parent].key) < 0 else { break }
                heap.swapAt(i, parent)
                i = parent
            }
        }
        func pop() -> (key: CSVKey, source: Int, fields: [String])? {
            guard !heap.isEmpty else { return nil }
            heap.swapAt(0, heap.count - 1)
            let top = heap.removeLast()
            var i = 0
            while true {
                let l = 2 * i + 1, r = l + 1
                var m = i
                if l < heap.count && CSVKey.compare(heap[l].key, heap[m].key) < 0 { m = l }
                if r < heap.count && CSVKey.compare(heap[r].key, heap[m].key) < 0 { m = r }
                if m == i { break }
                heap.swapAt(i, m)
                i = m
            }
            return top
        }
        func refill(_ i: Int) throws {
            guard let fields = try sources[i].next() else { return }
            push((try reader.key(fields, row: sources[i].rowsRead), i, fields))
        }
        for i in sources.indices { try refill(i) }
        var last: CSVKey?
        while let top = pop() {
            if let last {
                let order = CSVKey.compare(last, top.key)
                if order == 0 { throw CSVExternalSort.duplicate(top.key, reader: keyReader, table: table) }
                if order > 0 {
                    // Runs are sorted here: a source out of order is a table file edited by hand.
                    throw CSVExternalSort.unsorted(sources[top.source].shown, row: sources[top.source].rowsRead, reader: keyReader, table: table)
                }
            }
            try sink.write(top.fields)
            last = top.key
            try refill(top.source)
        }
        return last
    }

    /// Removes the run files.
    func discard() {
        for run in runs { CSVFileSystem.remove(run) }
        runs = []
        chunk = []
    }

    /// The error for a keyed table's file that is not in key order (edited by hand).
    static func unsorted(_ path: String, row: Int64, reader: CSVKeyReader, table: TableName) -> FerryError {
        .invalidValue(
            table: table, column: nil, key: nil,
            message: "\(path) is not sorted by its key (\(reader.names.joined(separator: ", "))) at row \(row); a keyed table's file must be in ascending key order (sort it, or take the key out of its sidecar)")
    }

    /// The error for a key two rows share. (No table: a write's caller names it, the copy
    /// engine or the client of Ferry's service, which puts it in front of the message.)
    static func duplicate(_ key: CSVKey, reader: CSVKeyReader, table: TableName) -> FerryError {
        .invalidValue(
            table: nil, column: nil, key: reader.describe(key),
            message: "two rows have this key; a keyed CSV table holds one row per key (\(reader.names.joined(separator: ", ")))")
    }
}
