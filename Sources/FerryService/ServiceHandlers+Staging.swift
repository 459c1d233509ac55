import FerryCore
import FerryXML
import Foundation

/// Staging operations, which keep the http driver's loads all or nothing: merge a staging
/// table into its target, swap one in for its target, and apply staged upserts and deletes.
extension ServiceHandlers {
    /// Moves every row of a staging table into its target in one transaction, then drops
    /// the staging table: how the http driver appends without leaving half a load behind.
    func merge(_ r: ServiceRequest) async throws -> ServiceResponse {
        let stagingTable = try r.table()
        let into = try Self.into(r, for: "merge")
        guard Self.isStaging(stagingTable) else {
            throw ServiceError.badRequest("\(stagingTable) is not a staging table (\(CopyEngine.internalPrefix)…): only those are merged", table: stagingTable.description)
        }
        try staging.check(stagingTable, r.principal, doing: "merge")
        try mayWrite(into, r, doing: "merge into")
        let limit = try Self.rejectLimit(r, table: into)
        let native = r.values("native")
        let merged = try await Offload.run { [self] () -> (rows: Int, refused: [RejectFile.Row], columns: [Column]) in
            // A second connection reads the (committed) staging table while the first writes:
            // batches stream through, memory stays flat whatever the size of the load.
            let (c, reading, separate) = try openTwo()
            defer { close(c) }
            defer { if separate { close(reading) } }
            let from = try served(stagingTable, in: c)
            let to = try served(into, in: c)
            let schema = try c.describe(from, rowEstimate: false)
            let target = try c.describe(to, rowEstimate: false)
            // Moved in the database's stored form where it keeps one (no value rewritten); with
            // `reject=`, read as the load wrote them, which is how refused rows go back.
            let columns = try limit == nil ? movedColumns(schema.columns) : schema.columns.map { try requested($0, native: native, table: from) }
            // With `reject=` on one connection that reads and writes (SQLite in a rollback
            // journal), the rows are read first: no read stays open across a rollback to a savepoint.
            let spool = try limit != nil && !separate ? Self.spool(schema, columns: columns, on: c) : nil
            defer { spool?.discard() }
            return try Self.transaction(c) {
                let rejecting = try limit.map { limit in try Self.rejecting(c, table: to, limit: limit) { try c.writer(into: target, columns: columns) } }
                let writer: any BatchWriter = try rejecting ?? c.writer(into: target, columns: columns)
                var n = 0
                do {
                    try Self.each(schema, columns: columns, spool: spool, on: reading) { batch in
                        try writer.write(batch)
                        n += batch.count
                    }
                    try writer.finish()
                } catch {
                    writer.abort()
                    throw error
                }
                try c.dropTable(from)
                staging.forget(from)
                let refused = rejecting?.rejected ?? []
                return (n - refused.count, refused, columns)
            }
        }
        if limit != nil { return refusedAnswer([("inserted", merged.rows)], refused: merged.refused, columns: merged.columns) }
        return .xml(XMLDocuments.applied([("inserted", merged.rows)]))
    }

    func swap(_ r: ServiceRequest) async throws -> ServiceResponse {
        let stagingTable = try r.table()
        let into = try Self.into(r, for: "swap")
        try r.principal.require(.manage, "replace tables")
        try await Offload.run { [self] in
            let c = try open(write: true)
            defer { close(c) }
            let from = try served(stagingTable, in: c)
            try Self.transaction(c) { try c.swapTable(from, into: into) }
            staging.forget(from)
        }
        return .xml(XMLDocuments.applied([("swapped", 1)]))
    }

    /// Keyed writes staged by the http driver, applied in one transaction: the keys of
    /// `deletes` deleted, the rows of `upserts` inserted or (where they differ) updated by
    /// `key`, serial counters moved, and the row count checked against `expect`; an
    /// incremental copy's watermark (`watermark=NAME&watermark-from=OLD&watermark-to=NEW`)
    /// moved only if it still holds OLD; both staging tables dropped. Any failure applies nothing.
    func apply(_ r: ServiceRequest) async throws -> ServiceResponse {
        let name = try r.table()
        let keyNames = r.values("key")
        let upserts = r.value("upserts").map { TableName(parsing: $0) }
        let deletes = r.value("deletes").map { TableName(parsing: $0) }
        let expect = try r.value("expect").map { text -> Int64 in
            guard let n = Int64(text), n >= 0 else { throw ServiceError.badRequest("expect= is a row count", table: name.description) }
            return n
        }
        let resetSerial = r.value("reset-serial") == "1"
        let watermark = try r.value("watermark").map { mark -> WatermarkMove in
            guard let to = r.value("watermark-to"), KeyText.decode(to) != nil, let rows = r.value("watermark-rows").flatMap({ Int64($0) }), rows >= 0,
                  r.value("watermark-from").map({ KeyText.decode($0) != nil }) ?? true
            else {
                throw ServiceError.badRequest("watermark= needs watermark-to= (a stored key value), watermark-rows= (a row count) and, after the first run, watermark-from=", table: name.description)
            }
            return WatermarkMove(name: mark, from: r.value("watermark-from"), to: to, rows: rows)
        }
        let logger = r.logger
        let principal = r.principal
        try mayWrite(name, r, doing: "apply into")
        guard upserts != nil || deletes != nil || watermark != nil else {
            throw ServiceError.badRequest("apply needs ?upserts=STAGING and/or ?deletes=STAGING", table: name.description)
        }
        let rejectLimit = try Self.rejectLimit(r, table: name)
        let native = r.values("native")
        let (counts, refused) = try await Offload.run { [self] () -> ([(String, Int)], (rows: [RejectFile.Row], columns: [Column])?) in
            // A second connection reads the (committed) staging tables while the first writes.
            let (c, reading, separate) = try openTwo()
            defer { close(c) }
            defer { if separate { close(reading) } }
            let t = try served(name, in: c)
            let schema = try c.describe(t, rowEstimate: false)
            let key = keyNames.isEmpty ? (schema.preferredKey?.columns ?? []) : keyNames
            guard !key.isEmpty else { throw FerryError.noKey(table: t) }
            for k in key where schema.column(named: k) == nil { throw FerryError.columnNotFound(table: t, column: k) }
            let staged = try [deletes, upserts].map { try $0.map { s -> TableSchema in
                let staging = try served(s, in: c)
                guard staging.name.hasPrefix(CopyEngine.internalPrefix) else {
                    throw ServiceError.badRequest("\(staging) is not a staging table (\(CopyEngine.internalPrefix)…)", table: name.description)
                }
                try self.staging.check(staging, principal, doing: "apply")
                return try c.describe(staging, rowEstimate: false)
            } }
            /// A staging table's rows as the target's columns of those names, typed as the staging
            /// table reads them.
            func layout(_ staging: TableSchema) throws -> [Column] {
                movedColumns(try staging.columns.map { s in
                    guard let col = schema.column(named: s.name) else { throw FerryError.columnNotFound(table: t, column: s.name) }
                    return Column(name: col.name, nativeType: col.nativeType, logicalType: s.logicalType, isNullable: true)
                })
            }
            /// Every batch of a staging table, read on `r`; a refused row named by its key.
            func each(_ staging: TableSchema, _ body: (RowBatch, [Column]) throws -> Void) throws {
                let columns = try layout(staging)
                let reader = try reading.reader(table: staging, columns: movedColumns(staging.columns), keyRange: nil, batchSize: 10_000)
                defer { reader.close() }
                while let batch = try reader.next() {
                    do {
                        try body(batch, columns)
                    } catch let e as BatchRowError {
                        let b = e.batch ?? batch
                        let shown = key.compactMap { k -> String? in
                            guard let i = columns.firstIndex(where: { $0.name == k }), e.row < b.count else { return nil }
                            return "\(k)=\(columns[i].display(b.columns[i], row: e.row))"
                        }
                        // Named by its key: the client's row numbers are not the staging table's.
                        var refused = ServiceError.from(e, table: t)
                        refused.row = nil
                        refused.message += " (key (\(shown.joined(separator: ", "))))"
                        throw refused
                    }
                }
            }
            // Made before the transaction: on MySQL a CREATE TABLE commits.
            let marks = try watermark.map { _ in try Watermarks.schema(c) }
            // Where `c` reads the staging tables itself (SQLite in a rollback journal), nothing
            // is read while it writes: the keys to delete are read first, into a temporary file
            // read back a batch at a time, and the upserts move inside the database
            // (`moveRows`, which drops their staging table).
            var deleteSpool: (spool: RowsSpool, columns: [Column])?
            defer { deleteSpool?.spool.discard() }
            // `reject=N`: the upserts merged a batch at a time in savepoints, refused ones kept.
            let settingAside = try rejectLimit.flatMap { limit in
                try staged[1].map { try UpsertsSettingAside($0, into: schema, limit: limit, native: native, service: self, spoolOn: separate ? nil : c) }
            }
            defer { settingAside?.discard() }
            if !separate, let d = staged[0] {
                let columns = try layout(d)
                let spool = try RowsSpool(table: t, columns: columns)
                deleteSpool = (spool, columns)
                try each(d) { batch, _ in try spool.append(batch) }
                try spool.finish()
            }
            let applied = try Self.transaction(c) { () -> MergeCounts in
                var counts = MergeCounts()
                // Deletes first: a row going away may free a unique value an upsert takes.
                if let d = staged[0] {
                    if separate {
                        try each(d) { batch, columns in
                            counts.deleted += Int64(try c.deleteRows(from: schema, key: columns, keys: batch))
                        }
                    } else if let d = deleteSpool {
                        try d.spool.forEachBatch(batchSize: 10_000) { batch in
                            counts.deleted += Int64(try c.deleteRows(from: schema, key: d.columns, keys: batch))
                        }
                    }
                }
                if let u = staged[1] {
                    if let settingAside {
                        counts = counts + (try settingAside.merge(into: schema, key: key, on: c, reading: reading))
                    } else if separate {
                        try each(u) { batch, columns in
                            counts = counts + (try c.mergeRows(into: schema, columns: columns, key: key, rows: batch))
                        }
                    } else {
                        for col in u.columns where schema.column(named: col.name) == nil { throw FerryError.columnNotFound(table: t, column: col.name) }
                        let moved = try c.moveRows(from: u.name, into: schema, columns: movedColumns(u.columns), key: key)
                        counts = counts + (moved ?? MergeCounts())
                    }
                }
                if let expect {
                    let n = try c.countRows(t)
                    guard n == expect else {
                        throw ServiceError(
                            status: 409, code: "conflict", table: t.description,
                            message: "after applying, \(t) would hold \(n) rows where \(expect) were expected; this table's key comparison merges keys the source keeps apart (a case-insensitive collation?); nothing was applied")
                    }
                }
                if let watermark, let marks {
                    do {
                        try Watermarks.apply(watermark, c, marks)
                    } catch FerryError.notReady(let message) {
                        throw ServiceError(status: 409, code: "conflict", table: t.description, message: message)
                    }
                }
                // Last: on MySQL moving a counter is DDL, which commits.
                if resetSerial, schema.columns.contains(where: \.isSerial) { try c.resetSerial(t, schema: schema) }
                return counts
            }
            // Outside the transaction: dropping a table commits on MySQL. A staging table
            // left behind by a failure here is dropped by the next load that stages.
            for s in staged.compactMap({ $0 }) {
                staging.forget(s.name)
                do { if try c.tableExists(s.name) { try Self.transaction(c) { try c.dropTable(s.name) } } } catch {
                    logger.warning("could not drop staging table \(s.name): \(error)")
                }
            }
            return ([("inserted", Int(applied.inserted)), ("updated", Int(applied.updated)),
                     ("unchanged", Int(applied.unchanged)), ("deleted", Int(applied.deleted))],
                    settingAside.map { ($0.refused, $0.columns) })
        }
        if rejectLimit != nil { return refusedAnswer(counts, refused: refused?.rows ?? [], columns: refused?.columns ?? []) }
        return .xml(XMLDocuments.applied(counts))
    }
}
