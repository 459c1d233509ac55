import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The system's close and write, by names the class's own methods do not hide.
private func systemClose(_ fd: Int32) -> Int32 { close(fd) }
private func systemWrite(_ fd: Int32, _ p: UnsafeRawPointer, _ n: Int) -> Int { write(fd, p, n) }

/// A file in the temporary folder (`TMPDIR`, else /tmp), unlinked as soon as it is made: only
/// its descriptor names it, so a crash leaves nothing behind and closing it frees the disk.
/// What Ferry keeps on disk instead of in memory (row hashes of a comparison, rows read before a
/// transaction writes them, a request's body) lives in one.
public final class TemporaryFile: @unchecked Sendable {  // unchecked: used by one thread at a time
    public private(set) var descriptor: Int32
    /// The folder it was made in (for messages).
    public let folder: String

    /// A new empty file named `prefix` and random letters; nil when none can be made (`errno`
    /// says why).
    public init?(prefix: String) {
        let dir = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array((dir.hasSuffix("/") ? dir : dir + "/").utf8CString.dropLast()) + Array((prefix + "-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { p in p.baseAddress.map { mkstemp($0) } ?? -1 }
        guard fd >= 0 else { return nil }
        template.withUnsafeBufferPointer { p in if let path = p.baseAddress { _ = unlink(path) } }
        descriptor = fd
        folder = dir
    }

    deinit { close() }

    /// Closes the file (freeing its disk); it reads and writes nothing after.
    public func close() {
        if descriptor >= 0 { _ = systemClose(descriptor) }
        descriptor = -1
    }

    /// Writes all of `bytes` at the end; nil when done, else why not (`strerror`).
    public func write(_ bytes: UnsafeRawBufferPointer) -> String? {
        guard descriptor >= 0 else { return "the file is closed" }
        guard let base = bytes.baseAddress else { return nil }
        var offset = 0
        while offset < bytes.count {
            let n = systemWrite(descriptor, base + offset, bytes.count - offset)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return n < 0 ? String(cString: strerror(errno)) : "nothing was written" }
            offset += n
        }
        return nil
    }

    /// Reads up to `count` bytes at `offset` into `into`; the bytes read (0 at the end), or nil
    /// when the file cannot be read.
    public func read(at offset: Int, count: Int, into: UnsafeMutableRawPointer) -> Int? {
        guard descriptor >= 0 else { return nil }
        while true {
            let n = pread(descriptor, into, count, off_t(offset))
            if n < 0 && errno == EINTR { continue }
            return n < 0 ? nil : n
        }
    }
}
