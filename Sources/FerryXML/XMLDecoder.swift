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
enum XMLGuard {
    static func check(_ data: Data, limits: XMLLimits) throws {
        if data.count > limits.maxValueBytes * 4 { throw XMLWireError.limitExceeded("\(data.count) bytes is more than allowed") }
        for marker in ["<!DOCTYPE", "<!ENTITY", "<!doctype"] where data.range(of: Data(marker.utf8)) != nil {
            throw XMLWireError.forbiddenDeclaration
        }
        // Foundation's XMLParser on Linux traps on invalid UTF-8 in element and attribute names
        // (found by the fuzz test): only valid UTF-8 reaches it.
        let valid = data.withUnsafeBytes { raw in
            String(validating: raw.bindMemory(to: UInt8.self), as: UTF8.self) != nil
        }
        guard valid else { throw XMLWireError.malformed("the document is not valid UTF-8", line: 0) }
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
        let parser = XMLParser(data: data)
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

/// Streams a `<rows>` document into batches of the given column types: each `<r>` becomes a
/// row, each `<v>` a cell (`null="1"`, `enc="b64"` honoured). Memory holds one batch.
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

    /// Decodes a whole response body. `onBatch` receives each full batch as soon as it is made.
    public func decode(_ data: Data, onBatch: @escaping (RowBatch) throws -> Void) throws -> (next: [String]?, rows: Int) {
        let d = RowsDelegate(decoder: self, onBatch: onBatch)
        try d.run(data)
        try d.flush()
        if let e = d.failure { throw e }
        guard d.sawRoot else { throw XMLWireError.unexpected("no <rows> element") }
        return (d.next, d.totalRows)
    }
}

private final class RowsDelegate: BoundedSAXDelegate {
    let decoder: XMLRowsDecoder
    let onBatch: (RowBatch) throws -> Void
    var batch: RowBatch
    var sawRoot = false
    var inRow = false
    var inNext = false
    var column = 0
    var cellText: [UInt8] = []
    var cellOpen = false
    var cellNull = false
    var cellB64 = false
    var next: [String]?
    var totalRows = 0

    init(decoder: XMLRowsDecoder, onBatch: @escaping (RowBatch) throws -> Void) {
        self.decoder = decoder
        self.onBatch = onBatch
        batch = RowBatch(types: decoder.types, capacity: decoder.batchSize)
        super.init(limits: decoder.limits)
    }

    func flush() throws {
        if !batch.isEmpty {
            try onBatch(batch)
            batch = RowBatch(types: decoder.types, capacity: decoder.batchSize)
        }
    }

    override func start(_ name: String, _ attributes: [String: String], _ parser: XMLParser) {
        switch (name, depth) {
        case ("rows", 1): sawRoot = true
        case ("r", 2):
            inRow = true
            column = 0
        case ("next", 2):
            inNext = true
            next = []
        case ("error", 2):
            // The server failed after it had started answering: it says so inside the rows.
            fail(XMLWireError.unexpected("the server stopped: \(attributes["code"] ?? "error")"), parser)
        case ("v", 3) where inRow || inNext:
            cellOpen = true
            cellText.removeAll(keepingCapacity: true)
            cellNull = attributes["null"] == "1"
            cellB64 = attributes["enc"] == "b64"
        default:
            fail(XMLWireError.unexpected("element <\(name)> at depth \(depth) in a rows document"), parser)
        }
    }

    override func characters(_ text: String, _ parser: XMLParser) {
        guard cellOpen else { return }
        cellText.append(contentsOf: text.utf8)
        if cellText.count > limits.maxValueBytes {
            fail(XMLWireError.limitExceeded("a value longer than \(limits.maxValueBytes) bytes"), parser)
        }
    }

    override func end(_ name: String, _ parser: XMLParser) {
        switch name {
        case "v" where cellOpen:
            cellOpen = false
            var bytes = cellText
            if cellB64 {
                guard let d = Data(base64Encoded: Data(cellText), options: .ignoreUnknownCharacters) else {
                    return fail(XMLWireError.badValue(row: totalRows, column: currentName, message: "invalid base64"), parser)
                }
                bytes = Array(d)
            }
            if inNext {
                next?.append(String(decoding: bytes, as: UTF8.self))
                return
            }
            guard column < decoder.types.count else {
                return fail(XMLWireError.unexpected("row \(totalRows + 1) has more than \(decoder.types.count) values"), parser)
            }
            do {
                if cellNull {
                    batch.columns[column].appendNull()
                } else {
                    try WireValue.append(bytes, as: decoder.types[column], to: &batch.columns[column])
                }
            } catch {
                return fail(XMLWireError.badValue(row: totalRows, column: currentName, message: "\(error)"), parser)
            }
            column += 1
        case "r":
            inRow = false
            guard column == decoder.types.count else {
                return fail(XMLWireError.unexpected("row \(totalRows + 1) has \(column) values for \(decoder.types.count) columns"), parser)
            }
            totalRows += 1
            if batch.count >= decoder.batchSize {
                do { try flush() } catch { fail(error, parser) }
            }
        case "next":
            inNext = false
        default: break
        }
    }

    var currentName: String { column < decoder.names.count ? decoder.names[column] : "#\(column + 1)" }
}
