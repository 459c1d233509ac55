import FerryCore
import Foundation

/// The schema of a `.csv` file that has no sidecar, guessed from one pass over its rows: per
/// column the first type every value fits, in this order — int64 (digits, no leading zeros:
/// `007` is a code, not a number), float64 (any other number, `NaN`, `Infinity`), boolean
/// (`true`/`false`), date (`YYYY-MM-DD`), timestamp (all with a UTC offset or all without),
/// else text. A column with an empty or `\N` field is nullable; the table has no key.
enum CSVSchemaInference {
    private struct Candidates {
        var int = true
        var float = true
        var bool = true
        var date = true
        var timestamp = true
        var withOffset = false
        var withoutOffset = false
        var nullable = false
        var seen = false

        mutating func textOnly() {
            int = false
            float = false
            bool = false
            date = false
            timestamp = false
        }

        var type: LogicalType {
            guard seen else { return .text }
            if int { return .int64 }
            if float { return .float64 }
            if bool { return .boolean }
            if date { return .date }
            if timestamp && !(withOffset && withoutOffset) { return .timestamp(precision: 6, timeZone: withOffset) }
            return .text
        }
    }

    static func infer(csv: String, shown: String, table: TableName, header: [String]) throws -> TableSchema {
        let source = try CSVRowSource(path: csv, shown: shown, table: table)
        defer { source.close() }
        source.skipsBlankLines = header.count > 1
        var candidates = Array(repeating: Candidates(), count: header.count)
        while let fields = try source.next() {
            guard fields.count == header.count else {
                throw FerryError.invalidValue(
                    table: table, column: nil, key: nil,
                    message: "row \(source.rowsRead) of \(shown) has \(fields.count) fields where the header names \(header.count) columns")
            }
            for (i, field) in fields.enumerated() {
                try observe(field, &candidates[i], table: table, column: header[i], row: source.rowsRead)
            }
        }
        var schema = TableSchema(
            name: table, engine: CSVCatalog.engine,
            columns: zip(header, candidates).map { name, c in
                Column(name: name, nativeType: c.type.description, logicalType: c.type, isNullable: c.nullable || !c.seen)
            })
        schema.rowEstimate = source.rowsRead
        return schema
    }

    private static func observe(_ field: String, _ c: inout Candidates, table: TableName, column: String, row: Int64) throws {
        if field.isEmpty || field == CSVValueCodec.nullField {
            c.nullable = true
            return
        }
        if field.utf8.first == 0x5C {
            // An escaped text (`\\…`, `\b…`): check it reads, and it is text.
            var scratch = ColumnBuffer(storage: .bytes, capacity: 1)
            do { try CSVValueCodec.append(field, as: .text, to: &scratch) } catch {
                throw FerryError.invalidValue(table: table, column: column, key: nil, message: "row \(row): \(error)")
            }
            c.seen = true
            c.textOnly()
            return
        }
        c.seen = true
        if c.int { c.int = isInteger(field) }
        if c.float { c.float = c.int || isNumber(field) }
        if c.bool { c.bool = field == "true" || field == "false" }
        if c.date { c.date = (try? Temporal.parseDate(field)) != nil }
        if c.timestamp {
            if let parsed = try? Temporal.parseTimestamp(field) {
                if parsed.hadOffset { c.withOffset = true } else { c.withoutOffset = true }
            } else {
                c.timestamp = false
            }
        }
    }

    /// Digits with an optional minus, no leading zero, within Int64.
    private static func isInteger(_ s: String) -> Bool {
        var digits = Substring(s)
        if digits.first == "-" { digits = digits.dropFirst() }
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return false }
        if digits.count > 1 && digits.first == "0" { return false }
        return Int64(s) != nil
    }

    /// A decimal or exponent number (no leading zero before other digits), or NaN/±Infinity.
    private static func isNumber(_ s: String) -> Bool {
        if s == "NaN" || s == "Infinity" || s == "-Infinity" { return true }
        guard s.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E || $0 == 0x2D || $0 == 0x2B || $0 == 0x65 || $0 == 0x45 }),
              let v = Double(s), v.isFinite
        else { return false }
        var digits = Substring(s)
        if digits.first == "-" || digits.first == "+" { digits = digits.dropFirst() }
        let integerPart = digits.prefix { $0 != "." && $0 != "e" && $0 != "E" }
        return !(integerPart.count > 1 && integerPart.first == "0")
    }
}
