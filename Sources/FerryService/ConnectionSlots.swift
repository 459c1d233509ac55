import FerryCore
import Foundation

/// How many database connections the service's requests hold at once (`--max-connections`):
/// a request takes a slot before it connects and gives it back when it closes; past the limit
/// requests queue, first come first served, and one that waited `waitSeconds` is answered 503
/// busy. A request that needs two connections (merge and apply read staging tables on a second
/// one while the first writes) takes both at once, so no request ever waits for a slot while
/// holding one: with any limit of two or more, requests cannot wait on each other for ever.
///
/// Read snapshots and change feeds hold their connections between requests: they are bounded
/// by their own limits (`--max-snapshots`), outside these slots, so that clients holding them
/// cannot starve the requests that would end them.
public final class ConnectionSlots: @unchecked Sendable {  // unchecked: the state only under `condition`
    public let limit: Int
    public let waitSeconds: Double
    private let condition = NSCondition()
    private var used = 0
    /// Tickets of the requests waiting, in arrival order, and the next ticket.
    private var queue: [UInt64] = []
    private var nextTicket: UInt64 = 0
    private var peak = 0
    private var waitedTotal = 0
    private var timedOut = 0

    /// `limit` 0: no limit.
    public init(limit: Int, waitSeconds: Double) {
        self.limit = limit
        self.waitSeconds = waitSeconds
    }

    /// Takes `n` slots (1 or 2), waiting in line for them; throws 503 busy after `waitSeconds`.
    public func acquire(_ n: Int = 1) throws {
        condition.lock()
        defer { condition.unlock() }
        guard limit > 0 else {
            used += n
            peak = max(peak, used)
            return
        }
        let need = min(n, limit)
        if queue.isEmpty && used + need <= limit {
            used += need
            peak = max(peak, used)
            return
        }
        let ticket = nextTicket
        nextTicket += 1
        queue.append(ticket)
        waitedTotal += 1
        let deadline = Date(timeIntervalSinceNow: waitSeconds)
        while !(queue.first == ticket && used + need <= limit) {
            if !condition.wait(until: deadline) {
                // Timed out: out of the line (the next in line may go now).
                queue.removeAll { $0 == ticket }
                timedOut += 1
                condition.broadcast()
                throw ServiceError.busy(
                    "waited \(Int(waitSeconds)) s for one of the \(limit) database connections (--max-connections)", table: nil)
            }
        }
        queue.removeFirst()
        used += need
        peak = max(peak, used)
        // The next in line may fit too.
        condition.broadcast()
    }

    /// Gives back `n` slots taken by `acquire`.
    public func release(_ n: Int = 1) {
        condition.lock()
        used -= limit > 0 ? min(n, limit) : n
        condition.broadcast()
        condition.unlock()
    }

    /// What `/metrics` reports: slots in use, requests waiting, the most in use at once, requests
    /// that had to wait, and those that waited too long.
    public struct Figures: Sendable {
        public var inUse: Int
        public var waiting: Int
        public var peak: Int
        public var waited: Int
        public var timedOut: Int
    }

    public var figures: Figures {
        condition.lock()
        defer { condition.unlock() }
        return Figures(inUse: used, waiting: queue.count, peak: peak, waited: waitedTotal, timedOut: timedOut)
    }
}
