import FerryCore
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A request body kept in a temporary file instead of memory, then mapped to be read where it
/// lies: a document the service reads more than once (a push is checked, then written) without
/// holding it. The file is unlinked as soon as it is made (a crash leaves nothing). The pages a
/// decoder has gone through are given back (`release`), so the mapping's share of the service's
/// memory is the part being read, not the document.
final class SpooledBody: @unchecked Sendable {  // unchecked: one request's, used by one thread at a time
    private let file: TemporaryFile
    /// Bytes written.
    private(set) var count = 0
    private var mapped: UnsafeMutableRawPointer?
    private static let page = max(Int(sysconf(Int32(_SC_PAGESIZE))), 4096)

    init() throws {
        guard let file = TemporaryFile(prefix: "ferry-body") else { throw Self.noRoom("no temporary file: \(String(cString: strerror(errno)))") }
        self.file = file
    }

    deinit {
        if let mapped { munmap(mapped, count) }
    }

    static func noRoom(_ detail: String) -> ServiceError {
        ServiceError(
            status: 507, code: "full",
            message: "the service has no room to keep the request's body in its temporary folder; nothing was changed; free space there (TMPDIR) and try again",
            detail: detail)
    }

    /// Adds the next piece of the body.
    func append(_ piece: [UInt8]) throws {
        guard mapped == nil else { throw ServiceError.internalFailure("a spooled body was written after it was read", table: nil) }
        if let why = piece.withUnsafeBytes({ file.write($0) }) { throw Self.noRoom(why) }
        count += piece.count
    }

    /// Hands the whole body to `body` as bytes (mapped from the file; empty when it is).
    func withBytes<T>(_ body: (UnsafeRawBufferPointer) throws -> T) throws -> T {
        guard count > 0 else { return try body(UnsafeRawBufferPointer(start: nil, count: 0)) }
        if mapped == nil {
            let p = mmap(nil, count, PROT_READ, MAP_PRIVATE, file.descriptor, 0)
            guard let p, p != UnsafeMutableRawPointer(bitPattern: -1) else {
                throw ServiceError.internalFailure("the request's body could not be mapped: \(String(cString: strerror(errno)))", table: nil)
            }
            mapped = p
        }
        return try body(UnsafeRawBufferPointer(start: mapped, count: count))
    }

    /// Gives back the pages wholly inside `range` of the body (read again from the file if they
    /// are needed again).
    func release(_ range: Range<Int>) {
        guard let mapped else { return }
        let first = (range.lowerBound + Self.page - 1) / Self.page * Self.page
        let end = min(range.upperBound, count) / Self.page * Self.page
        guard end > first else { return }
        _ = madvise(mapped + first, end - first, MADV_DONTNEED)
    }
}
