import FerryCore
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif

/// A small element tree for the protocol's short documents (table lists, schemas, errors,
/// change sets' answers). Row data never goes through it: `XMLRowsDecoder` streams rows.
public struct XMLElementNode: Sendable, Equatable {
    public var name: String
    public var attributes: [String: String]
    public var children: [XMLElementNode]
    public var text: String

    public func child(_ name: String) -> XMLElementNode? { children.first { $0.name == name } }
    public func children(_ name: String) -> [XMLElementNode] { children.filter { $0.name == name } }
}

/// Checks done before any parser sees a document: size and no DOCTYPE/ENTITY declarations
/// (so no external entity is ever resolved and no entity is ever expanded).
public enum XMLGuard {
    static func check(_ data: Data, limits: XMLLimits) throws {
        try data.withUnsafeBytes { raw in try check(raw, limits: limits) }
    }

    /// The checks on a document where it lies; `passed` is told each stretch of it the checks
    /// have gone through (a mapped body's owner gives those pages back).
    public static func check(_ raw: UnsafeRawBufferPointer, limits: XMLLimits, passed: ((Range<Int>) -> Void)? = nil) throws {
        if raw.count > limits.maxValueBytes * 4 { throw XMLWireError.limitExceeded("\(raw.count) bytes is more than allowed") }
        // `<!D…`, `<!d…` (DOCTYPE) and `<!E…` (ENTITY): one pass over the bytes. Also `<?`
        // (a processing instruction) anywhere but the XML declaration at the start: no
        // document of the protocol has one, and Foundation's XMLParser on Linux crashes on
        // one without data (`<?x?>`: strlen of a null pointer — found by scripts/fuzz-serve).
        var i = 0
        let n = raw.count
        let declaration = n >= 3 && raw[0] == 0xEF && raw[1] == 0xBB && raw[2] == 0xBF ? 3 : 0
        // In stretches of about 1 MiB, each ending before an ASCII byte (never inside a UTF-8
        // sequence), so that each is checked for UTF-8 on its own and then let go of.
        var from = 0
        while from < n {
            var end = min(from + (1 << 20), n)
            while end < n && raw[end] >= 0x80 { end += 1 }
            while i < end {
                if i + 2 < n && raw[i] == 60 && raw[i + 1] == 33 {
                    let c = raw[i + 2]
                    if c == 68 || c == 100 || c == 69 { throw XMLWireError.forbiddenDeclaration }
                } else if i + 1 < n && raw[i] == 60 && raw[i + 1] == 63 {
                    let isDeclaration = i == declaration && i + 5 < n && raw[i + 2] == 120 && raw[i + 3] == 109 && raw[i + 4] == 108
                        && (raw[i + 5] == 32 || raw[i + 5] == 9 || raw[i + 5] == 10 || raw[i + 5] == 13)
                    if !isDeclaration {
                        throw XMLWireError.malformed("a processing instruction (<?…?>) other than the XML declaration at the start is refused", line: 0)
                    }
                }
                i += 1
            }
            // Foundation's XMLParser on Linux traps on invalid UTF-8 in element and attribute
            // names (found by the fuzz test): only valid UTF-8 reaches it.
            guard XMLText.isValidUTF8(UnsafeRawBufferPointer(rebasing: raw[from..<end])) else {
                throw XMLWireError.malformed("the document is not valid UTF-8", line: 0)
            }
            passed?(from..<end)
            from = end
        }
    }
}

/// SAX parsing with Foundation's XMLParser, with depth and element-count limits enforced as
/// elements open. Subclasses handle the events.
class BoundedSAXDelegate: NSObject, XMLParserDelegate {
    let limits: XMLLimits
    var depth = 0
    var elements = 0
    var failure: (any Error)?

    init(limits: XMLLimits) { self.limits = limits }

    func fail(_ error: any Error, _ parser: XMLParser) {
        if failure == nil { failure = error }
        parser.abortParsing()
    }

    func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) {
        depth += 1
        elements += 1
        if depth > limits.maxDepth { return fail(XMLWireError.limitExceeded("elements nested deeper than \(limits.maxDepth)"), parser) }
        if elements > limits.maxElements { return fail(XMLWireError.limitExceeded("more than \(limits.maxElements) elements"), parser) }
        start(name, attributes, parser)
    }

    func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
        depth -= 1
        end(name, parser)
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) { characters(string, parser) }

    func parser(_ parser: XMLParser, foundCDATA data: Data) { characters(String(decoding: data, as: UTF8.self), parser) }

    func parser(_ parser: XMLParser, resolveExternalEntityName name: String, systemID: String?) -> Data? { nil }

    func start(_ name: String, _ attributes: [String: String], _ parser: XMLParser) {}
    func end(_ name: String, _ parser: XMLParser) {}
    func characters(_ text: String, _ parser: XMLParser) {}

    /// Parses `data`, rethrowing the delegate's error or the parser's.
    func run(_ data: Data) throws {
        try XMLGuard.check(data, limits: limits)
        // Stream mode: XMLParser(data:) on Linux fails documents past about 10 MB (measured
        // here with a 23 MB page); the InputStream path parses them whole.
        let parser = XMLParser(stream: InputStream(data: data))
        parser.shouldResolveExternalEntities = false
        parser.shouldProcessNamespaces = false
        parser.delegate = self
        let ok = parser.parse()
        if let failure { throw failure }
        if !ok {
            let message = parser.parserError.map { ($0 as NSError).localizedDescription } ?? "parse error"
            throw XMLWireError.malformed(message, line: parser.lineNumber)
        }
    }
}

/// Builds an `XMLElementNode` tree for short documents.
final class TreeBuilder: BoundedSAXDelegate {
    private var stack: [XMLElementNode] = []
    private(set) var root: XMLElementNode?

    override func start(_ name: String, _ attributes: [String: String], _ parser: XMLParser) {
        stack.append(XMLElementNode(name: name, attributes: attributes, children: [], text: ""))
    }

    override func end(_ name: String, _ parser: XMLParser) {
        guard let node = stack.popLast() else { return }
        if stack.isEmpty { root = node } else { stack[stack.count - 1].children.append(node) }
    }

    override func characters(_ text: String, _ parser: XMLParser) {
        guard !stack.isEmpty else { return }
        if stack[stack.count - 1].text.utf8.count + text.utf8.count > limits.maxValueBytes {
            return fail(XMLWireError.limitExceeded("a value longer than \(limits.maxValueBytes) bytes"), parser)
        }
        stack[stack.count - 1].text += text
    }
}

public enum XMLTree {
    /// Parses a short protocol document into a tree.
    public static func parse(_ data: Data, limits: XMLLimits = XMLLimits()) throws -> XMLElementNode {
        let builder = TreeBuilder(limits: limits)
        try builder.run(data)
        guard let root = builder.root else { throw XMLWireError.unexpected("empty document") }
        return root
    }
}

/// Decodes a `<rows>` document into batches of the given column types: each `<r>` becomes a
/// row, each `<v>` a cell (`null="1"`, `enc="b64"` honoured). Memory holds one batch, which
/// ends at `batchSize` rows or `RowBatch.byteLimit` bytes.
public final class XMLRowsDecoder {
    public let types: [LogicalType]
    public let names: [String]
    public let batchSize: Int
    public let limits: XMLLimits

    public init(columns: [Column], batchSize: Int, limits: XMLLimits = XMLLimits()) {
        types = columns.map(\.logicalType)
        names = columns.map(\.name)
        self.batchSize = batchSize
        self.limits = limits
    }

    /// Decodes a whole document held in memory. `onBatch` receives each full batch as soon as
    /// it is made. (Bodies that arrive in pieces go through `XMLRowsStreamDecoder` directly.)
    public func decode(_ data: Data, onBatch: (RowBatch) throws -> Void) throws -> (next: [[UInt8]]?, rows: Int) {
        let stream = XMLRowsStreamDecoder(types: types, names: names, batchSize: batchSize, limits: limits)
        try stream.decodeWhole(data, onBatch: onBatch)
        return (stream.next, stream.rows)
    }

    /// Decodes the `<v>` cells of one row (after `<r>`) into `batch`.
    static func row(
        _ p: inout RowsParser, closing: StaticString, types: [LogicalType], names: [String], index: Int,
        text: inout [UInt8], into batch: inout RowBatch
    ) throws {
        var column = 0
        while let cell = try p.cell(closing: closing, into: &text) {
            guard column < types.count else { throw XMLWireError.unexpected("row \(index + 1) has more than \(types.count) values") }
            if cell.null {
                batch.columns[column].appendNull()
            } else if cell.stored != 0 {
                // A value in the served engine's stored form, kept with its storage class.
                guard case .binary = types[column] else {
                    throw XMLWireError.badValue(row: index, column: names[column], message: "a stored value (s=) in a column not read in its stored form")
                }
                let bytes = cell.base64 ? Array(try base64Data(&text, row: index, column: names[column])) : text
                do {
                    try bytes.withUnsafeBytes { try WireValue.append(stored: cell.stored, raw: $0, textUnchecked: !cell.base64, to: &batch.columns[column]) }
                } catch {
                    throw XMLWireError.badValue(row: index, column: names[column], message: "\(error)")
                }
            } else if cell.base64, case .binary = types[column] {
                // Straight from the decoded bytes into the column: a 10 MB blob is not copied twice more.
                let decoded = try base64Data(&text, row: index, column: names[column])
                decoded.withUnsafeBytes { batch.columns[column].append(bytes: $0) }
            } else {
                let bytes = cell.base64 ? Array(try base64Data(&text, row: index, column: names[column])) : text
                do { try WireValue.append(bytes, as: types[column], to: &batch.columns[column]) } catch {
                    throw XMLWireError.badValue(row: index, column: names[column], message: "\(error)")
                }
            }
            column += 1
        }
        guard column == types.count else {
            throw XMLWireError.unexpected("row \(index + 1) has \(column) values for \(types.count) columns")
        }
    }

    static func base64(_ text: [UInt8], row: Int, column: String) throws -> [UInt8] {
        var text = text
        return Array(try base64Data(&text, row: row, column: column))
    }

    /// Decodes base64 text without copying it first (the text is only read).
    static func base64Data(_ text: inout [UInt8], row: Int, column: String) throws -> Data {
        let decoded: Data? = text.withUnsafeMutableBytes { raw in
            guard let base = raw.baseAddress, raw.count > 0 else { return Data() }
            return Data(base64Encoded: Data(bytesNoCopy: base, count: raw.count, deallocator: .none), options: .ignoreUnknownCharacters)
        }
        guard let decoded else { throw XMLWireError.badValue(row: row, column: column, message: "invalid base64") }
        return decoded
    }
}
