import Foundation

/// Lines a long piece of work says while it goes on besides its progress — a request asked
/// again (`--retries`) — to stderr unless an embedding application takes them (`setSink`).
public enum Notices {
    private static let sink = Locked<@Sendable (String) -> Void>({ line in
        FileHandle.standardError.write(Data(("ferry: " + line + "\n").utf8))
    })

    /// Says `line` (one line, no trailing newline).
    public static func say(_ line: String) {
        let write = sink.withLock { $0 }
        write(line)
    }

    /// Sends every line to `write` from now on.
    public static func setSink(_ write: @escaping @Sendable (String) -> Void) {
        sink.withLock { $0 = write }
    }
}
