import FerryCore

/// Turns rows of a batch (laid out for a writer's columns, in any order, possibly fewer than
/// the table's) into fields in the table's column order, checked against the table's types:
/// a value whose text would not read back as its column's type, or a NULL in a NOT NULL
/// column, is refused with a `BatchRowError` naming the row and the column (the caller names
/// the table: the copy engine, or the client of Ferry's service).
final class CSVRowEncoder {
    let schema: TableSchema
    let columns: [Column]
    /// Per table column: the position of its values among `columns`, nil when not given.
    let sources: [Int?]
    /// Per table column: whether a value of the given type must be checked against it.
    private let checks: [Bool]
    private var scratch: [ColumnBuffer]

    init(schema: TableSchema, columns: [Column]) throws {
        self.schema = schema
        self.columns = columns
        for c in columns where schema.column(named: c.name) == nil {
            throw FerryError.columnNotFound(table: schema.name, column: c.name)
        }
        let sources = schema.columns.map { s in columns.firstIndex { $0.name == s.name } }
        self.sources = sources
        checks = zip(schema.columns, sources).map { s, i in i.map { !Self.sameForm(columns[$0].logicalType, s.logicalType) } ?? false }
        scratch = schema.columns.map { ColumnBuffer(storage: $0.logicalType.storage, capacity: 1) }
    }

    /// Row `row` of `batch` as fields in the table's column order; nil for a column not given.
    func fields(_ batch: RowBatch, row: Int) throws -> [String?] {
        var out: [String?] = []
        out.reserveCapacity(schema.columns.count)
        for (c, column) in schema.columns.enumerated() {
            guard let i = sources[c] else {
                out.append(nil)
                continue
            }
            let field = CSVValueCodec.field(batch.columns[i], row: row, type: columns[i].logicalType, stored: column.logicalType)
            if field == CSVValueCodec.nullField {
                if !column.isNullable {
                    throw BatchRowError(row: row, error: .invalidValue(table: nil, column: column.name, key: nil, message: "NULL in a NOT NULL column"))
                }
            } else if checks[c] {
                scratch[c].removeAll()
                do { try CSVValueCodec.append(field, as: column.logicalType, to: &scratch[c]) } catch {
                    throw BatchRowError(row: row, error: .invalidValue(
                        table: nil, column: column.name, key: nil, message: "\(error) (the column is \(column.logicalType))"))
                }
            }
            out.append(field)
        }
        return out
    }

    /// True when a value of `type`, written in its text form, always reads back as a value of
    /// `stored` (no check needed).
    static func sameForm(_ type: LogicalType, _ stored: LogicalType) -> Bool {
        switch (type, stored) {
        case (.text, .text), (.text, .json), (.json, .json), (.json, .text), (.enumeration, .text), (.enumeration, .enumeration),
             (.text, .enumeration), (.decimal, .decimal), (.float32, .float64), (.float64, .float64), (.float32, .float32),
             (.binary, .binary), (.timestamp, .timestamp), (.time, .time), (.date, .date), (.uuid, .uuid), (.boolean, .boolean),
             (.int16, .int16), (.int16, .int32), (.int16, .int64), (.int32, .int32), (.int32, .int64), (.int64, .int64),
             (.unsupported, .unsupported):
            return true
        default:
            return false
        }
    }
}
