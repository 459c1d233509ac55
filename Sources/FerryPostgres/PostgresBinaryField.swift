import FerryCore

/// One value in PostgreSQL's binary send format (a binary COPY field, a logical replication
/// tuple's `b` column), decoded straight into a column buffer. Wire input is untrusted: a
/// fixed-width type whose length is not its width is a malformed stream, never a read past the
/// field.
enum PostgresBinaryField {
    enum Kind: Equatable {
        case bool, int, float, numeric, bytes, uuid, date, time, timestamp
        /// jsonb's own binary form: a version byte (1), then the text.
        case jsonb
        /// character(n) as sent, padded: read as PostgreSQL's char → text cast reads it
        /// (trailing spaces dropped), as a copy's SELECT reads it.
        case paddedText

        /// How a column of `column`'s type arrives when nothing casts it at the server (a
        /// replication stream sends each type's binary form). Nil for a type Ferry cannot read.
        init?(sent column: Column) {
            switch column.logicalType {
            case .boolean: self = .bool
            case .int16, .int32, .int64: self = .int
            case .float32, .float64: self = .float
            case .decimal: self = .numeric
            case .json: self = column.nativeType.lowercased() == "jsonb" ? .jsonb : .bytes
            case .text(_, true): self = .paddedText
            case .enumeration, .text, .binary: self = .bytes
            case .uuid: self = .uuid
            case .date: self = .date
            case .time: self = .time
            case .timestamp: self = .timestamp
            case .unsupported: return nil
            }
        }
    }

    /// Why a field could not be decoded.
    enum Failure: Error {
        /// The field's length is none of its type's widths: the stream is malformed.
        case width(allowed: [Int], got: Int)
        /// The bytes are not a value of the type (malformed numeric, jsonb version).
        case malformed
        /// A value other engines cannot hold (infinite dates), or text that is not a UUID.
        case value(String)
    }

    /// Decodes the `n` bytes at `f` (already checked to lie inside the message) as `kind`.
    @inline(__always)
    static func decode(_ kind: Kind, _ f: UnsafeRawPointer, _ n: Int, into col: inout ColumnBuffer) throws(Failure) {
        // Not variadic: an array of allowed widths was built per field (callgrind).
        @inline(__always) func width(_ a: Int, _ b: Int = -1, _ c: Int = -1) throws(Failure) {
            guard n == a || n == b || n == c else { throw .width(allowed: [a, b, c].filter { $0 >= 0 }, got: n) }
        }
        switch kind {
        case .bool:
            try width(1)
            col.append(Int64(f.load(as: UInt8.self)))
        case .int:
            try width(2, 4, 8)
            switch n {
            case 2: col.append(Int64(PostgresValueCodec.int16(f)))
            case 4: col.append(Int64(PostgresValueCodec.int32(f)))
            default: col.append(PostgresValueCodec.int64(f))
            }
        case .float:
            try width(4, 8)
            if n == 4 {
                col.append(Double(Float(bitPattern: UInt32(bigEndian: f.loadUnaligned(as: UInt32.self)))))
            } else {
                col.append(Double(bitPattern: UInt64(bigEndian: f.loadUnaligned(as: UInt64.self))))
            }
        case .numeric:
            guard PostgresValueCodec.appendNumericText(f, count: n, to: &col) else { throw .malformed }
        case .bytes:
            col.append(bytes: UnsafeRawBufferPointer(start: f, count: n))
        case .jsonb:
            guard n >= 1, f.load(as: UInt8.self) == 1 else { throw .malformed }
            col.append(bytes: UnsafeRawBufferPointer(start: f + 1, count: n - 1))
        case .paddedText:
            var end = n
            while end > 0 && f.load(fromByteOffset: end - 1, as: UInt8.self) == 32 { end -= 1 }
            col.append(bytes: UnsafeRawBufferPointer(start: f, count: end))
        case .uuid:
            let field = UnsafeRawBufferPointer(start: f, count: n)
            if n == 16 {
                col.append(bytes: field)
            } else {
                // A UUID kept as text (character(36) after a trip through an engine without uuid).
                var u: UUIDText.Bytes = (0, 0)
                guard UUIDText.parse(field, into: &u) else { throw .value("'\(String(decoding: field.prefix(60), as: UTF8.self))' is not a UUID") }
                withUnsafeBytes(of: &u) { col.append(bytes: $0) }
            }
        case .date:
            try width(4)
            let d = PostgresValueCodec.int32(f)
            if d == Int32.max || d == Int32.min {
                throw .value("the date \(d == Int32.max ? "infinity" : "-infinity") has no value in other engines; update it or skip the column")
            }
            col.append(Int64(d) + PostgresValueCodec.epochDays)
        case .time:
            try width(8)
            col.append(PostgresValueCodec.int64(f))
        case .timestamp:
            try width(8)
            let t = PostgresValueCodec.int64(f)
            if t == Int64.max || t == Int64.min {
                throw .value("the timestamp \(t == Int64.max ? "infinity" : "-infinity") has no value in other engines; update it or skip the column")
            }
            col.append(t + PostgresValueCodec.epochMicros)
        }
    }
}
