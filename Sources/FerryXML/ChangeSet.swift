import FerryCore
import Foundation

/// A change set: rows to insert, rows to upsert by key, keys of rows to delete — applied by the
/// service in one transaction.
public struct ChangeSet {
    public var inserts: RowBatch
    public var upserts: RowBatch
    public var deletes: RowBatch

    /// `<changes><insert><r>…</r></insert><upsert>…</upsert><delete><r>KEY…</r></delete></changes>`;
    /// sections are optional and may repeat.
    public static func decode(_ data: Data, columns: [Column], key: [Column], limits: XMLLimits = XMLLimits()) throws -> ChangeSet {
        try XMLGuard.check(data, limits: limits)
        return try data.withUnsafeBytes { raw in
            let rows = try ChangeSetRows(raw, columns: columns, key: key, limits: limits)
            var set = ChangeSet(
                inserts: RowBatch(types: columns.map(\.logicalType), capacity: 0), upserts: RowBatch(types: columns.map(\.logicalType), capacity: 0),
                deletes: RowBatch(types: key.map(\.logicalType), capacity: 0))
            try rows.forEach(.insert, batchSize: 10_000) { set.inserts.append(contentsOf: $0) }
            try rows.forEach(.upsert, batchSize: 10_000) { set.upserts.append(contentsOf: $0) }
            try rows.forEach(.delete, batchSize: 10_000) { set.deletes.append(contentsOf: $0) }
            return set
        }
    }

    /// Encodes a change set for `columns` (inserts, upserts) and `key` (deletes).
    public static func encode(inserts: RowBatch?, upserts: RowBatch?, deletes: RowBatch?, columns: [Column], key: [Column]) -> Data {
        var out = Array("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<changes>\n".utf8)
        let rows = XMLDocuments.RowsWriter(types: columns.map(\.logicalType))
        let keys = XMLDocuments.RowsWriter(types: key.map(\.logicalType))
        if let inserts, !inserts.isEmpty {
            out += Array("<insert>\n".utf8); rows.rows(inserts, into: &out); out += Array("</insert>\n".utf8)
        }
        if let upserts, !upserts.isEmpty {
            out += Array("<upsert>\n".utf8); rows.rows(upserts, into: &out); out += Array("</upsert>\n".utf8)
        }
        if let deletes, !deletes.isEmpty {
            out += Array("<delete>\n".utf8); keys.rows(deletes, into: &out); out += Array("</delete>\n".utf8)
        }
        out += Array("</changes>\n".utf8)
        return Data(out)
    }
}

/// A change set read where it lies (a request body mapped from its file): indexed once — where
/// each section's rows are, every value decoded and checked on the way — then each kind of
/// change decoded again a batch at a time (`forEach`): never held whole. `bytes` must stay valid
/// while it is used; `passed` is told the bytes each pass has gone through (pages the owner may
/// give back).
public final class ChangeSetRows {
    public enum Kind: Sendable {
        case insert, upsert, delete
        var closing: StaticString {
            switch self {
            case .insert: return "</insert>"
            case .upsert: return "</upsert>"
            case .delete: return "</delete>"
            }
        }
    }

    struct Section {
        var kind: Kind
        var start: Int
        var rows: Int
    }

    let sections: [Section]
    let bytes: UnsafeRawBufferPointer
    let limits: XMLLimits
    let passed: ((Range<Int>) -> Void)?
    /// Rows to insert and upsert carry `columns`, rows to delete `key`.
    public let columns: [Column]
    public let key: [Column]

    /// Indexes the change set in `bytes` (already through `XMLGuard`).
    public init(
        _ bytes: UnsafeRawBufferPointer, columns: [Column], key: [Column], limits: XMLLimits = XMLLimits(),
        passed: ((Range<Int>) -> Void)? = nil
    ) throws {
        self.bytes = bytes
        self.limits = limits
        self.passed = passed
        self.columns = columns
        self.key = key
        var p = RowsParser(bytes, limits: limits)
        var index = 0
        var sections: [Section] = []
        if try p.start(root: "<changes") {
            while true {
                try p.skipMisc()
                if p.eat("</changes>") {
                    try p.skipMisc()
                    guard p.i == bytes.count else { throw p.error("content after </changes>") }
                    break
                }
                let kind: Kind
                if p.eat("<insert>") { kind = .insert } else if p.eat("<upsert>") { kind = .upsert } else if p.eat("<delete>") {
                    kind = .delete
                } else if p.eat("<insert/>") || p.eat("<upsert/>") || p.eat("<delete/>") {
                    continue
                } else {
                    throw p.error("expected <insert>, <upsert>, <delete> or </changes>")
                }
                let cols = kind == .delete ? key : columns
                // Every value decoded once here, so that a malformed one is refused before
                // anything is written; the rows are let go of as they are checked.
                let start = p.i
                let rows = try p.sectionRows(
                    closing: kind.closing, types: cols.map(\.logicalType), names: cols.map(\.name), index: &index, batchSize: 1_000,
                    passed: passed) { _ in }
                let section = Section(kind: kind, start: start, rows: rows)
                sections.append(section)
            }
        }
        self.sections = sections
    }

    /// Rows of that kind.
    public func count(_ kind: Kind) -> Int { sections.filter { $0.kind == kind }.reduce(0) { $0 + $1.rows } }

    /// Hands the rows of `kind` to `body` in document order, in batches of at most `batchSize`.
    public func forEach(_ kind: Kind, batchSize: Int, _ body: (RowBatch) throws -> Void) throws {
        let cols = kind == .delete ? key : columns
        let types = cols.map(\.logicalType)
        let names = cols.map(\.name)
        var row = 0
        for s in sections where s.kind == kind && s.rows > 0 {
            var p = RowsParser(bytes, limits: limits)
            p.i = s.start
            _ = try p.sectionRows(closing: kind.closing, types: types, names: names, index: &row, batchSize: batchSize, passed: passed, body)
        }
    }
}
