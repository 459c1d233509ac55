import FerryCore
import Foundation

/// The answer to a load that asked for refused rows to be set aside (`reject=N` on `…/rows`,
/// `…/merge` and `…/apply`): the counts, and each refused row, with the database's reason, in
/// the columns the load wrote —
/// `<applied inserted="29994" rejected="6"><refused reason="…"><r><v>7</v>…</r></refused>…</applied>`.
extension XMLDocuments {
    public static func applied(_ counts: [(String, Int)], refused: [(row: RowBatch, reason: String)], types: [LogicalType], stored: [Bool] = []) -> Data {
        var out = declaration
        out.append(contentsOf: "<applied".utf8)
        for (k, v) in counts { attr(k, String(v), into: &out) }
        attr("rejected", String(refused.count), into: &out)
        out.append(contentsOf: ">\n".utf8)
        let rows = RowsWriter(types: types, stored: stored)
        for r in refused {
            out.append(contentsOf: "<refused".utf8)
            attr("reason", r.reason, into: &out)
            out.append(62)
            rows.rows(r.row, into: &out)
            out.append(contentsOf: "</refused>\n".utf8)
        }
        out.append(contentsOf: "</applied>\n".utf8)
        return Data(out)
    }

    /// The counts and refused rows of an `<applied>` answer, the rows decoded as `columns`
    /// (the columns the load wrote). An answer without refused rows has none.
    public static func decodeApplied(_ data: Data, refusedAs columns: [Column], limits: XMLLimits = XMLLimits()) throws -> (counts: [String: Int64], refused: [RefusedRow]) {
        try XMLGuard.check(data, limits: limits)
        return try data.withUnsafeBytes { raw in
            var p = RowsParser(raw, limits: limits)
            var refused: [RefusedRow] = []
            let types = columns.map(\.logicalType)
            let names = columns.map(\.name)
            var index = 0
            if try p.start(root: "<applied") {
                while true {
                    try p.skipMisc()
                    if p.eat("</applied>") { break }
                    if p.eat("<skipped") {
                        _ = try p.attributes()
                        continue
                    }
                    guard p.eat("<refused") else { throw p.error("expected <refused> or </applied>") }
                    let (attributes, empty) = try p.attributes()
                    guard !empty else { continue }
                    let reason = attributes["reason"] ?? "refused by the target"
                    _ = try p.sectionRows(closing: "</refused>", types: types, names: names, index: &index, batchSize: 1_000, passed: nil) { batch in
                        for i in 0..<batch.count { refused.append(RefusedRow(row: batch.rows(i..<i + 1), reason: reason)) }
                    }
                }
            }
            return (p.rootAttributes.compactMapValues { Int64($0) }, refused)
        }
    }
}
