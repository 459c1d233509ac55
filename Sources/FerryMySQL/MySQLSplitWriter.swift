import FerryCore
import Foundation

/// Loads a table created in the caller's transaction through more than one connection: the
/// batches go, `MySQLWriter.loadBytes` at a time, in turn to writers on this connection and on
/// `load-connections - 1` more, each running its own LOAD DATA. One LOAD DATA keeps one server
/// thread busy and the server's other core idle: 5,000,000 rows of (bigint key, int) loaded by
/// the mariadb client from a file took 7.3–7.4 s in one LOAD DATA and 4.9–5.0 s in two at once
/// fed alternate slices of 200,000 rows (MariaDB 10.11, 2 cores), the same table after.
///
/// Only a table this transaction created: MySQL's CREATE TABLE has committed it already, and
/// whoever created it drops it when the load fails (the copy does), so that the other
/// connections' rows, committed by `finish` (before the caller's next DDL, which would wait for
/// their locks), are never left in a table that existed before. A second connection is opened
/// only once the first slice is full (small tables use one); one that cannot be opened leaves
/// the load to the connections it has.
final class MySQLSplitWriter: BatchWriter {
    private let open: () throws -> MySQLConnection
    private let make: (MySQLConnection) throws -> MySQLWriter
    private let limit: Int
    private var writers: [MySQLWriter]
    private var helpers: [MySQLConnection] = []
    private var opening = true
    /// The writer given the batches now, and the bytes given to it since it was chosen.
    private var current = 0
    private var sliceBytes = 0
    /// Per writer, the first row of each batch it was given: its own count and the split's.
    private var starts: [[(own: Int, all: Int)]]
    private var ownGiven: [Int]
    private var given = 0
    private var ended = false

    init(main: MySQLConnection, connections: Int, open: @escaping () throws -> MySQLConnection, make: @escaping (MySQLConnection) throws -> MySQLWriter) throws {
        self.open = open
        self.make = make
        limit = max(1, connections)
        writers = [try make(main)]
        starts = [[]]
        ownGiven = [0]
    }

    var rowsStored: Int64? {
        var sum: Int64 = 0
        for w in writers {
            guard let n = w.rowsStored else { return nil }
            sum += n
        }
        return sum
    }

    func write(_ batch: RowBatch) throws {
        if sliceBytes >= MySQLWriter.loadBytes {
            sliceBytes = 0
            current = (current + 1) % limit
            if current >= writers.count { addWriter() }
            if current >= writers.count { current = 0 }
        }
        starts[current].append((ownGiven[current], given))
        do { try writers[current].write(batch) } catch { throw placed(error, writer: current) }
        ownGiven[current] += batch.count
        given += batch.count
        sliceBytes += batch.byteSize
    }

    /// One more writer on a new connection, in a transaction of its own; none once opening failed.
    private func addWriter() {
        guard opening else { return }
        do {
            let c = try open()
            do {
                try c.begin()
                writers.append(try make(c))
                helpers.append(c)
                starts.append([])
                ownGiven.append(0)
            } catch {
                c.close()
                throw error
            }
        } catch {
            opening = false
        }
    }

    /// Ends every writer's loads, then commits the other connections' rows.
    func finish() throws {
        for i in writers.indices {
            do { try writers[i].finish() } catch { throw placed(error, writer: i) }
        }
        for c in helpers { try c.commit() }
        close(rollingBack: false)
    }

    func abort() {
        guard !ended else { return }
        for w in writers { w.abort() }
        close(rollingBack: true)
    }

    private func close(rollingBack: Bool) {
        ended = true
        for c in helpers {
            if rollingBack { try? c.rollback() }
            c.close()
        }
        helpers = []
    }

    /// A row error of writer `i`, placed among all the rows this split writer was given.
    private func placed(_ error: any Error, writer i: Int) -> any Error {
        guard var e = error as? BatchRowError, let own = e.rowsBefore else { return error }
        if let start = starts[i].last(where: { $0.own <= own }) { e.rowsBefore = start.all + (own - start.own) }
        return e
    }
}
