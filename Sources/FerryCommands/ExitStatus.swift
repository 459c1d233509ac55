import ArgumentParser
import FerryCore
import Foundation

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
        (verify), conflicts or rejected rows; 130/143 stopped by SIGINT/SIGTERM
        (a copy rolls back first). docs/errors.md lists every error line.
        """

    var exitCode: ExitCode { ExitCode(rawValue) }
}

/// SIGINT and SIGTERM taken from their default action (ending the process) and handed to
/// `stop`, until `cancel`: how a command stops in an orderly way (a follower between
/// transactions, a snapshot holder).
final class StopSignals {
    private let sources: [any DispatchSourceSignal]

    convenience init(_ stop: @escaping @Sendable () -> Void) {
        self.init { (_: Int32) in stop() }
    }

    /// `stop` learns which signal came.
    init(_ stop: @escaping @Sendable (Int32) -> Void) {
        sources = [SIGINT, SIGTERM].map { sig in
            signal(sig, SIG_IGN)
            let s = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            s.setEventHandler { stop(sig) }
            s.resume()
            return s
        }
    }

    func cancel() { for s in sources { s.cancel() } }
}

/// A one-shot command (a copy) stopped by SIGINT or SIGTERM: the first signal cancels the work
/// (the table being written rolls back, its staging table is dropped) and the command ends as
/// that signal would have ended it (a shell sees 130 or 143); a second signal ends it at once.
final class SignalStop: @unchecked Sendable {  // `received` is Locked; the sources are set once
    let cancellation = Cancellation()
    private let received = Locked<Int32?>(nil)
    private var signals: StopSignals?
    private let what: String

    init(doing what: String) {
        self.what = what
        let received = self.received, cancellation = self.cancellation
        signals = StopSignals { (sig: Int32) in
            let first = received.withLock { r -> Bool in
                guard r == nil else { return false }
                r = sig
                return true
            }
            guard first else { return }
            // The next SIGINT or SIGTERM takes its default action: the process ends there.
            signal(SIGINT, SIG_DFL)
            signal(SIGTERM, SIG_DFL)
            Console.error("ferry: \(sig == SIGINT ? "SIGINT" : "SIGTERM"): stopping \(what): what is not committed is rolled back (send it again to stop at once)")
            cancellation.cancel()
        }
    }

    /// After the work returned: if a signal stopped it, says so and ends the process by that
    /// signal (its default action), else keeps the default handling from here on. `workDone`:
    /// everything was committed before the signal could stop it — it stands, and the command
    /// goes on as if none had come.
    func finish(workDone: Bool = false) {
        signals?.cancel()
        signals = nil
        let received = self.received.withLock { r -> Int32? in
            defer { if workDone { r = nil } }
            return r
        }
        if let sig = received, workDone {
            Console.error("ferry: \(sig == SIGINT ? "SIGINT" : "SIGTERM") came after \(what) had committed everything: it stands")
        }
        guard let sig = received, !workDone else {
            signal(SIGINT, SIG_DFL)
            signal(SIGTERM, SIG_DFL)
            return
        }
        Console.error("ferry: error: stopped by \(sig == SIGINT ? "SIGINT" : "SIGTERM") before \(what) finished; tables that were not finished were left as they were")
        signal(sig, SIG_DFL)
        kill(getpid(), sig)
        // Not reached: the default action of SIGINT and SIGTERM ends the process.
        exit(128 + sig)
    }
}
