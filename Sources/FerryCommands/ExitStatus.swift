import Foundation
import ArgumentParser

/// The exit codes of every `ferry` command, one meaning each (documented in the README and in
/// `ferry --help`). Sync and reject files reuse `differences` for "finished, with conflicts or
/// rejected rows" rather than adding a code per command.
public enum ExitStatus: Int32, CaseIterable, Sendable {
    /// Everything asked for was done.
    case ok = 0
    /// Something failed (a table, a connection, bad data); nothing is reported as done that was not.
    case failed = 1
    /// The command line was wrong (an unknown option, a bad URL, a missing argument).
    case usage = 2
    /// The command finished, and found differences (verify), conflicts or rejected rows.
    case differences = 3

    /// One line per code, for help texts.
    public static let table = """
        Exit codes: 0 ok; 1 failed; 2 usage error; 3 finished with differences
        (verify), conflicts or rejected rows.
        """

    var exitCode: ExitCode { ExitCode(rawValue) }
}

/// SIGINT and SIGTERM taken from their default action (ending the process) and handed to
/// `stop`, until `cancel`: how a command stops in an orderly way (a follower between
/// transactions, a snapshot holder).
final class StopSignals {
    private let sources: [any DispatchSourceSignal]

    init(_ stop: @escaping @Sendable () -> Void) {
        sources = [SIGINT, SIGTERM].map { sig in
            signal(sig, SIG_IGN)
            let s = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            s.setEventHandler(handler: stop)
            s.resume()
            return s
        }
    }

    func cancel() { for s in sources { s.cancel() } }
}
