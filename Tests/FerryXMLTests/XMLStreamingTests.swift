import FerryCore
import FerryDriverTestKit
@testable import FerryXML
import Foundation
import XCTest

/// The streaming halves of the wire format: the rows decoder fed a body piece by piece as it
/// arrives, and the encoder that writes rows a piece at a time.
final class XMLStreamingTests: XCTestCase {
    func col(_ name: String, _ t: LogicalType) -> Column { Column(name: name, nativeType: "", logicalType: t) }

    /// Decodes `doc` fed in pieces of the sizes `split` gives, as a body arrives from the network.
    func decodeInPieces(_ doc: [UInt8], columns: [Column], batchSize: Int, split: (Int) -> Int) throws -> (rows: [[Value]], next: [[UInt8]]?, batches: Int) {
        let types = columns.map(\.logicalType)
        let d = XMLRowsStreamDecoder(columns: columns, batchSize: batchSize)
        var rows: [[Value]] = []
        var batches = 0
        var at = 0
        func take(_ b: RowBatch) {
            batches += 1
            XCTAssertGreaterThan(b.count, 0, "batches are never empty")
            for r in 0..<b.count { rows.append(b.row(r, types: types)) }
        }
        while at < doc.count {
            let n = min(max(split(doc.count - at), 1), doc.count - at)
            doc[at..<(at + n)].withUnsafeBytes { d.append($0) }
            at += n
            while let b = try d.next() { take(b) }
        }
        while let b = try d.next(final: true) { take(b) }
        return (rows, d.next, batches)
    }

    /// A document of `rows` written by the encoder the client and the service use, in pieces
    /// of at most `piece` bytes.
    func encode(_ rows: [[Value]], types: [LogicalType], next: Bool = true, piece: Int = 1 << 16) throws -> [UInt8] {
        let batch = try RowBatch(rows: rows, types: types)
        let w = XMLDocuments.RowsWriter(types: types)
        var doc = w.begin(table: TableName("t"))
        var encoder = RowsEncoder(types: types)
        encoder.start(batch)
        var pieces = 0
        while true {
            var out: [UInt8] = []
            let done = encoder.fill(&out, limit: piece)
            // A piece ends after the cell or slice that reached the limit: at most 6 bytes per byte
            // of a slice (`&quot;`) past it.
            XCTAssertLessThanOrEqual(out.count, piece + 6 * RowsEncoder.largeValue, "a piece is bounded, whatever the values")
            doc += out
            pieces += 1
            if done { break }
        }
        doc += w.end(next: next ? (batch, rows.count - 1, [0]) : nil)
        return doc
    }

    var sampleColumns: [Column] { [col("id", .int64), col("t", .text), col("b", .binary(maxLength: nil)), col("f", .float64)] }

    func sampleRows() -> [[Value]] {
        (0..<40).map { i in
            let text = i % 5 == 0 ? String(repeating: "long & <escaped> \"text\"\r\n😀", count: 2500) : "row \(i) \u{1} bell, CR\r, 😀 &#13;"
            return [.int(Int64(i)), i == 7 ? .null : .text(text), .binary((0..<(i % 5 == 0 ? 70_001 : i * 37 % 300)).map { UInt8(truncatingIfNeeded: $0 &* (i + 1)) }), .double(Double(i) / 7)]
        }
    }

    /// The piecewise encoder writes what the whole-batch writer writes, whatever the size of the
    /// pieces, but that a value written in slices says its length (`n="…"`).
    /// Numbers parse to exactly the double the C library's correctly rounded conversion gives
    /// (Swift's `Double(String)`), through the fast path (few digits, small exponents) and the
    /// general one: shortest forms of random doubles, amounts, integers, extreme exponents,
    /// signed zeros; and text that is not a number is refused by both.
    func testDoublesParseAsTheCLibraryParsesThem() {
        var rng = SplitMix64(seed: 0xD0B1E)
        var texts: [String] = ["0", "-0", "0.0", "-0.0", "1", "-1", ".5", "5.", "1e22", "1e23", "9007199254740992", "9007199254740993",
                               "123456789012345678", "1234567890123456789012", "4.9406564584124654e-324", "2.2250738585072014e-308",
                               "1.7976931348623157e308", "1e-22", "1e-23", "3.14159", "-2.5E+3", "00012.5000", "0.1", "0.3",
                               "1e400", "-1e400", "1e", "e5", "+", "-", ".", "1.2.3", "--1", "1e+-3", "12a", "", "NaN", "Infinity", "-Infinity", "nan"]
        for _ in 0..<20_000 {
            let d = Double(bitPattern: rng.next())
            if d.isFinite { texts.append("\(d)") }
            texts.append(String(format: "%.2f", Double(Int64(bitPattern: rng.next()) % 1_000_000_000_000) / 100))
            texts.append("\(Int64(bitPattern: rng.next()) % 10_000_000)e\(Int(rng.next() % 60) - 30)")
        }
        for t in texts {
            let got = t.utf8CString.withUnsafeBytes { WireValue.parseDouble(UnsafeRawBufferPointer(rebasing: $0.dropLast())) }
            let expected: Double? = t == "NaN" ? .nan : Double(t).flatMap { $0.isFinite || t.contains("Infinity") ? $0 : nil }
            switch (got, expected) {
            case (nil, nil): continue
            case let (g?, e?) where g.isNaN && e.isNaN: continue
            case let (g?, e?) where g.bitPattern == e.bitPattern: continue
            default: XCTFail("'\(t)': got \(String(describing: got)), expected \(String(describing: expected))")
            }
        }
    }

    func testPiecewiseEncodingIsTheSameDocument() throws {
        let types = sampleColumns.map(\.logicalType)
        let rows = sampleRows()
        let batch = try RowBatch(rows: rows, types: types)
        let w = XMLDocuments.RowsWriter(types: types)
        var whole: [UInt8] = []
        w.rows(batch, into: &whole)
        var first: [UInt8]?
        for piece in [1, 7, 4096, 1 << 16, 1 << 22] {
            var encoder = RowsEncoder(types: types)
            encoder.start(batch)
            var out: [UInt8] = []
            while !encoder.fill(&out, limit: out.count + piece) {}
            if let first {
                XCTAssertTrue(out == first, "pieces of \(piece) bytes give another document")
            } else {
                first = out
                let text = String(decoding: out, as: UTF8.self)
                let lengths = try NSRegularExpression(pattern: " n=\"([0-9]+)\"").matches(in: text, range: NSRange(text.startIndex..., in: text))
                XCTAssertEqual(lengths.count, 16, "8 long texts and 8 long blobs say their length")
                let plain = text.replacingOccurrences(of: " n=\"[0-9]+\"", with: "", options: .regularExpression)
                XCTAssertTrue(Array(plain.utf8) == whole, "the same document but the lengths")
            }
        }
    }

    /// The same document gives the same rows, batches and errors however its bytes are cut
    /// into pieces: one byte at a time, random sizes, or whole.
    func testPiecesDecodeLikeTheWholeDocument() throws {
        let columns = sampleColumns
        let types = columns.map(\.logicalType)
        let rows = sampleRows()
        let doc = try encode(rows, types: types, piece: 10_000)
        // Other producers' features, too.
        let other = Array(("\u{FEFF}<?xml version='1.0'?>\n<!-- c --><rows table='t'>\r\n<r><v>1</v> <!-- x --> <v><![CDATA[<b>&amp;</b> ]]]]><![CDATA[>]]></v>"
            + "<v enc='b64'>AAEC\n/w==</v><v>1.5</v></r>\r\n<r><v>2</v><v>a\r\nb\rc &#x1F600;&#233;</v><v enc=\"b64\"/><v null='1' /></r></rows>\n").utf8)
        let whole = try decodeInPieces(doc, columns: columns, batchSize: 6) { $0 }
        XCTAssertEqual(whole.rows.count, rows.count)
        for (g, w) in zip(whole.rows, rows) { XCTAssertEqual(g, w) }
        XCTAssertEqual(whole.next, [Array("39".utf8)])
        XCTAssertEqual(try XMLRowsDecoder(columns: columns, batchSize: 6).decode(Data(doc)) { _ in }.rows, rows.count)
        var rng = SplitMix64(seed: 7)
        let splits: [(Int) -> Int] = [{ _ in 1 }, { _ in 3 }, { _ in 4096 }, { _ in Int(rng.next() % 70) + 1 }, { _ in Int(rng.next() % 20000) + 1 }]
        for (n, split) in splits.enumerated() {
            // One byte at a time through 3 MB is slow: the smallest pieces go through the start only.
            let input = n < 2 ? Array(doc.prefix(60_000)) + Array("</rows>".utf8) : doc
            let got = try? decodeInPieces(input, columns: columns, batchSize: 6, split: split)
            if n >= 2 {
                let got = try XCTUnwrap(got)
                XCTAssertEqual(got.rows.count, rows.count)
                for (g, w) in zip(got.rows, rows) { XCTAssertEqual(g, w) }
                XCTAssertEqual(got.next, whole.next)
                XCTAssertEqual(got.batches, whole.batches)
            } else {
                let w = try? decodeInPieces(input, columns: columns, batchSize: 6) { $0 }
                XCTAssertEqual(got?.rows, w?.rows)
            }
            let o1 = try decodeInPieces(other, columns: columns, batchSize: 10) { $0 }
            let o2 = try decodeInPieces(other, columns: columns, batchSize: 10, split: split)
            XCTAssertEqual(o1.rows, o2.rows)
            XCTAssertEqual(o2.rows, [[.int(1), .text("<b>&amp;</b> ]]>"), .binary([0, 1, 2, 255]), .double(1.5)],
                                     [.int(2), .text("a\nb\nc 😀é"), .binary([]), .null]])
        }
        // Mutated documents: whole and in pieces agree on the rows, or both fail cleanly.
        let small = try encode(Array(rows.filter { $0[0] != .int(0) && $0[0] != .int(5) }.prefix(12)), types: types)
        for _ in 0..<400 {
            var bad = small
            for _ in 0..<(1 + Int(rng.next() % 4)) {
                let at = Int(rng.next() % UInt64(bad.count))
                if rng.next() % 2 == 0 { bad.remove(at: at) } else { bad.insert(Array("<>&;/v\r=\"!-[".utf8)[Int(rng.next() % 12)], at: at) }
            }
            let a = Result { try decodeInPieces(bad, columns: columns, batchSize: 6) { $0 } }
            let b = Result { try decodeInPieces(bad, columns: columns, batchSize: 6) { _ in Int(rng.next() % 200) + 1 } }
            switch (a, b) {
            case let (.success(x), .success(y)): XCTAssertEqual(x.rows, y.rows)
            case let (.failure(x), .failure(y)):
                XCTAssertTrue(x is XMLWireError, "\(x)")
                XCTAssertTrue(y is XMLWireError, "\(y)")
            default: XCTFail("whole and in pieces disagree: \(a) / \(b)")
            }
        }
    }

    /// A page cut short anywhere — between rows, inside a tag, a value, a reference, `<next>`
    /// — is an error, never a shorter page: a document is complete only at `</rows>`.
    func testADocumentCutShortNeverDecodes() throws {
        let columns = [col("id", .int64), col("t", .text), col("b", .binary(maxLength: nil))]
        let types = columns.map(\.logicalType)
        let rows: [[Value]] = (0..<5).map { [.int(Int64($0)), .text("v\($0) &amp; \u{1} <\r"), .binary([UInt8($0), 0, 255])] }
        let doc = try encode(rows, types: types)
        // `</rows>\n` ends the document: any shorter prefix is cut short.
        let complete = doc.count - 1
        for cut in 0..<complete {
            let prefix = Array(doc[0..<cut])
            XCTAssertThrowsError(try decodeInPieces(prefix, columns: columns, batchSize: 2) { $0 }, "cut at \(cut)") { e in
                XCTAssertTrue(e is XMLWireError, "\(e)")
            }
            XCTAssertThrowsError(try decodeInPieces(prefix, columns: columns, batchSize: 2) { _ in 3 }, "cut at \(cut)")
            XCTAssertThrowsError(try XMLRowsDecoder(columns: columns, batchSize: 2).decode(Data(prefix)) { _ in }, "cut at \(cut)")
        }
        XCTAssertEqual(try decodeInPieces(Array(doc[0..<complete]), columns: columns, batchSize: 2) { $0 }.rows, rows)
        // Cut between rows, the message says so.
        let lastRowEnd = try XCTUnwrap(String(decoding: doc, as: UTF8.self).range(of: "</r>\n", options: .backwards))
        let between = Array(String(decoding: doc, as: UTF8.self)[..<lastRowEnd.upperBound].utf8)
        XCTAssertThrowsError(try decodeInPieces(between, columns: columns, batchSize: 2) { $0 }) { e in
            XCTAssertTrue("\(e)".contains("cut short"), "\(e)")
        }
        // The service's error inside a page fails the read with its message.
        let stopped = Array("<rows><r><v>1</v><v>a</v><v enc=\"b64\">AA==</v></r><error code=\"failed\">disk &amp; dust</error></rows>".utf8)
        XCTAssertThrowsError(try decodeInPieces(stopped, columns: columns, batchSize: 2) { _ in 5 }) { e in
            XCTAssertTrue("\(e)".contains("the server stopped (failed): disk & dust"), "\(e)")
        }
    }

    /// The decoder reads the cells Ferry writes in a fast loop and hands every other form to its
    /// state machine at the start of that cell: each form below, at each position in a row,
    /// between fast cells, with rows joined every way XML allows, decodes to the same values
    /// whole and in pieces of any size (a piece can end anywhere in a fast cell too).
    /// The keys a streamed load keeps to name a refused row: one integer key as varint deltas
    /// (in order, out of order, at both ends of Int64), any other key as its columns; every
    /// row's key read back exactly.
    func testKeptKeysGiveBackEveryRowsKey() throws {
        let ints: [Int64] = [1, 2, 3, 1_000_000, 5, -7, .min, .max, 0, .min, -1, 1 << 40]
        let batch = try RowBatch(rows: ints.map { [.int($0), .text("v\($0)")] }, types: [.int64, .text])
        let integers = KeptKeys(batch, at: [0])
        guard case .integers(let deltas) = integers else { return XCTFail("one integer key without NULLs is kept as deltas") }
        XCTAssertLessThan(deltas.count, 12 * 10)
        for (row, value) in ints.enumerated() { XCTAssertEqual(integers.column(0, row: row).ints, [value], "row \(row)") }
        let inOrder = try RowBatch(rows: (1...10_000).map { [.int(Int64($0))] }, types: [.int64])
        XCTAssertLessThanOrEqual(KeptKeys(inOrder, at: [0]).bytes, 10_100, "about a byte a row for keys in order")
        XCTAssertEqual(KeptKeys(inOrder, at: [0]).column(0, row: 9_999).ints, [10_000])

        let composite = KeptKeys(batch, at: [1, 0])
        guard case .columns = composite else { return XCTFail("two key columns are kept as columns") }
        for (row, value) in ints.enumerated() {
            XCTAssertEqual(composite.column(0, row: row).arena.count, "v\(value)".utf8.count)
            XCTAssertEqual(Value(column: composite.column(0, row: row), row: 0, type: .text), .text("v\(value)"))
            XCTAssertEqual(composite.column(1, row: row).ints, [value])
        }
        let withNull = try RowBatch(rows: [[.int(1)], [.null]], types: [.int64])
        guard case .columns = KeptKeys(withNull, at: [0]) else { return XCTFail("a key column with a NULL is kept as a column") }
        XCTAssertEqual(Value(column: KeptKeys(withNull, at: [0]).column(0, row: 1), row: 0, type: .int64), .null)
    }

    func testFastCellsAndEveryOtherFormMixInARow() throws {
        let columns = [col("id", .int64), col("t", .text(maxLength: nil, fixed: false)), col("b", .binary(maxLength: nil))]
        // (cell, value) of the text column: fast forms first, then those the state machine reads.
        let texts: [(String, Value)] = [
            ("<v>plain</v>", .text("plain")), ("<v>a &amp; b &lt;c&gt; &quot;q&quot; &apos;s&apos;</v>", .text("a & b <c> \"q\" 's'")),
            ("<v>Zoë — ✓</v>", .text("Zoë — ✓")), ("<v></v>", .text("")), ("<v null=\"1\"/>", .null),
            ("<v enc=\"b64\">aGk=</v>", .text("hi")), ("<v>x&#65;y</v>", .text("xAy")), ("<v>x&#x1F600;y</v>", .text("x😀y")),
            ("<v><![CDATA[<a> & b]]></v>", .text("<a> & b")), ("<v>cr\r\nlf</v>", .text("cr\nlf")), ("<v >spaced</v>", .text("spaced")),
            ("<v\tnull='1'/>", .null), ("<v n=\"3\">abc</v>", .text("abc")), ("<v>tab\there\nline</v>", .text("tab\there\nline")),
        ]
        let gaps = ["", "\n", " ", "<!-- c -->"]
        var doc = "<?xml version=\"1.0\"?>\n<rows table=\"t\">\n"
        var expected: [[Value]] = []
        var id: Int64 = 0
        for (k, (cell, value)) in texts.enumerated() {
            for position in 0..<3 {
                id += 1
                // The text column's cell in the middle; the cell before or after it also in a form
                // the state machine reads (a space in the tag, a line break inside base64).
                var cells = ["<v>\(id)</v>", cell, "<v enc=\"b64\">dGV4dA==</v>"]
                if position == 1 { cells[0] = "<v >\(id)</v>" }
                if position == 2 { cells[2] = "<v enc=\"b64\">dGV4\ndA==</v>" }
                let row: [Value] = [.int(id), value, .binary(Array("text".utf8))]
                let gap = gaps[(k + position) % gaps.count]
                doc += "<r>" + cells.joined(separator: gap) + "</r>" + gaps[(k + position + 1) % gaps.count]
                expected.append(row)
            }
        }
        doc += "</rows>\n"
        let bytes = Array(doc.utf8)
        var random = SplitMix64(seed: 15)
        for (batchSize, split) in [(1000, { (n: Int) in n }), (2, { _ in 1 }), (3, { _ in 7 }), (5, { _ in Int(random.next() % 40) + 1 })] as [(Int, (Int) -> Int)] {
            let got = try decodeInPieces(bytes, columns: columns, batchSize: batchSize, split: split)
            XCTAssertEqual(got.rows.count, expected.count)
            for (g, e) in zip(got.rows, expected) { XCTAssertEqual(g, e, "batch size \(batchSize)") }
        }
    }

    /// A stored value (`StoredValue`: a tag byte and its payload) in a column read in its stored
    /// form goes out in its own form — `<v s="i">`, `s="t"` (base64 when XML cannot hold the
    /// text), `s="b"` — and comes back byte for byte, in pieces of any size, long values in
    /// slices, in `<next>` too; a REAL and bytes that are no stored value go as plain binary,
    /// and a REAL written as its shortest text (`s="r"`) is read as the same value.
    func testStoredValuesTravelInTheirOwnForm() throws {
        func word(_ tag: Character, _ w: UInt64) -> [UInt8] { [tag.asciiValue ?? 0] + (0..<8).map { UInt8(truncatingIfNeeded: w >> (56 - 8 * UInt64($0))) } }
        func text(_ s: String) -> [UInt8] { Array("t".utf8) + Array(s.utf8) }
        let values: [[UInt8]?] = [
            word("i", UInt64(bitPattern: -42)), word("i", UInt64(bitPattern: Int64.min)), word("i", 0),
            word("r", (1.5).bitPattern), word("r", (-0.0).bitPattern), word("r", Double.leastNonzeroMagnitude.bitPattern), word("r", Double.infinity.bitPattern),
            word("r", (0.1 + 0.2).bitPattern), text("12:00:00.500000"), text("A&B <c> \"q\" 'a' CR\r LF\n tab\t 😀"), text(""),
            Array("t".utf8) + [0x61, 0xFF, 0x62], text("bell \u{1}"), [UInt8(ascii: "b")], [UInt8(ascii: "b"), 0, 1, 255],
            text(String(repeating: "long \"json\" & <text> ", count: 5000)), [UInt8(ascii: "b")] + (0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 7) },
            Array("t".utf8) + [0xC3] + Array(repeating: 0x61, count: 70_000), nil, [UInt8(ascii: "x"), 1, 2], [],
        ]
        let column = Column(name: "v", nativeType: "", logicalType: .binary(maxLength: nil)).storedForm
        let rows: [[Value]] = values.map { [$0.map(Value.binary) ?? .null] }
        let batch = try RowBatch(rows: rows, types: [column.logicalType])
        let writer = XMLDocuments.RowsWriter(types: [column.logicalType], stored: [true])
        var doc = writer.begin(table: TableName("t"))
        var encoder = RowsEncoder(types: [column.logicalType], stored: [true])
        encoder.start(batch)
        while !encoder.fill(&doc, limit: doc.count + 1000) {}
        doc += writer.end(next: (batch, 8, [0]))
        let shown = String(decoding: doc, as: UTF8.self)
        func binary(_ bytes: [UInt8]) -> String { "<v enc=\"b64\">\(Data(bytes).base64EncodedString())</v>" }
        for form in ["<v s=\"i\">-42</v>", "<v s=\"i\">-9223372036854775808</v>", binary(values[3]!), binary(values[4]!), binary(values[6]!),
                     binary(values[7]!), "<v s=\"t\">12:00:00.500000</v>", "<v s=\"t\">A&amp;B &lt;c&gt; \"q\" 'a' CR&#13; LF\n tab\t 😀</v>",
                     "<v s=\"t\"></v>", "<v s=\"t\" enc=\"b64\">", "<v s=\"b\" enc=\"b64\"></v>", "<v s=\"b\" enc=\"b64\">AAH/</v>",
                     "<v s=\"t\" n=\"\(values[15]!.count - 1)\">", "<v s=\"b\" enc=\"b64\" n=\"70000\">", "<v s=\"t\" enc=\"b64\" n=\"70001\">", "<v enc=\"b64\">eAEC</v>",
                     "<next><v s=\"t\">12:00:00.500000</v></next>"] {
            XCTAssertTrue(shown.contains(form), "no \(form) in the document")
        }
        var rng = SplitMix64(seed: 11)
        for split in [{ (_: Int) in 1 }, { _ in 5 }, { _ in Int(rng.next() % 3000) + 1 }, { $0 }] as [(Int) -> Int] {
            let got = try decodeInPieces(doc, columns: [column], batchSize: 4, split: split)
            XCTAssertEqual(got.rows.count, values.count)
            for (g, v) in zip(got.rows, values) { XCTAssertEqual(g, [v.map(Value.binary) ?? .null]) }
            XCTAssertEqual(got.next, [text("12:00:00.500000")])
        }
        XCTAssertFalse(shown.contains("s=\"r\""))
        // A REAL as its shortest text, as other producers may write it: the same eight bytes.
        let reals = [1.5, -0.0, Double.leastNonzeroMagnitude, .infinity, -.infinity, 0.1 + 0.2, 37828.95275711235, -1e-300]
        let texts = ["1.5", "-0.0", "5e-324", "Infinity", "-Infinity", "0.30000000000000004", "37828.95275711235", "-1e-300"]
        let asText = try decodeInPieces(Array(("<rows>" + texts.map { "<r><v s=\"r\">\($0)</v></r>" }.joined() + "</rows>").utf8), columns: [column], batchSize: 3) { _ in 7 }
        XCTAssertEqual(asText.rows, reals.map { [Value.binary(word("r", $0.bitPattern))] })
        // What is not a stored value of its class, or `s` where no stored value is read, is refused.
        func refused(_ cells: String, _ expected: String, column c: Column = column) {
            XCTAssertThrowsError(try decodeInPieces(Array("<rows><r>\(cells)</r></rows>".utf8), columns: [c], batchSize: 4) { $0 }, cells) { e in
                XCTAssertTrue("\(e)".contains(expected), "\(cells): \(e)")
            }
        }
        refused("<v s=\"i\">12a</v>", "is not an INTEGER")
        refused("<v s=\"i\">9223372036854775808</v>", "is not an INTEGER")
        refused("<v s=\"r\">nan</v>", "is not a REAL")
        refused("<v s=\"x\">1</v>", "no storage class")
        refused("<v s=\"t\" s=\"t\">1</v>", "given twice")
        refused("<v s=\"t\">1</v>", "not read in its stored form", column: Column(name: "v", nativeType: "", logicalType: .text(maxLength: nil, fixed: false)))
    }

    /// Base64 decoded in pieces agrees with Foundation on valid text, and refuses what is not base64.
    func testBase64InPieces() {
        var rng = SplitMix64(seed: 3)
        for n in [0, 1, 2, 3, 4, 5, 100, 1000] {
            let raw = (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            let text = Array(Data(raw).base64EncodedString(options: .lineLength64Characters).utf8)
            for piece in [1, 2, 3, 5, 64] {
                var d = Base64Decoder()
                var out: [UInt8] = []
                var at = 0
                while at < text.count {
                    let end = min(at + piece, text.count)
                    XCTAssertTrue(text[at..<end].withUnsafeBufferPointer { d.decode($0, into: &out) })
                    at = end
                }
                XCTAssertTrue(d.finish())
                XCTAssertEqual(out, raw)
            }
        }
        // Without line breaks, in pieces of whole groups: four characters at a time, the last
        // group padded or not.
        for n in [1, 2, 3, 16, 17, 18, 300] {
            let raw = (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            let text = Array(Data(raw).base64EncodedString().utf8)
            for piece in [4, 8, text.count] {
                var d = Base64Decoder()
                var out: [UInt8] = []
                for at in stride(from: 0, to: text.count, by: piece) {
                    XCTAssertTrue(text[at..<min(at + piece, text.count)].withUnsafeBufferPointer { d.decode($0, into: &out) }, "\(n) bytes, pieces of \(piece)")
                }
                XCTAssertTrue(d.finish())
                XCTAssertEqual(out, raw, "\(n) bytes, pieces of \(piece)")
            }
        }
        for pieces in [["AB==", "AAAA"], ["AB=A"], ["A=AA"], ["AAAA", "A===", "AAAA"], ["AA\u{0}A"]] {
            var d = Base64Decoder()
            var out: [UInt8] = []
            let ok = pieces.allSatisfy { p in Array(p.utf8).withUnsafeBufferPointer { d.decode($0, into: &out) } } && d.finish()
            XCTAssertFalse(ok, "\(pieces)")
        }
        for bad in ["A", "AB", "ABC", "A===", "AB==C", "AB==AB==", "=AAA"] {
            var d = Base64Decoder()
            var out: [UInt8] = []
            let ok = Array(bad.utf8).withUnsafeBufferPointer { d.decode($0, into: &out) } && d.finish()
            XCTAssertFalse(ok, bad)
            XCTAssertNil(Data(base64Encoded: bad), "Foundation agrees that \(bad) is not base64")
        }
    }

    /// A replica's transaction as the service reads it: indexed once (every value decoded and
    /// checked, no row held), then each section's rows decoded again a batch at a time — the same
    /// rows, in order, as the document held whole; a bad value is refused while indexing, before
    /// anything would be written.
    func testAReplicaTransactionIsIndexedThenReadABatchAtATime() throws {
        let columns = sampleColumns
        let types = columns.map(\.logicalType)
        let upserts = (0..<25_000).map { i -> [Value] in
            let name: Value = i % 97 == 0 ? .null : .text("row \(i) <&> 😀")
            let bytes: [UInt8] = [UInt8(i % 256), 0, 1]
            return [.int(Int64(i)), name, .binary(bytes), .double(Double(i) / 3)]
        }
        let updates = (0..<12_345).map { i -> [Value] in [.int(Int64(i * 2)), .text("updated \(i)")] }
        let deletes = (0..<3).map { i -> [Value] in [.int(Int64(24_990 + i))] }
        var doc = ChangeDocuments.beginTransaction(repeatingCascades: false)
        ChangeDocuments.section("upsert", table: TableName("t"), columns: columns, key: ["id"], rows: try RowBatch(rows: upserts, types: types), into: &doc)
        ChangeDocuments.section("update", table: TableName("t"), columns: [columns[0], columns[1]], key: ["id"],
                                rows: try RowBatch(rows: updates, types: [.int64, .text]), into: &doc)
        ChangeDocuments.section("upsert", table: TableName("t"), columns: columns, key: ["id"], rows: nil, staged: TableName("_ferry_load_x"), into: &doc)
        ChangeDocuments.section("delete", table: TableName("t"), columns: [columns[0]], key: [], rows: try RowBatch(rows: deletes, types: [.int64]), into: &doc)
        let state = ReplicationState.Row(name: "r", phase: "following", position: "0/1", appliedRows: 7, updatedAt: "", source: "sqlite:x")
        ChangeDocuments.endTransaction(state: state, into: &doc)
        let resolve = { (_: TableName, names: [String], _: Set<String>) -> [Column] in names.compactMap { n in columns.first { $0.name == n } } }

        let held = try ChangeDocuments.decodeTransaction(Data(doc), columns: resolve)
        var passedBytes = 0
        let indexed = try doc.withUnsafeBytes { raw in
            try ChangeDocuments.decodeTransaction(raw, holdingRows: false, passed: { passedBytes += $0.count }, columns: resolve)
        }
        XCTAssertEqual(indexed.state, state)
        XCTAssertGreaterThanOrEqual(passedBytes, doc.count * 9 / 10, "the pages indexed are given back as they are passed")
        XCTAssertEqual(indexed.sections.map(\.tag), ["upsert", "update", "upsert", "delete"])
        XCTAssertEqual(indexed.sections.map(\.rowCount), [25_000, 12_345, 0, 3])
        XCTAssertEqual(indexed.sections.map(\.staged), [nil, nil, TableName("_ferry_load_x"), nil])
        XCTAssertEqual(indexed.sections.map(\.key), [["id"], ["id"], ["id"], ["id"]])
        for (h, s) in zip(held.sections, indexed.sections) {
            XCTAssertEqual(s.rows.count, 0, "an indexed section holds no rows")
            var got: [[Value]] = []
            var batches = 0
            try doc.withUnsafeBytes { raw in
                try ChangeDocuments.forEachBatch(of: s, in: raw, batchSize: 10_000) { b in
                    batches += 1
                    XCTAssertLessThanOrEqual(b.count, 10_000)
                    for r in 0..<b.count { got.append(b.row(r, types: s.columns.map(\.logicalType))) }
                }
            }
            let want = (0..<h.rows.count).map { h.rows.row($0, types: h.columns.map(\.logicalType)) }
            XCTAssertEqual(got, want, "\(s.tag): the rows read a batch at a time are the rows held whole")
            XCTAssertEqual(batches, (s.rowCount + 9_999) / 10_000, s.tag)
        }

        // A value that is not a number, in the update section: refused while indexing.
        let bad = String(decoding: doc, as: UTF8.self).replacingOccurrences(of: "<r><v>24680</v>", with: "<r><v>24x680</v>")
        XCTAssertNotEqual(Array(bad.utf8), doc)
        XCTAssertThrowsError(try Array(bad.utf8).withUnsafeBytes { raw in
            try ChangeDocuments.decodeTransaction(raw, holdingRows: false, columns: resolve)
        })
    }
}
