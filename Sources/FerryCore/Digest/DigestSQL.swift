/// An engine whose SQL reproduces Ferry's canonical text and MD5, so range digests and bucket
/// filters run next to its data (drivers conform their dialects; see `CanonicalText`).
public protocol DigestSQLDialect: Dialect {
    /// The canonical text of a non-NULL value of `column` (named by `quoted`), as a string
    /// whose bytes are the UTF-8 of `CanonicalText`.
    func canonicalTextSQL(_ column: Column, quoted: String) -> String
    /// The byte length of a string expression.
    func byteLengthSQL(_ text: String) -> String
    /// The concatenation of string expressions.
    func concatSQL(_ parts: [String]) -> String
    /// Lowercase hex MD5 of a string expression's bytes.
    func md5HexSQL(_ text: String) -> String
    /// The unsigned integer of an expression holding 8 hex digits.
    func hex32SQL(_ hex: String) -> String
    /// `select` made a subquery whose columns are computed once per row, where the engine
    /// would otherwise copy a column's expression into every place the outer query uses it
    /// (PostgreSQL's `OFFSET 0`). Default: `select` as it is.
    func computedOnce(_ select: String) -> String
}

extension DigestSQLDialect {
    public func computedOnce(_ select: String) -> String { select }
}

/// Builds the digest and bucket SQL from a `DigestSQLDialect`'s pieces.
public enum DigestSQL {
    static func rowText(_ columns: [Column], _ d: any DigestSQLDialect) -> String {
        d.concatSQL(columns.map { c in
            let q = d.quote(c.name)
            let t = d.canonicalTextSQL(c, quoted: q)
            return "CASE WHEN \(q) IS NULL THEN 'n' ELSE \(d.concatSQL(["'v'", d.byteLengthSQL(t), "':'", t])) END"
        })
    }

    /// The key hash of the current row: 32 bits of the MD5 of the key's canonical text.
    public static func keyHash(_ key: [Column], _ d: any DigestSQLDialect) -> String {
        d.hex32SQL("substr(\(d.md5HexSQL(rowText(key, d))), 1, 8)")
    }

    /// `<key hash> % modulus IN (…)` for a bucket filter.
    public static func condition(_ filter: BucketFilter, _ d: any DigestSQLDialect) -> String {
        guard !filter.residues.isEmpty else { return "1 = 0" }
        return "\(keyHash(filter.key, d)) % \(filter.modulus) IN (" + filter.residues.map(String.init).joined(separator: ", ") + ")"
    }

    /// A query whose rows are `bucket, rows, sum0, sum1` (integers) for `request` over `table`.
    /// `from` is the table as the engine's readers name it (PostgreSQL's `ONLY "t"` for a table
    /// whose inheritance children are tables of their own); default: the quoted name.
    public static func query(_ table: TableName, _ request: DigestRequest, _ d: any DigestSQLDialect, from: String? = nil) -> String {
        var conditions: [String] = []
        if let f = request.filter { conditions.append("(" + f + ")") }
        if let w = request.within { conditions.append(condition(w, d)) }
        // Each row's two MD5s, computed once: `rm` is used twice above (two 32-bit sums), and an
        // engine that flattens the subquery would hash the row's whole text twice.
        let inner = d.computedOnce("SELECT \(d.md5HexSQL(rowText(request.key, d))) AS km, \(d.md5HexSQL(rowText(request.columns, d))) AS rm FROM "
            + (from ?? d.quote(table)) + (conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")))
        let hashes = "SELECT \(d.hex32SQL("substr(km, 1, 8)")) AS kh, \(d.hex32SQL("substr(rm, 1, 8)")) AS r0, "
            + "\(d.hex32SQL("substr(rm, 9, 8)")) AS r1 FROM (\(inner)) ferry_rows"
        return "SELECT kh % \(request.modulus) AS b, COUNT(*), SUM(r0), SUM(r1) FROM (\(hashes)) ferry_hashes GROUP BY b ORDER BY b"
    }

    /// Parses the query's rows (text, as clients return them).
    public static func digests(_ rows: [[String?]], table: TableName) throws -> [BucketDigest] {
        try rows.map { r in
            guard r.count == 4, let b = r[0].flatMap({ Int64($0) }), let n = r[1].flatMap({ Int64($0) }),
                let s0 = r[2].flatMap({ Int64($0) }), let s1 = r[3].flatMap({ Int64($0) })
            else {
                throw FerryError.copyFailed(table: table, endpoint: "", reason: "the range digest query returned \(r.map { $0 ?? "NULL" })")
            }
            return BucketDigest(bucket: b, rows: n, sum0: s0, sum1: s1)
        }
    }
}
