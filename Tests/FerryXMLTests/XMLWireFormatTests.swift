import FerryCore
import FerryDriverTestKit
import FerryXML
import Foundation
import XCTest

final class XMLWireFormatTests: XCTestCase {
    func roundTrip(_ columns: [Column], _ rows: [[Value]], batchSize: Int = 3, file: StaticString = #filePath, line: UInt = #line) throws -> Data {
        let types = columns.map(\.logicalType)
        let batch = try RowBatch(rows: rows, types: types)
        let w = XMLDocuments.RowsWriter(types: types)
        var out = w.begin(table: TableName("t"))
        w.rows(batch, into: &out)
        out += w.end(next: (batch, rows.count - 1, [0]))
        let data = Data(out)
        var got: [[Value]] = []
        let decoder = XMLRowsDecoder(columns: columns, batchSize: batchSize)
        let (next, count) = try decoder.decode(data) { b in
            XCTAssertLessThanOrEqual(b.count, batchSize)
            for r in 0..<b.count { got.append(b.row(r, types: types)) }
        }
        XCTAssertEqual(count, rows.count, file: file, line: line)
        XCTAssertEqual(got.count, rows.count, file: file, line: line)
        for (g, w) in zip(got, rows) { XCTAssertEqual(g, w, file: file, line: line) }
        XCTAssertEqual(next?.count, 1, file: file, line: line)
        return data
    }

    func col(_ name: String, _ t: LogicalType) -> Column { Column(name: name, nativeType: "", logicalType: t) }

    func testEveryLogicalTypeRoundTrips() throws {
        let columns = [
            col("id", .int64), col("b", .boolean), col("i16", .int16), col("i32", .int32), col("dec", .decimal(precision: nil, scale: nil)),
            col("f32", .float32), col("f64", .float64), col("t", .text), col("bin", .binary(maxLength: nil)), col("d", .date),
            col("tm", .time(precision: 6)), col("ts", .timestamp(precision: 6, timeZone: false)),
            col("tz", .timestamp(precision: 6, timeZone: true)), col("u", .uuid), col("j", .json),
            col("e", .enumeration(labels: ["a", "b"])),
        ]
        let rows: [[Value]] = [
            [.int(.min), .bool(true), .int(-32768), .int(Int64(Int32.max)), .decimal("-1234567890123456789012345678901234567890.000000000000000000001"),
             .double(Double(Float.leastNonzeroMagnitude)), .double(-0.0), .text("plain"), .binary([0, 1, 2, 0, 255]),
             .date(Temporal.days(year: 1, month: 1, day: 1)), .time(Temporal.microsPerDay - 1), .timestamp(-2_208_988_800_000_001),
             .timestamp(4_102_444_800_123_456), .uuid(Array(0..<16)), .json("{\"k\": [1, 2.50], \"é\": \"😀\"}"), .text("b")],
            [.int(.max), .bool(false), .int(0), .int(0), .decimal("NaN"), .double(.nan), .double(.infinity), .text(""), .binary([]),
             .date(Temporal.days(year: 9999, month: 12, day: 31)), .time(0), .timestamp(0), .timestamp(1), .uuid(Array(repeating: 255, count: 16)),
             .json("12.30"), .text("a")],
            [.int(0), .null, .null, .null, .null, .null, .double(-.infinity), .null, .null, .null, .null, .null, .null, .null, .null, .null],
            [.int(1), .bool(true), .int(1), .int(1), .decimal("0.1"), .double(Double.leastNonzeroMagnitude), .double(1.7976931348623157e308), .text(" "),
             .binary(Array(repeating: 0, count: 3)), .date(0), .time(1), .timestamp(-1), .timestamp(-1), .uuid(Array(0..<16)), .json("null"), .text("a")],
        ]
        _ = try roundTrip(columns, rows)
    }

    func testNastyTextIsExact() throws {
        let nasty = [
            "&amp; written literally", "]]> closes CDATA", "<v>not a tag</v>", "quotes \" and ' apostrophes", "tab\there",
            "CR\rLF\nCRLF\r\nend", "NUL \u{0} inside", "bell \u{7} and escape \u{1B}", "emoji 😀 🚀 and CJK 中文 and RTL עברית",
            String(repeating: "1 MB of text & <markup> ", count: 45_000), "", "   leading and trailing spaces   ", "\n", "\r", "\u{FFFD}",
            "&#13; literal reference text", "a\u{FEFF}b (BOM inside)",
        ]
        let rows = nasty.enumerated().map { [Value.int(Int64($0.offset)), .text($0.element)] } + [[.int(99), .null]]
        let data = try roundTrip([col("id", .int64), col("t", .text)], rows, batchSize: 4)
        let xml = String(decoding: data, as: UTF8.self)
        XCTAssertTrue(xml.contains("&amp;amp; written literally"), "ampersands are escaped")
        XCTAssertTrue(xml.contains("<v enc=\"b64\">"), "control characters travel as base64")
        XCTAssertTrue(xml.contains("CR&#13;LF"), "CR is kept with a character reference")
        XCTAssertTrue(xml.contains("<v null=\"1\"/>"))
        XCTAssertTrue(xml.contains("<v></v>"), "the empty string is not NULL")
    }

    /// The escaping scans eight bytes at a time: every character that needs a look, at every
    /// position of a word and across words, against escaping byte by byte.
    func testEscapingAtEveryPositionIsByteByByte() throws {
        func reference(_ bytes: [UInt8]) -> [UInt8]? {
            guard String(validating: bytes, as: UTF8.self) != nil else { return nil }
            var out: [UInt8] = []
            for scalar in String(decoding: bytes, as: UTF8.self).unicodeScalars {
                let v = scalar.value
                if v < 0x20 && v != 9 && v != 10 && v != 13 { return nil }
                if v == 0xFFFE || v == 0xFFFF { return nil }
                switch v {
                case 0x26: out += Array("&amp;".utf8)
                case 0x3C: out += Array("&lt;".utf8)
                case 0x3E: out += Array("&gt;".utf8)
                case 0x0D: out += Array("&#13;".utf8)
                default: out += Array(String(scalar).utf8)
                }
            }
            return out
        }
        let specials: [[UInt8]] = ["&", "<", ">", "\r", "\t", "\n", "\"", "'", "é", "✓", "😀", "\u{1}", "\u{7F}", "\u{FFFE}"].map { Array($0.utf8) }
            + [[0xFF], [0xC3], [0x1F], [0x20], [0x25], [0x27], [0x3B], [0x3D], [0x3F]]
        var texts: [String] = []
        for length in 0...19 {
            for position in 0..<max(length, 1) {
                for special in specials {
                    var bytes = (0..<length).map { UInt8(97 + $0 % 26) }
                    if length > 0 { bytes.replaceSubrange(position...position, with: special) }
                    var out: [UInt8] = Array("x".utf8)
                    let ok = bytes.withUnsafeBytes { XMLText.appendEscapedIfRepresentable($0, into: &out) }
                    let expected = reference(bytes)
                    XCTAssertEqual(ok, expected != nil, "\(bytes)")
                    XCTAssertEqual(out, Array("x".utf8) + (expected ?? []), "\(bytes)")
                    if expected != nil {
                        texts.append(String(decoding: bytes, as: UTF8.self))
                        var content: [UInt8] = []
                        bytes.withUnsafeBytes { XMLText.appendContent($0, into: &content) }
                        XCTAssertEqual(content, expected, "\(bytes)")
                    }
                }
            }
        }
        // Two bytes that need a look in one word or the next: each is found after the other
        // (the scans jump to the first one a word holds, then look again from the byte after it).
        let pairs: [[UInt8]] = ["&", "<", ">", "\r", "\t", "\n", "é", "✓", "\u{1}"].map { Array($0.utf8) } + [[0xFF], [0x3D]]
        for p in 0..<16 {
            for q in (p + 1)..<17 {
                for first in pairs {
                    for second in pairs {
                        var bytes = (0..<17).map { UInt8(97 + $0 % 26) }
                        bytes.replaceSubrange(q...q, with: second)
                        bytes.replaceSubrange(p...p, with: first)
                        var out: [UInt8] = []
                        let ok = bytes.withUnsafeBytes { XMLText.appendEscapedIfRepresentable($0, into: &out) }
                        let expected = reference(bytes)
                        XCTAssertEqual(ok, expected != nil, "\(bytes)")
                        XCTAssertEqual(out, expected ?? [], "\(bytes)")
                        if expected != nil { texts.append(String(decoding: bytes, as: UTF8.self)) }
                    }
                }
            }
        }
        // And back: the decoder scans plain text eight bytes at a time too.
        let rows = texts.enumerated().map { [Value.int(Int64($0.offset)), .text($0.element)] }
        _ = try roundTrip([col("id", .int64), col("t", .text)], rows, batchSize: 1000)
    }

    /// The UTF-8 checks (in line, per sequence, as the escaping and the decoder use them) against
    /// the standard library's decoding: every lead byte before edge bytes, four-byte sequences
    /// around the limits, and random mixes — alone, and inside ASCII that is scanned by words.
    func testUTF8ChecksAgreeWithTheStandardLibrary() {
        func expected(_ bytes: [UInt8]) -> (valid: Bool, representable: Bool) {
            guard let s = String(validating: bytes, as: UTF8.self) else { return (false, false) }
            let representable = s.unicodeScalars.allSatisfy { scalar in
                let v = scalar.value
                return (v >= 0x20 || v == 9 || v == 10 || v == 13) && v != 0xFFFE && v != 0xFFFF
            }
            return (true, representable)
        }
        let edges: [UInt8] = [0x00, 0x09, 0x1F, 0x20, 0x26, 0x3C, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBD, 0xBE, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF]
        var cases: [[UInt8]] = []
        for a in 0...255 { for b in edges { for c in edges { cases.append([UInt8(a), b, c]) } } }
        for a: UInt8 in [0xF0, 0xF3, 0xF4, 0xF5] { for b in edges { for c in edges { for d in edges { cases.append([a, b, c, d]) } } } }
        var random = SplitMix64(seed: 29)
        for _ in 0..<20_000 {
            cases.append((0..<random.next(24)).map { _ in random.next(3) == 0 ? edges[random.next(edges.count)] : UInt8(random.next(128)) })
        }
        var checked = 0
        for bytes in cases {
            for text in [bytes, Array("abcdefghij".utf8) + bytes + Array("klmnopqrstuvwxyz".utf8)] {
                let want = expected(text)
                text.withUnsafeBytes { raw in
                    XCTAssertEqual(XMLText.isValidUTF8(raw), want.valid, "\(text)")
                    XCTAssertEqual(XMLText.isRepresentable(raw), want.representable, "\(text)")
                    var out: [UInt8] = []
                    XCTAssertEqual(XMLText.appendEscapedIfRepresentable(raw, into: &out), want.representable, "\(text)")
                }
                checked += 1
            }
        }
        XCTAssertGreaterThan(checked, 400_000)
    }

    func testSchemaAndTablesDocuments() throws {
        let schema = TableSchema(
            name: TableName(schema: "sales", "Odd \"name\" <&>\ttab"), engine: Engine("postgres"),
            columns: [
                Column(name: "id", nativeType: "bigint", logicalType: .int64, isNullable: false, serial: .identityByDefault),
                Column(name: "price", nativeType: "numeric(10,2)", logicalType: .decimal(precision: 10, scale: 2), defaultValue: .number("0.00")),
                Column(name: "mood", nativeType: "mood", logicalType: .enumeration(labels: ["ok", "it's <bad>", " spaced "])),
                Column(name: "at", nativeType: "timestamptz", logicalType: .timestamp(precision: 3, timeZone: true)),
                Column(name: "code", nativeType: "char(3)", logicalType: .text(maxLength: 3, fixed: true), isNullable: false),
                Column(name: "fts", nativeType: "tsvector", logicalType: .unsupported(native: "tsvector")),
                Column(name: "twice", nativeType: "int", logicalType: .int32, generated: true),
            ],
            primaryKey: ["id"], uniqueKeys: [["code"], ["at", "mood"]], rowEstimate: 42)
        var full = schema
        full.columns[2].defaultValue = .text("it's <bad>")
        full.columns[3].defaultValue = .currentTimestamp
        full.indexes = [IndexInfo(name: "by \"at\" & <mood>", columns: [IndexColumn("at", descending: true), IndexColumn("mood")], isUnique: true)]
        full.foreignKeys = [ForeignKey(name: "fk<1>", columns: ["code", "id"], referencedTable: TableName(schema: "ref", "codes & ids"),
                                       referencedColumns: ["c", "i"], onDelete: .cascade, onUpdate: .setNull)]
        let back = try XMLDocuments.decodeSchema(XMLDocuments.schema(full))
        XCTAssertEqual(back, full)
        // SQL text never travels: an expression default, a check and a partial index are named as withheld.
        var sql = schema
        sql.columns[1].defaultValue = .expression("nextval('x')")
        sql.checks = [CheckConstraint(name: "positive", expression: "(price > 0)")]
        sql.indexes = [IndexInfo(name: "partial", columns: [IndexColumn("id")], predicate: "id > 3")]
        let text = String(decoding: XMLDocuments.schema(sql), as: UTF8.self)
        XCTAssertFalse(text.contains("nextval") || text.contains("price > 0") || text.contains("id > 3"), text)
        let decoded = try XMLDocuments.decodeSchema(XMLDocuments.schema(sql))
        XCTAssertEqual(decoded.withheld.map { "\($0.kind) \($0.name)" }.sorted(), ["check positive", "default price", "index partial"])
        XCTAssertNil(decoded.columns[1].defaultValue)
        XCTAssertEqual(decoded.indexes, [])
        XCTAssertTrue(String(decoding: XMLDocuments.schema(schema), as: UTF8.self).contains("<skipped column=\"fts\""))

        let tables = [TableInfo(name: TableName("a&b"), rowEstimate: 3), TableInfo(name: TableName(schema: "s", "x y"), rowEstimate: nil)]
        XCTAssertEqual(try XMLDocuments.decodeTables(XMLDocuments.tables(tables)), tables)

        let e = XMLDocuments.error(code: "not_found", table: "t<1>", message: "table t<1> & friends not found")
        XCTAssertEqual(XMLDocuments.decodeError(e)?.code, "not_found")
        XCTAssertEqual(XMLDocuments.decodeError(e)?.table, "t<1>")
        XCTAssertEqual(XMLDocuments.decodeError(e)?.message, "table t<1> & friends not found")
    }

    func testHostileDocumentsAreRefusedWithoutExpansion() throws {
        let laughs = """
            <?xml version="1.0"?>
            <!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
            <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>
            <rows><r><v>&lol3;</v></r></rows>
            """
        let external = """
            <?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><rows><r><v>&x;</v></r></rows>
            """
        let decoder = XMLRowsDecoder(columns: [col("t", .text)], batchSize: 10)
        for doc in [laughs, external] {
            XCTAssertThrowsError(try decoder.decode(Data(doc.utf8)) { _ in XCTFail("no rows may come out") }) { e in
                XCTAssertEqual(e as? XMLWireError, .forbiddenDeclaration)
            }
        }
        let deep = String(repeating: "<a>", count: 100) + String(repeating: "</a>", count: 100)
        XCTAssertThrowsError(try XMLTree.parse(Data(deep.utf8))) { e in
            guard case .limitExceeded = e as? XMLWireError else { return XCTFail("\(e)") }
        }
        XCTAssertThrowsError(try decoder.decode(Data("<rows><r><v>1</v><v>2</v></r></rows>".utf8)) { _ in }) { e in
            XCTAssertTrue("\(e)".contains("more than 1 values"), "\(e)")
        }
        let typed = XMLRowsDecoder(columns: [col("n", .int16)], batchSize: 10)
        XCTAssertThrowsError(try typed.decode(Data("<rows><r><v>70000</v></r></rows>".utf8)) { _ in }) { e in
            XCTAssertTrue("\(e)".contains("row 1, column n"), "\(e)")
        }
    }

    /// XML written by other producers: comments, CDATA, character references, single quotes,
    /// CR LF line ends (normalised to LF, as XML requires) and an XML declaration with a BOM.
    func testOtherProducersXMLFeatures() throws {
        let doc = "\u{FEFF}<?xml version='1.0' encoding='UTF-8'?>\n<!-- made elsewhere -->\n<rows table='t'>\r\n"
            + "  <r><v>1</v> <!-- a comment --> <v><![CDATA[<b>&amp;</b> ]]]]><![CDATA[>]]></v></r>\r\n"
            + "  <r><v>2</v><v>line1\r\nline2\rline3 &#13;&#x1F600;&#233;</v></r>\n"
            + "  <r><v>3</v><v null='1' /></r><r><v>4</v><v/></r>\n"
            + "</rows>\n"
        var got: [[Value]] = []
        let columns = [col("id", .int64), col("t", .text)]
        _ = try XMLRowsDecoder(columns: columns, batchSize: 10).decode(Data(doc.utf8)) { b in
            for r in 0..<b.count { got.append(b.row(r, types: [.int64, .text])) }
        }
        XCTAssertEqual(got, [
            [.int(1), .text("<b>&amp;</b> ]]>")], [.int(2), .text("line1\nline2\nline3 \r😀é")], [.int(3), .null], [.int(4), .text("")],
        ])
        for bad in ["<rows><r><v>1</v><v>&nbsp;</v></r></rows>", "<rows><r><v>1</v><v>&#0;</v></r></rows>",
                    "<rows><r><v>1</v><v>x</v></r></rows><rows/>", "<rows><r><v a=\"1\" a=\"2\">1</v><v/></r></rows>",
                    "<?xml version=\"1.0\"?><rows><r><v>1</v><v>\u{1}</v></r></rows>"] {
            XCTAssertThrowsError(try XMLRowsDecoder(columns: columns, batchSize: 10).decode(Data(bad.utf8)) { _ in }, bad)
        }
    }

    /// Random and mutated documents: the decoder never crashes, it only returns clean errors.
    func testFuzzedDocumentsOnlyFailCleanly() throws {
        let columns = [col("id", .int64), col("t", .text), col("b", .binary(maxLength: nil)), col("ts", .timestamp(precision: 6, timeZone: true)),
                       col("d", .decimal(precision: nil, scale: nil)), col("f", .float64), col("u", .uuid)]
        let types = columns.map(\.logicalType)
        let rows: [[Value]] = (0..<20).map { i in
            [.int(Int64(i)), .text("row <\(i)> & \"\u{1}\""), .binary([UInt8(i), 0]), .timestamp(Int64(i) * 1_000_001), .decimal("\(i).5"),
             .double(Double(i) / 3), .uuid(Array(repeating: UInt8(i), count: 16))]
        }
        let w = XMLDocuments.RowsWriter(types: types)
        var valid = w.begin(table: TableName("t"))
        w.rows(try RowBatch(rows: rows, types: types), into: &valid)
        valid += w.end()
        var rng = SplitMix64(seed: 0xFE22)
        let alphabet = Array("<>/&;\"'= vr!?[]-#x0123456789abcdefghijklmnopqrstuvwxyzABCDEF\n\t\u{0}\u{80}\u{FF}".utf8)
        var clean = 0
        let iterations = Int(ProcessInfo.processInfo.environment["FERRY_FUZZ_ITERATIONS"] ?? "") ?? 3000
        for _ in 0..<iterations {
            var doc = valid
            let edits = 1 + Int(rng.next() % 8)
            for _ in 0..<edits where !doc.isEmpty {
                let pos = Int(rng.next() % UInt64(doc.count))
                switch rng.next() % 4 {
                case 0: doc[pos] = alphabet[Int(rng.next() % UInt64(alphabet.count))]
                case 1: doc.remove(at: pos)
                case 2: doc.insert(alphabet[Int(rng.next() % UInt64(alphabet.count))], at: pos)
                default: doc = Array(doc[..<pos])
                }
            }
            do {
                _ = try XMLRowsDecoder(columns: columns, batchSize: 7).decode(Data(doc)) { _ in }
                clean += 1
            } catch is XMLWireError {
            } catch {
                XCTFail("unexpected error type \(type(of: error)): \(error)")
            }
        }
        // Pure random bytes, too.
        for _ in 0..<500 {
            let doc = (0..<Int(rng.next() % 400)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            do { _ = try XMLTree.parse(Data(doc)) } catch is XMLWireError {} catch { XCTFail("\(error)") }
        }
        XCTAssertGreaterThan(clean, 0, "some mutations (inside text) still decode")
    }

    /// A `<digests>` answer is written in pieces and read as its pieces arrive, cut anywhere.
    func testDigestsStreamWhereverTheAnswerIsCut() throws {
        var list: [BucketDigest] = []
        for i in 0..<5_000 {
            let k = Int64(i)
            list.append(BucketDigest(bucket: k * 3, rows: k % 7 + 1, sum: Int64.min &+ k &* 0x1E37_79B9_7F4A_7C15))
        }
        list.append(BucketDigest(bucket: 15_000, rows: 1, sum: Int64.max))
        list.append(BucketDigest(bucket: 15_001, rows: 2, sum: Int64.min))
        var pieces: [[UInt8]] = []
        var writer = DigestsWriter(modulus: 1 << 18, list)
        while let piece = writer.next() { pieces.append(piece) }
        XCTAssertGreaterThan(pieces.count, 2, "a long answer goes out in several pieces")
        let whole = Data(pieces.joined())
        XCTAssertEqual(try XMLDocuments.decodeDigests(whole), list)
        // Cut at every offset of a short answer, and in odd pieces of the long one.
        let short = XMLDocuments.digests(modulus: 16, Array(list.suffix(3)))
        for cut in 0...short.count {
            var d = DigestsStreamDecoder()
            try d.feed(short.prefix(cut))
            try d.feed(short.dropFirst(cut))
            XCTAssertEqual(try d.finish(), Array(list.suffix(3)), "cut at \(cut)")
            XCTAssertEqual(d.modulus, 16)
        }
        var d = DigestsStreamDecoder(expected: list.count)
        var at = 0, step = 1
        while at < whole.count {
            try d.feed(whole[at..<min(at + step, whole.count)])
            at += step
            step = step * 7 % 9_973 + 1
        }
        XCTAssertEqual(try d.finish(), list)

        // Another producer's spelling: attributes in any order, either quote, comments, spaces.
        let other = Data("""
            <?xml version='1.0'?>
            <!-- digests -->
            <digests modulus='8' >
              <b s1="0" s0='-5' rows="2"  n="3" />
              <b n="4" rows="1" s0="9"/><!-- end -->
            </digests>

            """.utf8)
        XCTAssertEqual(try XMLDocuments.decodeDigests(other), [BucketDigest(bucket: 3, rows: 2, sum: -5), BucketDigest(bucket: 4, rows: 1, sum: 9)])
        // A comment holding `>`, cut anywhere.
        let commented = Data("<digests modulus=\"8\"><!-- a > b --><b n=\"1\" rows=\"1\" s0=\"2\"/><!-- -> > --></digests>".utf8)
        for cut in 0...commented.count {
            var d = DigestsStreamDecoder()
            try d.feed(commented.prefix(cut))
            try d.feed(commented.dropFirst(cut))
            XCTAssertEqual(try d.finish(), [BucketDigest(bucket: 1, rows: 1, sum: 2)], "cut at \(cut)")
        }
        XCTAssertEqual(try XMLDocuments.decodeDigests(Data("<digests modulus=\"4\"/>".utf8)), [])

        // Anything else is refused with a message, never taken in part.
        let bad = [
            "<digests modulus=\"4\"><b n=\"1\" rows=\"1\" s0=\"x\" s1=\"0\"/></digests>",
            "<digests modulus=\"4\"><b n=\"1\" rows=\"1\" s0=\"99999999999999999999\" s1=\"0\"/></digests>",
            "<digests modulus=\"4\"><b n=\"1\" rows=\"1\" s0=\"3\" s1=\"7\"/></digests>",
            "<digests modulus=\"4\"><b n=\"1\" n=\"2\" rows=\"1\" s0=\"3\"/></digests>",
            "<digests modulus=\"4\"><b n=\"1\" rows=\"1\"/></digests>",
            "<digests modulus=\"4\"><b n=\"1\" rows=\"1\" s0=\"3\"/>",
            "<digests modulus=\"4\"><c/></digests>",
            "<digests modulus=\"4\"></digests><b n=\"1\" rows=\"1\" s0=\"3\"/>",
            "<!DOCTYPE d [<!ENTITY x \"1\">]><digests modulus=\"4\"></digests>",
            "<digests><b n=\"1\" rows=\"1\" s0=\"3\"/></digests>",
            "<rows></rows>",
            "",
        ]
        for text in bad {
            XCTAssertThrowsError(try XMLDocuments.decodeDigests(Data(text.utf8)), text)
        }
    }

    /// A processing instruction anywhere but the XML declaration at the start is refused before
    /// Foundation's parser sees it: `<?x?>` (no data) made it read a null pointer and killed
    /// `ferry serve` (scripts/fuzz-serve found it). The declaration, after a BOM too, still parses.
    func testProcessingInstructionsAreRefusedBeforeTheParser() throws {
        for text in ["<a><?x?></a>", "<?x?><a/>", "<a/><?x?>", "<a><v><?pi data?></v></a>", " <?xml version=\"1.0\"?><a/>", "<a><?xml version=\"1.0\"?></a>"] {
            XCTAssertThrowsError(try XMLTree.parse(Data(text.utf8)), text) { error in
                XCTAssertTrue("\(error)".contains("processing instruction"), "\(text): \(error)")
            }
        }
        for text in ["<?xml version=\"1.0\"?><a/>", "\u{FEFF}<?xml version='1.0' encoding='UTF-8'?>\n<a>x?&gt;</a>", "<a>&lt;?x?&gt;</a>"] {
            XCTAssertNoThrow(try XMLTree.parse(Data(text.utf8)), text)
        }
    }
}
