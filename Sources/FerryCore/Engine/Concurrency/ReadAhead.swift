import Foundation

/// A reader that reads its next batches on a thread of its own while the caller works on the
/// one it took. For a digest computed beside Ferry from a server's rows: on one thread the
/// server waited while Ferry hashed each batch (a MariaDB → SQLite mirror read MariaDB's
/// 1,000,000 bench_orders rows in about 3 s this way, its whole copy in 2.3 s). At most `depth`
/// batches wait. The inner reader is used by that thread alone, and closed by `close` once the
/// thread has ended.
final class ReadAhead: BatchReader {
    private let queue: BoundedQueue<RowBatch>
    private let inner: Handoff<any BatchReader>
    private var worker: Worker?

    init(_ reader: any BatchReader, depth: Int = 2, name: String) {
        let queue = BoundedQueue<RowBatch>(capacity: depth)
        let inner = Handoff(reader)
        self.queue = queue
        self.inner = inner
        worker = Worker(name: name) {
            do {
                while queue.waitForRoom(), let batch = try inner.value.next() {
                    if !queue.put(batch) { break }
                }
                queue.finish()
            } catch {
                queue.finish(error: error)
            }
        }
    }

    func next() throws -> RowBatch? {
        queue.release()
        return try queue.take()
    }

    func close() {
        guard let worker else { return }
        queue.cancel()
        worker.join()
        self.worker = nil
        inner.value.close()
    }

    deinit { close() }
}
