/// How a row is hashed into its bucket's sum. Both sides of a comparison use the same one.
public enum RowHash: String, Sendable, Hashable, Codable, CaseIterable {
    /// The first 64 bits of the MD5 of the row's canonical text (`CanonicalText`): what every
    /// engine's SQL reproduces, and the XML protocol's digests.
    case md5
    /// PostgreSQL's own row hash, `hash_record_extended(ROW(…), 0)` (PostgreSQL 14 or later):
    /// each column hashed by its type's 64-bit hash with Bob Jenkins' lookup3 (`Lookup3`),
    /// combined as `h = 31·h + column hash`, NULL as 0. A column is given to it in a form both
    /// sides agree on (`ColumnHashForm`): integers, dates, times and timestamps as PostgreSQL's
    /// integers, floats as float8, UUIDs and binary as their bytes, everything else as its
    /// canonical text. No text is built for most values and no MD5 is run, on the server or
    /// beside SQLite: a digest of 1,000,000 bench_orders rows in PostgreSQL 2.5 s → 1.6 s.
    case lookup3
}

/// The form in which a column's value is given to the `lookup3` row hash, from its logical
/// type: what PostgreSQL hashes natively and Ferry reproduces beside SQLite. Two sides whose
/// columns have different forms use `text` for that column on both.
public enum ColumnHashForm: Sendable, Hashable {
    /// Booleans (0/1) and integers: PostgreSQL's `hashint8extended` (equal to int2's and int4's
    /// for the values they hold).
    case integer
    /// Days since 2000-01-01 hashed as an integer (PostgreSQL's date hash).
    case date
    /// Microseconds since 2000-01-01 hashed as an integer (timestamp and timestamptz).
    case timestamp
    /// Microseconds since midnight hashed as an integer.
    case time
    /// float8 (float4 widened exactly): `hashfloat8extended`, ±0 as 0, every NaN alike.
    case float
    /// UUIDs (16 bytes) and binary values: their bytes.
    case bytes
    /// The canonical text's UTF-8 bytes (text, JSON, enums, decimals and any other type).
    case text
    /// A SQLite stored value's bytes (tag and payload), compared only with another SQLite
    /// database's.
    case stored

    /// The form of `column`'s values.
    public init(_ column: Column) {
        if column.travelsNatively {
            self = .stored
            return
        }
        switch column.logicalType {
        case .boolean, .int16, .int32, .int64: self = .integer
        case .date: self = .date
        case .timestamp: self = .timestamp
        case .time: self = .time
        case .float32, .float64: self = .float
        case .uuid, .binary: self = .bytes
        case .decimal, .text, .json, .enumeration, .unsupported: self = .text
        }
    }

    /// The form both sides use for a column typed `source` on one and `target` on the other.
    public static func agreed(_ source: Column, _ target: Column) -> ColumnHashForm {
        let a = ColumnHashForm(source), b = ColumnHashForm(target)
        return a == b ? a : .text
    }
}

/// PostgreSQL's 64-bit hash functions (src/common/hashfn.c, as of PostgreSQL 11: Bob Jenkins'
/// lookup3 with a seed, on a little-endian server), written here from the algorithm so that a
/// digest computed beside SQLite equals one PostgreSQL computes in SQL. Only seed 0 is used.
/// A big-endian server hashes bytes differently: its buckets then all differ and are read,
/// which costs time but never a row.
public enum Lookup3 {
    @inline(__always) static func rot(_ x: UInt32, _ k: UInt32) -> UInt32 { (x << k) | (x >> (32 - k)) }

    @inline(__always) static func mix(_ a: inout UInt32, _ b: inout UInt32, _ c: inout UInt32) {
        a &-= c; a ^= rot(c, 4); c &+= b
        b &-= a; b ^= rot(a, 6); a &+= c
        c &-= b; c ^= rot(b, 8); b &+= a
        a &-= c; a ^= rot(c, 16); c &+= b
        b &-= a; b ^= rot(a, 19); a &+= c
        c &-= b; c ^= rot(b, 4); b &+= a
    }

    @inline(__always) static func final(_ a: inout UInt32, _ b: inout UInt32, _ c: inout UInt32) {
        c ^= b; c &-= rot(b, 14)
        a ^= c; a &-= rot(c, 11)
        b ^= a; b &-= rot(a, 25)
        c ^= b; c &-= rot(b, 16)
        a ^= c; a &-= rot(c, 4)
        b ^= a; b &-= rot(a, 14)
        c ^= b; c &-= rot(b, 24)
    }

    /// `hash_bytes_extended(bytes, seed 0)`.
    @inline(__always)
    public static func bytes(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var a = 0x9e37_79b9 &+ UInt32(truncatingIfNeeded: bytes.count) &+ 3_923_095
        var b = a, c = a
        guard let base = bytes.baseAddress else {
            final(&a, &b, &c)
            return UInt64(b) << 32 | UInt64(c)
        }
        return blocks(base, bytes.count, &a, &b, &c)
    }

    /// `hash_bytes_extended` of the bytes `tag` then `payload`, without laying them out
    /// together (a SQLite stored value: its class tag and its bytes; copying each value next to
    /// its tag cost a `memcpy` a value, as much as the hashing).
    @inline(__always)
    public static func bytes(tag: UInt8, _ payload: UnsafeRawBufferPointer) -> UInt64 {
        let total = payload.count + 1
        var a = 0x9e37_79b9 &+ UInt32(truncatingIfNeeded: total) &+ 3_923_095
        var b = a, c = a
        guard let q = payload.baseAddress, total > 1 else {
            a &+= UInt32(tag)
            final(&a, &b, &c)
            return UInt64(b) << 32 | UInt64(c)
        }
        if total >= 12 {
            // The first block: the tag and payload bytes 0–10 (the payload has 11 or more).
            a &+= UInt32(tag) | UInt32(littleEndian: q.loadUnaligned(as: UInt32.self)) << 8
            b &+= UInt32(littleEndian: q.loadUnaligned(fromByteOffset: 3, as: UInt32.self))
            c &+= UInt32(littleEndian: q.loadUnaligned(fromByteOffset: 7, as: UInt32.self))
            mix(&a, &b, &c)
            return blocks(q + 11, total - 12, &a, &b, &c)
        }
        // 2–11 bytes: the tag and 1–10 payload bytes, as the tail of `blocks` takes them.
        let n = total - 1
        a &+= UInt32(tag) | partial(q, min(n, 3)) << 8
        if n > 3 { b &+= partial(q + 3, min(n - 3, 4)) }
        if n > 7 { c &+= partial(q + 7, n - 7) << 8 }
        final(&a, &b, &c)
        return UInt64(b) << 32 | UInt64(c)
    }

    /// The 12-byte blocks of `length` bytes at `p`, then their last 1–11 bytes as three
    /// little-endian words padded with zeros (the lowest byte of c is left for the length: c
    /// gets bytes 8–10 shifted up by one byte), then the final mix.
    @inline(__always)
    static func blocks(_ start: UnsafeRawPointer, _ count: Int, _ a: inout UInt32, _ b: inout UInt32, _ c: inout UInt32) -> UInt64 {
        var p = start
        var length = count
        while length >= 12 {
            a &+= UInt32(littleEndian: p.loadUnaligned(as: UInt32.self))
            b &+= UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 4, as: UInt32.self))
            c &+= UInt32(littleEndian: p.loadUnaligned(fromByteOffset: 8, as: UInt32.self))
            mix(&a, &b, &c)
            p += 12
            length -= 12
        }
        if length > 0 {
            a &+= partial(p, min(length, 4))
            if length > 4 { b &+= partial(p + 4, min(length - 4, 4)) }
            if length > 8 { c &+= partial(p + 8, length - 8) << 8 }
        }
        final(&a, &b, &c)
        return UInt64(b) << 32 | UInt64(c)
    }

    /// The `n` (0–4) bytes at `p` as a little-endian word, zero above them: loads of exactly
    /// those bytes, never past them.
    @inline(__always)
    static func partial(_ p: UnsafeRawPointer, _ n: Int) -> UInt32 {
        switch n {
        case 4: return UInt32(littleEndian: p.loadUnaligned(as: UInt32.self))
        case 3:
            return UInt32(UInt16(littleEndian: p.loadUnaligned(as: UInt16.self))) | UInt32(p.load(fromByteOffset: 2, as: UInt8.self)) << 16
        case 2: return UInt32(UInt16(littleEndian: p.loadUnaligned(as: UInt16.self)))
        case 1: return UInt32(p.load(as: UInt8.self))
        default: return 0
        }
    }

    /// `hash_bytes_extended` of an array's bytes.
    public static func bytes(_ array: [UInt8]) -> UInt64 {
        array.withUnsafeBytes { bytes($0) }
    }

    /// `hash_bytes_uint32_extended(k, seed 0)`.
    @inline(__always)
    public static func uint32(_ k: UInt32) -> UInt64 {
        var a: UInt32 = 0x9e37_79b9 &+ 4 &+ 3_923_095
        var b = a, c = a
        a &+= k
        final(&a, &b, &c)
        return UInt64(b) << 32 | UInt64(c)
    }

    /// `hashint8extended`: the high half folded into the low one, so that an int8 hashes as
    /// an int2 or int4 of the same value does.
    @inline(__always)
    public static func int8(_ v: Int64) -> UInt64 {
        let low = UInt32(truncatingIfNeeded: v), high = UInt32(truncatingIfNeeded: v >> 32)
        return uint32(low ^ (v >= 0 ? high : ~high))
    }

    /// `hashfloat8extended`: ±0 hashes as the seed (0), every NaN as the one NaN, any other
    /// value as its 8 bytes.
    @inline(__always)
    public static func float8(_ v: Double) -> UInt64 {
        if v == 0 { return 0 }
        var bits = (v.isNaN ? Double.nan : v).bitPattern.littleEndian
        return withUnsafeBytes(of: &bits) { bytes($0) }
    }

    /// Days from 1970-01-01 (Ferry's dates) to 2000-01-01 (PostgreSQL's).
    public static let dateOffset: Int64 = 10_957
    /// Microseconds from 1970-01-01 (Ferry's timestamps) to 2000-01-01 (PostgreSQL's).
    public static let timestampOffset: Int64 = 946_684_800_000_000

    /// `h·31 + element`: how `hash_record_extended` adds a column's hash to the row's.
    @inline(__always)
    public static func combine(_ h: UInt64, _ element: UInt64) -> UInt64 {
        h &* 31 &+ element
    }
}
