/// A batch's buffers copied to stable memory for the duration of a write, so that a writer's
/// row loop reads raw pointers (and can hand them to C as static bindings) instead of going
/// through Swift arrays cell by cell. One memcpy per buffer per batch.
public final class PinnedBatch {
    /// One column's buffers; only those of the column's storage are set.
    public struct Column {
        public let storage: ColumnStorage
        public let ints: UnsafeMutablePointer<Int64>?
        public let doubles: UnsafeMutablePointer<Double>?
        public let arena: UnsafeMutableRawPointer?
        public let offsets: UnsafeMutablePointer<Int>?
        /// One byte per row: 1 when NULL.
        public let nulls: UnsafeMutablePointer<UInt8>

        @inline(__always) public func isNull(_ row: Int) -> Bool { nulls[row] != 0 }
        @inline(__always) public func int(_ row: Int) -> Int64 { ints.unsafelyUnwrapped[row] }
        @inline(__always) public func double(_ row: Int) -> Double { doubles.unsafelyUnwrapped[row] }
        /// Row `row`'s bytes.
        @inline(__always) public func bytes(_ row: Int) -> UnsafeRawBufferPointer {
            let o = offsets.unsafelyUnwrapped
            return UnsafeRawBufferPointer(start: arena.unsafelyUnwrapped + o[row], count: o[row + 1] - o[row])
        }
    }

    public let columns: [Column]
    public let count: Int

    public init(_ batch: RowBatch) {
        count = batch.count
        columns = batch.columns.map { c in
            let n = c.count
            let nulls = UnsafeMutablePointer<UInt8>.allocate(capacity: max(n, 1))
            for r in 0..<n { nulls[r] = c.isNull(r) ? 1 : 0 }
            var ints: UnsafeMutablePointer<Int64>?
            var doubles: UnsafeMutablePointer<Double>?
            var arena: UnsafeMutableRawPointer?
            var offsets: UnsafeMutablePointer<Int>?
            switch c.storage {
            case .int64:
                let p = UnsafeMutablePointer<Int64>.allocate(capacity: max(n, 1))
                c.ints.withUnsafeBufferPointer { if let b = $0.baseAddress { p.update(from: b, count: n) } }
                ints = p
            case .double:
                let p = UnsafeMutablePointer<Double>.allocate(capacity: max(n, 1))
                c.doubles.withUnsafeBufferPointer { if let b = $0.baseAddress { p.update(from: b, count: n) } }
                doubles = p
            case .bytes:
                let a = UnsafeMutableRawPointer.allocate(byteCount: max(c.arena.count, 1), alignment: 8)
                c.arena.withUnsafeBytes { if let b = $0.baseAddress { a.copyMemory(from: b, byteCount: $0.count) } }
                arena = a
                let o = UnsafeMutablePointer<Int>.allocate(capacity: n + 1)
                c.offsets.withUnsafeBufferPointer { if let b = $0.baseAddress { o.update(from: b, count: n + 1) } }
                offsets = o
            }
            return Column(storage: c.storage, ints: ints, doubles: doubles, arena: arena, offsets: offsets, nulls: nulls)
        }
    }

    deinit {
        for c in columns {
            c.nulls.deallocate()
            c.ints?.deallocate()
            c.doubles?.deallocate()
            c.arena?.deallocate()
            c.offsets?.deallocate()
        }
    }
}
