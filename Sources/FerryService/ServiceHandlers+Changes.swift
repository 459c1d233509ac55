import FerryCore
import FerryXML
import Foundation

/// Change sets (inserts, upserts by key and deletes by key, in one transaction, all or
/// nothing) and moving serial counters past the largest value.
extension ServiceHandlers {
    func changes(_ r: ServiceRequest) async throws -> ServiceResponse {
        let name = try r.table()
        try mayWrite(name, r, doing: "change")
        let wanted = r.values("columns")
        let keyNames = r.values("key")
        let native = r.values("native")
        // Kept in a temporary file and read where it lies, applied a batch at a time.
        let body = try await spooledBody(r)
        let counts = try await Offload.run { [self] () -> [(String, Int)] in
            let c = try open(write: true)
            defer { close(c) }
            let t = try served(name, in: c)
            let schema = try c.describe(t, rowEstimate: false)
            let columns = try (wanted.isEmpty ? schema.columns.filter { $0.logicalType.isSupported && !$0.generated } : wanted.map { w in
                guard let col = schema.column(named: w) else { throw FerryError.columnNotFound(table: t, column: w) }
                return col
            }).map { try requested($0, native: native, table: t) }
            let key = keyNames.isEmpty ? (schema.preferredKey?.columns ?? []) : keyNames
            guard !key.isEmpty else { throw FerryError.noKey(table: t) }
            let keyColumns = try key.map { k in
                guard let col = schema.column(named: k) else { throw FerryError.columnNotFound(table: t, column: k) }
                return try requested(col, native: native, table: t)
            }
            return try body.withBytes { raw in
                let passed: (Range<Int>) -> Void = { body.release($0) }
                try XMLGuard.check(raw, limits: XMLLimits(), passed: passed)
                let set = try ChangeSetRows(raw, columns: columns, key: keyColumns, passed: passed)
                return try Self.transaction(c) {
                    // Inserts, then upserts, then deletes, as the rows of each come in the document.
                    if set.count(.insert) > 0 {
                        let w = try c.writer(into: schema, columns: columns)
                        do {
                            var writes = LocatedWrites(w)
                            try set.forEach(.insert, batchSize: 10_000) { try writes.write($0) }
                            try writes.finish()
                        } catch {
                            w.abort()
                            throw error
                        }
                    }
                    var upserted = 0
                    var deleted = 0
                    var before = 0
                    /// A refused row by its place among the section's rows.
                    func located(_ body: () throws -> Int, _ batch: RowBatch) throws -> Int {
                        do {
                            let n = try body()
                            before += batch.count
                            return n
                        } catch let e as BatchRowError where e.batch == nil && e.rowsBefore == nil {
                            throw BatchRowError(row: before + e.row, error: e.error)
                        }
                    }
                    try set.forEach(.upsert, batchSize: 10_000) { batch in
                        upserted += try located({ try c.upsertRows(into: schema, columns: columns, key: key, rows: batch) }, batch)
                    }
                    before = 0
                    try set.forEach(.delete, batchSize: 10_000) { batch in
                        deleted += try located({ try c.deleteRows(from: schema, key: keyColumns, keys: batch) }, batch)
                    }
                    return [("inserted", set.count(.insert)), ("upserted", upserted), ("deleted", deleted)]
                }
            }
        }
        return .xml(XMLDocuments.applied(counts))
    }

    func resetSerial(_ r: ServiceRequest) async throws -> ServiceResponse {
        let name = try r.table()
        try mayWrite(name, r, doing: "change")
        try await Offload.run { [self] in
            let c = try open(write: true)
            defer { close(c) }
            let t = try served(name, in: c)
            try Self.transaction(c) { try c.resetSerial(t, schema: try c.describe(t, rowEstimate: false)) }
        }
        return .xml(XMLDocuments.applied([("reset", 1)]))
    }
}
