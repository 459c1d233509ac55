import CSQLite
import FerryCore

/// Ferry's SQLite form of every logical type (docs/type-mapping.md), decided here once and
/// used by everything that hands SQLite a value: the writer, upserts and deletes (through the
/// writer), and the key values that bound a key range. A key bound in another form than the
/// stored one compares wrongly (SQLite orders INTEGER < TEXT < BLOB), which once made a keyed
/// page walk over a UUID key stop after its first page and one over a date key repeat it.
///
/// - integers and booleans: INTEGER; floats: REAL
/// - dates, times, timestamps: ISO-8601 TEXT (`2024-01-31`, `13:45:00.123456`,
///   `2024-01-31 13:45:00.123456`, timestamptz with `+00:00`), with the column's declared
///   fraction digits, so text order is time order
/// - UUIDs: lowercase canonical TEXT; binary: BLOB; decimals, text, JSON, enums: TEXT
enum SQLiteValueCodec {
    /// How a column's values are bound, decided once per column rather than per value.
    enum Form {
        case integer, double, date, blob, text, uuid
        case time(digits: Int?)
        case timestamp(digits: Int?, utc: Bool)

        init(_ type: LogicalType) {
            switch type {
            case .boolean, .int16, .int32, .int64: self = .integer
            case .float32, .float64: self = .double
            case .date: self = .date
            // Text keeps the declared precision, so DATETIME(6) values keep all six digits.
            case .time(let p): self = .time(digits: p)
            case .timestamp(let p, let tz): self = .timestamp(digits: p, utc: tz)
            case .uuid: self = .uuid
            case .binary: self = .blob
            case .decimal, .text, .json, .enumeration, .unsupported: self = .text
            }
        }

        /// A value of logical type `type` written into a column the target describes as
        /// `column`: times and timestamps take the column's declared precision and zone — the
        /// form its key-range bounds are bound in — so that text order stays time order.
        init(_ type: LogicalType, storedIn column: LogicalType?) {
            switch (type, column) {
            case (.time, .time(let p)?): self = .time(digits: p)
            case (.timestamp, .timestamp(let p, let tz)?): self = .timestamp(digits: p, utc: tz)
            default: self.init(type)
            }
        }
    }

    /// Binds row `row` of `column` (non-NULL) to parameter `index` in `form`. `scratch` is a
    /// reused buffer for the forms that are formatted; SQLite copies it (SQLITE_TRANSIENT).
    /// Text and blobs are bound without a copy: the batch must outlive the step.
    @inline(__always)
    static func bind(_ st: OpaquePointer, _ index: Int32, form: Form, column col: PinnedBatch.Column, row: Int,
                     scratch: inout [UInt8]) -> Int32 {
        func bindScratch() -> Int32 {
            scratch.withUnsafeBufferPointer {
                sqlite3_bind_text(st, index, UnsafeRawPointer($0.baseAddress)?.assumingMemoryBound(to: CChar.self),
                                  Int32($0.count), ferry_sqlite_transient())
            }
        }
        switch form {
        case .integer:
            return sqlite3_bind_int64(st, index, col.int(row))
        case .double:
            return sqlite3_bind_double(st, index, col.double(row))
        case .date:
            scratch.removeAll(keepingCapacity: true)
            Temporal.appendDate(col.int(row), into: &scratch)
            return bindScratch()
        case .time(let digits):
            scratch.removeAll(keepingCapacity: true)
            Temporal.appendTime(col.int(row), fractionDigits: digits, into: &scratch)
            return bindScratch()
        case .timestamp(let digits, let utc):
            scratch.removeAll(keepingCapacity: true)
            Temporal.appendTimestamp(col.int(row), fractionDigits: digits, into: &scratch)
            if utc { scratch.append(contentsOf: utcSuffix) }
            return bindScratch()
        case .uuid:
            scratch.removeAll(keepingCapacity: true)
            UUIDText.append(col.bytes(row), into: &scratch)
            return bindScratch()
        case .blob:
            let b = col.bytes(row)
            return sqlite3_bind_blob(st, index, b.baseAddress, Int32(b.count), nil)
        case .text:
            let b = col.bytes(row)
            return sqlite3_bind_text(st, index, b.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(b.count), nil)
        }
    }

    /// Binds `values` (one per column, in `types`) to parameters `first`, `first + 1`, … in the
    /// form the writer stores them, for key-range bounds. Copies what it binds.
    ///
    /// Times and timestamps are bound with all six fraction digits: a file written by another
    /// program holds `12:00:37`, `12:00:37.000` or `12:00:37.5`, and in text order each of those
    /// sorts at or before the six-digit text of the same instant (a prefix is smaller; a zone
    /// suffix sorts below any digit) and after the six-digit text of any earlier instant, so
    /// `key > bound` and `key <= bound` keep their meaning whatever digits the rows have.
    static func bind(_ st: OpaquePointer, values: [Value], types: [LogicalType], first: Int32 = 1) throws -> Int32 {
        guard !values.isEmpty else { return SQLITE_OK }
        let batch = try RowBatch(rows: [values], types: types)
        return try PinnedBatch.with(batch) { try bind(st, pinned: $0, types: types, first: first) }
    }

    private static func bind(_ st: OpaquePointer, pinned: PinnedBatch, types: [LogicalType], first: Int32) throws -> Int32 {
        var scratch: [UInt8] = []
        for (i, col) in pinned.columns.enumerated() {
            let index = first + Int32(i)
            let rc: Int32
            if col.isNull(0) {
                rc = sqlite3_bind_null(st, index)
            } else {
                var form = Form(types[i])
                switch form {
                case .time: form = .time(digits: 6)
                case .timestamp(_, let utc): form = .timestamp(digits: 6, utc: utc)
                default: break
                }
                switch form {
                case .blob:
                    let b = col.bytes(0)
                    rc = sqlite3_bind_blob(st, index, b.baseAddress, Int32(b.count), ferry_sqlite_transient())
                case .text:
                    let b = col.bytes(0)
                    rc = sqlite3_bind_text(st, index, b.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(b.count), ferry_sqlite_transient())
                case let form:
                    rc = bind(st, index, form: form, column: col, row: 0, scratch: &scratch)
                }
            }
            guard rc == SQLITE_OK else { return rc }
        }
        return SQLITE_OK
    }

    static let utcSuffix = Array("+00:00".utf8)
}
