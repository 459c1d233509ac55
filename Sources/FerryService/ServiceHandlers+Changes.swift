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
        let data = try await body(r)
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
            let set = try ChangeSet.decode(data, columns: columns, key: keyColumns)
            return try Self.transaction(c) {
                if !set.inserts.isEmpty {
                    let w = try c.writer(into: schema, columns: columns)
                    do {
                        try w.write(set.inserts)
                        try w.finish()
                    } catch {
                        w.abort()
                        throw error
                    }
                }
                let upserted = set.upserts.isEmpty ? 0 : try c.upsertRows(into: schema, columns: columns, key: key, rows: set.upserts)
                let deleted = set.deletes.isEmpty ? 0 : try c.deleteRows(from: schema, key: keyColumns, keys: set.deletes)
                return [("inserted", set.inserts.count), ("upserted", upserted), ("deleted", deleted)]
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
