import FerryCore

/// The key columns of one batch of a streamed load, kept to name a row the service refuses
/// (its answer counts the rows of the request): one integer key without NULLs as zigzag varint
/// deltas (a byte a row for keys in order: a request of 500,000 rows kept 4 MB as columns),
/// any other key as copies of its columns, sized to their rows.
enum KeptKeys {
    case integers(deltas: [UInt8])
    case columns([ColumnBuffer])

    init(_ batch: RowBatch, at indexes: [Int]) {
        if indexes.count == 1, case let column = batch.columns[indexes[0]], column.storage == .int64, column.nullCount == 0 {
            var deltas: [UInt8] = []
            deltas.reserveCapacity(batch.count + 8)
            var previous: Int64 = 0
            for value in column.ints.prefix(batch.count) {
                let delta = value &- previous
                previous = value
                var zigzag = UInt64(bitPattern: (delta << 1) ^ (delta >> 63))
                while zigzag >= 0x80 {
                    deltas.append(UInt8(truncatingIfNeeded: zigzag) | 0x80)
                    zigzag >>= 7
                }
                deltas.append(UInt8(zigzag))
            }
            self = .integers(deltas: deltas)
            return
        }
        self = .columns(indexes.map {
            var key = ColumnBuffer(sizedLike: batch.columns[$0])
            key.append(contentsOf: batch.columns[$0])
            return key
        })
    }

    /// The memory they take.
    var bytes: Int {
        switch self {
        case .integers(let deltas): return deltas.capacity
        case .columns(let columns): return columns.reduce(0) { $0 + $1.arena.count + 8 * $1.count }
        }
    }

    /// Key column `k`'s value at `row`, as a one-row column.
    func column(_ k: Int, row: Int) -> ColumnBuffer {
        switch self {
        case .columns(let columns):
            return RowBatch(columns: [columns[k]]).selecting([row]).columns[0]
        case .integers(let deltas):
            var value: Int64 = 0
            var i = 0
            for _ in 0...row {
                var zigzag: UInt64 = 0
                var shift: UInt64 = 0
                while i < deltas.count {
                    let byte = deltas[i]
                    i += 1
                    zigzag |= UInt64(byte & 0x7f) << shift
                    shift += 7
                    if byte < 0x80 { break }
                }
                value &+= Int64(bitPattern: zigzag >> 1) ^ -Int64(bitPattern: zigzag & 1)
            }
            var out = ColumnBuffer(storage: .int64, capacity: 1)
            out.append(value)
            return out
        }
    }
}
