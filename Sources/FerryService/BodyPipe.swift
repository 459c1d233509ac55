import Foundation

/// Carries a request body from the server's async side (the transport's body sequence) to the
/// blocking side that decodes and writes it (a database thread), piece by piece, bounded in
/// bytes: the async side waits while `maxBytes` are queued, so it stops reading the socket and
/// TCP holds the client back.
final class BodyPipe: @unchecked Sendable {  // unchecked: all state is touched only under `condition`
    private let condition = NSCondition()
    private var pieces: [[UInt8]] = []
    private var head = 0
    private var queued = 0
    private var ended = false
    private var failure: (any Error)?
    /// The reading side stopped (done or failed): nothing more is wanted.
    private var closed = false
    private var waiter: CheckedContinuation<Void, Never>?
    let maxBytes: Int

    init(maxBytes: Int = 1 << 20) { self.maxBytes = maxBytes }

    // The async side.

    /// Queues a piece, waiting while the pipe is full. Returns false when the reading side
    /// stopped (the rest of the body is not wanted).
    func put(_ piece: [UInt8]) async -> Bool {
        switch enqueue(piece) {
        case .refused: return false
        case .queued: return true
        case .full:
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in park(c) }
            return !isClosed
        }
    }

    private enum Enqueued { case refused, queued, full }

    private func enqueue(_ piece: [UInt8]) -> Enqueued {
        condition.lock()
        defer { condition.unlock() }
        if closed { return .refused }
        pieces.append(piece)
        queued += piece.count
        condition.broadcast()
        return queued > maxBytes ? .full : .queued
    }

    /// Resumes `c` once there is room (at once if there is already).
    private func park(_ c: CheckedContinuation<Void, Never>) {
        condition.lock()
        if queued <= maxBytes || closed {
            condition.unlock()
            c.resume()
        } else {
            waiter = c
            condition.unlock()
        }
    }

    private var isClosed: Bool {
        condition.lock()
        defer { condition.unlock() }
        return closed
    }

    /// The body ended (`error`: it could not be read whole).
    func finish(error: (any Error)? = nil) {
        condition.lock()
        ended = true
        if failure == nil { failure = error }
        condition.broadcast()
        condition.unlock()
    }

    // The blocking side.

    /// The next piece; nil at the end of the body. Throws when the body could not be read whole.
    func take() throws -> [UInt8]? {
        condition.lock()
        while head == pieces.count && !ended { condition.wait() }
        if head < pieces.count {
            let piece = pieces[head]
            // The slot lets go of it now: taken pieces wait for the compaction below, and 64
            // of them held 4 MiB of the service's peak while a load streamed.
            pieces[head] = []
            head += 1
            queued -= piece.count
            if head == pieces.count || head > 64 {
                pieces.removeFirst(head)
                head = 0
            }
            let resume = queued <= maxBytes ? waiter : nil
            if resume != nil { waiter = nil }
            condition.unlock()
            resume?.resume()
            return piece
        }
        let error = failure
        condition.unlock()
        if let error { throw error }
        return nil
    }

    /// The reading side is done (or gave up): the async side stops feeding.
    func close() {
        condition.lock()
        closed = true
        pieces = []
        head = 0
        queued = 0
        let resume = waiter
        waiter = nil
        condition.unlock()
        resume?.resume()
    }
}
