import Foundation

/// Finds the key-hash buckets in which two copies of a table differ, comparing range digests
/// level by level (each side computes its own, next to its data) — what a mirror reads and
/// what a pull reads. Equal buckets are never read.
public enum RangeDiff {
    /// One side of the comparison: a connection and the table as that side names and types it.
    public struct Side {
        public var connection: any Connection
        public var schema: TableSchema
        public var key: [Column]
        public var columns: [Column]
        /// A row condition in this side's own SQL (`--where`), never from a request.
        public var filter: String?
        public init(connection: any Connection, schema: TableSchema, key: [Column], columns: [Column], filter: String? = nil) {
            self.connection = connection
            self.schema = schema
            self.key = key
            self.columns = columns
            self.filter = filter
        }
    }

    /// What the comparison found.
    public struct Outcome: Sendable {
        /// The buckets to read on each side (modulus, residues); nil: the whole table (too
        /// many buckets differ to name them). Empty residues: the tables are equal.
        public var buckets: (modulus: Int64, residues: [Int64])?
        /// Rows of the source in buckets found equal (not to be read).
        public var unchanged: Int64 = 0
        public var sourceRows: Int64 = 0
        public var targetRows: Int64 = 0
        public var levels = 0
        public var digests = 0
        /// How both sides hashed their keys.
        public var keyHash = KeyHash.md5
        /// How both sides hashed their rows, and the per-column choices both made
        /// (`DigestRequest.delimited`, `hashForms`): a further comparison asks the same.
        public var rowHash = RowHash.md5
        public var delimited: [Bool]?
        public var hashForms: [ColumnHashForm]?
        /// Each side's keys and row hashes as its first level listed them, where that side
        /// digests by reading its rows (`KeyedHashSpill`); nil where its SQL digests.
        public var sourceSpill: KeyedHashSpill?
        public var targetSpill: KeyedHashSpill?

        /// The request for `side`'s rows in the buckets to read, hashed as the digests were.
        public func request(_ side: Side) -> DigestRequest? {
            guard let b = buckets else { return nil }
            return DigestRequest(
                key: side.key, columns: side.columns, modulus: b.modulus,
                within: BucketFilter(key: side.key, modulus: b.modulus, residues: b.residues, hash: keyHash), filter: side.filter,
                keyHash: keyHash, delimited: delimited ?? side.columns.map { _ in false }, rowHash: rowHash, hashForms: hashForms)
        }
        public var isEqual: Bool { buckets.map { $0.residues.isEmpty } ?? false }

        /// The bucket filter for `key` (one side's key columns); nil for the whole table.
        public func filter(key: [Column]) -> BucketFilter? {
            buckets.map { BucketFilter(key: key, modulus: $0.modulus, residues: $0.residues, hash: keyHash) }
        }
    }

    /// Bucket counts are powers of two; the first level aims at this many rows per bucket and
    /// each further level splits a differing bucket in `fanout`. Every level scans both tables
    /// (the digest SQL hashes every row), so the first level is already fine-grained: its
    /// answer (a short line per bucket) costs far less than another scan. Eight rows a bucket,
    /// with differing buckets read at once when they hold a tenth of the table or less, lets a
    /// mirror with 1% of its rows changed read them after one level (1,000,000 bench_orders rows
    /// PostgreSQL → SQLite, 10,000 changed: 6.5 s with a second level at 16 rows a bucket), while
    /// the answers stay small beside the rows (at 0.1% changed, digests and rows together under
    /// 5% of the bytes of a full copy: MirrorBytesTests; four rows a bucket took 8.7%).
    public static let rowsPerBucket: Int64 = 8
    public static let fanout: Int64 = 16
    /// At most this many buckets in one filter (an `IN` list of ~140 kB, well under MySQL's
    /// max_allowed_packet; 20 requests through the service).
    public static let maxBuckets = 20_000
    /// Where both sides kept their keys and row hashes (`KeyedHashSpill`), no filter is sent to
    /// either: up to this many buckets are named, and their rows compared key by key from the
    /// files. Beyond it (or without the files) the first level's excess reads the whole table,
    /// remembering every key it wrote — 129 MiB and 7.7 s for 1,000,000 bench_orders rows with
    /// 2% changed, where naming the buckets costs the keys and hashes of their rows (32 bytes a
    /// row, at most ~500,000 rows at this limit, or a tenth of the table).
    public static let maxKeptBuckets = 1 << 16

    /// How two sides with the same columns hash each of them so that equal rows hash equal: a
    /// column's canonical field is `<text>,` only where its type on both sides allows it (a
    /// UUID compared with a text column is measured on both), and PostgreSQL's row hash takes
    /// each column in a form both agree on.
    static func agreedHashing(_ source: Side, _ target: Side) -> (delimited: [Bool], forms: [ColumnHashForm]) {
        (zip(source.columns, target.columns).map { CanonicalText.isDelimitable($0) && CanonicalText.isDelimitable($1) },
         zip(source.columns, target.columns).map { ColumnHashForm.agreed($0, $1) })
    }

    /// Compares `source` with `target`. `firstLevel` sees the row counts of both sides once
    /// they are known (and may throw to stop); `differing` the rows of the source in buckets
    /// that still differ after each level (for progress).
    public static func find(
        source: Side, target: Side, estimate: Int64, cancellation: Cancellation? = nil,
        firstLevel: (_ sourceRows: Int64, _ targetRows: Int64) throws -> Void = { _, _ in },
        differing report: (_ sourceRows: Int64) -> Void = { _ in }
    ) throws -> Outcome {
        var out = Outcome()
        // The integer hash only when both keys are one integer column (a key cast to text on
        // one side hashes its canonical text on both).
        let hash = KeyHash.suited(to: source.key) == KeyHash.suited(to: target.key) ? KeyHash.suited(to: source.key) : .md5
        out.keyHash = hash
        // Each column hashed as both sides can (`agreedHashing`).
        let agreed = source.columns.count == target.columns.count ? agreedHashing(source, target) : nil
        let delimited = agreed?.delimited
        out.delimited = delimited
        // PostgreSQL's row hash where both sides compute it (no canonical text for most values,
        // no MD5), each column in a form both agree on.
        let rowHash: RowHash = source.columns.count == target.columns.count
            && source.connection.rowHashes.contains(.lookup3) && target.connection.rowHashes.contains(.lookup3) ? .lookup3 : .md5
        out.rowHash = rowHash
        let forms: [ColumnHashForm]? = rowHash == .lookup3 ? agreed?.forms : nil
        out.hashForms = forms
        var modulus: Int64 = 1
        let estimate = max(estimate, 1)
        while modulus < 1 << 20 && modulus * rowsPerBucket < estimate { modulus *= 2 }
        var within: (modulus: Int64, residues: [Int64])?
        out.sourceSpill = KeyedHashSpill.forComparison(source, target, hash: hash, rowHash: rowHash, forms: forms, estimate: estimate)
        out.targetSpill = KeyedHashSpill.forComparison(target, source, hash: hash, rowHash: rowHash, forms: forms, estimate: estimate)
        let sourceSpill = out.sourceSpill, targetSpill = out.targetSpill
        while true {
            if cancellation?.isCancelled == true { throw FerryError.cancelled }
            // Both sides at once: each computes next to its own data.
            let sourceRequest = DigestRequest(
                key: source.key, columns: source.columns, modulus: modulus,
                within: within.map { BucketFilter(key: source.key, modulus: $0.modulus, residues: $0.residues, hash: hash) }, filter: source.filter,
                keyHash: hash, delimited: delimited ?? source.columns.map { _ in false }, rowHash: rowHash, hashForms: forms)
            let targetRequest = DigestRequest(
                key: target.key, columns: target.columns, modulus: modulus,
                within: within.map { BucketFilter(key: target.key, modulus: $0.modulus, residues: $0.residues, hash: hash) }, filter: target.filter,
                keyHash: hash, delimited: delimited ?? target.columns.map { _ in false }, rowHash: rowHash, hashForms: forms)
            let (s, t) = try Worker.both(
                { try KeyedHashSpill.digests(source, sourceSpill, sourceRequest) },
                { try KeyedHashSpill.digests(target, targetSpill, targetRequest) })
            out.levels += 1
            out.digests += s.count + t.count
            if out.levels == 1 {
                out.sourceRows = s.reduce(0) { $0 + $1.rows }
                out.targetRows = t.reduce(0) { $0 + $1.rows }
                try firstLevel(out.sourceRows, out.targetRows)
            }
            // Both lists in bucket order, walked side by side (a level's answer can hold a few
            // hundred thousand buckets: no dictionaries of them).
            let ours = s.isSorted ? s : s.sorted { $0.bucket < $1.bucket }
            let theirs = t.isSorted ? t : t.sorted { $0.bucket < $1.bucket }
            var differing: [Int64] = []
            var levelUnchanged: Int64 = 0, oursInDiffering: Int64 = 0, theirsInDiffering: Int64 = 0
            var i = 0, j = 0
            while i < ours.count || j < theirs.count {
                let a = i < ours.count ? ours[i] : nil, b = j < theirs.count ? theirs[j] : nil
                if let a, let b, a.bucket == b.bucket {
                    if a == b {
                        levelUnchanged += a.rows
                    } else {
                        differing.append(a.bucket)
                        oursInDiffering += a.rows
                        theirsInDiffering += b.rows
                    }
                    i += 1
                    j += 1
                } else if let a, b.map({ a.bucket < $0.bucket }) ?? true {
                    differing.append(a.bucket)
                    oursInDiffering += a.rows
                    i += 1
                } else if let b {
                    differing.append(b.bucket)
                    theirsInDiffering += b.rows
                    j += 1
                }
            }
            let bothKept = sourceSpill?.isComplete == true && targetSpill?.isComplete == true
            if differing.count > (bothKept ? maxKeptBuckets : maxBuckets) {
                // Too many buckets to name in one filter: read the previous level's buckets
                // (fewer, larger), or everything at the first level. Rows of this level's equal
                // buckets are read again, and counted by the keyed write.
                out.buckets = within
                if within == nil { report(out.sourceRows) }
                return out
            }
            out.unchanged += levelUnchanged
            if differing.isEmpty {
                out.buckets = (modulus, [])
                return out
            }
            let rowsInDiffering = max(oursInDiffering, theirsInDiffering)
            // Small enough to read (a few rows per bucket, or a tenth of the table: reading them
            // costs less than another scan of both tables), or as fine as the 32-bit key hash goes.
            let total = max(out.sourceRows, out.targetRows)
            report(oursInDiffering)
            if rowsInDiffering <= 8 * Int64(differing.count) || rowsInDiffering <= total / 10 || modulus * fanout > 1 << 31
                || out.levels >= 6
            {
                out.buckets = (modulus, differing)
                return out
            }
            within = (modulus, differing)
            modulus *= fanout
        }
    }
}

extension Array where Element == BucketDigest {
    /// True when the buckets ascend (as every digest query orders them).
    var isSorted: Bool { zip(self, dropFirst()).allSatisfy { $0.bucket < $1.bucket } }
}

extension RangeDiff {
    /// The rows of the buckets that differ, compared key by key by their row hashes.
    public struct KeyedDifference: Sendable {
        /// Keys of the source whose row hash differs from the target's, or that the target
        /// lacks (ascending).
        public var differ: [Int64] = []
        /// Keys of the target the source lacks (ascending).
        public var missing: [Int64] = []
        /// Rows whose hashes are equal on both sides.
        public var same: Int64 = 0
        /// Rows each side listed (its rows in the differing buckets).
        public var sourceRows = 0
        public var targetRows = 0
    }

    /// Inside the buckets `found` names, each side lists its rows' keys and row hashes (both at
    /// once, next to their data: `Connection.keyedRowHashes`), hashed as the digests were, and
    /// the lists are compared key by key — so that only the rows that differ are read. Nil where
    /// it does not apply: a key that is not one integer column, a side that would read its rows
    /// across a network to hash them (the XML service), or a comparison that found no buckets
    /// to name (equal, or everything differs).
    public static func keyedDifference(source: Side, target: Side, found: Outcome) throws -> KeyedDifference? {
        guard found.keyHash == .integer, source.key.count == 1, target.key.count == 1, let b = found.buckets, !b.residues.isEmpty,
            source.connection.listsKeyedRowHashes(key: source.key, hash: found.keyHash),
            target.connection.listsKeyedRowHashes(key: target.key, hash: found.keyHash),
            let sourceRequest = found.request(source), let targetRequest = found.request(target)
        else { return nil }
        /// One side's keys and row hashes in the buckets found: from its spill where it kept one,
        /// else listed next to its data.
        func list(_ side: Side, _ spill: KeyedHashSpill?, _ request: DigestRequest, _ each: (Int64, Int64) -> Void) throws {
            guard let spill, spill.isComplete else { return try side.connection.keyedRowHashes(side.schema, request: request, each: each) }
            let buckets = ResidueSet(modulus: b.modulus, residues: b.residues)
            try spill.forEach(table: side.schema.name) { key, hash in
                if buckets.contains(KeyHash.integer(key)) { each(key, hash) }
            }
        }
        // Both lists sorted by key and walked side by side: 16 bytes a row each, no dictionary.
        let (ours, theirs) = try Worker.both(
            {
                var out: [(key: Int64, hash: Int64)] = []
                try list(source, found.sourceSpill, sourceRequest) { out.append(($0, $1)) }
                out.sort { $0.key < $1.key }
                return out
            },
            {
                var out: [(key: Int64, hash: Int64)] = []
                try list(target, found.targetSpill, targetRequest) { out.append(($0, $1)) }
                out.sort { $0.key < $1.key }
                return out
            })
        var d = KeyedDifference(sourceRows: ours.count, targetRows: theirs.count)
        var i = 0, j = 0
        while i < ours.count || j < theirs.count {
            if j == theirs.count || (i < ours.count && ours[i].key < theirs[j].key) {
                d.differ.append(ours[i].key)
                i += 1
            } else if i == ours.count || theirs[j].key < ours[i].key {
                d.missing.append(theirs[j].key)
                j += 1
            } else {
                if ours[i].hash == theirs[j].hash { d.same += 1 } else { d.differ.append(ours[i].key) }
                i += 1
                j += 1
            }
        }
        return d
    }
}
