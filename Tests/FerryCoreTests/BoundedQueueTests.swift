import Foundation
import XCTest

@testable import FerryCore

/// The queue between a copy's reader and writer counts the batch being written: with batches
/// larger than its byte budget the reader waits for the writer to finish one before it reads
/// the next, so no more than two such batches are in memory.
final class BoundedQueueTests: XCTestCase {
    func testTheTakenItemCountsUntilReleased() throws {
        let queue = BoundedQueue<Int>(capacity: 4, maxCost: 10) { $0 }
        XCTAssertTrue(queue.put(20))
        XCTAssertEqual(try queue.take(), 20)
        let roomMade = DispatchSemaphore(value: 0)
        let producer = Thread {
            _ = queue.waitForRoom()
            roomMade.signal()
        }
        producer.start()
        XCTAssertEqual(roomMade.wait(timeout: .now() + 0.5), .timedOut, "the producer found room while a batch over the budget was being written")
        queue.release()
        XCTAssertEqual(roomMade.wait(timeout: .now() + 10), .success, "releasing the batch did not make room")
    }

    func testSmallItemsStillOverlap() throws {
        // Two items within the budget: one written while the next is read and queued.
        let queue = BoundedQueue<Int>(capacity: 4, maxCost: 10) { $0 }
        XCTAssertTrue(queue.put(4))
        XCTAssertEqual(try queue.take(), 4)
        XCTAssertTrue(queue.waitForRoom())
        XCTAssertTrue(queue.put(4))
        queue.finish()
        queue.release()
        XCTAssertEqual(try queue.take(), 4)
        XCTAssertNil(try queue.take())
    }
}
