import FerryCore
import FerryXML
import Foundation

/// A read snapshot for a client's whole copy: every request naming it (`snapshot=ID` on rows,
/// count, digests and schema reads) sees one state of the database.
extension ServiceHandlers {
    func createSnapshot(_ r: ServiceRequest) async throws -> ServiceResponse {
        let id = try await Offload.run { [self] in try snapshots.create { try open(write: false) } }
        return .xml(
            XMLDocuments.snapshot(id: id, idleSeconds: Int(snapshots.idleSeconds), lifetimeSeconds: Int(snapshots.lifetimeSeconds)),
            status: 201)
    }

    func releaseSnapshot(_ r: ServiceRequest) throws -> ServiceResponse {
        guard let id = r.parameters["id"], snapshots.release(id) else {
            throw ServiceError(status: 404, code: "not_found", message: "no such snapshot (it may have ended already)")
        }
        return .xml(XMLDocuments.applied([("released", 1)]))
    }
}
