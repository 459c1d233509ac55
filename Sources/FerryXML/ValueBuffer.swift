import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The bytes of the value being decoded, until they go into the batch.
///
/// Small values live in an array. On Linux, a value that grows past `largeBytes` moves to pages
/// of its own (anonymous mmap), unmapped as soon as the value is in the batch: glibc, once its
/// mmap threshold has risen to the size of the blocks freed so far (it does, up to 32 MiB), would
/// serve a 10 MB buffer from the reading thread's heap, where the pages stay resident after the
/// value is gone and add to every later peak. Elsewhere (Darwin's malloc returns large blocks at
/// once) the array serves every size.
final class ValueBuffer {
    private var small: [UInt8] = []
    private var large: UnsafeMutableRawPointer?
    private var largeCapacity = 0
    private(set) var count = 0
    static let largeBytes = 1 << 20

    deinit { unmap() }

    /// Makes room for a value of `n` bytes (a hint: a value may still be longer).
    func reserve(_ n: Int) {
        #if canImport(Glibc)
        if n >= Self.largeBytes && large == nil { moveToPages(capacity: n) }
        #endif
        if large == nil && n > small.capacity { small.reserveCapacity(n) }
    }

    func append(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        #if canImport(Glibc)
        if large == nil && count + bytes.count > Self.largeBytes { moveToPages(capacity: 2 * (count + bytes.count)) }
        if large != nil && count + bytes.count > largeCapacity { grow(to: max(2 * largeCapacity, count + bytes.count)) }
        if let l = large {
            l.advanced(by: count).copyMemory(from: base, byteCount: bytes.count)
            count += bytes.count
            return
        }
        #endif
        small.append(bytes: bytes)
        count += bytes.count
    }

    func append(_ byte: UInt8) {
        Swift.withUnsafeBytes(of: byte) { append($0) }
    }

    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        if let large { return try body(UnsafeRawBufferPointer(start: large, count: count)) }
        return try small.withUnsafeBytes(body)
    }

    /// Empties the buffer for the next value (a large one's pages go back to the system).
    func reset() {
        unmap()
        small.removeAll(keepingCapacity: small.capacity <= Self.largeBytes)
        count = 0
    }

    private func unmap() {
        #if canImport(Glibc)
        if let large { munmap(large, largeCapacity) }
        #endif
        large = nil
        largeCapacity = 0
    }

    #if canImport(Glibc)
    /// Pages of `capacity` bytes (rounded up to pages), or nil when the system refuses them.
    private static func map(_ capacity: Int) -> UnsafeMutableRawPointer? {
        let page = 4096
        let size = (capacity + page - 1) / page * page
        guard let p = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), p != MAP_FAILED else { return nil }
        return p
    }

    private func moveToPages(capacity: Int) {
        let size = (capacity + 4095) / 4096 * 4096
        guard let p = Self.map(size) else { return }  // the array goes on serving
        small.withUnsafeBytes { if let b = $0.baseAddress, count > 0 { p.copyMemory(from: b, byteCount: count) } }
        small = []
        large = p
        largeCapacity = size
    }

    private func grow(to capacity: Int) {
        let size = (capacity + 4095) / 4096 * 4096
        guard let p = Self.map(size) else {
            // No pages: back to the array, which grows in the heap.
            var bytes = [UInt8]()
            bytes.reserveCapacity(capacity)
            if let l = large { bytes.append(bytes: UnsafeRawBufferPointer(start: l, count: count)) }
            unmap()
            small = bytes
            return
        }
        if let l = large { p.copyMemory(from: l, byteCount: count) }
        unmap()
        large = p
        largeCapacity = size
    }
    #endif
}
