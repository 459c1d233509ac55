import FerryCore
import Foundation

extension DriverConformance {
    /// Values in an engine's stored form that its canonical forms would rewrite, for the check
    /// "a copy between two databases of the engine keeps every value as stored". Set
    /// `Options.storedForm` for engines whose dialect keeps stored forms (SQLite).
    public struct StoredFormSample: Sendable {
        /// The engine whose stored form the bytes are in (the tables are that engine's).
        public var engine: Engine
        /// Columns: name, declared type; every value in the engine's stored form (nil = NULL).
        public var columns: [(name: String, declared: String)]
        public var rows: [[[UInt8]?]]

        public init(engine: Engine, columns: [(name: String, declared: String)], rows: [[[UInt8]?]]) {
            self.engine = engine
            self.columns = columns
            self.rows = rows
        }

        /// SQLite's (`StoredForm` in FerrySQLite: a tag `i`, `r`, `t` or `b`, then the bytes):
        /// the texts of the fidelity finding (`…10.000010` is not `…10.00001`, `00:00:00.500000`
        /// is not `00:00:00.5`), an upper-case UUID, decimals as written, and values of another
        /// storage class than the declared type's.
        public static let sqlite: StoredFormSample = {
            func t(_ s: String) -> [UInt8] { [UInt8(ascii: "t")] + Array(s.utf8) }
            func b(_ bytes: [UInt8]) -> [UInt8] { [UInt8(ascii: "b")] + bytes }
            func i(_ v: Int64) -> [UInt8] { [UInt8(ascii: "i")] + withUnsafeBytes(of: UInt64(bitPattern: v).bigEndian) { Array($0) } }
            func r(_ v: Double) -> [UInt8] { [UInt8(ascii: "r")] + withUnsafeBytes(of: v.bitPattern.bigEndian) { Array($0) } }
            return StoredFormSample(
                engine: Engine("sqlite"),
                columns: [("k", "VARCHAR(20)"), ("ts", "DATETIME(6)"), ("tm", "TIME"), ("d", "DATE"), ("u", "UUID"),
                          ("amount", "DECIMAL TEXT(10,2)"), ("n", "INT"), ("note", "TEXT"), ("untyped", "")],
                rows: [
                    [t("a"), t("1969-12-31 23:01:10.000010"), t("00:00:00.500000"), t("2020-1-1"), t("550E8400-E29B-41D4-A716-446655440000"),
                     t("12.30"), i(7), t("x"), r(1.5)],
                    [t("b"), t("2020-01-01 00:00:00.5"), t("12:00"), t("2020-01-01"), b(Array(0..<16)),
                     t("-0.000"), t("not a number"), b([0, 255]), t("")],
                    [t("c"), i(1_700_000_000), r(3.25), nil, t(""), t("1e5"), i(Int64.max), t(""), b([])],
                    [t("D"), t("2024-02-29 12:34:56.789012+05:30"), t("23:59:59.999999"), t("2150-06-30"), t("00000000-0000-0000-0000-0000000000ab"),
                     nil, i(-1), t("ü😀"), i(0)],
                ])
        }()
    }

    /// A table of stored values (`Options.storedForm`) copied into another database of the
    /// engine (`--mode create`), then mirrored after one value changed in a way only its stored
    /// form shows: every value of the target equals the source's, byte for byte and class for
    /// class, and the verifier compares stored forms (it finds the changed one).
    func storedFormsSurviveACopy() throws {
        guard let sample = options.storedForm else { return }
        let src = try freshDatabase()
        defer { src.close() }
        let dst = try freshDatabase()
        defer { dst.close() }
        guard dst.dialect.keepsStoredForm(fromEngine: sample.engine) else {
            throw ConformanceFailure("the target does not keep \(sample.engine)'s stored form (Dialect.keepsStoredForm)")
        }
        let name = TableName("stored_forms")
        let typed = sample.columns.map { c in
            Column(name: c.name, nativeType: c.declared, logicalType: src.dialect.logicalType(forDeclaredType: c.declared) ?? .binary(maxLength: nil), isNullable: c.name != "k")
        }
        let schema = TableSchema(name: name, engine: sample.engine, columns: typed, primaryKey: ["k"])
        let stored = typed.map(\.storedForm)
        func batch(_ rows: [[[UInt8]?]]) throws -> RowBatch {
            try RowBatch(rows: rows.map { $0.map { $0.map(Value.binary) ?? .null } }, types: stored.map(\.logicalType))
        }
        try src.begin()
        do {
            let created = try src.createTable(schema, named: name)
            let writer = try src.writer(into: created, columns: stored)
            try writer.write(batch(sample.rows))
            try writer.finish()
            try src.commit()
        } catch {
            try? src.rollback()
            throw error
        }
        func read(_ db: any Connection) throws -> [[Value]] {
            try Self.readAll(db, name, columns: stored).sorted { $0[0].description < $1[0].description }
        }
        let want = sample.rows.map { $0.map { $0.map(Value.binary) ?? .null } }.sorted { $0[0].description < $1[0].description }
        let names = sample.columns.map(\.name)
        try expectEqual(try read(src), want, "the stored values as written", names: names)

        let engine = CopyEngine(registry: DriverRegistry())
        let quiet = ProgressReporter(style: .quiet) { _ in }
        func copy(_ mode: WriteMode) throws {
            var o = CopyOptions()
            o.mode = mode
            o.tables = [name]
            o.batchSize = 2
            let plan = try engine.plan(source: src, target: dst, options: o)
            let summary = engine.run(plan, source: src, target: dst, options: o, progress: quiet)
            guard summary.ok else { throw ConformanceFailure("\(mode): \(summary.tables.first?.error ?? "failed")") }
        }
        try copy(.create)
        try expectEqual(try read(dst), want, "copied into another database of the engine", names: names)

        // Only the stored text changes (the same instant, written with fewer digits): verify sees
        // it, and a mirror puts the stored text back.
        var changed = sample.rows[0]
        changed[1] = [UInt8(ascii: "t")] + Array("1969-12-31 23:01:10.00001".utf8)
        try dst.begin()
        _ = try dst.upsertRows(into: try dst.describe(name), columns: stored, key: ["k"], rows: batch([changed]))
        try dst.commit()
        let verifier = Verifier()
        var vo = Verifier.Options()
        vo.tables = [name]
        let differs = try verifier.verify(source: src, target: dst, options: vo)
        guard differs.tables.first?.status == .different else {
            throw ConformanceFailure("verify called a stored text changed from …10.000010 to …10.00001 equal")
        }
        try copy(.mirror)
        try expectEqual(try read(dst), want, "mirrored back", names: names)
        let equal = try verifier.verify(source: src, target: dst, options: vo)
        guard equal.tables.first?.status == .equal else { throw ConformanceFailure("verify after the mirror: \(equal.tables)") }
    }
}
