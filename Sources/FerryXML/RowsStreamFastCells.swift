import FerryCore
import Foundation

/// `RowsStreamCore`'s fast path: the cells of a row, and the rows after it, while they come in
/// the forms Ferry writes them — `<v>`, `<v s="X">`, `<v enc="b64">`, `<v s="b" enc="b64">`
/// or `<v null="1"/>`, then text without markup, CR, CDATA or character references (the five
/// named references are read in line), then `</v>`; rows joined by `</r>` and `<r>` with at
/// most a line feed between them. Such a cell goes from the input into its column in one step,
/// without the state machine's round per cell (its `switch` on the state, and the cell's flags
/// stored and read back through the decoder around each call): anything else — another form,
/// an error, a cell the input cuts short — stops the fast path at the start of that cell, where
/// the state machine reads it as before.
extension RowsStreamCore {
    enum FastStop {
        /// The state machine goes on at `c.i`.
        case general
        /// A row ended the batch.
        case full
    }

    /// The longest base64 text a cell is decoded from on the stack (768 bytes): a BLOB key, a
    /// REAL in its stored form.
    static let shortBase64 = 1024

    /// Reads cells from `c.i` (in `.rowCells`, at a cell or at the end of a row).
    mutating func fastCells(_ c: inout Cursor) throws -> FastStop {
        guard let p = c.p.baseAddress else { return .general }
        let end = c.end
        let count = types.count
        var i = c.i
        defer { c.i = i }
        while true {
            guard i + 4 <= end, p[i] == 60 else { return .general }
            if p[i + 1] != 118 {
                // `</r>`, then `<r>` (after a line feed) for the next row.
                guard p[i + 1] == 47, p[i + 2] == 114, p[i + 3] == 62, column == count else { return .general }
                i += 4
                rows += 1
                column = 0
                if batch.isFull(rows: batch.count, limit: batchSize) {
                    state = .items
                    return .full
                }
                var k = i
                if k < end && p[k] == 10 { k += 1 }
                guard k + 3 <= end, p[k] == 60, p[k + 1] == 114, p[k + 2] == 62 else {
                    state = .items
                    return .general
                }
                i = k + 3
                continue
            }
            guard column < count else { return .general }
            // The start tag.
            var k = i + 2
            var stored: UInt8 = 0
            var base64 = false
            if p[k] == 62 {
                k += 1
            } else {
                var cursor = Cursor(p: c.p, i: k, final: c.final)
                guard let tag = Self.commonCellTag(&cursor) else { return .general }
                k = cursor.i
                if tag.null {
                    batch.columns[column].appendNull()
                    column += 1
                    i = k
                    continue
                }
                stored = tag.stored
                base64 = tag.base64
                if stored != 0 && kinds[column] != .binary { return .general }
            }
            // The value: plain runs and named references up to `</v>`.
            var seen: UInt64 = 0
            let start = k
            k = Self.plainRun(c, from: k, seen: &seen)
            var built = false
            while k < end && p[k] == 38 && !base64 {
                // `&amp;` and the like: the value is built in `text` (a short one only).
                guard let named = Self.namedReference(Cursor(p: c.p, i: k, final: c.final)), k - start < ValueBuffer.largeBytes else { return .general }
                if !built {
                    built = true
                    text.removeAll(keepingCapacity: true)
                    text.append(bytes: UnsafeRawBufferPointer(start: p + start, count: k - start))
                }
                text.append(named.byte)
                k += named.length
                let run = Self.plainRun(c, from: k, seen: &seen)
                text.append(bytes: UnsafeRawBufferPointer(start: p + k, count: run - k))
                k = run
            }
            guard k + 4 <= end, p[k] == 60, p[k + 1] == 47, p[k + 2] == 118, p[k + 3] == 62 else {
                if built { text.removeAll(keepingCapacity: true) }
                return .general
            }
            let ascii = seen & XMLText.highBits == 0
            if built {
                // Out of `self` while it is read (a copy would share the storage, and the next
                // `removeAll` would then allocate).
                var value = ByteArena()
                swap(&value, &text)
                defer { swap(&value, &text) }
                try value.withUnsafeBytes { try cellValue($0, stored: stored, base64: false, ascii: ascii) }
            } else if base64 {
                guard k - start <= Self.shortBase64, k > start else { return .general }
                let decoded = try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.shortBase64 / 4 * 3) { room -> Bool in
                    guard let o = room.baseAddress, let whole = Base64Decoder.decodeWhole(UnsafeBufferPointer(start: p + start, count: k - start), into: o) else { return false }
                    try cellValue(UnsafeRawBufferPointer(start: o, count: whole.bytes), stored: stored, base64: true, ascii: true)
                    return true
                }
                guard decoded else { return .general }
            } else {
                try cellValue(UnsafeRawBufferPointer(start: p + start, count: k - start), stored: stored, base64: false, ascii: ascii)
            }
            column += 1
            i = k + 4
        }
    }

    /// One cell's decoded bytes (unescaped, base64 decoded) into the current column: `stored`,
    /// the storage class its `s` gave (0: none); `ascii`, its text had no byte from 0x80 (else
    /// it is checked for UTF-8).
    @inline(__always) mutating func cellValue(_ bytes: UnsafeRawBufferPointer, stored: UInt8, base64: Bool, ascii: Bool) throws {
        do {
            if stored != 0 {
                try WireValue.append(stored: stored, raw: bytes, textUnchecked: !base64 && !ascii, to: &batch.columns[column])
            } else if kinds[column] == .other {
                try WireValue.append(raw: bytes, as: types[column], to: &batch.columns[column])
            } else {
                try WireValue.append(raw: bytes, kind: kinds[column], knownUTF8: !base64 && ascii, to: &batch.columns[column])
            }
        } catch {
            throw XMLWireError.badValue(row: rows, column: names[column], message: "\(error)")
        }
    }
}
