import ArgumentParser
import FerryCore

extension Ferry {
    /// `ferry tables URL`: the tables of a database with their row counts.
    struct Tables: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the tables of a database with their row counts.",
            discussion: """
                SQLite tables are counted. PostgreSQL tables its statistics know, and MySQL/MariaDB \
                tables of 100,000 rows or more, show the server's estimate (ferry verify counts).

                Examples:
                  ferry tables sqlite:samples/chinook.sqlite
                  ferry tables --json sqlite:samples/chinook.sqlite
                  ferry tables postgres://dba@db.example/shop --schema sales,public
                """)

        @Argument(help: "The database URL (sqlite:file.db, postgres://…, mysql://…).")
        var url: String

        @Option(name: .long, help: "Only tables in these schemas, comma-separated.")
        var schema: [String] = []

        @OptionGroup var driverSettings: DriverSettings

        @OptionGroup var output: OutputOptions

        func run() throws {
            let connection = try Ferry.registry.connect(driverSettings.endpoint(url, registry: Ferry.registry), role: .source)
            defer { connection.close() }
            let schemas = schema.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
            let tables = try connection.listTables().filter {
                schemas.isEmpty || schemas.contains($0.name.schema ?? connection.defaultSchema)
            }
            if output.json {
                struct Row: Encodable { var table: String; var rows: Int64? }
                try Console.json(tables.map { Row(table: $0.name.description, rows: $0.rowEstimate) })
                return
            }
            if tables.isEmpty {
                Console.out("no tables in \(connection.endpoint)")
                return
            }
            Console.out(renderColumns(["TABLE", "ROWS"], tables.map { [$0.name.description, $0.rowEstimate.map(String.init) ?? "?"] }))
        }
    }
}
