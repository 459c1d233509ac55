import FerryCore
import Foundation

/// Writes a batch's rows as `<r><v>…</v>…</r>` lines a piece at a time: each `fill` appends
/// about `limit` bytes and remembers where it stopped, inside a value if need be (a 10 MB text
/// goes out in slices, escaped or base64-encoded slice by slice). So neither the client nor the
/// service ever holds a document, or even one large value's text, whole: only the batch and
/// one piece. The bytes are those of `XMLDocuments.RowsWriter.rows`, but that a value written
/// in slices says its length in bytes (`<v n="10485760">`), which decoders may use to make room
/// for it at once.
public struct RowsEncoder {
    public let types: [LogicalType]
    /// Columns holding values in the served engine's stored form (written with `s`).
    public let stored: [Bool]
    /// Each column's cell form (from its type and `stored`), decided once.
    let forms: [WireValue.CellForm]
    /// The columns whose values may be long (text and binary).
    let sliceable: [Int]
    private var batch: RowBatch?
    private var row = 0
    private var column = 0
    private var inRow = false
    /// A large value being written: the arena range still to go, and its form.
    private var large: (next: Int, end: Int, base64: Bool)?

    /// Values longer than this go out in slices; a slice of base64 is a multiple of 3 bytes, so
    /// the slices' texts join into the value's base64.
    static let largeValue = 64 * 1024
    static let slice = 48 * 1024

    public init(types: [LogicalType], stored: [Bool] = []) {
        self.types = types
        self.stored = stored
        let forms = WireValue.CellForm.forms(types, stored: stored)
        self.forms = forms
        sliceable = forms.indices.filter { forms[$0].sliceable }
    }

    /// True when no batch is being written.
    public var isIdle: Bool { batch == nil }

    /// Starts writing `batch` (the encoder keeps it until its last row is out).
    public mutating func start(_ batch: RowBatch) {
        self.batch = batch.isEmpty ? nil : batch
        row = 0
        column = 0
        inRow = false
        large = nil
    }

    /// Appends rows to `out` until it holds `limit` bytes or more, or the batch is done.
    /// Returns true when the batch is done (and released).
    public mutating func fill(_ out: inout [UInt8], limit: Int) -> Bool {
        encode(into: &out, limit: limit)
    }

    /// `fill` into a `ByteOutput` (no array's bookkeeping per append).
    public mutating func fill(_ out: ByteOutput, limit: Int) -> Bool {
        var o = out
        return encode(into: &o, limit: limit)
    }

    /// `fill` into any `ByteAppending` (the document source's `ByteOutput`).
    mutating func encode<Out: ByteAppending>(into out: inout Out, limit: Int) -> Bool {
        guard let batch else { return true }
        let forms = self.forms, sliceable = self.sliceable
        let rows = batch.count
        // The batch's buffers pinned for this piece: each cell reads raw pointers (a
        // ColumnBuffer read from its array was retained and released, five arrays, per cell).
        batch.withPinnedColumns { cols in
            forms.withUnsafeBufferPointer { forms in
                sliceable.withUnsafeBufferPointer { sliceable in
                    while out.count < limit && row < rows {
                        if large == nil && !inRow && Self.isShort(row, cols, sliceable) {
                            // The common case, a row whose values are short together: written whole,
                            // without this loop's bookkeeping per cell (the piece then goes past
                            // `limit` by at most a row of such values, as it did by a cell).
                            out.appendASCII("<r>")
                            for c in 0..<forms.count { WireValue.appendCell(cols[c], row: row, form: forms[c], into: &out) }
                            out.appendASCII("</r>\n")
                            row += 1
                            continue
                        }
                        if let l = large {
                            let end = min(l.next + Self.slice, l.end)
                            let piece = cols[column].bytes(l.next..<end)
                            if l.base64 { XMLText.base64(piece, into: &out) } else { XMLText.appendEscaped(piece, content: true, into: &out) }
                            if end == l.end {
                                out.appendASCII("</v>")
                                large = nil
                                column += 1
                            } else {
                                large = (end, l.end, l.base64)
                            }
                            continue
                        }
                        if !inRow {
                            out.appendASCII("<r>")
                            inRow = true
                        }
                        if column == forms.count {
                            out.appendASCII("</r>\n")
                            inRow = false
                            column = 0
                            row += 1
                            continue
                        }
                        let form = forms[column]
                        if form.sliceable, !cols[column].isNull(row), cols[column].range(row).count > Self.largeValue {
                            startLarge(cols[column], form: form, into: &out)
                            continue
                        }
                        WireValue.appendCell(cols[column], row: row, form: form, into: &out)
                        column += 1
                    }
                }
            }
        }
        if row >= batch.count {
            self.batch = nil
            return true
        }
        return false
    }

    /// True when the text and binary values of `row` come to at most `largeValue` bytes.
    @inline(__always) static func isShort(_ row: Int, _ cols: UnsafeBufferPointer<PinnedColumn>, _ sliceable: UnsafeBufferPointer<Int>) -> Bool {
        var bytes = 0
        for c in sliceable where !cols[c].isNull(row) { bytes += cols[c].range(row).count }
        return bytes <= largeValue
    }

    /// Opens the cell of a value long enough to go out in slices, and notes where it is.
    private mutating func startLarge<Out: ByteAppending>(_ c: PinnedColumn, form: WireValue.CellForm, into out: inout Out) {
        var range = c.range(row)
        let base64: Bool
        // A stored TEXT or BLOB says its class and goes out without its tag byte.
        let storedTag = form == .stored ? c.bytes(row).first ?? 0 : 0
        if storedTag == StoredValue.text || storedTag == StoredValue.blob {
            range = range.lowerBound + 1..<range.upperBound
            base64 = storedTag == StoredValue.blob || !XMLText.isRepresentable(c.bytes(range))
            out.appendASCII(storedTag == StoredValue.text ? "<v s=\"t\" " : "<v s=\"b\" ")
        } else {
            base64 = form != .text || !XMLText.isRepresentable(c.bytes(range))
            out.appendASCII("<v ")
        }
        // `n`: the value's length in bytes, so that the decoder makes room for it once.
        out.appendASCII(base64 ? "enc=\"b64\" n=\"" : "n=\"")
        let length = Int64(range.count)
        out.write(maxBytes: IntegerText.maxBytes) { IntegerText.write(length, to: $0) }
        out.appendASCII("\">")
        large = (range.lowerBound, range.upperBound, base64)
    }




}

/// The body of a `POST …/rows` request, produced as the transport asks for it: the document's
/// start, the batches' rows piece by piece, `</rows>`. Holds one piece at a time. The batches
/// come from a list, or one by one from whoever writes them (`HTTPWriter`), who may also
/// abandon the document: it then ends short of `</rows>`, which the service refuses whole.
public final class RowsDocumentSource {
    /// What comes after a batch.
    enum Next {
        case batch(RowBatch)
        /// `</rows>`: the document is complete.
        case end
        /// Nothing more: the document stops where it is (the writer gave up).
        case abandon
    }

    private var encoder: RowsEncoder
    private let next: () -> Next
    private let pending = ByteOutput(capacity: 96 * 1024)
    private var offset = 0
    private var stage = 0  // 0: rows, 1: the end, 2: done
    static let piece = 64 * 1024
    /// Bytes of the document encoded so far (read from any thread: a writer sizing its request).
    public let produced = Locked(0)

    init(table: TableName, types: [LogicalType], stored: [Bool] = [], next: @escaping () -> Next) {
        encoder = RowsEncoder(types: types, stored: stored)
        self.next = next
        XMLDocuments.RowsWriter(types: types).begin(table: table).withUnsafeBytes { pending.append(bytes: $0) }
    }

    convenience init(table: TableName, types: [LogicalType], stored: [Bool] = [], batches: [RowBatch]) {
        var rest = batches[...]
        self.init(table: table, types: types, stored: stored) { rest.popFirst().map { .batch($0) } ?? .end }
    }

    convenience init(table: TableName, types: [LogicalType], stored: [Bool] = [], batch: RowBatch) {
        self.init(table: table, types: types, stored: stored, batches: [batch])
    }

    /// Copies up to `count` bytes of the document into `buffer`; 0 at the end.
    public func read(into buffer: UnsafeMutablePointer<UInt8>, count: Int) -> Int {
        while offset == pending.count {
            pending.removeAll()
            offset = 0
            switch stage {
            case 0:
                defer { produced.withLock { $0 += pending.count } }
                rows: while pending.count < Self.piece {
                    guard encoder.fill(pending, limit: Self.piece) else { continue }
                    switch next() {
                    case .batch(let b): encoder.start(b)
                    case .end:
                        stage = 1
                        break rows
                    case .abandon:
                        stage = 2
                        return 0
                    }
                }
            case 1:
                XMLDocuments.RowsWriter(types: []).end().withUnsafeBytes { pending.append(bytes: $0) }
                stage = 2
            default:
                return 0
            }
        }
        let n = min(count, pending.count - offset)
        buffer.update(from: pending.base + offset, count: n)
        offset += n
        return n
    }
}
