import FerryCore
import FerryXML
import Foundation

/// A read snapshot for a client's whole copy: every request naming it (`snapshot=ID` on rows,
/// count, digests and schema reads) sees one state of the database.
extension ServiceHandlers {
    func createSnapshot(_ r: ServiceRequest) async throws -> ServiceResponse {
        if try await snapshotWouldBlockWriters(r.principal) {
            throw ServiceError(
                status: 403, code: "forbidden",
                message: "a snapshot held on this database (a SQLite file in a rollback journal) keeps every writer waiting until it ends: only a token that may write may hold one; read without a snapshot, or switch the file to WAL (PRAGMA journal_mode=WAL)")
        }
        let owner = r.principal.identity
        let id = try await Offload.run { [self] in try snapshots.create(owner: owner) { try connect(write: false) } }
        return .xml(
            XMLDocuments.snapshot(id: id, idleSeconds: Int(snapshots.idleSeconds), lifetimeSeconds: Int(snapshots.lifetimeSeconds)),
            status: 201)
    }

    /// True when `principal` may only read, others may write, and a held snapshot of the served
    /// database would keep them waiting (a read token must not be able to stop every write).
    func snapshotWouldBlockWriters(_ principal: RequestPrincipal) async throws -> Bool {
        guard principal.scope < .write, configuration.writable else { return false }
        return try await Offload.run { [self] in
            let c = try open(write: false)
            defer { close(c) }
            return c.heldSnapshotsBlockWriters
        }
    }

    func releaseSnapshot(_ r: ServiceRequest) throws -> ServiceResponse {
        guard let id = r.parameters["id"], snapshots.release(id) else {
            throw ServiceError(status: 404, code: "not_found", message: "no such snapshot (it may have ended already)")
        }
        return .xml(XMLDocuments.applied([("released", 1)]))
    }
}
