/// A growable run of bytes with value semantics (copy on write, as `[UInt8]`), for the arena of
/// a `ColumnBuffer`: a value's bytes are appended with one capacity check and one `memcpy`.
///
/// `[UInt8].append(contentsOf:)` of a buffer pointer takes the Sequence path (an iterator, a
/// `_copyContents`, a check that the count was right): about 150 instructions a call before the
/// copy (callgrind, 30,000 bench_orders rows through `ferry serve`: 522,759 appends, 79 M
/// instructions in the client, 9% of it), and a column's arena takes one append per value.
public struct ByteArena: @unchecked Sendable {
    // Unchecked: the storage is a class, but it is never written while shared (every mutation
    // first makes it unique), as the standard library's arrays do.
    @usableFromInline var storage: ByteStorage

    /// An empty arena with room for `capacity` bytes.
    public init(capacity: Int = 0) {
        storage = ByteStorage(capacity: capacity)
    }

    @inlinable public var count: Int { storage.count }
    @inlinable public var isEmpty: Bool { storage.count == 0 }
    @inlinable public var capacity: Int { storage.capacity }

    /// Makes the storage this arena's own with room for `extra` more bytes (doubling, so that
    /// appends stay amortized constant).
    @inlinable @inline(__always)
    mutating func prepare(adding extra: Int) {
        if !isKnownUniquelyReferenced(&storage) {
            storage = storage.copy(capacity: Swift.max(storage.count + extra, storage.capacity))
        } else if storage.capacity - storage.count < extra {
            storage.grow(to: Swift.max(storage.count + extra, 2 * storage.capacity, 64))
        }
    }

    @inlinable @inline(__always)
    public mutating func append(_ byte: UInt8) {
        prepare(adding: 1)
        storage.base.storeBytes(of: byte, toByteOffset: storage.count, as: UInt8.self)
        storage.count += 1
    }

    @inlinable @inline(__always)
    public mutating func append(bytes: UnsafeRawBufferPointer) {
        guard let from = bytes.baseAddress, bytes.count > 0 else { return }
        prepare(adding: bytes.count)
        (storage.base + storage.count).copyMemory(from: from, byteCount: bytes.count)
        storage.count += bytes.count
    }

    /// Appends `tag` and then `bytes` (a driver's tagged native form) with one check.
    @inlinable @inline(__always)
    public mutating func append(tag: UInt8, bytes: UnsafeRawBufferPointer) {
        prepare(adding: 1 + bytes.count)
        storage.base.storeBytes(of: tag, toByteOffset: storage.count, as: UInt8.self)
        if let from = bytes.baseAddress, bytes.count > 0 {
            (storage.base + storage.count + 1).copyMemory(from: from, byteCount: bytes.count)
        }
        storage.count += 1 + bytes.count
    }

    /// Appends `count` bytes that `write` fills in place.
    @inlinable @inline(__always)
    public mutating func append(count: Int, initializingWith write: (UnsafeMutableRawBufferPointer) -> Void) {
        precondition(count >= 0, "a negative byte count")
        guard count > 0 else { return }
        prepare(adding: count)
        write(UnsafeMutableRawBufferPointer(start: storage.base + storage.count, count: count))
        storage.count += count
    }

    public mutating func append<S: Sequence>(contentsOf bytes: S) where S.Element == UInt8 {
        let done: Void? = bytes.withContiguousStorageIfAvailable { append(bytes: UnsafeRawBufferPointer($0)) }
        if done == nil { for b in bytes { append(b) } }
    }

    public mutating func reserveCapacity(_ n: Int) {
        if !isKnownUniquelyReferenced(&storage) {
            storage = storage.copy(capacity: Swift.max(n, storage.count))
        } else if storage.capacity < n {
            storage.grow(to: n)
        }
    }

    /// Empties the arena; its memory is kept when `keepingCapacity` (and the arena its own).
    public mutating func removeAll(keepingCapacity: Bool = false) {
        if keepingCapacity && isKnownUniquelyReferenced(&storage) {
            storage.count = 0
        } else {
            storage = ByteStorage(capacity: keepingCapacity ? storage.capacity : 0)
        }
    }

    /// Runs `body` with the bytes in place (valid only inside `body`).
    @inlinable
    public func withUnsafeBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        try withExtendedLifetime(storage) { () throws(E) -> R in
            try body(UnsafeRawBufferPointer(start: storage.base, count: storage.count))
        }
    }

    /// The bytes `range` (a copy).
    public subscript(range: Range<Int>) -> [UInt8] {
        precondition(range.lowerBound >= 0 && range.upperBound <= count, "bytes \(range) of an arena of \(count)")
        return withUnsafeBytes { Array($0[range]) }
    }
}

/// The memory behind a `ByteArena`.
@usableFromInline
final class ByteStorage {
    // Unchecked: a storage is written only by the arena that holds it uniquely, and the
    // runtime's exclusivity checks on a class's properties (swift_beginAccess) cost more than
    // the appends themselves (callgrind: a third of a client's instructions).
    @exclusivity(unchecked) @usableFromInline var base: UnsafeMutableRawPointer
    @exclusivity(unchecked) @usableFromInline var count = 0
    @exclusivity(unchecked) @usableFromInline private(set) var capacity: Int

    @usableFromInline init(capacity: Int) {
        self.capacity = Swift.max(capacity, 0)
        // Never a zero-byte allocation: the address is handed to C APIs, which read nil as NULL.
        base = .allocate(byteCount: Swift.max(capacity, 1), alignment: 16)
    }

    deinit { base.deallocate() }

    /// A new storage holding these bytes, with room for `capacity`.
    @usableFromInline func copy(capacity: Int) -> ByteStorage {
        let s = ByteStorage(capacity: Swift.max(capacity, count))
        s.base.copyMemory(from: base, byteCount: count)
        s.count = count
        return s
    }

    @usableFromInline func grow(to newCapacity: Int) {
        guard newCapacity > capacity else { return }
        let moved = UnsafeMutableRawPointer.allocate(byteCount: newCapacity, alignment: 16)
        moved.copyMemory(from: base, byteCount: count)
        base.deallocate()
        base = moved
        capacity = newCapacity
    }
}
