import Foundation

extension CopyEngine {
    /// The writer of keyed modes: each batch upserted by key in the table's transaction, counted.
    final class MergeWriter: BatchWriter {
        let target: any Connection
        let table: TableSchema
        let columns: [Column]
        let key: [String]
        private(set) var counts = MergeCounts()
        /// Positions of the key among `columns`, when the canonical text of every key written
        /// is kept in `seen` (a mirror's deletes).
        let collectKeysAt: [Int]?
        private(set) var seen = Set<[UInt8]>()
        /// An incremental copy's column (its place and type), and the largest value written in it.
        var tracking: (index: Int, type: LogicalType)?
        private(set) var largest: Value?
        init(target: any Connection, table: TableSchema, columns: [Column], key: [String], collectKeysAt: [Int]? = nil) {
            self.target = target
            self.table = table
            self.columns = columns
            self.key = key
            self.collectKeysAt = collectKeysAt
        }
        func write(_ batch: RowBatch) throws {
            counts = counts + (try target.mergeRows(into: table, columns: columns, key: key, rows: batch))
            if let t = tracking { largest = CopyEngine.largest(batch, index: t.index, type: t.type, above: largest) }
            if let at = collectKeysAt {
                let types = columns.map(\.logicalType)
                for row in 0..<batch.count { seen.insert(Self.keyText(batch, row: row, at: at, types: types)) }
            }
        }
        /// The canonical text of a row's key: equal for equal keys whatever engine read them.
        static func keyText(_ batch: RowBatch, row: Int, at: [Int], types: [LogicalType]) -> [UInt8] {
            var out: [UInt8] = []
            CanonicalText.appendFields(batch, row: row, at: at, types: types, into: &out)
            return out
        }
        func finish() throws {}
        func abort() {}
    }
}
