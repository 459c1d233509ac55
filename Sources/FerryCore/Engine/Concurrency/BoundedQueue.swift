import Foundation

/// A blocking FIFO between one producer and one consumer thread, bounded by items and by
/// bytes (`cost` of each item): the producer waits while the consumer is behind, so memory
/// stays flat whatever the size of the rows. The bytes count the item the consumer took and
/// has not `release`d yet: with items larger than the budget, the producer reads the next one
/// only when the consumer is done with the last. One item always fits, however large.
public final class BoundedQueue<Element: Sendable>: @unchecked Sendable {  // unchecked: all state is touched only under `condition`
    private let condition = NSCondition()
    private var items: [(item: Element, cost: Int)] = []
    private var queuedCost = 0
    /// The cost of the item the consumer took and still works on.
    private var takenCost = 0
    private let capacity: Int
    private let maxCost: Int
    private let cost: @Sendable (Element) -> Int
    private var finished = false
    private var failure: (any Error)?
    private var cancelled = false

    public init(capacity: Int, maxCost: Int = .max, cost: @escaping @Sendable (Element) -> Int = { _ in 0 }) {
        self.capacity = max(1, capacity)
        self.maxCost = max(1, maxCost)
        self.cost = cost
    }

    /// Adds an item, waiting for room. Returns false when the consumer cancelled.
    public func put(_ item: Element) -> Bool {
        let c = cost(item)
        condition.lock()
        defer { condition.unlock() }
        while !items.isEmpty && (items.count >= capacity || queuedCost + c > maxCost) && !cancelled { condition.wait() }
        if cancelled { return false }
        items.append((item, c))
        queuedCost += c
        condition.broadcast()
        return true
    }

    /// Waits until the queue has room for another item (by count and by bytes), so that the
    /// producer reads its next item only then and does not hold one while it waits. Returns
    /// false when the consumer cancelled.
    public func waitForRoom() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while (items.count >= capacity || (queuedCost + takenCost >= maxCost && queuedCost + takenCost > 0)) && !cancelled {
            condition.wait()
        }
        return !cancelled
    }

    /// The producer is done; `error` when it stopped because of one.
    public func finish(error: (any Error)? = nil) {
        condition.lock()
        finished = true
        failure = error
        condition.broadcast()
        condition.unlock()
    }

    /// The next item; nil at the end. Rethrows the producer's error once the items before it are taken.
    public func take() throws -> Element? {
        condition.lock()
        defer { condition.unlock() }
        while items.isEmpty && !finished { condition.wait() }
        if !items.isEmpty {
            let first = items.removeFirst()
            queuedCost -= first.cost
            takenCost = first.cost
            condition.broadcast()
            return first.item
        }
        if let failure { throw failure }
        return nil
    }

    /// The consumer is done with the item it took last (and holds no reference to it).
    public func release() {
        condition.lock()
        takenCost = 0
        condition.broadcast()
        condition.unlock()
    }

    /// The consumer gives up: the producer's next `put` returns false.
    public func cancel() {
        condition.lock()
        cancelled = true
        items.removeAll()
        queuedCost = 0
        takenCost = 0
        condition.broadcast()
        condition.unlock()
    }
}

/// Carries a value that is not `Sendable` (a C-backed connection) to another thread. Safe only
/// when the sender stops using it until the receiver is done, which the engine guarantees by
/// joining the thread before touching the value again.
final class Handoff<T>: @unchecked Sendable {  // unchecked: carrying a non-Sendable value is its purpose
    var value: T
    init(_ value: T) { self.value = value }
}

/// Runs `body` on a new thread and returns a handle to wait for it.
public final class Worker: Sendable {
    private let done = DispatchSemaphore(value: 0)

    public init(name: String, _ body: @escaping @Sendable () -> Void) {
        let done = self.done
        let thread = Thread {
            body()
            done.signal()
        }
        thread.name = name
        thread.stackSize = 4 << 20
        thread.start()
    }

    public func join() { done.wait() }
}

extension Worker {
    /// Runs `a` on a new thread and `b` on this one, and returns both results (each closure
    /// uses its own connection: a connection is used by one thread at a time).
    static func both<A, B>(_ a: @escaping () throws -> A, _ b: () throws -> B) throws -> (A, B) {
        let box = Handoff<(Result<A, any Error>?, () throws -> A)>((nil, a))
        let worker = Worker(name: "ferry-both") { box.value.0 = Result { try box.value.1() } }
        let right = Result { try b() }
        worker.join()
        guard let left = box.value.0 else { throw FerryError.notReady("a concurrent read did not run") }
        return (try left.get(), try right.get())
    }
}
