import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn` and waited for with `waitpid`. Foundation's
/// `Process.waitUntilExit` on Linux polls its run loop every 50 ms, which made each `sqlite3`
/// edit of the model test cost 50 ms of nothing; this waits exactly as long as the child runs.
struct Subprocess {
    let pid: pid_t
    /// The child's standard error (when asked for), read to the end by `wait`.
    private let errorFD: Int32?
    /// The child's standard output (when asked for), read to the end by `wait`.
    private let outputFD: Int32?

    /// Starts `path` with `arguments`; standard input and output are /dev/null, standard error
    /// is kept for `wait` (`captureErrors`) or /dev/null.
    /// `inheritErrors`: standard error goes where the caller's goes (with `captureErrors` false).
    init(_ path: String, _ arguments: [String], captureErrors: Bool = true, captureOutput: Bool = false, inheritErrors: Bool = false) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        var writeEnds: [Int32] = []
        // `fd` of the child into a new pipe: its read end, or nil (then /dev/null, or inherited).
        func pipeFrom(_ fd: Int32, capture: Bool, inherit: Bool = false) throws -> Int32? {
            guard capture else {
                if !inherit { posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", O_WRONLY, 0) }
                return nil
            }
            var ends: [Int32] = [-1, -1]
            guard pipe(&ends) == 0 else { throw ModelFailure(description: "pipe: \(String(cString: strerror(errno)))") }
            posix_spawn_file_actions_adddup2(&actions, ends[1], fd)
            posix_spawn_file_actions_addclose(&actions, ends[0])
            posix_spawn_file_actions_addclose(&actions, ends[1])
            writeEnds.append(ends[1])
            return ends[0]
        }
        let output = try pipeFrom(1, capture: captureOutput)
        let errors = try pipeFrom(2, capture: captureErrors, inherit: inheritErrors)
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        defer { for a in argv { free(a) } }
        var child: pid_t = 0
        let rc = posix_spawn(&child, path, &actions, nil, argv, environ)
        // The parent keeps only the read ends.
        for fd in writeEnds { close(fd) }
        guard rc == 0 else {
            for fd in [output, errors].compactMap({ $0 }) { close(fd) }
            throw ModelFailure(description: "could not start \(path): \(String(cString: strerror(rc)))")
        }
        pid = child
        errorFD = errors
        outputFD = output
    }

    /// Reads `fd` to its end and closes it.
    private static func drain(_ fd: Int32) -> [UInt8] {
        var bytes = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n > 0 { bytes += buffer[0..<n] } else if n < 0 && errno == EINTR { continue } else { break }
        }
        close(fd)
        return bytes
    }

    /// Waits for the child; its exit status (or 128 + signal) and what it wrote to standard error.
    /// (With both captured, standard output is read first: keep standard error short.)
    @discardableResult
    func wait() -> (status: Int32, errors: String, output: String) {
        let output = outputFD.map(Self.drain) ?? []
        let errors = errorFD.map(Self.drain) ?? []
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        // WIFEXITED / WEXITSTATUS / WTERMSIG, spelled out (macros Swift does not import).
        let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return (code, String(decoding: errors, as: UTF8.self), String(decoding: output, as: UTF8.self))
    }

    /// True when the child exited by itself (not by a signal).
    static func exitedNormally(_ status: Int32) -> Bool { status < 128 }
}
