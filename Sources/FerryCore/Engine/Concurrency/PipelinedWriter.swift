import Foundation

/// Writes batches on a thread of its own, so that whoever produces them (a decoder of a request
/// body) goes on with the next while the last is being written. At most one batch waits between
/// the two, so memory holds three: the one being made, the one waiting and the one being written.
///
/// A row refused by the writer surfaces on a later `write` or on `finish`, as a `BatchRowError`
/// whose `rowsBefore` places it among all the rows given to this writer. Not for a writer whose
/// connection is used by anything else until `finish` or `abort` returned.
public final class PipelinedWriter: BatchWriter {
    private let inner: any BatchWriter
    private let queue: BoundedQueue<Item>
    private let worker: Worker
    /// What the writing thread failed with.
    private let failure: Locked<(any Error)?>
    private var rowsGiven = 0
    private var ended = false

    /// A batch and the rows given before it.
    private struct Item: Sendable {
        var batch: RowBatch
        var rowsBefore: Int
    }

    public init(_ inner: any BatchWriter) {
        self.inner = inner
        let queue = BoundedQueue<Item>(capacity: 1)
        let failure = Locked<(any Error)?>(nil)
        let writer = Handoff(inner)
        self.queue = queue
        self.failure = failure
        worker = Worker(name: "ferry-writer") {
            // Rows before the last batch written: a writer may report a row of that one.
            var previous = 0
            do {
                while let item = try queue.take() {
                    do {
                        try writer.value.write(item.batch)
                    } catch var e as BatchRowError {
                        if e.rowsBefore == nil { e.rowsBefore = e.batch == nil ? item.rowsBefore : previous }
                        throw e
                    }
                    queue.release()
                    previous = item.rowsBefore
                }
            } catch {
                failure.withLock { $0 = error }
                queue.cancel()
            }
        }
    }

    /// Hands `batch` to the writing thread, waiting while one batch already waits; throws what
    /// the writing thread failed with, if it did.
    public func write(_ batch: RowBatch) throws {
        try rethrow()
        guard !batch.isEmpty else { return }
        let item = Item(batch: batch, rowsBefore: rowsGiven)
        rowsGiven += batch.count
        if !queue.put(item) {
            try rethrow()
            throw FerryError.cancelled
        }
    }

    /// Waits for every batch to be written, then finishes the writer.
    public func finish() throws {
        guard !ended else { return }
        ended = true
        queue.finish()
        worker.join()
        try rethrow()
        try inner.finish()
    }

    /// Drops what waits, lets the batch being written end, and aborts the writer.
    public func abort() {
        if !ended {
            ended = true
            queue.cancel()
            queue.finish()
            worker.join()
        }
        inner.abort()
    }

    deinit {
        // Never finished nor aborted: the writing thread is let go.
        if !ended {
            queue.cancel()
            queue.finish()
        }
    }

    public var rowsStored: Int64? { inner.rowsStored }

    private func rethrow() throws {
        if let e = failure.withLock({ $0 }) { throw e }
    }
}
