import FerryCore
import FerryXML
import Foundation

/// A guarded push (offline sync): several tables' inserts, updates and deletes, each guarded
/// by the row it expects, applied in one transaction and recorded under its id; and whether a
/// push id committed.
extension ServiceHandlers {
    func push(_ r: ServiceRequest) async throws -> ServiceResponse {
        // Kept in a temporary file and read where it lies: the push is checked row by row, then
        // written, a batch at a time, and never held whole.
        let body = try await spooledBody(r)
        let logger = r.logger
        let answer = try await Offload.run { [self] () -> Data in
            let c = try open(write: true)
            defer { close(c) }
            return try body.withBytes { raw in
                let passed: (Range<Int>) -> Void = { body.release($0) }
                try XMLGuard.check(raw, limits: XMLLimits(), passed: passed)
                let push = try PushDocumentRows(raw, passed: passed) { name, names in
                    let t = try served(name, in: c)
                    guard !Self.isStaging(t) else { throw ServiceError.notFound(t) }
                    let schema = try c.describe(t, rowEstimate: false)
                    return try names.map { n in
                        guard let col = schema.column(named: n), col.logicalType.isSupported, !col.generated else {
                            throw FerryError.columnNotFound(table: t, column: n)
                        }
                        return col
                    }
                }
                let outcome = try push.tables.isEmpty ? .applied([:]) : c.applyGuardedPush(push)
                if case .applied = outcome { logger.info("push \(push.id) applied to \(push.tables.count) tables") }
                return PushDocument.outcome(outcome, id: push.id)
            }
        }
        return .xml(answer)
    }

    func pushStatus(_ r: ServiceRequest) async throws -> ServiceResponse {
        guard let id = r.parameters["id"]?.removingPercentEncoding, !id.isEmpty, id.utf8.count <= 64 else {
            throw ServiceError.badRequest("a push id is 1 to 64 characters")
        }
        let committed = try await Offload.run { [self] () -> Bool in
            let c = try open(write: false)
            defer { close(c) }
            return try c.pushCommitted(id)
        }
        return .xml(XMLDocuments.pushStatus(id: id, committed: committed))
    }
}
