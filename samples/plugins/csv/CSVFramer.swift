/// Finds where each record of a CSV file ends, byte by byte, by the same rules CSV.swift's
/// reader splits records with. CSV.swift returns a record's fields but not where it ended in
/// the file; the framer runs over the same bytes as they are handed to it, so the driver knows
/// the byte offset after every row (to resume a keyed page there, or to count rows without
/// parsing fields).
///
/// CSV.swift's rules: a field is quoted only when it starts with `"`; inside, `""` is a quote
/// and a `"` followed by anything but `,`, CR, LF or the end closes nothing (the next character
/// is taken into the field); outside quotes a record ends at LF, at CR LF, or at a lone CR.
/// Every byte these rules look at is ASCII, and UTF-8 never uses ASCII bytes inside a longer
/// character, so bytes can be framed without decoding them.
struct CSVFramer {
    private enum State {
        case fieldStart, unquoted, quoted, quoteInQuoted
        /// A CR ended the record; an LF right after it belongs to the same end.
        case afterCR
    }

    private var state = State.fieldStart
    /// The record being framed holds at least one byte (a blank line holds none).
    private var recordHasBytes = false
    private var crEnd: Int64 = 0
    private var crBlank = false

    /// Frames `bytes`, which sit at `base` in the file, calling `emit(end, blank)` for every
    /// record that ends in them: `end` is the offset of the byte after the record's line end.
    mutating func feed(_ bytes: UnsafeRawBufferPointer, base: Int64, emit: (Int64, Bool) -> Void) {
        let quote: UInt8 = 0x22, comma: UInt8 = 0x2C, lf: UInt8 = 0x0A, cr: UInt8 = 0x0D
        var i = 0
        let n = bytes.count
        while i < n {
            let b = bytes[i]
            let offset = base + Int64(i)
            switch state {
            case .afterCR:
                if b == lf {
                    emit(offset + 1, crBlank)
                    state = .fieldStart
                    recordHasBytes = false
                    i += 1
                    continue
                }
                emit(crEnd, crBlank)
                state = .fieldStart
                recordHasBytes = false
                continue  // the byte starts the next record
            case .fieldStart:
                if b == lf {
                    emit(offset + 1, !recordHasBytes)
                    recordHasBytes = false
                } else if b == cr {
                    crEnd = offset + 1
                    crBlank = !recordHasBytes
                    state = .afterCR
                } else {
                    recordHasBytes = true
                    state = b == quote ? .quoted : b == comma ? .fieldStart : .unquoted
                }
            case .quoted:
                if b == quote { state = .quoteInQuoted }
            case .unquoted, .quoteInQuoted:
                // After a field's text or its closing quote: a comma or a line end ends it.
                if b == comma {
                    state = .fieldStart
                } else if b == lf {
                    emit(offset + 1, false)
                    state = .fieldStart
                    recordHasBytes = false
                } else if b == cr {
                    crEnd = offset + 1
                    crBlank = false
                    state = .afterCR
                } else if case .quoteInQuoted = state {
                    // `""` is a quote inside the field; any other byte is taken into it.
                    state = .quoted
                }
            }
            i += 1
        }
    }

    /// The end of the bytes at offset `end`: a record without a line end ends there.
    mutating func finish(at end: Int64, emit: (Int64, Bool) -> Void) {
        if case .afterCR = state {
            emit(crEnd, crBlank)
        } else if recordHasBytes {
            emit(end, false)
        }
        state = .fieldStart
        recordHasBytes = false
    }
}
