import FerryCore
import FerryXML
import Foundation

/// Tables: the list, a schema, the row count, create and drop; and what the service can do.
extension ServiceHandlers {
    func capabilities(_ r: ServiceRequest) async throws -> ServiceResponse {
        let c = configuration
        var announced = c.capabilities
        // A read token is not offered snapshots where holding one would lock writers out: its
        // client then reads each table as it finds it (and says so).
        // (An unreachable database does not fail this answer: the snapshot request would say why.)
        if announced.contains(.snapshots), (try? await snapshotWouldBlockWriters(r.principal)) == true { announced.remove(.snapshots) }
        return .xml(XMLDocuments.capabilities(.init(name: c.name, version: c.version, capabilities: announced, storedForm: c.storedForm, maxBody: c.maxBodyBytes, maxLoad: c.maxLoadBytes, windows: c.windows)))
    }

    func tables(_ r: ServiceRequest) async throws -> ServiceResponse {
        let counted = r.value("rows") != "no"
        let data = try await Offload.run { [self] in
            let c = try open(write: false)
            defer { close(c) }
            let all = counted ? try c.listTables() : try c.listTableNames().map { TableInfo(name: $0, rowEstimate: nil) }
            let served = configuration.tables
            return XMLDocuments.tables(served.isEmpty ? all : all.filter { t in served.contains { t.name.matches($0) } })
        }
        return .xml(data)
    }

    func schema(_ r: ServiceRequest) async throws -> ServiceResponse {
        let name = try r.table()
        let snapshot = r.value("snapshot")
        let data = try await Offload.run { [self] in
            let lease = try read(snapshot: snapshot)
            defer { lease.release() }
            let c = lease.connection
            return XMLDocuments.schema(try c.describe(try served(name, in: c)))
        }
        return .xml(data)
    }

    func count(_ r: ServiceRequest) async throws -> ServiceResponse {
        let name = try r.table()
        let snapshot = r.value("snapshot")
        let n = try await Offload.run { [self] in
            let lease = try read(snapshot: snapshot)
            defer { lease.release() }
            let c = lease.connection
            return try c.countRows(try served(name, in: c))
        }
        return .xml(XMLDocuments.count(n))
    }

    func createTable(_ r: ServiceRequest) async throws -> ServiceResponse {
        let data = try await body(r)
        let principal = r.principal
        let result = try await Offload.run { [self] () -> Data in
            let schema = RequestSchema.sanitized(try XMLDocuments.decodeSchema(data))
            // A write token creates only the staging tables of its loads.
            if !Self.isStaging(schema.name) { try principal.require(.manage, "create tables") }
            let c = try open(write: true)
            defer { close(c) }
            // Names the engine would refuse, or keep cut short, are refused before any SQL.
            for name in [schema.name.name] + (schema.name.schema.map { [$0] } ?? []) + schema.columns.map(\.name) {
                if let problem = c.dialect.identifierProblem(name) { throw ServiceError.badRequest(problem, table: schema.name.description) }
            }
            // A foreign key (SQLite declares them in CREATE TABLE) may only reference a served table.
            for fk in schema.foreignKeys { try mayReference(fk.referencedTable) }
            if try c.tableExists(schema.name) {
                throw FerryError.targetTableExists(table: schema.name, endpoint: "this service")
            }
            // Recorded first: a sweep never takes a staging table being made for one no longer used.
            if Self.isStaging(schema.name) { staging.record(schema.name, principal) }
            do {
                if StagingOwners.isTransient(schema.name) {
                    try StagingJanitor.lease(schema.name, on: c)
                } else if StagingOwners.outlivesARun(schema.name) {
                    // A create's or replace's staging table: leased so that a sweep may drop it once
                    // abandoned; where the lease cannot be written (a store with one writer at a
                    // time, busy) the load goes on, and only its own rerun removes it if it dies.
                    do { try StagingJanitor.lease(schema.name, on: c) } catch {
                        r.logger.notice("staging table \(schema.name) not leased: \(error)")
                    }
                }
                try Self.transaction(c) { _ = try c.createTable(schema, named: schema.name) }
            } catch {
                if !c.dialect.supportsTransactionalDDL { try? c.dropTable(schema.name) }
                if Self.isStaging(schema.name) { staging.forget(schema.name) }
                throw error
            }
            return XMLDocuments.schema(try c.describe(schema.name))
        }
        return .xml(result, status: 201)
    }

    /// Adds a column to a served table (a replica whose source gained one): the body is the
    /// table's schema with that column alone, typed as the protocol types it; the service
    /// gives it its engine's type, and a structured default (never an expression).
    func addColumn(_ r: ServiceRequest) async throws -> ServiceResponse {
        let name = try r.table()
        try r.principal.require(.manage, "add columns")
        let data = try await body(r)
        let result = try await Offload.run { [self] () -> Data in
            let posted = RequestSchema.sanitized(try XMLDocuments.decodeSchema(data))
            guard posted.columns.count == 1, var column = posted.columns.first else {
                throw ServiceError.badRequest("adding a column takes a schema of that one column", table: name.description)
            }
            let c = try open(write: true)
            defer { close(c) }
            let t = try served(name, in: c)
            guard !Self.isStaging(t) else { throw ServiceError.notFound(t) }
            let existing = try c.describe(t, rowEstimate: false)
            guard existing.column(named: column.name) == nil else {
                throw ServiceError(status: 409, code: "exists", table: t.description, message: "\(t) has a column \(column.name) already")
            }
            column.isNullable = true
            column.serial = nil
            var alone = existing
            alone.columns = [column]
            alone.primaryKey = []
            alone.uniqueKeys = []
            alone.indexes = []
            alone.foreignKeys = []
            alone.checks = []
            guard let typed = try c.planTable(alone, named: t).schema.columns.first else {
                throw ServiceError.badRequest("the served database has no type for the column \(column.name)", table: t.description)
            }
            try c.addColumn(typed, default: column.defaultValue, to: t)
            r.logger.info("added the column \(column.name) to \(t)")
            return XMLDocuments.schema(try c.describe(t))
        }
        return .xml(result, status: 201)
    }

    func dropTable(_ r: ServiceRequest) async throws -> ServiceResponse {
        let name = try r.table()
        if Self.isStaging(name) { try staging.check(name, r.principal, doing: "drop") } else {
            try r.principal.require(.manage, "drop tables")
        }
        try await Offload.run { [self] in
            let c = try open(write: true)
            defer { close(c) }
            let t = try served(name, in: c)
            try Self.transaction(c) { try c.dropTable(t) }
            staging.forget(t)
        }
        return .xml(XMLDocuments.applied([("dropped", 1)]))
    }
}
