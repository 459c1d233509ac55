import Foundation

/// A value shared between threads, every access under one lock. (`Synchronization.Mutex` would
/// do, but needs macOS 15 / iOS 18; FerryKit supports macOS 14 / iOS 17.)
public final class Locked<Value>: @unchecked Sendable {  // unchecked: `value` is only touched while `lock` is held
    private let lock = NSLock()
    private var value: Value

    public init(_ value: Value) { self.value = value }

    /// Runs `body` with the value, holding the lock.
    public func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
