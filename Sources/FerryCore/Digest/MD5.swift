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

    private static let shifts: [UInt32] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
        5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20,
        4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
        6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ]
    /// floor(abs(sin(i + 1)) · 2^32), as RFC 1321 defines them.
    private static let constants: [UInt32] = (0..<64).map { UInt32(truncatingIfNeeded: Int64(abs(sin(Double($0 + 1))) * 4_294_967_296.0)) }

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

    private mutating func block(_ p: UnsafeRawPointer) {
        var a = a0, b = b0, c = c0, d = d0
        for i in 0..<64 {
            var f: UInt32
            let g: Int
            switch i >> 4 {
            case 0: f = (b & c) | (~b & d); g = i
            case 1: f = (d & b) | (~d & c); g = (5 &* i &+ 1) & 15
            case 2: f = b ^ c ^ d; g = (3 &* i &+ 5) & 15
            default: f = c ^ (b | ~d); g = (7 &* i) & 15
            }
            let word = UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 4 * g, as: UInt32.self))
            f = f &+ a &+ Self.constants[i] &+ word
            a = d
            d = c
            c = b
            let s = Self.shifts[i]
            b = b &+ ((f << s) | (f >> (32 - s)))
        }
        a0 = a0 &+ a
        b0 = b0 &+ b
        c0 = c0 &+ c
        d0 = d0 &+ d
    }
}
