/// A batch's buffers pinned in place for the duration of a write, so that a writer's row loop
/// reads raw pointers (and can hand them to C as static bindings) instead of going through
/// Swift arrays cell by cell. Nothing is copied but the null flags (one byte per row): a batch
/// of 20 MB documents costs no second 20 MB while it is written.
///
/// ```swift
/// try PinnedBatch.with(batch) { pinned in
///     for row in 0..<pinned.count { … pinned.columns[c].bytes(row) … }
/// }
/// ```
public final class PinnedBatch {
    /// One column's buffers; only those of the column's storage are set. Valid only inside
    /// `PinnedBatch.with`.
    public struct Column {
        public let storage: ColumnStorage
        public let ints: UnsafePointer<Int64>?
        public let doubles: UnsafePointer<Double>?
        public let arena: UnsafeRawPointer?
        public let offsets: UnsafePointer<Int>?
        /// One byte per row: 1 when NULL.
        public let nulls: UnsafePointer<UInt8>

        @inlinable @inline(__always) public func isNull(_ row: Int) -> Bool { nulls[row] != 0 }
        @inlinable @inline(__always) public func int(_ row: Int) -> Int64 { ints.unsafelyUnwrapped[row] }
        @inlinable @inline(__always) public func double(_ row: Int) -> Double { doubles.unsafelyUnwrapped[row] }
        /// Row `row`'s bytes. Never a nil base address, also when empty: C APIs read a nil pointer
        /// as NULL (sqlite3_bind_text), and an empty string is not NULL.
        @inlinable @inline(__always) public func bytes(_ row: Int) -> UnsafeRawBufferPointer {
            let o = offsets.unsafelyUnwrapped
            return UnsafeRawBufferPointer(start: (arena ?? PinnedBatch.emptyBytes) + o[row], count: o[row + 1] - o[row])
        }
    }

    public let columns: [Column]
    public let count: Int

    /// A valid address for empty values when a column's arena has no storage at all.
    @usableFromInline nonisolated(unsafe) static let emptyBytes = UnsafeRawPointer(UnsafeMutableRawPointer.allocate(byteCount: 1, alignment: 8))

    private init(columns: [Column], count: Int) {
        self.columns = columns
        self.count = count
    }

    /// Runs `body` with every buffer of `batch` pinned (`RowBatch.withPinnedColumns`: the
    /// pointers stay valid until `body` returns), and each column's null flags computed.
    public static func with<R>(_ batch: RowBatch, _ body: (PinnedBatch) throws -> R) throws -> R {
        let n = batch.count
        let nulls = UnsafeMutablePointer<UInt8>.allocate(capacity: max(n, 1) * max(batch.columns.count, 1))
        defer { nulls.deallocate() }
        return try batch.withPinnedColumns { (pinned) throws -> R in
            let columns = pinned.enumerated().map { i, c in
                let flags = nulls + i * max(n, 1)
                // Sixty-four rows at a time: a word of null bits that is zero (no NULL among
                // them, the common case) is 64 zero flags at once, not 64 bit tests (a flag
                // per value cost 11 instructions, 2% of a mirror's, callgrind).
                var r = 0
                while r < n {
                    let end = min(r + 64, n)
                    let word = c.nullBits.map { $0[r >> 6] } ?? 0
                    if word == 0 {
                        (flags + r).initialize(repeating: 0, count: end - r)
                    } else {
                        for k in r..<end { flags[k] = UInt8(truncatingIfNeeded: (word >> UInt64(k & 63)) & 1) }
                    }
                    r = end
                }
                return Column(storage: c.storage, ints: c.ints, doubles: c.doubles, arena: c.arena, offsets: c.offsets, nulls: flags)
            }
            return try body(PinnedBatch(columns: columns, count: n))
        }
    }
}
