import FerryCore

/// Parses the key fields of rows (as field texts) into `CSVKey`s, through the same codec the
/// values are read with, so that a key from a file and a key from a batch compare alike. (A
/// class: its scratch buffers are reused from row to row, never copied.)
final class CSVKeyReader {
    /// Positions of the key's columns among a row's fields.
    let indexes: [Int]
    let types: [LogicalType]
    let names: [String]
    let table: TableName
    private var scratch: [ColumnBuffer]

    init(indexes: [Int], types: [LogicalType], names: [String], table: TableName) {
        self.indexes = indexes
        self.types = types
        self.names = names
        self.table = table
        scratch = types.map { ColumnBuffer(storage: $0.storage, capacity: 1) }
    }

    /// The key of a row of fields (`row` is its data row number, for errors).
    func key(_ fields: [String], row: Int64) throws -> CSVKey {
        var parts: [CSVKey.Part] = []
        parts.reserveCapacity(indexes.count)
        for (k, i) in indexes.enumerated() {
            scratch[k].removeAll()
            guard i < fields.count else {
                throw FerryError.invalidValue(table: table, column: names[k], key: nil, message: "row \(row) has no field for the key column")
            }
            do {
                try CSVValueCodec.append(fields[i], as: types[k], to: &scratch[k])
            } catch {
                throw FerryError.invalidValue(table: table, column: names[k], key: nil, message: "row \(row): \(error)")
            }
            parts.append(CSVKey.part(scratch[k], row: 0, type: types[k]))
        }
        return CSVKey(parts: parts)
    }

    func describe(_ key: CSVKey) -> String { key.description(names: names, types: types) }
}
