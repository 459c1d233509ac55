import Foundation

/// Stops a running copy between batches: the table being written is rolled back like any
/// failed table (the target keeps what it had), and tables not yet started are not touched.
/// Thread-safe; `cancel()` may come from any thread, e.g. a Swift task's cancellation handler.
public final class Cancellation: @unchecked Sendable {
    private let lock = NSLock()
    private var cancelled = false

    public init() {}

    public func cancel() {
        lock.lock()
        cancelled = true
        lock.unlock()
    }

    public var isCancelled: Bool {
        lock.lock()
        defer { lock.unlock() }
        return cancelled
    }
}
