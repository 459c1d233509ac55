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
        /// The value as SQLite stored it (`StoredForm`), bound in its own storage class.
        case stored

        var isStored: Bool { if case .stored = self { return true } else { return false } }

        /// How `column` is bound: in its stored form when it travels natively, else by its
        /// logical type in the form of the target column `storedIn`.
        init(_ column: Column, storedIn target: LogicalType?) {
            if column.travelsNatively { self = .stored } else { self.init(column.logicalType, storedIn: target) }
        }

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

    /// True for the forms whose text is formatted (dates, times, timestamps, UUIDs).
    static func isFormatted(_ form: Form) -> Bool {
        switch form {
        case .date, .time, .timestamp, .uuid: return true
        case .integer, .double, .blob, .text, .stored: return false
        }
    }

    /// Appends the text of row `row` of `column` (non-NULL) in a formatted `form`.
    @inline(__always)
    static func format(_ col: PinnedBatch.Column, row: Int, form: Form, into out: inout [UInt8]) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: maxTextBytes(col, row: row, form: form)) { buf in
            guard let p = buf.baseAddress else { return }
            out.append(contentsOf: UnsafeBufferPointer(start: p, count: write(col, row: row, form: form, to: p)))
        }
    }

    /// The most bytes `write` writes for row `row` of `column` in a formatted `form`.
    @inline(__always)
    static func maxTextBytes(_ col: PinnedBatch.Column, row: Int, form: Form) -> Int {
        switch form {
        case .uuid: return UUIDText.maxTextBytes(col.bytes(row).count)
        default: return Temporal.maxTextBytes + utcSuffix.count
        }
    }

    /// Writes the text of row `row` of `column` (non-NULL) in a formatted `form` at `p` (room
    /// for `maxTextBytes`); returns its length.
    @inline(__always)
    static func write(_ col: PinnedBatch.Column, row: Int, form: Form, to p: UnsafeMutablePointer<UInt8>) -> Int {
        switch form {
        case .date: return Temporal.write(date: col.int(row), to: p)
        case .time(let digits): return Temporal.write(time: col.int(row), fractionDigits: digits, to: p)
        case .timestamp(let digits, let utc):
            var n = Temporal.write(timestamp: col.int(row), fractionDigits: digits, to: p)
            if utc {
                for b in utcSuffix {
                    p[n] = b
                    n += 1
                }
            }
            return n
        case .uuid: return UUIDText.write(col.bytes(row), to: p)
        case .integer, .double, .blob, .text, .stored: return 0
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
        case .date, .time, .timestamp, .uuid:
            scratch.removeAll(keepingCapacity: true)
            format(col, row: row, form: form, into: &scratch)
            return bindScratch()
        case .blob:
            let b = col.bytes(row)
            return sqlite3_bind_blob(st, index, b.baseAddress, Int32(b.count), nil)
        case .text:
            let b = col.bytes(row)
            return sqlite3_bind_text(st, index, b.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(b.count), nil)
        case .stored:
            return StoredForm.bind(st, index, col.bytes(row), copy: false)
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
    ///
    /// `columns` are the key columns as read: one that travels natively has its bounds in its
    /// stored form and they are bound as stored (SQLite then compares them as it orders them).
    static func bind(_ st: OpaquePointer, values: [Value], columns: [Column], first: Int32 = 1) throws -> Int32 {
        guard !values.isEmpty else { return SQLITE_OK }
        let types = columns.map(\.logicalType)
        let batch = try RowBatch(rows: [values], types: types)
        return try PinnedBatch.with(batch) { try bind(st, pinned: $0, columns: columns, first: first) }
    }

    private static func bind(_ st: OpaquePointer, pinned: PinnedBatch, columns: [Column], first: Int32) throws -> Int32 {
        var scratch: [UInt8] = []
        for (i, col) in pinned.columns.enumerated() {
            let index = first + Int32(i)
            let rc: Int32
            if col.isNull(0) {
                rc = sqlite3_bind_null(st, index)
            } else {
                var form = Form(columns[i], storedIn: nil)
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
                case .stored:
                    rc = StoredForm.bind(st, index, col.bytes(0), copy: true)
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

/// A SQLite value in its stored form (`StoredValue`): its storage class and its bytes, exactly as the file
/// holds them, carried when both ends are SQLite (`SQLiteDialect.keepsStoredForm`). In SQLite
/// the stored form is the value: `12:00:00.500000` and `12:00:00.5` are different texts to an
/// application's `WHERE`, and a column may hold any storage class whatever its declared type.
///
/// One tag byte, then the payload: `i` INTEGER (8 bytes, big-endian two's complement), `r`
/// REAL (8 bytes, big-endian IEEE 754 bits), `t` TEXT (UTF-8), `b` BLOB. NULL is the batch's
/// NULL. Documented in docs/xml-protocol.md (such a column travels as binary).
enum StoredForm {
    static var integer: UInt8 { StoredValue.integer }
    static var real: UInt8 { StoredValue.real }
    static var text: UInt8 { StoredValue.text }
    static var blob: UInt8 { StoredValue.blob }

    /// Appends a statement's value (`sqlite3_column_value`, not NULL) to `col`.
    @inline(__always)
    static func read(_ value: OpaquePointer?, storage: Int32, into col: inout ColumnBuffer) {
        switch storage {
        case SQLITE_INTEGER:
            var v = UInt64(bitPattern: sqlite3_value_int64(value)).bigEndian
            withUnsafeBytes(of: &v) { col.append(tag: integer, bytes: $0) }
        case SQLITE_FLOAT:
            var v = sqlite3_value_double(value).bitPattern.bigEndian
            withUnsafeBytes(of: &v) { col.append(tag: real, bytes: $0) }
        case SQLITE_TEXT:
            // sqlite3_value_text before sqlite3_value_bytes: the length of the UTF-8 form.
            let p = sqlite3_value_text(value)
            col.append(tag: text, bytes: UnsafeRawBufferPointer(start: p, count: Int(sqlite3_value_bytes(value))))
        default:
            let p = sqlite3_value_blob(value)
            col.append(tag: blob, bytes: UnsafeRawBufferPointer(start: p, count: Int(sqlite3_value_bytes(value))))
        }
    }

    /// Binds a stored value to parameter `index` in its own storage class; SQLITE_MISMATCH for
    /// bytes that are not a stored value. `copy` false binds text and blobs in place (the bytes
    /// must outlive the step).
    @inline(__always)
    static func bind(_ st: OpaquePointer, _ index: Int32, _ b: UnsafeRawBufferPointer, copy: Bool) -> Int32 {
        guard let tag = b.first else { return SQLITE_MISMATCH }
        let payload = UnsafeRawBufferPointer(rebasing: b[1...])
        let destructor = copy ? ferry_sqlite_transient() : nil
        switch tag {
        case integer where payload.count == 8:
            return sqlite3_bind_int64(st, index, Int64(bitPattern: UInt64(bigEndian: payload.loadUnaligned(as: UInt64.self))))
        case real where payload.count == 8:
            return sqlite3_bind_double(st, index, Double(bitPattern: UInt64(bigEndian: payload.loadUnaligned(as: UInt64.self))))
        case text:
            // Never a nil pointer: SQLite binds NULL for one, and '' is not NULL.
            let p = (payload.baseAddress ?? b.baseAddress)?.assumingMemoryBound(to: CChar.self)
            return sqlite3_bind_text(st, index, p, Int32(payload.count), destructor)
        case blob:
            if payload.isEmpty { return sqlite3_bind_zeroblob(st, index, 0) }
            return sqlite3_bind_blob(st, index, payload.baseAddress, Int32(payload.count), destructor)
        default:
            return SQLITE_MISMATCH
        }
    }
}
