/// The physical layout of a column inside a batch.
public enum ColumnStorage: Sendable, Hashable {
    /// Fixed-width Int64 values (integers, booleans as 0/1, dates, times, timestamps).
    case int64
    /// Fixed-width Double values (Float widened exactly).
    case double
    /// Variable-width values: UTF-8 text or raw bytes in one arena with offsets.
    case bytes
}

/// One column of a `RowBatch`: a typed buffer, an arena for variable-width values and a
/// null bitmap. Every row has a slot in the typed buffer (zero or empty for NULL), so row
/// `i` is always at index `i`.
public struct ColumnBuffer: Sendable {
    public let storage: ColumnStorage
    // The buffers are usable from inlinable code so that a driver's or the XML decoder's
    // append is inlined into its loop: across modules each append was a call (perf: the tagged
    // append alone 3.7% of a client decoding a service's rows, 4.9% of the service's reader).
    @usableFromInline var _ints: [Int64] = []
    @usableFromInline var _doubles: [Double] = []
    @usableFromInline var _arena = ByteArena()
    @usableFromInline var _offsets: [Int] = [0]
    /// Bit `i` set when row `i` is NULL.
    @usableFromInline var nullBits: [UInt64] = []
    @usableFromInline var _count: Int = 0
    @usableFromInline var _nullCount: Int = 0

    /// Values when `storage == .int64`.
    @inlinable public var ints: [Int64] { _ints }
    /// Values when `storage == .double`.
    @inlinable public var doubles: [Double] { _doubles }
    /// Bytes of all values when `storage == .bytes`.
    @inlinable public var arena: ByteArena { _arena }
    /// `offsets[i]..<offsets[i+1]` are row i's bytes in `arena` (count + 1 entries).
    @inlinable public var offsets: [Int] { _offsets }
    @inlinable public var count: Int { _count }
    @inlinable public var nullCount: Int { _nullCount }

    /// An empty column with room for `capacity` rows and, for variable-width values,
    /// `arenaBytes` bytes of them (default 16 a row).
    public init(storage: ColumnStorage, capacity: Int = 0, arenaBytes: Int? = nil) {
        self.storage = storage
        switch storage {
        case .int64: _ints.reserveCapacity(capacity)
        case .double: _doubles.reserveCapacity(capacity)
        case .bytes:
            _offsets.reserveCapacity(capacity + 1)
            _arena.reserveCapacity(arenaBytes ?? capacity * 16)
        }
        nullBits.reserveCapacity(capacity / 64 + 1)
    }

    /// An empty column of `other`'s storage with room for its rows and bytes.
    public init(sizedLike other: ColumnBuffer) {
        self.init(storage: other.storage)
        switch storage {
        case .int64: _ints.reserveCapacity(other.count)
        case .double: _doubles.reserveCapacity(other.count)
        case .bytes:
            _offsets.reserveCapacity(other.count + 1)
            _arena.reserveCapacity(other.arena.count)
        }
        nullBits.reserveCapacity(other.count / 64 + 1)
    }

    @inlinable @inline(__always)
    mutating func markRow(null: Bool) {
        let word = _count >> 6
        if word == nullBits.count { nullBits.append(0) }
        if null {
            nullBits[word] |= (1 as UInt64) << UInt64(_count & 63)
            _nullCount += 1
        }
        _count += 1
    }

    @inlinable @inline(__always)
    public func isNull(_ row: Int) -> Bool {
        (nullBits[row >> 6] >> UInt64(row & 63)) & 1 == 1
    }

    public mutating func appendNull() {
        switch storage {
        case .int64: _ints.append(0)
        case .double: _doubles.append(0)
        case .bytes: _offsets.append(_arena.count)
        }
        markRow(null: true)
    }

    @inlinable @inline(__always)
    public mutating func append(_ value: Int64) {
        precondition(storage == .int64, "Int64 appended to a \(storage) column")
        _ints.append(value)
        markRow(null: false)
    }

    @inlinable @inline(__always)
    public mutating func append(_ value: Double) {
        precondition(storage == .double, "Double appended to a \(storage) column")
        _doubles.append(value)
        markRow(null: false)
    }

    @inlinable @inline(__always)
    public mutating func append(bytes: UnsafeRawBufferPointer) {
        precondition(storage == .bytes, "bytes appended to a \(storage) column")
        _arena.append(bytes: bytes)
        _offsets.append(_arena.count)
        markRow(null: false)
    }

    /// Appends one value made of a leading byte and `bytes` (a driver's tagged native form).
    @inlinable @inline(__always)
    public mutating func append(tag: UInt8, bytes: UnsafeRawBufferPointer) {
        precondition(storage == .bytes, "bytes appended to a \(storage) column")
        _arena.append(tag: tag, bytes: bytes)
        _offsets.append(_arena.count)
        markRow(null: false)
    }

    /// Appends one value of exactly `count` bytes that `write` fills (a driver formatting text
    /// without an array or String of its own per value): written into temporary memory, on the
    /// arena's own memory.
    @inlinable @inline(__always)
    public mutating func append(count: Int, initializingWith write: (UnsafeMutableRawBufferPointer) -> Void) {
        precondition(storage == .bytes, "bytes appended to a \(storage) column")
        _arena.append(count: count, initializingWith: write)
        _offsets.append(_arena.count)
        markRow(null: false)
    }

    /// Appends row `row` of `other` (a column of the same storage), NULL included.
    public mutating func append(row: Int, of other: ColumnBuffer) {
        if other.isNull(row) {
            appendNull()
            return
        }
        switch other.storage {
        case .int64: append(other._ints[row])
        case .double: append(other._doubles[row])
        case .bytes: other.withUnsafeArena { append(bytes: UnsafeRawBufferPointer(rebasing: $0[other.range(row)])) }
        }
    }

    /// Appends every row of `other` (a column of the same storage), NULLs included: a column
    /// of fixed-width values without NULLs at once, others row by row.
    public mutating func append(contentsOf other: ColumnBuffer) {
        guard other.nullCount == 0, other.storage != .bytes else {
            for row in 0..<other.count { append(row: row, of: other) }
            return
        }
        precondition(storage == other.storage, "a \(other.storage) column appended to a \(storage) column")
        if storage == .int64 { _ints.append(contentsOf: other._ints) } else { _doubles.append(contentsOf: other._doubles) }
        _count += other.count
        let words = (_count + 63) >> 6
        if nullBits.count < words { nullBits.append(contentsOf: repeatElement(0, count: words - nullBits.count)) }
    }

    public mutating func append<S: Sequence>(bytes: S) where S.Element == UInt8 {
        precondition(storage == .bytes, "bytes appended to a \(storage) column")
        _arena.append(contentsOf: bytes)
        _offsets.append(_arena.count)
        markRow(null: false)
    }

    public mutating func append(string: String) {
        var s = string
        s.withUTF8 { append(bytes: UnsafeRawBufferPointer($0)) }
    }

    /// Row `i`'s byte range in `arena`.
    @inlinable @inline(__always)
    public func range(_ row: Int) -> Range<Int> { _offsets[row]..<_offsets[row + 1] }

    /// Row `i`'s bytes (a copy); for hot paths use `withUnsafeArena` and `range(_:)`.
    public func bytes(_ row: Int) -> [UInt8] { _arena[range(row)] }

    /// Row `i` as a String (bytes are UTF-8).
    public func string(_ row: Int) -> String {
        _arena.withUnsafeBytes { buf in
            String(decoding: UnsafeRawBufferPointer(rebasing: buf[range(row)]), as: UTF8.self)
        }
    }

    public func withUnsafeArena<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        try _arena.withUnsafeBytes(body)
    }

    /// Empties the column and keeps its capacity, so a reader can refill it.
    public mutating func removeAll() {
        _ints.removeAll(keepingCapacity: true)
        _doubles.removeAll(keepingCapacity: true)
        _arena.removeAll(keepingCapacity: true)
        _offsets.removeAll(keepingCapacity: true)
        _offsets.append(0)
        nullBits.removeAll(keepingCapacity: true)
        _count = 0
        _nullCount = 0
    }
}

/// One column's buffers as raw pointers, its null bits included: valid only inside
/// `RowBatch.withPinnedColumns`. Unlike `PinnedBatch` nothing is computed per row, so a batch
/// may be pinned once per piece of work (the XML encoder pins it for each piece it writes).
public struct PinnedColumn {
    public let storage: ColumnStorage
    @usableFromInline let ints: UnsafePointer<Int64>?
    @usableFromInline let doubles: UnsafePointer<Double>?
    @usableFromInline let arena: UnsafeRawPointer?
    @usableFromInline let offsets: UnsafePointer<Int>?
    @usableFromInline let nullBits: UnsafePointer<UInt64>?

    @inlinable @inline(__always) public func isNull(_ row: Int) -> Bool {
        guard let nullBits else { return false }
        return (nullBits[row >> 6] >> UInt64(row & 63)) & 1 == 1
    }
    @inlinable @inline(__always) public func int(_ row: Int) -> Int64 { ints.unsafelyUnwrapped[row] }
    @inlinable @inline(__always) public func double(_ row: Int) -> Double { doubles.unsafelyUnwrapped[row] }
    /// Row `row`'s bytes (`.bytes` storage).
    @inlinable @inline(__always) public func bytes(_ row: Int) -> UnsafeRawBufferPointer {
        let o = offsets.unsafelyUnwrapped
        return UnsafeRawBufferPointer(start: arena.map { $0 + o[row] }, count: o[row + 1] - o[row])
    }
    /// The bytes `range` of the column's arena (`.bytes` storage).
    @inlinable @inline(__always) public func bytes(_ range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: arena.map { $0 + range.lowerBound }, count: range.count)
    }
    @inlinable @inline(__always) public func range(_ row: Int) -> Range<Int> {
        let o = offsets.unsafelyUnwrapped
        return o[row]..<o[row + 1]
    }
}

extension ColumnBuffer {
    /// Runs `body` with this column's arrays pinned.
    public func withPinned<R, E: Error>(_ body: (PinnedColumn) throws(E) -> R) throws(E) -> R {
        try nullBits.withUnsafeBufferPointer { (bits) throws(E) -> R in
            switch storage {
            case .int64:
                return try ints.withUnsafeBufferPointer { (p) throws(E) -> R in
                    try body(PinnedColumn(storage: storage, ints: p.baseAddress, doubles: nil, arena: nil, offsets: nil, nullBits: bits.baseAddress))
                }
            case .double:
                return try doubles.withUnsafeBufferPointer { (p) throws(E) -> R in
                    try body(PinnedColumn(storage: storage, ints: nil, doubles: p.baseAddress, arena: nil, offsets: nil, nullBits: bits.baseAddress))
                }
            case .bytes:
                return try _arena.withUnsafeBytes { (a) throws(E) -> R in
                    try offsets.withUnsafeBufferPointer { (o) throws(E) -> R in
                        try body(PinnedColumn(storage: storage, ints: nil, doubles: nil, arena: a.baseAddress, offsets: o.baseAddress, nullBits: bits.baseAddress))
                    }
                }
            }
        }
    }
}

extension RowBatch {
    /// Runs `body` with every column's buffers pinned (nested `withUnsafe…` scopes: the
    /// pointers stay valid until `body` returns), without retaining or copying any buffer
    /// per value.
    public func withPinnedColumns<R, E: Error>(_ body: (UnsafeBufferPointer<PinnedColumn>) throws(E) -> R) throws(E) -> R {
        var pinned: [PinnedColumn] = []
        pinned.reserveCapacity(columns.count)
        func pin(_ i: Int) throws(E) -> R {
            if i == columns.count { return try pinned.withUnsafeBufferPointer { (p) throws(E) -> R in try body(p) } }
            return try columns[i].withPinned { (column) throws(E) -> R in
                pinned.append(column)
                return try pin(i + 1)
            }
        }
        return try pin(0)
    }
}
