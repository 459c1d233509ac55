import ArgumentParser
import FerryCore
import Foundation

/// What a copy carries and how it writes: the options `ferry copy` and `ferry plan` share, and
/// the one place their defaults and checks are decided.
struct CopyChoices: ParsableArguments {
    @Option(name: .long, help: "Only tables in these schemas (PostgreSQL schemas, SQLite attached databases), comma-separated.")
    var schema: [String] = []

    @Option(name: .long, help: "create, replace, append, upsert or mirror.")
    var mode: WriteMode = .create

    @OptionGroup var tableOptions: TableOptions

    @OptionGroup var castOptions: CastOptions

    @Option(name: .long, help: ArgumentHelp(
        "Copy only the rows matching a condition, in the source's SQL: TABLE='CONDITION' for one table, or a CONDITION for every table named with --tables (repeatable).",
        valueName: "[TABLE=]CONDITION"))
    var `where`: [String] = []

    @Option(name: .long, help: ArgumentHelp(
        "Copy only these columns: TABLE=COL,COL for one table, or COL,COL for every table named with --tables (repeatable).",
        valueName: "[TABLE=]COLUMNS"))
    var columns: [String] = []

    @Flag(name: .long, help: "Leave out the source's secondary indexes.")
    var noIndexes = false

    @Flag(name: .long, help: "Leave out the source's foreign keys.")
    var noForeignKeys = false

    @Option(name: .long, help: "Rows per batch.")
    var batchSize: Int = 10_000

    @Option(name: .long, help: ArgumentHelp(
        "With --mode upsert: read only rows whose COLUMN (an integer, date or timestamp that grows, such as updated_at) is above the last successful run's watermark: COLUMN for every table, or TABLE=COLUMN (repeatable).",
        valueName: "[TABLE=]COLUMN"))
    var incremental: [String] = []

    @Option(name: .long, help: ArgumentHelp(
        "With --incremental: read again this far below the watermark, for rows that committed late: a duration (0, 90s, 10m, 2h, 1d; default 5m) for timestamps and dates, a number for integer columns (default 0).",
        valueName: "duration"))
    var incrementalLookback: String?

    func validate() throws {
        if incrementalLookback != nil && incremental.isEmpty { throw ValidationError("--incremental-lookback goes with --incremental COLUMN") }
        guard batchSize >= 1 && batchSize <= 1_000_000 else {
            throw ValidationError("--batch-size must be between 1 and 1000000, not \(batchSize)")
        }
    }

    func copyOptions() throws -> CopyOptions {
        var options = CopyOptions()
        options.tables = tableOptions.named
        options.exclude = tableOptions.excluded
        options.schemas = schema.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
        options.mode = mode
        options.batchSize = batchSize
        options.keys = tableOptions.keys
        options.casts = try castOptions.rules()
        options.filters = self.where
        options.indexes = !noIndexes
        options.foreignKeys = !noForeignKeys
        options.incremental = incremental
        options.columns = columns
        options.incrementalLookback = incrementalLookback
        return options
    }
}

/// `ferry copy --plan FILE` and its steps.
struct UnitOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("A plan made by `ferry plan --shards N`: run one of its steps (--prepare, --shard I/N, --finish).", valueName: "file"))
    var plan: String?

    @Flag(name: .long, help: "With --plan: create the target tables (keys, no secondary indexes or foreign keys) once, before any unit.")
    var prepare = false

    @Option(name: .long, help: ArgumentHelp("With --plan: run unit I of N alone (0-based; idempotent: a unit run again leaves the same target).", valueName: "I/N"))
    var shard: String?

    @Flag(name: .long, help: "With --plan: once every unit is in, create the indexes and foreign keys and move the serial counters (refused, naming the units, while any is missing).")
    var finish = false

    func validate() throws {
        let steps = [prepare, shard != nil, finish].filter { $0 }.count
        if plan == nil && steps > 0 { throw ValidationError("--prepare, --shard and --finish are steps of a plan: give it with --plan FILE") }
        if plan != nil && steps != 1 { throw ValidationError("--plan FILE runs one step: --prepare, --shard I/N or --finish") }
        if let shard, Self.shard(shard) == nil { throw ValidationError("--shard takes I/N with 0 <= I < N, as in --shard 0/4; got '\(shard)'") }
    }

    /// `I/N` as numbers; nil unless 0 <= I < N.
    static func shard(_ text: String) -> (index: Int, count: Int)? {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let i = Int(parts[0].trimmingCharacters(in: .whitespaces)), let n = Int(parts[1].trimmingCharacters(in: .whitespaces)),
              n >= 1, i >= 0, i < n else { return nil }
        return (i, n)
    }
}
