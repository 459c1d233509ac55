import Foundation

/// One request in flight, as an HTTP transport reports it: the status, then the body's pieces
/// as they arrive, then the end (or the failure). The caller takes the pieces in order.
///
/// A transport that can pause a transfer passes `resumeLater` with each piece: past
/// `pauseAbove` bytes not taken yet, `received` keeps it and returns true, and the transport
/// reads no more until the caller has taken half of them and the exchange calls it.
/// Linux's URLSession (libcurl) cannot pause a transfer (suspending a task restarts it), so
/// there the pieces wait here: a page of rows ends at the service's page size (8 MiB plus one
/// row), and the next page is asked for only when the caller wants more rows, which bounds
/// them.
public final class HTTPExchange: ProtocolExchange, @unchecked Sendable {  // unchecked: all state is touched only under `condition`
    private let condition = NSCondition()
    private let pauseAbove: Int
    private var statusCode: Int?
    private var pieces: [Data] = []
    private var head = 0
    private var buffered = 0
    private var resume: (() -> Void)?
    private var finished = false
    private var failure: (any Error)?
    private var cancelTransfer: (() -> Void)?

    public init(pauseAbove: Int = 1 << 20) {
        self.pauseAbove = pauseAbove
    }

    public var status: Int? {
        condition.lock()
        defer { condition.unlock() }
        return statusCode
    }

    /// How to stop the transfer when the caller cancels.
    public func attach(cancel: @escaping () -> Void) {
        condition.lock()
        cancelTransfer = cancel
        condition.unlock()
    }

    // The transport's side.

    public func received(status: Int) {
        condition.lock()
        statusCode = status
        condition.broadcast()
        condition.unlock()
    }

    /// Adds a piece of the body. Returns true when the transport should read no more until
    /// `resumeLater` is called (only when given one).
    public func received(_ data: Data, resumeLater: (() -> Void)?) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        pieces.append(data)
        buffered += data.count
        condition.broadcast()
        guard let resumeLater, buffered > pauseAbove, !finished else { return false }
        resume = resumeLater
        return true
    }

    /// The end of the transfer, `error` when it failed: `beforeResponse` is judged from
    /// whether a status came.
    public func completed(_ error: (any Error)?) {
        condition.lock()
        if let error, failure == nil { failure = HTTPTransportError(error, beforeResponse: statusCode == nil) }
        if error == nil && statusCode == nil { failure = HTTPTransportError(nil, beforeResponse: true) }
        finished = true
        cancelTransfer = nil
        let paused = resume
        resume = nil
        condition.broadcast()
        condition.unlock()
        paused?()
    }

    // The caller's side.

    /// Waits for the status line (or the failure that came instead).
    public func waitForStatus() throws {
        condition.lock()
        defer { condition.unlock() }
        while statusCode == nil && !finished { condition.wait() }
        if statusCode == nil { throw failure ?? HTTPTransportError(nil, beforeResponse: true) }
    }

    public var isFinished: Bool {
        condition.lock()
        defer { condition.unlock() }
        return finished
    }

    /// The next piece of the body; nil at its end. Throws `HTTPTransportError` when the
    /// transfer broke off.
    public func next() throws -> Data? {
        condition.lock()
        while head == pieces.count && !finished { condition.wait() }
        guard head < pieces.count else {
            let failure = self.failure
            condition.unlock()
            if let failure { throw failure }
            return nil
        }
        let piece = pieces[head]
        // The slot lets go of it now (taken pieces wait for the compaction below).
        pieces[head] = Data()
        head += 1
        if head == pieces.count || head > 64 {
            pieces.removeFirst(head)
            head = 0
        }
        buffered -= piece.count
        var paused: (() -> Void)?
        if buffered <= pauseAbove / 2 {
            paused = resume
            resume = nil
        }
        condition.unlock()
        paused?()
        return piece
    }

    /// Stops the transfer (the caller does not want the rest) and drops what was not taken.
    public func cancel() {
        condition.lock()
        let stop = finished ? nil : cancelTransfer
        pieces = []
        head = 0
        buffered = 0
        let paused = resume
        resume = nil
        condition.unlock()
        paused?()
        stop?()
    }
}
