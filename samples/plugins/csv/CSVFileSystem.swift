import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The few POSIX calls the driver makes on its folder. Files are never changed in place: a
/// new state is written to a temporary file and renamed over the old one, so an open file (a
/// reader, a snapshot's hard link) keeps the state it was opened with.
enum CSVFileSystem {
    /// What tells two states of a file apart: a rename keeps all of it, a rewrite changes it.
    /// Cached facts (row counts, last keys, resume points) are keyed by it.
    struct Identity: Hashable, Sendable {
        var device: UInt64
        var inode: UInt64
        var size: Int64
        var modifiedSeconds: Int64
        var modifiedNanoseconds: Int64
    }

    static func identity(path: String) -> Identity? {
        var st = stat()
        guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        return identity(st)
    }

    static func identity(fd: Int32) -> Identity? {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        return identity(st)
    }

    private static func identity(_ st: stat) -> Identity {
        #if os(Linux)
        let seconds = Int64(st.st_mtim.tv_sec)
        let nanos = Int64(st.st_mtim.tv_nsec)
        #else
        let seconds = Int64(st.st_mtimespec.tv_sec)
        let nanos = Int64(st.st_mtimespec.tv_nsec)
        #endif
        return Identity(
            device: UInt64(truncatingIfNeeded: st.st_dev), inode: UInt64(truncatingIfNeeded: st.st_ino), size: Int64(st.st_size),
            modifiedSeconds: seconds, modifiedNanoseconds: nanos)
    }

    static func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    static func exists(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0
    }

    static func device(of path: String) -> UInt64? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return UInt64(truncatingIfNeeded: st.st_dev)
    }

    /// Eight random hex digits for temporary names, so that writers never collide.
    static func randomSuffix() -> String {
        var generator = SystemRandomNumberGenerator()
        return String(format: "%08x", UInt32.random(in: 0...UInt32.max, using: &generator))
    }

    /// The message of the current `errno`.
    static func lastError() -> String { String(cString: strerror(errno)) }

    static func closeFile(_ fd: Int32) {
        _ = close(fd)
    }

    static func openForReading(_ path: String) throws -> Int32 {
        while true {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            if fd >= 0 { return fd }
            if errno == EINTR { continue }
            throw CSVFileError("cannot open \(path): \(lastError())")
        }
    }

    /// Creates `path`, which must not exist, for writing.
    static func createExclusive(_ path: String) throws -> Int32 {
        while true {
            let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o666)
            if fd >= 0 { return fd }
            if errno == EINTR { continue }
            throw CSVFileError("cannot create \(path): \(lastError())")
        }
    }

    /// Writes all of `bytes` to `fd`.
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws {
        var done = 0
        while done < bytes.count {
            guard let base = bytes.baseAddress else { return }
            let n = write(fd, base + done, bytes.count - done)
            if n < 0 {
                if errno == EINTR { continue }
                throw CSVFileError("cannot write \(path): \(lastError())")
            }
            done += n
        }
    }

    /// Copies the whole file `source` to the start of the empty file `fd`: a reflink where the
    /// file system shares blocks (btrfs, XFS), else a copy inside the kernel, else read/write.
    /// Returns the number of bytes copied and leaves `fd`'s offset at the end.
    @discardableResult
    static func copyFile(_ source: String, to fd: Int32, path: String) throws -> Int64 {
        let src = try openForReading(source)
        defer { close(src) }
        var st = stat()
        guard fstat(src, &st) == 0 else { throw CSVFileError("cannot read \(source): \(lastError())") }
        let size = Int64(st.st_size)
        #if os(Linux)
        // FICLONE: the copy shares the original's blocks until either is written.
        if size > 0, ioctl(fd, 0x4004_9409, src) == 0 {
            guard lseek(fd, off_t(size), SEEK_SET) >= 0 else { throw CSVFileError("cannot write \(path): \(lastError())") }
            return size
        }
        var copied: Int64 = 0
        var kernelCopyWorks = true
        while copied < size && kernelCopyWorks {
            let n = sendfile(fd, src, nil, Int(min(size - copied, 1 << 30)))
            if n > 0 {
                copied += Int64(n)
            } else if n < 0 && errno == EINTR {
                continue
            } else if copied == 0 && n < 0 && (errno == EINVAL || errno == ENOSYS) {
                kernelCopyWorks = false
            } else if n == 0 {
                break
            } else {
                throw CSVFileError("cannot copy \(source) to \(path): \(lastError())")
            }
        }
        if kernelCopyWorks { return copied }
        #endif
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var total: Int64 = 0
        while true {
            let n = buffer.withUnsafeMutableBytes { read(src, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw CSVFileError("cannot read \(source): \(lastError())")
            }
            if n == 0 { break }
            try buffer.withUnsafeBytes { try writeAll(fd, UnsafeRawBufferPointer(rebasing: $0[0..<n]), path: path) }
            total += Int64(n)
        }
        return total
    }

    /// The last byte of a file, nil when it is empty or unreadable.
    static func lastByte(_ path: String) -> UInt8? {
        guard let fd = try? openForReading(path) else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_size > 0 else { return nil }
        var byte: UInt8 = 0
        guard pread(fd, &byte, 1, off_t(st.st_size - 1)) == 1 else { return nil }
        return byte
    }

    /// A hard link `to` of `from`; false when the file system refuses one.
    static func link(_ from: String, _ to: String) -> Bool {
        systemLink(from, to) == 0
    }

    static func rename(_ from: String, _ to: String) throws {
        guard systemRename(from, to) == 0 else { throw CSVFileError("cannot rename \(from) to \(to): \(lastError())") }
    }

    /// Removes a file; one that is not there is not an error.
    static func remove(_ path: String) {
        _ = unlink(path)
    }

    static func sync(_ fd: Int32, path: String) throws {
        guard fsync(fd) == 0 else { throw CSVFileError("cannot flush \(path) to disk: \(lastError())") }
    }

    /// Flushes a folder's entries (the renames into it) to disk; best effort.
    static func syncDirectory(_ path: String) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = fsync(fd)
        close(fd)
    }

    /// A new private folder `prefix` + six random characters inside `parent`.
    static func makeTemporaryDirectory(in parent: String, prefix: String) throws -> String {
        var template = ((parent.hasSuffix("/") ? parent : parent + "/") + prefix + "XXXXXX").utf8CString
        guard let made = template.withUnsafeMutableBufferPointer({ $0.baseAddress.flatMap { mkdtemp($0) } }) else {
            throw CSVFileError("cannot create a folder in \(parent): \(lastError())")
        }
        return String(cString: made)
    }

    static func removeDirectory(_ path: String) {
        _ = rmdir(path)
    }

    /// Creates `path` and its missing parents.
    static func makeDirectories(_ path: String) throws {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        } catch {
            throw CSVFileError("cannot create the folder \(path): \(error.localizedDescription)")
        }
    }

    /// Names of the entries of a folder.
    static func entries(_ path: String) throws -> [String] {
        guard let dir = opendir(path) else { throw CSVFileError("cannot list \(path): \(lastError())") }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}

// The system's calls under their own names: `CSVFileSystem.link` and `.rename` shadow them.
#if canImport(Glibc)
private let systemLink = Glibc.link
private let systemRename = Glibc.rename
#else
private let systemLink = Darwin.link
private let systemRename = Darwin.rename
#endif

/// A file the driver could not read or write, with the path and the system's reason.
struct CSVFileError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
