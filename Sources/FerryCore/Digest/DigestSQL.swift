/// An engine whose SQL computes the integer key hash (`KeyHash.integer`), so bucket filters on a
/// key of one integer column run next to its data (SQLite's, which has no MD5).
public protocol IntegerKeyHashDialect: Dialect {
    /// An integer expression as a 64-bit signed integer, so that arithmetic on it neither
    /// overflows a narrower type nor changes sign. Default: `CAST(x AS BIGINT)`.
    func int64SQL(_ expression: String) -> String
}

extension IntegerKeyHashDialect {
    public func int64SQL(_ expression: String) -> String { "CAST(\(expression) AS BIGINT)" }
}

/// An engine whose SQL reproduces Ferry's canonical text and MD5, so range digests and bucket
/// filters run next to its data (drivers conform their dialects; see `CanonicalText`).
public protocol DigestSQLDialect: IntegerKeyHashDialect {
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
    /// The 64-bit integer of an expression holding 16 hex digits, signed or unsigned (the sums
    /// are taken modulo 2^64).
    func hex64SQL(_ hex: String) -> String
    /// `select` (each row's key hash and row hash) made a subquery the planner keeps as it is,
    /// where grouping its flattened form would cost more. Default: `select` as it is.
    func computedOnce(_ select: String) -> String
    /// The `lookup3` row hash (`RowHash.lookup3`) of `columns`, each in its form, as a signed
    /// 64-bit integer expression; nil where this engine's SQL does not compute it (the default).
    func lookup3RowHashSQL(_ columns: [Column], forms: [ColumnHashForm]) -> String?
}

extension DigestSQLDialect {
    public func computedOnce(_ select: String) -> String { select }
    public func lookup3RowHashSQL(_ columns: [Column], forms: [ColumnHashForm]) -> String? { nil }
}

/// Builds the digest and bucket SQL from a `DigestSQLDialect`'s pieces.
public enum DigestSQL {
    /// The row text (`CanonicalText`) of `columns`: a delimited column's text and a comma, any
    /// other's `n` or `v<len>:<text>` (every column's when `delimited` is empty: a key's text).
    static func rowText(_ columns: [Column], delimited: [Bool] = [], _ d: any DigestSQLDialect) -> String {
        d.concatSQL(columns.enumerated().flatMap { i, c -> [String] in
            let q = d.quote(c.name)
            let t = d.canonicalTextSQL(c, quoted: q)
            if i < delimited.count && delimited[i] && CanonicalText.isDelimitable(c) {
                return ["CASE WHEN \(q) IS NULL THEN '' ELSE \(t) END", "','"]
            }
            return ["CASE WHEN \(q) IS NULL THEN 'n' ELSE \(d.concatSQL(["'v'", d.byteLengthSQL(t), "':'", t])) END"]
        })
    }

    /// The integer key hash of a one-column key (`KeyHash.integer`).
    static func integerKeyHash(_ column: Column, _ d: any IntegerKeyHashDialect) -> String {
        let p = KeyHash.prime, a = KeyHash.multiplier
        return "((\(d.int64SQL(d.quote(column.name))) % \(p) + \(p)) % \(p) * \(a) % \(p))"
    }

    /// The key hash of the current row (`KeyHash`).
    public static func keyHash(_ key: [Column], _ hash: KeyHash, _ d: any DigestSQLDialect) -> String {
        if hash == .integer, key.count == 1 { return integerKeyHash(key[0], d) }
        return d.hex32SQL("substr(\(d.md5HexSQL(rowText(key, d))), 1, 8)")
    }

    /// `<key hash> % modulus IN (…)` for a bucket filter.
    public static func condition(_ filter: BucketFilter, _ d: any DigestSQLDialect) -> String {
        condition(filter, hash: keyHash(filter.key, filter.hash, d))
    }

    /// The bucket filter in `d`'s SQL, when it can compute the filter's key hash; else nil
    /// (Ferry filters the rows beside it: `BucketFilteringReader`).
    public static func condition(_ filter: BucketFilter, in d: any Dialect) -> String? {
        if let d = d as? any DigestSQLDialect { return condition(filter, d) }
        guard filter.hash == .integer, filter.key.count == 1, let d = d as? any IntegerKeyHashDialect else { return nil }
        return condition(filter, hash: integerKeyHash(filter.key[0], d))
    }

    private static func condition(_ filter: BucketFilter, hash: String) -> String {
        guard !filter.residues.isEmpty else { return "1 = 0" }
        return "\(hash) % \(filter.modulus) IN (" + filter.residues.map(String.init).joined(separator: ", ") + ")"
    }

    /// A query whose rows are `bucket, rows, sum` (integers; the sum may exceed 64 bits and is
    /// taken modulo 2^64) for `request` over `table`. `from` is the table as the engine's
    /// readers name it (PostgreSQL's `ONLY "t"` for a table whose inheritance children are
    /// tables of their own); default: the quoted name.
    public static func query(_ table: TableName, _ request: DigestRequest, _ d: any DigestSQLDialect, from: String? = nil) -> String {
        let hashes = "SELECT \(keyHash(request.key, request.keyHash, d)) AS kh, \(rowHashSQL(request, d)) AS rh FROM "
            + (from ?? d.quote(table)) + whereClause(request, d)
        return "SELECT kh % \(request.modulus) AS b, COUNT(*), SUM(rh) FROM (\(d.computedOnce(hashes))) ferry_hashes GROUP BY b ORDER BY b"
    }

    /// A query whose rows are `key, row hash` (integers) for the rows of `request`, whose key is
    /// one integer column (`KeyHash.integer`): what a mirror compares, key by key, inside the
    /// buckets whose digests differ (`Connection.keyedRowHashes`).
    public static func keyedRowHashQuery(_ table: TableName, _ request: DigestRequest, _ d: any DigestSQLDialect, from: String? = nil) -> String? {
        guard request.keyHash == .integer, request.key.count == 1 else { return nil }
        return "SELECT \(d.int64SQL(d.quote(request.key[0].name))), \(rowHashSQL(request, d)) FROM " + (from ?? d.quote(table)) + whereClause(request, d)
    }

    /// The row hash of `request` (`RowHash`) as a 64-bit integer expression.
    static func rowHashSQL(_ request: DigestRequest, _ d: any DigestSQLDialect) -> String {
        let lookup3 = request.rowHash == .lookup3 ? d.lookup3RowHashSQL(request.columns, forms: request.hashForms) : nil
        return lookup3 ?? d.hex64SQL("substr(\(d.md5HexSQL(rowText(request.columns, delimited: request.delimited, d))), 1, 16)")
    }

    /// ` WHERE` the user's filter and the request's buckets, or nothing.
    static func whereClause(_ request: DigestRequest, _ d: any DigestSQLDialect) -> String {
        var conditions: [String] = []
        if let f = request.filter { conditions.append("(" + f + ")") }
        if let w = request.within { conditions.append(condition(w, d)) }
        return conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
    }

    /// Parses a row of `keyedRowHashQuery` (key, row hash).
    public static func keyedRowHash(_ r: [String?], table: TableName) throws -> (key: Int64, hash: Int64) {
        // The hash modulo 2^64 (MySQL's is unsigned).
        guard r.count == 2, let k = r[0].flatMap({ Int64($0) }), let h = r[1].flatMap({ wrappingInteger($0) }) else {
            throw FerryError.copyFailed(table: table, endpoint: "", reason: "the row hash query returned \(r.map { $0 ?? "NULL" })")
        }
        return (k, h)
    }

    /// Parses one row of the query (a client hands rows over one at a time: a level's answer can
    /// hold a few hundred thousand buckets, not to be kept twice).
    public static func digest(_ r: [String?], table: TableName) throws -> BucketDigest {
        guard r.count == 3, let b = r[0].flatMap({ Int64($0) }), let n = r[1].flatMap({ Int64($0) }),
            let sum = r[2].flatMap({ wrappingInteger($0) })
        else {
            throw FerryError.copyFailed(table: table, endpoint: "", reason: "the range digest query returned \(r.map { $0 ?? "NULL" })")
        }
        return BucketDigest(bucket: b, rows: n, sum: sum)
    }

    /// A decimal integer of any length (`-`, digits, an optional `.000…` as some engines print a
    /// sum), modulo 2^64; nil for anything else.
    static func wrappingInteger(_ text: String) -> Int64? {
        var value: UInt64 = 0
        var utf8 = Substring(text).utf8[...]
        let negative = utf8.first == UInt8(ascii: "-")
        if negative { utf8 = utf8.dropFirst() }
        if let dot = utf8.firstIndex(of: UInt8(ascii: ".")) {
            guard utf8[utf8.index(after: dot)...].allSatisfy({ $0 == UInt8(ascii: "0") }) else { return nil }
            utf8 = utf8[..<dot]
        }
        guard !utf8.isEmpty else { return nil }
        for c in utf8 {
            guard c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") else { return nil }
            value = value &* 10 &+ UInt64(c - UInt8(ascii: "0"))
        }
        return Int64(bitPattern: negative ? 0 &- value : value)
    }
}
