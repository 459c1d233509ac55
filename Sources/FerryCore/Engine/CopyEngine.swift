import Foundation

/// Copies tables from one database to another: plan → run → summary.
///
/// Each table is loaded inside one target transaction (create or stage, insert, move serial
/// counters, swap), so a failure leaves the target as it was. Within a table a reader thread
/// and the writer are joined by a queue bounded in batches and bytes (see `pump`); `jobs`
/// tables run at once when the target allows concurrent writers.
public struct CopyEngine: Sendable {
    public let registry: DriverRegistry

    /// Prefix of tables Ferry creates for its own use (staging tables, bookkeeping).
    public static let internalPrefix = "_ferry_"

    public init(registry: DriverRegistry) {
        self.registry = registry
    }
}
