import CSQLite
import FerryCore

/// The text of one formatted column (dates, times, timestamps, UUIDs) for a whole batch, in
/// memory that stays where it is while the batch's rows are stepped, so the writer binds it
/// without a copy (SQLITE_STATIC). Bound as a copy per value (SQLITE_TRANSIENT), each cost
/// SQLite a malloc, a memcpy and a free (callgrind, 200,000 rows of bench_orders from
/// PostgreSQL into SQLite).
final class SQLiteFormattedColumn {
    private var base: UnsafeMutableRawPointer
    private var capacity: Int
    /// Row i's text is `offsets[i]..<offsets[i + 1]`.
    private var offsets: [Int] = [0]

    init() {
        capacity = 1 << 16
        base = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
    }

    deinit { base.deallocate() }

    /// Formats rows `0..<count` of `column` in `form` (NULL rows as empty text, never bound).
    /// Works on locals and stores them once: a class property touched per value costs a dynamic
    /// exclusivity check.
    func fill(_ column: PinnedBatch.Column, count: Int, form: SQLiteValueCodec.Form) {
        var offsets = self.offsets
        self.offsets = []
        var base = self.base, capacity = self.capacity, end = 0
        offsets.removeAll(keepingCapacity: true)
        offsets.append(0)
        for row in 0..<count {
            if !column.isNull(row) {
                let most = SQLiteValueCodec.maxTextBytes(column, row: row, form: form)
                if end + most > capacity {
                    var grown = capacity * 2
                    while end + most > grown { grown *= 2 }
                    let moved = UnsafeMutableRawPointer.allocate(byteCount: grown, alignment: 16)
                    moved.copyMemory(from: base, byteCount: end)
                    base.deallocate()
                    base = moved
                    capacity = grown
                }
                end += SQLiteValueCodec.write(column, row: row, form: form, to: (base + end).assumingMemoryBound(to: UInt8.self))
            }
            offsets.append(end)
        }
        self.base = base
        self.capacity = capacity
        self.offsets = offsets
    }

    /// Binds row `row`'s text in place: it must stay bound only until the next `fill`.
    @inline(__always)
    func bind(_ st: OpaquePointer, _ index: Int32, row: Int) -> Int32 {
        let start = offsets[row]
        return sqlite3_bind_text(st, index, (base + start).assumingMemoryBound(to: CChar.self), Int32(offsets[row + 1] - start), nil)
    }
}
