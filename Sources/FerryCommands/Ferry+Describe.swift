import ArgumentParser
import FerryCore

extension Ferry {
    /// `ferry describe URL TABLE`: columns, types, keys, serial columns and skipped columns.
    struct Describe: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a table's columns, native and logical types, keys and serial columns.",
            discussion: """
                Columns whose type Ferry cannot carry are listed with the reason they would be skipped.

                Examples:
                  ferry describe sqlite:samples/chinook.sqlite Track
                  ferry describe --json sqlite:samples/chinook.sqlite Invoice
                  ferry describe postgres://dba@db/pagila film --cast 'type tsvector to text'
                  ferry describe postgres://dba@db/pagila film --target sqlite:pagila.db

                With --cast/--casts (as in ferry copy), the DECIDED BY column shows which rule, or the
                engine's type map, decides each column's type; with --target, what that target
                makes of each column (native types a rule names, types kept in a same-engine copy),
                and every statement a copy of this table alone would run there, in order (the target
                is only read; `ferry copy --dry-run` shows a whole copy).
                """)

        @Argument(help: "The database URL.")
        var url: String

        @Argument(help: "The table, as `name` or `schema.name`.")
        var table: TableName

        @OptionGroup var castOptions: CastOptions

        @Option(name: .long, help: "The database a copy would write to (URL): only read, to decide the columns as a copy would.")
        var target: String?

        @OptionGroup var driverSettings: DriverSettings

        @OptionGroup var output: OutputOptions

        func run() throws {
            let connection = try Ferry.registry.connect(driverSettings.endpoint(url, registry: Ferry.registry), role: .source)
            defer { connection.close() }
            let rules = try castOptions.rules()
            let schema = try connection.describe(resolve(table, in: connection))
            // Only its dialect is used: the target is never written (nor created) by describe.
            let targetDialect = try target.map { try Ferry.registry.driver(for: Endpoint(parsing: $0)) }.map(\.dialect)
            let resolved = try rules.resolve(schema, target: targetDialect)
            let skipped = resolved.skipped
            let decisions = resolved.decisions
            let unused = rules.unused(resolved.usedRules)
            if output.json {
                struct Out: Encodable {
                    var schema: TableSchema
                    var key: TableKey?
                    var columns: [ColumnDecision]
                    var skippedColumns: [SkippedColumn]
                    var warnings: [String]
                }
                try Console.json(Out(schema: schema, key: schema.preferredKey, columns: decisions, skippedColumns: skipped, warnings: unused))
                return
            }
            Console.out("table \(schema.name) in \(connection.endpoint)" + (schema.rowEstimate.map { ", about \($0) rows" } ?? ""))
            let rows = zip(schema.columns, decisions).map { c, d in
                [c.name, c.nativeType.isEmpty ? "(none)" : c.nativeType, c.logicalType.description,
                 c.isNullable ? "yes" : "no", c.defaultExpression ?? "", c.serial?.rawValue ?? (c.generated ? "generated" : ""),
                 d.targetType + (d.transforms.isEmpty ? "" : " using " + d.transforms.map(\.rawValue).joined(separator: ",")),
                 d.decidedBy]
            }
            Console.out(renderColumns(["COLUMN", "NATIVE", "LOGICAL", "NULL", "DEFAULT", "SERIAL", "CARRIED AS", "DECIDED BY"], rows))
            Console.out("primary key: " + (schema.primaryKey.isEmpty ? "none" : "(" + schema.primaryKey.joined(separator: ", ") + ")"))
            for key in schema.uniqueKeys { Console.out("unique key: (" + key.joined(separator: ", ") + ")") }
            Console.out("key for keyed work: " + (schema.preferredKey?.description ?? "none (name one with --key \(schema.name)=col1,col2)"))
            for i in schema.indexes {
                let cols = i.columns.map { $0.name + ($0.descending ? " DESC" : "") }.joined(separator: ", ")
                var line = "index \(i.name): " + (i.isUnique ? "unique " : "") + "(" + cols + ")"
                if let e = i.expression { line += " defined as " + SkippedObject.shortened(e, limit: 100) }
                if let p = i.predicate { line += " where " + SkippedObject.shortened(p, limit: 100) }
                Console.out(line)
            }
            for fk in schema.foreignKeys {
                Console.out("foreign key \(fk.name ?? "(unnamed)"): \(fk.summary) on delete \(fk.onDelete.rawValue.lowercased()), on update \(fk.onUpdate.rawValue.lowercased())")
            }
            for c in schema.checks { Console.out("check \(c.name ?? "(unnamed)"): \(SkippedObject.shortened(c.expression, limit: 100))") }
            for w in schema.withheld { Console.out("not carried: \(w.kind) \(w.name): \(w.reason)") }
            if skipped.isEmpty {
                Console.out("skipped columns: none")
            } else {
                for s in skipped { Console.out("skipped column \(s.column): \(s.reason)") }
            }
            for w in unused + schema.readWarnings { Console.out("warning: \(w)") }
            if let target {
                // Planned as `ferry copy --tables TABLE` would plan it: the catalog is read, nothing written.
                let (_, targetEndpoint) = try driverSettings.endpoints(source: url, target: target, registry: Ferry.registry)
                let dst = try Ferry.registry.connect(targetEndpoint, role: .target)
                defer { dst.close() }
                var options = CopyOptions()
                options.tables = [schema.name]
                options.casts = rules
                let plan = try CopyEngine(registry: Ferry.registry).plan(source: connection, target: dst, options: options)
                Console.out("\nstatements a copy of this table alone would run on \(dst.endpoint), in order:")
                for t in plan.tables {
                    for o in t.skippedObjects { Console.out("  skip \(o.kind) \(o.name): \(o.reason)") }
                    for line in Copy.statements(t, mode: plan.mode) { Console.out(line) }
                }
                for line in Copy.foreignKeyStatements(plan) { Console.out(line) }
            }
        }
    }
}

/// Finds the table the user meant: exact name first, then a unique case-insensitive match.
func resolve(_ wanted: TableName, in connection: any Connection) throws -> TableName {
    if try connection.tableExists(wanted) { return wanted }
    let all = try connection.listTableNames()
    let hits = all.filter {
        $0.name.lowercased() == wanted.name.lowercased()
            && (wanted.schema == nil || $0.schema?.lowercased() == wanted.schema?.lowercased())
    }
    if hits.count == 1 { return hits[0] }
    throw FerryError.tableNotFound(table: wanted, endpoint: connection.endpoint.redacted)
}
