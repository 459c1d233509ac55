import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The bytes of one file, from `start` to `end`, as the `InputStream` CSV.swift reads, framed
/// into records on the way (`CSVFramer`) so that the reader learns where each row ends.
///
/// Why not `InputStream(fileAtPath:)`: its `hasBytesAvailable` stays true at the end of a
/// file, so CSV.swift reports every normal end as a read error; and it cannot start in the
/// middle of a file. This stream knows the file's size (files are replaced, never changed in
/// place, so the size at open stays right) and reads with `pread`.
///
/// CSV.swift takes a byte order mark off the start of its stream. The stream therefore begins
/// with one of its own, so a value that starts with U+FEFF at a resumed offset keeps it (a
/// file's own mark, at offset 0, reaches the header, where the catalog takes it off).
final class CSVFileInput: InputStream {
    private let fd: Int32
    private let path: String
    private var offset: Int64
    private let end: Int64
    private var prefix: [UInt8] = [0xEF, 0xBB, 0xBF]
    private var framer = CSVFramer()
    private var framedToEnd = false
    /// Ends of the records framed and not taken yet, oldest first (from `head`).
    private var ends: [(end: Int64, blank: Bool)] = []
    private var head = 0
    private var failure: (any Error)?

    /// Reads `fd` (owned by the caller) from `start` up to `end`.
    init(fd: Int32, path: String, start: Int64, end: Int64) {
        self.fd = fd
        self.path = path
        self.offset = start
        self.end = end
        super.init(data: Data())
    }

    override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength len: Int) -> Int {
        var n = 0
        if !prefix.isEmpty {
            let k = min(prefix.count, len)
            for i in 0..<k { buffer[i] = prefix[i] }
            prefix.removeFirst(k)
            n = k
        }
        let want = Int(min(Int64(len - n), end - offset))
        if want > 0 {
            var got = 0
            while true {
                got = pread(fd, buffer + n, want, off_t(offset))
                if got < 0 && errno == EINTR { continue }
                break
            }
            if got < 0 {
                failure = CSVFileError("cannot read \(path): \(CSVFileSystem.lastError())")
                return -1
            }
            if got == 0 {
                // The file is shorter than it was: read what there is.
                framer.finish(at: offset) { ends.append(($0, $1)) }
                framedToEnd = true
                return n
            }
            let base = offset
            framer.feed(UnsafeRawBufferPointer(start: buffer + n, count: got), base: base) { ends.append(($0, $1)) }
            offset += Int64(got)
            n += got
        }
        if offset >= end && !framedToEnd {
            framer.finish(at: offset) { ends.append(($0, $1)) }
            framedToEnd = true
        }
        return n
    }

    override var hasBytesAvailable: Bool { !prefix.isEmpty || (offset < end && !framedToEnd) }
    override func open() {}
    override func close() {}
    override var streamStatus: Stream.Status { .open }
    override var streamError: (any Error)? { failure }

    /// The end of the next record CSV.swift has returned (records are taken in order, one per
    /// row it returns), and whether it was a blank line.
    func takeRecord() -> (end: Int64, blank: Bool)? {
        guard head < ends.count else { return nil }
        let r = ends[head]
        head += 1
        if head >= 4096 && head * 2 >= ends.count {
            ends.removeFirst(head)
            head = 0
        }
        return r
    }
}
