import Foundation

/// Stops a running copy between batches: the table being written is rolled back like any
/// failed table (the target keeps what it had), and tables not yet started are not touched.
/// Thread-safe; `cancel()` may come from any thread, e.g. a Swift task's cancellation handler.
public final class Cancellation: Sendable {
    private let cancelled = Locked(false)

    public init() {}

    public func cancel() { cancelled.withLock { $0 = true } }

    public var isCancelled: Bool { cancelled.withLock { $0 } }
}
