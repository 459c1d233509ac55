import Foundation

/// Where the encoders append bytes: an array (documents built whole, small ones) or a
/// `ByteOutput` (the rows encoder's pieces, where a cell is a few appends of a few bytes each).
protocol ByteAppending {
    var count: Int { get }
    mutating func append(_ byte: UInt8)
    mutating func append(bytes: UnsafeRawBufferPointer)
    mutating func appendASCII(_ s: StaticString)
    /// Writes at most `maxBytes` bytes at the end through `body`, which returns how many it wrote.
    mutating func write(maxBytes: Int, _ body: (UnsafeMutablePointer<UInt8>) -> Int)
    /// Drops the bytes after the first `count`.
    mutating func truncate(to count: Int)
}

extension ByteAppending {
    mutating func append(utf8 text: String) {
        var t = text
        t.withUTF8 { append(bytes: UnsafeRawBufferPointer($0)) }
    }
}

extension Array: ByteAppending where Element == UInt8 {
    mutating func write(maxBytes: Int, _ body: (UnsafeMutablePointer<UInt8>) -> Int) {
        let start = count
        append(contentsOf: repeatElement(0, count: maxBytes))
        let n = withUnsafeMutableBufferPointer { p in p.baseAddress.map { body($0 + start) } ?? 0 }
        removeLast(maxBytes - n)
    }

    mutating func truncate(to count: Int) { removeSubrange(count...) }
}

/// A growable byte buffer written through a pointer: an append checks the room once and copies,
/// without an array's uniqueness check and generic copy per call (the rows encoder appends
/// three or more pieces per cell; on `Array` that was a tenth of a load's client time).
public final class ByteOutput: ByteAppending {
    // Unchecked: every access is by the one thread that owns the buffer, and the runtime's
    // exclusivity checks on a class's properties cost more than the appends themselves.
    @exclusivity(unchecked) private(set) var base: UnsafeMutablePointer<UInt8>
    @exclusivity(unchecked) public private(set) var count = 0
    @exclusivity(unchecked) private var capacity: Int

    public init(capacity: Int = 64 * 1024) {
        self.capacity = max(capacity, 64)
        base = .allocate(capacity: self.capacity)
    }

    deinit { base.deallocate() }

    public var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: count) }

    @inline(__always) private func reserve(_ n: Int) {
        if count + n > capacity { grow(count + n) }
    }

    private func grow(_ needed: Int) {
        var c = capacity
        while c < needed { c *= 2 }
        let b = UnsafeMutablePointer<UInt8>.allocate(capacity: c)
        b.update(from: base, count: count)
        base.deallocate()
        base = b
        capacity = c
    }

    @inline(__always) func append(_ byte: UInt8) {
        reserve(1)
        base[count] = byte
        count += 1
    }

    @inline(__always) func append(bytes: UnsafeRawBufferPointer) {
        let n = bytes.count
        guard n > 0, let from = bytes.baseAddress else { return }
        reserve(n)
        UnsafeMutableRawPointer(base + count).copyMemory(from: from, byteCount: n)
        count += n
    }

    @inline(__always) func appendASCII(_ s: StaticString) {
        let n = s.utf8CodeUnitCount
        reserve(n)
        (base + count).update(from: s.utf8Start, count: n)
        count += n
    }

    @inline(__always) func write(maxBytes: Int, _ body: (UnsafeMutablePointer<UInt8>) -> Int) {
        reserve(maxBytes)
        count += body(base + count)
    }

    func truncate(to count: Int) { self.count = min(self.count, max(0, count)) }

    /// Empties the buffer, keeping its memory.
    public func removeAll() { count = 0 }

    /// The bytes as `Data` over this buffer's own memory, which the `Data` now owns; the buffer
    /// starts again empty in new memory of the same capacity.
    public func take() -> Data {
        let taken = base
        let data = Data(bytesNoCopy: taken, count: count, deallocator: .custom { _, _ in taken.deallocate() })
        base = .allocate(capacity: capacity)
        count = 0
        return data
    }
}
