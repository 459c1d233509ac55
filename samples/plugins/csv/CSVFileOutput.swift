import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The `OutputStream` CSV.swift's writer writes into: a buffer flushed to a file descriptor.
///
/// CSV.swift writes one byte per call; `OutputStream(toFileAtPath:)` would make each a system
/// call. The stream also counts the bytes, so the sink knows the offset of every record.
final class CSVFileOutput: OutputStream {
    private let fd: Int32
    private let path: String
    private var pending: [UInt8] = []
    private var failure: (any Error)?
    /// Bytes written through the stream (flushed or not), from `start`.
    private(set) var position: Int64

    private static let flushBytes = 256 * 1024

    /// Writes to `fd` (owned by the caller), whose offset is at `start`.
    init(fd: Int32, path: String, start: Int64) {
        self.fd = fd
        self.path = path
        self.position = start
        pending.reserveCapacity(Self.flushBytes + 4096)
        super.init(toMemory: ())
    }

    /// Required by `OutputStream`; the driver never makes one this way (writes would fail).
    required init(toMemory: ()) {
        fd = -1
        path = "(memory)"
        position = 0
        super.init(toMemory: ())
    }

    override func write(_ buffer: UnsafePointer<UInt8>, maxLength len: Int) -> Int {
        guard failure == nil else { return -1 }
        if len == 1 {
            pending.append(buffer.pointee)
        } else {
            pending.append(contentsOf: UnsafeBufferPointer(start: buffer, count: len))
        }
        position += Int64(len)
        if pending.count >= Self.flushBytes {
            do { try flush() } catch { return -1 }
        }
        return len
    }

    /// Counts bytes put into the file directly (a copy made before anything was written here).
    func skip(to position: Int64) {
        self.position = position
    }

    /// Appends bytes the driver writes itself (line ends).
    func append(_ bytes: [UInt8]) throws {
        _ = bytes.withUnsafeBufferPointer { p in p.baseAddress.map { write($0, maxLength: p.count) } }
        if let failure { throw failure }
    }

    /// Writes what is buffered to the file.
    func flush() throws {
        if let failure { throw failure }
        guard !pending.isEmpty else { return }
        do {
            try pending.withUnsafeBytes { try CSVFileSystem.writeAll(fd, $0, path: path) }
        } catch {
            failure = error
            throw error
        }
        pending.removeAll(keepingCapacity: true)
    }

    override var hasSpaceAvailable: Bool { failure == nil }
    override func open() {}
    override func close() {}
    override var streamStatus: Stream.Status { failure == nil ? .open : .error }
    override var streamError: (any Error)? { failure }
}
