import CLibPQ
import FerryCore
import Foundation

extension PostgresConnection {
    /// Whether a mirror lists every row's key and row hash of this server (computed in its SQL,
    /// sent by a binary COPY, summed into buckets by Ferry) rather than asking it for the
    /// digests: `?digests=read`, the default for a server on this machine (loopback or a Unix
    /// socket), where the 16 bytes a row cost no network; `?digests=sql`, the default for
    /// another host, where the digests' few bytes a bucket are what a mirror exists to send.
    /// Listing once lets the comparison take the keyed listing inside the differing buckets from
    /// what it kept (`KeyedHashSpill`) instead of scanning the table again: 1,000,000
    /// bench_orders rows with 1% changed, that scan took ~0.4 s of a 2.5 s mirror.
    public static func digestsByListing(_ endpoint: Endpoint) throws -> Bool {
        // No host, or a path (a Unix socket's folder), is this machine.
        let host = endpoint.parameter("host") ?? endpoint.host ?? ""
        return try endpoint.digestsBesideFerry(onThisMachine: host.isEmpty || host.hasPrefix("/") || Endpoint.isLoopback(host), engine: "PostgreSQL")
    }

    /// Ends an unfinished COPY out (its reader stopped early): asks the server to stop sending,
    /// then drains what is in flight so the connection is usable again.
    func abandonCopyOut() {
        // A stalled connection is not used again: nothing to stop or drain (a cancel request
        // would go the same stalled way, and libpq's waits for it without a limit).
        guard !stalled else { return }
        if let cancel = PQgetCancel(conn) {
            var message = [CChar](repeating: 0, count: 256)
            _ = PQcancel(cancel, &message, Int32(message.count))
            PQfreeCancel(cancel)
        }
        // (After a stall nothing more is read: the connection is not used again.)
        var buf: UnsafeMutablePointer<CChar>?
        while !stalled, (try? nextCopyData(&buf)) ?? -2 > 0 { PQfreemem(buf) }
        drainResults()
    }

    /// `PQgetCopyData`: the length of the next row of a COPY out (its bytes in `buf`), -1 at its
    /// end, -2 on a failure; with `waitLimit`, waited for within it.
    func nextCopyData(_ buf: inout UnsafeMutablePointer<CChar>?) throws -> Int32 {
        guard waitLimit != nil else { return PQgetCopyData(conn, &buf, 0) }
        try usable()
        while true {
            let len = PQgetCopyData(conn, &buf, 1)
            if len != 0 { return len }
            try awaitInput()
        }
    }

    /// Runs `sql`, whose rows are two non-NULL bigints, as a binary COPY and hands each row's
    /// pair to `body`: no text to parse and no result per row (single-row results of 1,000,000
    /// rows took about a second of Ferry's CPU). The COPY is read to its end marker and its row
    /// count checked; a failure stops the server's sending and leaves the connection usable.
    func forEachInt64Pair(_ sql: String, table: TableName, _ body: (Int64, Int64) throws -> Void) throws {
        let copy = "COPY (\(sql)) TO STDOUT (FORMAT binary)"
        let res = try exec(copy)
        guard res.status == PGRES_COPY_OUT else { throw error(res.handle, sql: copy) }
        func malformed() -> FerryError {
            .copyFailed(table: table, endpoint: endpoint.redacted, reason: "malformed binary COPY data from the server")
        }
        var open = true
        defer { if open { abandonCopyOut() } }
        var headerSeen = false, trailerSeen = false
        var rows = 0
        while true {
            var buf: UnsafeMutablePointer<CChar>?
            let len = try nextCopyData(&buf)
            if len == -1 { break }
            guard len > 0, let buf else {
                open = false
                throw error(nil, sql: nil)
            }
            defer { PQfreemem(buf) }
            let p = UnsafeRawPointer(buf), n = Int(len)
            var o = 0
            if !headerSeen {
                guard let header = PostgresValueCodec.headerLength(p, n) else { throw malformed() }
                o = header
                headerSeen = true
            }
            while o + 2 <= n {
                let fields = PostgresValueCodec.int16(p + o)
                o += 2
                if fields == -1 {
                    trailerSeen = true
                    break
                }
                // Two fields of 8 bytes each, never NULL.
                guard fields == 2, o + 24 <= n, PostgresValueCodec.int32(p + o) == 8, PostgresValueCodec.int32(p + o + 12) == 8 else { throw malformed() }
                try body(PostgresValueCodec.int64(p + o + 4), PostgresValueCodec.int64(p + o + 16))
                o += 24
                rows += 1
            }
        }
        open = false
        var reported: Int?
        while let r = try awaitResult() {
            if r.status != PGRES_COMMAND_OK { throw error(r.handle, sql: nil) }
            if let count = r.commandRows { reported = count }
        }
        guard trailerSeen else { throw malformed() }
        if let reported, reported != rows {
            throw FerryError.copyFailed(
                table: table, endpoint: endpoint.redacted, reason: "the server reports \(reported) row hashes sent (COPY \(reported)) but \(rows) were read")
        }
    }
}
