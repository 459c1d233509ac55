import Foundation

/// MD5 (RFC 1321), used only as a checksum: it is the one digest that PostgreSQL, MySQL and
/// MariaDB all compute in SQL (`md5()`), so Ferry computes the same one beside engines that
/// cannot (SQLite) and range digests agree across engines. Not for security.
///
/// Hand-written rather than taken from swift-crypto: that package builds BoringSSL, about a
/// minute and a half more on every clean build (CI builds twice), for one short function.
public struct MD5: Sendable {
    private var a0: UInt32 = 0x6745_2301, b0: UInt32 = 0xefcd_ab89, c0: UInt32 = 0x98ba_dcfe, d0: UInt32 = 0x1032_5476
    /// Bytes waiting for a full 64-byte block.
    private var pending: [UInt8] = []
    private var length: UInt64 = 0

    public init() {}

    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        length &+= UInt64(bytes.count)
        var i = 0
        if !pending.isEmpty {
            let take = min(64 - pending.count, bytes.count)
            pending.append(contentsOf: bytes[0..<take])
            i = take
            if pending.count == 64 {
                pending.withUnsafeBytes { block($0.baseAddress!) }
                pending.removeAll(keepingCapacity: true)
            }
        }
        while bytes.count - i >= 64 {
            block(bytes.baseAddress! + i)
            i += 64
        }
        if i < bytes.count { pending.append(contentsOf: bytes[i...]) }
    }

    public mutating func update(_ bytes: [UInt8]) { bytes.withUnsafeBytes { update($0) } }

    /// The 16-byte digest. The hasher is spent afterwards.
    public mutating func finalize() -> [UInt8] {
        let bits = length &* 8
        var tail: [UInt8] = [0x80]
        let used = (pending.count + 1) % 64
        tail += [UInt8](repeating: 0, count: used <= 56 ? 56 - used : 120 - used)
        for i in 0..<8 { tail.append(UInt8(truncatingIfNeeded: bits >> (8 * UInt64(i)))) }
        update(tail)
        var out: [UInt8] = []
        out.reserveCapacity(16)
        for word in [a0, b0, c0, d0] {
            for i in 0..<4 { out.append(UInt8(truncatingIfNeeded: word >> (8 * UInt32(i)))) }
        }
        return out
    }

    /// The first 8 bytes of the digest of `bytes`, big-endian (what `substr(md5(x), 1, 16)`
    /// reads as hex): the full blocks hashed in place and the padded tail on the stack, so a
    /// hash per row allocates nothing.
    public static func prefix(_ bytes: [UInt8]) -> UInt64 {
        var m = MD5()
        bytes.withUnsafeBytes { whole in
            let full = whole.count / 64 * 64
            var i = 0
            while i < full {
                m.block(whole.baseAddress! + i)
                i += 64
            }
            let rest = whole.count - full
            let blocks = rest < 56 ? 1 : 2
            withUnsafeTemporaryAllocation(byteCount: 128, alignment: 8) { tail in
                tail.initializeMemory(as: UInt8.self, repeating: 0)
                if rest > 0 { tail.copyMemory(from: UnsafeRawBufferPointer(rebasing: whole[full...])) }
                tail[rest] = 0x80
                let bits = UInt64(whole.count) &* 8
                for b in 0..<8 { tail[blocks * 64 - 8 + b] = UInt8(truncatingIfNeeded: bits >> (8 * UInt64(b))) }
                for b in 0..<blocks { m.block(UnsafeRawPointer(tail.baseAddress! + 64 * b)) }
            }
        }
        return UInt64(m.a0.byteSwapped) << 32 | UInt64(m.b0.byteSwapped)
    }

    public static func digest(_ bytes: [UInt8]) -> [UInt8] {
        var m = MD5()
        m.update(bytes)
        return m.finalize()
    }

    /// One 64-byte block, its 64 steps written out: the round functions, shifts and constants
    /// are literals the compiler folds in (a loop with a switch and table lookups per step cost
    /// ~3,400 instructions a block; callgrind).
    private mutating func block(_ p: UnsafeRawPointer) {
        @inline(__always) func word(_ i: Int) -> UInt32 { UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 4 * i, as: UInt32.self)) }
        let x0 = word(0), x1 = word(1), x2 = word(2), x3 = word(3), x4 = word(4), x5 = word(5), x6 = word(6), x7 = word(7)
        let x8 = word(8), x9 = word(9), x10 = word(10), x11 = word(11), x12 = word(12), x13 = word(13), x14 = word(14), x15 = word(15)
        var a = a0, b = b0, c = c0, d = d0
        Self.f(&a, b, c, d, x0, 7, 0xd76aa478)
        Self.f(&d, a, b, c, x1, 12, 0xe8c7b756)
        Self.f(&c, d, a, b, x2, 17, 0x242070db)
        Self.f(&b, c, d, a, x3, 22, 0xc1bdceee)
        Self.f(&a, b, c, d, x4, 7, 0xf57c0faf)
        Self.f(&d, a, b, c, x5, 12, 0x4787c62a)
        Self.f(&c, d, a, b, x6, 17, 0xa8304613)
        Self.f(&b, c, d, a, x7, 22, 0xfd469501)
        Self.f(&a, b, c, d, x8, 7, 0x698098d8)
        Self.f(&d, a, b, c, x9, 12, 0x8b44f7af)
        Self.f(&c, d, a, b, x10, 17, 0xffff5bb1)
        Self.f(&b, c, d, a, x11, 22, 0x895cd7be)
        Self.f(&a, b, c, d, x12, 7, 0x6b901122)
        Self.f(&d, a, b, c, x13, 12, 0xfd987193)
        Self.f(&c, d, a, b, x14, 17, 0xa679438e)
        Self.f(&b, c, d, a, x15, 22, 0x49b40821)
        Self.g(&a, b, c, d, x1, 5, 0xf61e2562)
        Self.g(&d, a, b, c, x6, 9, 0xc040b340)
        Self.g(&c, d, a, b, x11, 14, 0x265e5a51)
        Self.g(&b, c, d, a, x0, 20, 0xe9b6c7aa)
        Self.g(&a, b, c, d, x5, 5, 0xd62f105d)
        Self.g(&d, a, b, c, x10, 9, 0x02441453)
        Self.g(&c, d, a, b, x15, 14, 0xd8a1e681)
        Self.g(&b, c, d, a, x4, 20, 0xe7d3fbc8)
        Self.g(&a, b, c, d, x9, 5, 0x21e1cde6)
        Self.g(&d, a, b, c, x14, 9, 0xc33707d6)
        Self.g(&c, d, a, b, x3, 14, 0xf4d50d87)
        Self.g(&b, c, d, a, x8, 20, 0x455a14ed)
        Self.g(&a, b, c, d, x13, 5, 0xa9e3e905)
        Self.g(&d, a, b, c, x2, 9, 0xfcefa3f8)
        Self.g(&c, d, a, b, x7, 14, 0x676f02d9)
        Self.g(&b, c, d, a, x12, 20, 0x8d2a4c8a)
        Self.h(&a, b, c, d, x5, 4, 0xfffa3942)
        Self.h(&d, a, b, c, x8, 11, 0x8771f681)
        Self.h(&c, d, a, b, x11, 16, 0x6d9d6122)
        Self.h(&b, c, d, a, x14, 23, 0xfde5380c)
        Self.h(&a, b, c, d, x1, 4, 0xa4beea44)
        Self.h(&d, a, b, c, x4, 11, 0x4bdecfa9)
        Self.h(&c, d, a, b, x7, 16, 0xf6bb4b60)
        Self.h(&b, c, d, a, x10, 23, 0xbebfbc70)
        Self.h(&a, b, c, d, x13, 4, 0x289b7ec6)
        Self.h(&d, a, b, c, x0, 11, 0xeaa127fa)
        Self.h(&c, d, a, b, x3, 16, 0xd4ef3085)
        Self.h(&b, c, d, a, x6, 23, 0x04881d05)
        Self.h(&a, b, c, d, x9, 4, 0xd9d4d039)
        Self.h(&d, a, b, c, x12, 11, 0xe6db99e5)
        Self.h(&c, d, a, b, x15, 16, 0x1fa27cf8)
        Self.h(&b, c, d, a, x2, 23, 0xc4ac5665)
        Self.i(&a, b, c, d, x0, 6, 0xf4292244)
        Self.i(&d, a, b, c, x7, 10, 0x432aff97)
        Self.i(&c, d, a, b, x14, 15, 0xab9423a7)
        Self.i(&b, c, d, a, x5, 21, 0xfc93a039)
        Self.i(&a, b, c, d, x12, 6, 0x655b59c3)
        Self.i(&d, a, b, c, x3, 10, 0x8f0ccc92)
        Self.i(&c, d, a, b, x10, 15, 0xffeff47d)
        Self.i(&b, c, d, a, x1, 21, 0x85845dd1)
        Self.i(&a, b, c, d, x8, 6, 0x6fa87e4f)
        Self.i(&d, a, b, c, x15, 10, 0xfe2ce6e0)
        Self.i(&c, d, a, b, x6, 15, 0xa3014314)
        Self.i(&b, c, d, a, x13, 21, 0x4e0811a1)
        Self.i(&a, b, c, d, x4, 6, 0xf7537e82)
        Self.i(&d, a, b, c, x11, 10, 0xbd3af235)
        Self.i(&c, d, a, b, x2, 15, 0x2ad7d2bb)
        Self.i(&b, c, d, a, x9, 21, 0xeb86d391)
        a0 = a0 &+ a
        b0 = b0 &+ b
        c0 = c0 &+ c
        d0 = d0 &+ d
    }

    @inline(__always) private static func rotate(_ v: UInt32, _ s: UInt32) -> UInt32 { (v << s) | (v >> (32 - s)) }
    @inline(__always) private static func f(_ a: inout UInt32, _ b: UInt32, _ c: UInt32, _ d: UInt32, _ x: UInt32, _ s: UInt32, _ t: UInt32) {
        a = b &+ rotate(a &+ ((b & c) | (~b & d)) &+ x &+ t, s)
    }
    @inline(__always) private static func g(_ a: inout UInt32, _ b: UInt32, _ c: UInt32, _ d: UInt32, _ x: UInt32, _ s: UInt32, _ t: UInt32) {
        a = b &+ rotate(a &+ ((b & d) | (c & ~d)) &+ x &+ t, s)
    }
    @inline(__always) private static func h(_ a: inout UInt32, _ b: UInt32, _ c: UInt32, _ d: UInt32, _ x: UInt32, _ s: UInt32, _ t: UInt32) {
        a = b &+ rotate(a &+ (b ^ c ^ d) &+ x &+ t, s)
    }
    @inline(__always) private static func i(_ a: inout UInt32, _ b: UInt32, _ c: UInt32, _ d: UInt32, _ x: UInt32, _ s: UInt32, _ t: UInt32) {
        a = b &+ rotate(a &+ (c ^ (b | ~d)) &+ x &+ t, s)
    }
}
