import FerryCore
import FerryXML
import Foundation

/// What a copy of tables does not carry (views, triggers, …), and indexes and foreign keys as
/// column lists: the service's engine names and creates them as its driver plans them.
extension ServiceHandlers {
    func objects(_ r: ServiceRequest) async throws -> ServiceResponse {
        let data = try await Offload.run { [self] in
            let c = try open(write: false)
            defer { close(c) }
            // With --tables, only what belongs to a served table.
            let all = try c.listOtherObjects()
            let tables = configuration.tables
            return XMLDocuments.otherObjects(tables.isEmpty ? all : all.filter { o in
                o.table.map { t in tables.contains { TableName(t).matches($0) } } ?? false
            })
        }
        return .xml(data)
    }

    /// `POST …/indexes` and `POST …/foreign-keys`, in one transaction.
    func createObjects(_ r: ServiceRequest) async throws -> ServiceResponse {
        let name = try r.table()
        let indexes = r.route == .indexes
        if Self.isStaging(name) { try staging.check(name, r.principal, doing: "change") } else {
            try r.principal.require(.manage, "create indexes or foreign keys")
        }
        let data = try await body(r)
        let result = try await Offload.run { [self] () -> Data in
            let objects = try XMLDocuments.decodeObjects(data)
            let c = try open(write: true)
            defer { close(c) }
            let t = try served(name, in: c)
            // A foreign key may only reference a table this service serves.
            for fk in objects.foreignKeys { try mayReference(fk.referencedTable) }
            var schema = try c.describe(t, rowEstimate: false)
            schema.indexes = indexes ? objects.indexes : []
            schema.foreignKeys = indexes ? [] : objects.foreignKeys
            schema = RequestSchema.sanitized(schema)
            let (skipped, count) = try objectRequests.withLock { _ -> ([SkippedObject], Int) in
                let planned = try c.planObjects(schema, on: t, indexesOn: t, replacing: nil, avoiding: [])
                var skipped = planned.skipped
                try Self.transaction(c) {
                    skipped += indexes ? try c.createIndexes(planned) : try c.createForeignKeys(planned)
                }
                return (skipped, (indexes ? planned.indexes.count : planned.foreignKeys.count) - skipped.count + planned.skipped.count)
            }
            return XMLDocuments.applied([(indexes ? "indexes" : "foreignKeys", count)], skipped: skipped)
        }
        return .xml(result)
    }
}
