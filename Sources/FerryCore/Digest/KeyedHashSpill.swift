import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One side's key and row hash of every row, listed once by its first level of digests and kept
/// in a temporary file, for a side whose digests Ferry computes by reading the rows
/// (`Connection.digestsByReading`: SQLite, MySQL/MariaDB with PostgreSQL's row hash). Its finer
/// levels and its keyed listing (`RangeDiff.keyedDifference`) are then computed from the file
/// rather than by reading the table again: a mirror of 1,000,000 bench_orders rows from MariaDB
/// into SQLite with 1% changed read both tables twice, and the second read (a scan with a
/// bucket filter, 78,000 rows hashed again) took 1.2 s of its 4.1 s.
///
/// 16 bytes a row, written in 1 MiB pieces and read back the same way, in a file unlinked as
/// soon as it is made (nothing is left behind by a crash). A side of more than `maxRows` rows
/// keeps none, and a file that cannot be written (a full disk) is given up quietly: the side
/// then reads its table again, as it would without one.
public final class KeyedHashSpill: @unchecked Sendable {
    /// At most 2^26 rows (1 GiB of file) a side.
    public static let maxRows: Int64 = 1 << 26
    static let pairsPerPiece = 1 << 16

    private let file: TemporaryFile
    /// Pairs waiting to be written (key, hash, key, hash, …): raw memory, as the accumulator's.
    @exclusivity(unchecked) private var buffer: UnsafeMutablePointer<Int64>
    @exclusivity(unchecked) private var buffered = 0
    /// Rows written.
    public private(set) var rows: Int64 = 0
    /// True once every row of the side is in the file.
    public private(set) var isComplete = false
    private var failed = false
    /// Each piece sorted by key before it is written, so that `sortedPairs` can merge them.
    private let sortsPieces: Bool

    /// A new empty spill in the temporary folder (`TMPDIR`), nil when none can be made there.
    /// `sortingPieces`: each piece of `pairsPerPiece` rows is sorted by key as it is written
    /// (for `sortedPairs`; `forEach` then hands them on in that order).
    public init?(sortingPieces: Bool = false) {
        sortsPieces = sortingPieces
        guard let file = TemporaryFile(prefix: "ferry-digest") else { return nil }
        self.file = file
        buffer = .allocate(capacity: 2 * Self.pairsPerPiece)
    }

    deinit { buffer.deallocate() }

    /// Adds one row's key and row hash.
    @inline(__always)
    public func append(key: Int64, hash: Int64) {
        guard !failed else { return }
        buffer[buffered] = key
        buffer[buffered + 1] = hash
        buffered += 2
        if buffered == 2 * Self.pairsPerPiece { flush() }
    }

    /// Marks the spill complete (every row appended), unless writing failed or it grew too large.
    public func finish() {
        flush()
        isComplete = !failed
    }

    private func flush() {
        guard !failed, buffered > 0 else {
            buffered = 0
            return
        }
        rows += Int64(buffered / 2)
        if sortsPieces {
            let n = buffered / 2
            buffer.withMemoryRebound(to: KeyHashPair.self, capacity: n) {
                var pairs = UnsafeMutableBufferPointer(start: $0, count: n)
                pairs.sort { $0.key < $1.key }
            }
        }
        let ok = file.write(UnsafeRawBufferPointer(start: buffer, count: buffered * 8)) == nil
        buffered = 0
        if !ok || rows > Self.maxRows { giveUp() }
    }

    /// Stops keeping rows (a full disk, or past `maxRows`) and frees the file.
    private func giveUp() {
        failed = true
        isComplete = false
        buffered = 0
        file.close()
    }

    /// Hands every row's key and hash to `body`, in the order they were appended. Throws when
    /// the file is incomplete or cannot be read back (never hands on fewer rows than it kept).
    public func forEach(table: TableName, _ body: (_ key: Int64, _ hash: Int64) throws -> Void) throws {
        func failure(_ why: String) -> FerryError {
            FerryError.copyFailed(table: table, endpoint: "", reason: "the temporary file of row hashes \(why); nothing was changed")
        }
        guard isComplete else { throw failure("is incomplete") }
        var piece = [Int64](repeating: 0, count: 2 * Self.pairsPerPiece)
        var first: Int64 = 0
        while first < rows {
            let count = Int(min(rows - first, Int64(Self.pairsPerPiece)))
            guard piece.withUnsafeMutableBytes({ read(first: first, count: count, into: $0.baseAddress!) }) else {
                throw failure("could not be read back (\(String(cString: strerror(errno))))")
            }
            for i in 0..<count { try body(piece[2 * i], piece[2 * i + 1]) }
            first += Int64(count)
        }
    }

    /// Reads `count` rows from row `first` on into `into`; false when the file cannot be read.
    fileprivate func read(first: Int64, count: Int, into: UnsafeMutableRawPointer) -> Bool {
        let want = count * 16
        var filled = 0
        while filled < want {
            guard let n = file.read(at: Int(first * 16) + filled, count: want - filled, into: into + filled), n > 0 else { return false }
            filled += n
        }
        return true
    }

    /// Every row kept, in ascending key order: the sorted pieces (`sortingPieces`) merged.
    /// Throws when the spill is incomplete or was not sorting its pieces.
    public func sortedPairs(table: TableName) throws -> SortedPairs {
        guard isComplete, sortsPieces else {
            throw FerryError.copyFailed(table: table, endpoint: "", reason: "the temporary file of row hashes is incomplete; nothing was changed")
        }
        return try SortedPairs(self, table: table)
    }

    /// The first level of `request` (no `within`) over `table` through `connection`, each row's
    /// key and hash kept on the way (`Connection.keyedRowHashes`, which hashes rows as
    /// `bucketDigests` does).
    public func record(_ connection: any Connection, table: TableSchema, request: DigestRequest) throws -> [BucketDigest] {
        let sums = DigestAccumulator(request)
        try connection.keyedRowHashes(table, request: request) { key, hash in
            sums.add(keyHash: KeyHash.integer(key), rowHash: hash)
            append(key: key, hash: hash)
        }
        finish()
        return sums.result()
    }

    /// A new spill for `side` of a comparison with `other`, nil where it keeps none: where both
    /// sides list keyed row hashes (the comparison ends in such a listing: one integer key
    /// column), the table is not past `maxRows`, and `side` reads or lists every row anyway
    /// (`Connection.digestsByReading`).
    static func forComparison(
        _ side: RangeDiff.Side, _ other: RangeDiff.Side, hash: KeyHash, rowHash: RowHash, forms: [ColumnHashForm]?, estimate: Int64
    ) -> KeyedHashSpill? {
        guard hash == .integer, side.key.count == 1, other.key.count == 1, estimate <= maxRows,
            side.connection.listsKeyedRowHashes(key: side.key, hash: hash), other.connection.listsKeyedRowHashes(key: other.key, hash: hash),
            side.connection.digestsByReading(
                DigestRequest(key: side.key, columns: side.columns, modulus: 1, filter: side.filter, keyHash: hash, rowHash: rowHash, hashForms: forms))
        else { return nil }
        return KeyedHashSpill()
    }

    /// One side's digests of `request`: from its spill once that is complete, through it at the
    /// first level (keeping every row's key and hash), else as the side computes them.
    static func digests(_ side: RangeDiff.Side, _ spill: KeyedHashSpill?, _ request: DigestRequest) throws -> [BucketDigest] {
        if let spill, spill.isComplete { return try spill.digests(request, table: side.schema.name) }
        if let spill, request.within == nil { return try spill.record(side.connection, table: side.schema, request: request) }
        return try side.connection.bucketDigests(side.schema, request: request)
    }

    /// The digests of `request` (its modulus, inside its `within`) over the rows kept.
    public func digests(_ request: DigestRequest, table: TableName) throws -> [BucketDigest] {
        let sums = DigestAccumulator(request)
        let within = request.within.map(ResidueSet.init)
        try forEach(table: table) { key, hash in
            let k = KeyHash.integer(key)
            if let within, !within.contains(k) { return }
            sums.add(keyHash: k, rowHash: hash)
        }
        return sums.result()
    }
}

/// One row's key and row hash, as a spill stores it (16 bytes).
public struct KeyHashPair: Sendable, Equatable {
    public var key: Int64
    public var hash: Int64
    public init(key: Int64, hash: Int64) {
        self.key = key
        self.hash = hash
    }
}

/// The rows of a spill whose pieces are each sorted by key, merged into one ascending stream:
/// a small buffer per piece (at most 4 MiB for all of them), read as it empties, and a heap of
/// the pieces by their next key.
public final class SortedPairs {
    private struct Run {
        var next: Int64
        var end: Int64
        var buffer: [KeyHashPair] = []
        var at = 0
        var head: KeyHashPair? { at < buffer.count ? buffer[at] : nil }
    }
    private let spill: KeyedHashSpill
    private let table: TableName
    private var runs: [Run] = []
    private var heap: [Int] = []
    private let chunk: Int
    /// The smallest row not handed on yet; nil at the end.
    public private(set) var current: KeyHashPair?

    fileprivate init(_ spill: KeyedHashSpill, table: TableName) throws {
        self.spill = spill
        self.table = table
        let piece = Int64(KeyedHashSpill.pairsPerPiece)
        let count = Int((spill.rows + piece - 1) / piece)
        chunk = max(64, min(1024, (1 << 18) / max(1, count)))
        for i in 0..<count {
            var run = Run(next: Int64(i) * piece, end: min(spill.rows, Int64(i + 1) * piece))
            try refill(&run)
            runs.append(run)
            if run.head != nil { push(i) }
        }
        current = heap.first.flatMap { runs[$0].head }
    }

    private func refill(_ run: inout Run) throws {
        let n = Int(min(Int64(chunk), run.end - run.next))
        run.at = 0
        guard n > 0 else {
            run.buffer = []
            return
        }
        run.buffer = [KeyHashPair](repeating: KeyHashPair(key: 0, hash: 0), count: n)
        let ok = run.buffer.withUnsafeMutableBytes { spill.read(first: run.next, count: n, into: $0.baseAddress!) }
        guard ok else {
            throw FerryError.copyFailed(
                table: table, endpoint: "", reason: "the temporary file of row hashes could not be read back (\(String(cString: strerror(errno)))); nothing was changed")
        }
        run.next += Int64(n)
    }

    /// Moves to the next row in key order.
    public func advance() throws {
        guard let top = heap.first else { return }
        runs[top].at += 1
        if runs[top].head == nil && runs[top].next < runs[top].end { try refill(&runs[top]) }
        if runs[top].head == nil {
            let last = heap.removeLast()
            if !heap.isEmpty {
                heap[0] = last
                down(0)
            }
        } else {
            down(0)
        }
        current = heap.first.flatMap { runs[$0].head }
    }

    private func less(_ a: Int, _ b: Int) -> Bool { (runs[heap[a]].head?.key ?? .max) < (runs[heap[b]].head?.key ?? .max) }

    private func push(_ run: Int) {
        heap.append(run)
        var i = heap.count - 1
        while i > 0 {
            let parent = (i - 1) / 2
            guard less(i, parent) else { break }
            heap.swapAt(i, parent)
            i = parent
        }
    }

    private func down(_ start: Int) {
        var i = start
        while true {
            let l = 2 * i + 1, r = l + 1
            var m = i
            if l < heap.count && less(l, m) { m = l }
            if r < heap.count && less(r, m) { m = r }
            guard m != i else { return }
            heap.swapAt(i, m)
            i = m
        }
    }
}

/// The residues of a bucket filter, for a membership test per row: a bit per residue up to 2^24
/// buckets (2 MiB), a set beyond.
struct ResidueSet {
    let modulus: Int64
    private var bits: [UInt64] = []
    private var set: Set<Int64> = []

    init(_ filter: BucketFilter) { self.init(modulus: filter.modulus, residues: filter.residues) }

    init(modulus: Int64, residues: [Int64]) {
        self.modulus = modulus
        if modulus <= 1 << 24 {
            bits = [UInt64](repeating: 0, count: Int((modulus + 63) / 64))
            for r in residues where r >= 0 && r < modulus { bits[Int(r >> 6)] |= 1 << UInt64(r & 63) }
        } else {
            set = Set(residues)
        }
    }

    /// True when key hash `k` falls in one of the residues.
    @inline(__always) func contains(_ k: Int64) -> Bool {
        let r = k % modulus
        if !bits.isEmpty { return bits[Int(r >> 6)] & (1 << UInt64(r & 63)) != 0 }
        return set.contains(r)
    }
}

/// Per-bucket row counts and hash sums of one digest request: a first level's buckets (at most
/// 2^20) in two arrays allocated once, a finer level's (spread over up to 2^31) in a dictionary.
/// A class over raw memory: an array's uniqueness check on every `+=` was a tenth of adding a row.
final class DigestAccumulator {
    let modulus: Int64
    let dense: Bool
    @exclusivity(unchecked) private var counts: UnsafeMutablePointer<Int64>
    @exclusivity(unchecked) private var sums: UnsafeMutablePointer<Int64>
    private let size: Int
    private var sparse: [Int64: BucketDigest] = [:]

    init(_ request: DigestRequest) {
        modulus = request.modulus
        dense = request.within == nil && request.modulus <= 1 << 20
        size = dense ? Int(request.modulus) : 0
        counts = .allocate(capacity: max(size, 1))
        counts.initialize(repeating: 0, count: max(size, 1))
        sums = .allocate(capacity: max(size, 1))
        sums.initialize(repeating: 0, count: max(size, 1))
    }

    deinit {
        counts.deallocate()
        sums.deallocate()
    }

    @inline(__always) func add(keyHash k: Int64, rowHash r: Int64) {
        let b = k % modulus
        if dense {
            counts[Int(b)] += 1
            sums[Int(b)] &+= r
            return
        }
        var d = sparse[b] ?? BucketDigest(bucket: b, rows: 0, sum: 0)
        d.rows += 1
        d.sum &+= r
        sparse[b] = d
    }

    /// The non-empty buckets in ascending order.
    func result() -> [BucketDigest] {
        guard dense else { return sparse.values.sorted { $0.bucket < $1.bucket } }
        // Sized once (no index list, no slack from growing).
        var filled = 0
        for b in 0..<size where counts[b] > 0 { filled += 1 }
        var out: [BucketDigest] = []
        out.reserveCapacity(filled)
        for b in 0..<size where counts[b] > 0 { out.append(BucketDigest(bucket: Int64(b), rows: counts[b], sum: sums[b])) }
        return out
    }
}
