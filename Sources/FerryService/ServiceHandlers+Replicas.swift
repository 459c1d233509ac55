import FerryCore
import FerryXML
import Foundation

/// Replicas kept in the served database (`ferry replicate` into the service): a replica's
/// transaction — changes of several tables in source order and the replica's record — applied
/// in one transaction of the served database; the record read and removed.
extension ServiceHandlers {
    func replicaState(_ r: ServiceRequest) async throws -> ServiceResponse {
        let name = try Self.feedName(r.parameters["id"])
        let row = try await Offload.run { [self] () -> ReplicationState.Row? in
            let c = try open(write: false)
            defer { close(c) }
            return try c.replicaStates().read(name)
        }
        guard let row else { throw ServiceError(status: 404, code: "not_found", message: "no replica \(name) is recorded here") }
        return .xml(ChangeDocuments.replica(row))
    }

    func dropReplica(_ r: ServiceRequest) async throws -> ServiceResponse {
        let name = try Self.feedName(r.parameters["id"])
        let removed = try await Offload.run { [self] () -> Bool in
            let c = try open(write: true)
            defer { close(c) }
            return try c.replicaStates().remove(name)
        }
        return .xml(XMLDocuments.applied([("removed", removed ? 1 : 0)]))
    }

    func applyReplica(_ r: ServiceRequest) async throws -> ServiceResponse {
        let name = try Self.feedName(r.parameters["id"])
        // Kept in a temporary file and read where it lies: indexed once (every value checked, no
        // row held), then each section's rows decoded again a batch at a time as they are written.
        let body = try await spooledBody(r)
        let principal = r.principal
        let logger = r.logger
        let native = configuration.storedForm != nil
        let counts = try await Offload.run { [self] () -> [(String, Int)] in
            let c = try open(write: true)
            defer { close(c) }
            var schemas: [TableName: TableSchema] = [:]
            func schema(_ name: TableName) throws -> TableSchema {
                if let s = schemas[name] { return s }
                let t = try served(name, in: c)
                guard !Self.isStaging(t) else { throw ServiceError.notFound(t) }
                let s = try c.describe(t, rowEstimate: false)
                schemas[name] = s
                return s
            }
            let passed: (Range<Int>) -> Void = { body.release($0) }
            let transaction = try body.withBytes { raw in
                try XMLGuard.check(raw, limits: XMLLimits(), passed: passed)
                return try ChangeDocuments.decodeTransaction(raw, holdingRows: false, passed: passed) { table, names, nativeNames in
                    let s = try schema(table)
                    guard native || nativeNames.isEmpty else {
                        throw ServiceError.badRequest("native columns: this service reads and writes values in no stored form", table: table.description)
                    }
                    return try names.map { n in
                        guard let col = s.column(named: n), col.logicalType.isSupported, !col.generated else { throw FerryError.columnNotFound(table: table, column: n) }
                        return nativeNames.contains(n) ? col.storedForm : col
                    }
                }
            }
            if let state = transaction.state, state.name != name {
                throw ServiceError.badRequest("the transaction records replica \(state.name) and was sent to \(name)")
            }
            // Staged rows: staging tables this caller's loads made, read on a second connection.
            let staged = try transaction.sections.compactMap { s -> TableSchema? in
                guard let staging = s.staged else { return nil }
                guard Self.isStaging(staging) else { throw ServiceError.badRequest("\(staging) is not a staging table (\(CopyEngine.internalPrefix)…)") }
                try self.staging.check(staging, principal, doing: "apply")
                return try c.describe(try served(staging, in: c), rowEstimate: false)
            }
            // Staged rows are read before the transaction begins (a reader open on the file while
            // the transaction writes would hold SQLite's lock against its commit), on the
            // request's own connection, into temporary files read back a batch at a time: the
            // service holds one batch of a staged section, not the section.
            var spools: [RowsSpool] = []
            defer { for s in spools { s.discard() } }
            for table in staged {
                let columns = movedColumns(table.columns)
                let spool = try RowsSpool(table: table.name, columns: columns)
                spools.append(spool)
                let reader = try c.reader(table: table, columns: columns, keyRange: nil, batchSize: 10_000)
                defer { reader.close() }
                while let b = try reader.next() { try spool.append(b) }
                try spool.finish()
            }
            // Made before the transaction: on MySQL a CREATE TABLE commits.
            if transaction.state != nil { _ = try ReplicationState.schema(c, create: true) }
            try c.prepareToApplyChanges(repeatingCascades: transaction.repeatingCascades)
            var rows = 0
            try Self.transaction(c) {
                var stagedAt = 0
                for s in transaction.sections {
                    let into = try schema(s.table)
                    var current = RowBatch(types: s.columns.map(\.logicalType), capacity: 0)
                    /// Writes `batch`, laid out for `columns` (the section's, or a staging table's).
                    func apply(_ batch: RowBatch, _ columns: [Column]) throws {
                        current = batch
                        switch s.tag {
                        case "upsert": _ = try c.upsertRows(into: into, columns: columns, key: s.key, rows: batch)
                        case "update": try c.updateColumns(of: into, columns: columns, key: s.key, rows: batch)
                        default: _ = try c.deleteRows(from: into, key: columns, keys: batch)
                        }
                        rows += batch.count
                    }
                    do {
                        if s.staged != nil, stagedAt < staged.count {
                            let table = staged[stagedAt]
                            let spool = spools[stagedAt]
                            stagedAt += 1
                            // As the staging table holds them: the served table's columns of those
                            // names, typed as the staging table reads them (as `apply` merges).
                            let columns = movedColumns(try table.columns.map { sc in
                                guard let col = s.columns.first(where: { $0.name == sc.name }) else { throw FerryError.columnNotFound(table: s.table, column: sc.name) }
                                return Column(name: col.name, nativeType: col.nativeType, logicalType: sc.logicalType, isNullable: true)
                            })
                            try spool.forEachBatch(batchSize: 10_000) { try apply($0, columns) }
                        } else {
                            try body.withBytes { raw in
                                try ChangeDocuments.forEachBatch(of: s, in: raw, batchSize: 10_000, passed: passed) { try apply($0, s.columns) }
                            }
                        }
                    } catch let e as BatchRowError {
                        // Named by the row's key: the client's row numbers are not this batch's.
                        let b = e.batch ?? current
                        let keyAt = (s.tag == "delete" ? s.columns.map(\.name) : s.key).compactMap { k in s.columns.firstIndex { $0.name == k } }
                        var refused = ServiceError.from(e, table: s.table)
                        refused.row = nil
                        if e.row >= 0, e.row < b.count, !keyAt.isEmpty {
                            refused.message += " (the row " + Column.keyText(keyAt.map { (s.columns[$0], b.columns[$0]) }, row: e.row) + ")"
                        }
                        throw refused
                    }
                }
                if let state = transaction.state { try c.replicaStates().write(state) }
            }
            // Outside the transaction: dropping a table commits on MySQL (one left behind is
            // dropped by the next load that stages).
            for s in staged {
                staging.forget(s.name)
                do { try Self.transaction(c) { try c.dropTable(s.name) } } catch {
                    logger.warning("could not drop staging table \(s.name): \(error)")
                }
            }
            return [("rows", rows)]
        }
        return .xml(XMLDocuments.applied(counts))
    }
}
