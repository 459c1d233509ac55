import FerryCore
import FerryDriverTestKit
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A fault on its own thread, fired `delay` seconds into a command's run: what it did.
final class Injection: @unchecked Sendable {  // the flags are Locked; the thread is only joined
    let injected = Locked(false)
    let failure = Locked<String?>(nil)
    private var thread: Thread?

    init(_ body: @escaping @Sendable (Injection) throws -> Void) {
        let t = Thread { [unowned self] in
            do { try body(self) } catch { self.failure.withLock { $0 = "\(error)" } }
        }
        thread = t
        t.start()
    }

    func fired() { injected.withLock { $0 = true } }

    /// Waits for the fault's thread (before the checks read the servers).
    func finish() -> (injected: Bool, failure: String?) {
        while let t = thread, t.isExecuting || !t.isFinished { usleep(10_000) }
        return (injected.withLock { $0 }, failure.withLock { $0 })
    }
}

extension Chaos {
    /// Fires `fault` at `launched` after `delay` seconds, unless it ended before: a signal to
    /// ferry, a server crashed and restarted, a service killed and restarted, the plugin
    /// process killed. (Relay and file faults are armed before the launch.)
    func inject(_ fault: Fault, into launched: Launched, after delay: Double, server: String?, service: Served?) -> Injection {
        let servers = self.servers
        return Injection { injection in
            Thread.sleep(forTimeInterval: delay)
            guard launched.process.isRunning else { return }
            switch fault {
            case .sigint, .sigterm, .sigkill:
                if let sig = fault.signal, launched.process.isRunning {
                    kill(launched.process.processIdentifier, sig)
                    injection.fired()
                }
            case .sourceServer, .targetServer, .originServer:
                if let server {
                    injection.fired()
                    try servers.crash(server)
                }
            case .serveKilled:
                if let service {
                    injection.fired()
                    try service.crash()
                }
            case .pluginKilled:
                for pid in Self.children(of: launched.process.processIdentifier, named: "ferry-driver-sq") {
                    kill(pid, SIGKILL)
                    injection.fired()
                }
            case .sourceCut, .targetCut, .sourceStall, .targetStall, .originCut, .originStall, .fileLimit, .diskFull, .readOnly:
                break
            }
        }
    }

    /// How ferry ended, and what is wrong with it: a hang, a death by a signal it was not sent,
    /// an exit of 128 or more for a fault not sent to it, more or less than one error line, a
    /// crash report. SIGINT and SIGTERM end a one-shot command with 130 and 143 (by the signal
    /// itself after a rollback), and `ferry replicate` (`stopsCleanly`) with 0.
    /// A run's command and its fault: how it ended, whether the fault landed while it ran, and
    /// what is wrong with how it ended.
    struct Broken {
        var ended: Ended
        var injected: Bool
        var text: String
        var problems: [String]
    }

    /// Launches ferry with `args`, fires `fault` after `delay` seconds (an armed relay or a
    /// confinement counts as landed when it fired or the command failed), waits, and judges.
    func breakRun(_ args: [String], confinement: Confinement, fault: Fault, delay: Double, server: String?, service: Served?,
                  armed: FaultRelay?, deadline: Double, stopsCleanly: Bool = false) throws -> Broken {
        let launched = try launch(args, confinement: confinement)
        let injection = inject(fault, into: launched, after: delay, server: server, service: service)
        let ended = wait(launched, deadline: deadline)
        var (injected, failure) = injection.finish()
        if let armed {
            injected = armed.fired
            armed.disarm()
        }
        if [.fileLimit, .diskFull, .readOnly].contains(fault) { injected = ended.status != 0 }
        if ended.status >= 90 && ended.status <= 92 && !ended.signaled && fault == .diskFull {
            throw ChaosFailure("the tmpfs for a full file system could not be set up (exit \(ended.status)): \(ended.err.prefix(300))")
        }
        var (text, problems) = judge(ended, fault: fault, injected: injected, deadline: deadline, stopsCleanly: stopsCleanly)
        if let failure { problems.insert("the fault itself failed: \(failure)", at: 0) }
        return Broken(ended: ended, injected: injected, text: text, problems: problems)
    }

    /// A relay of the suite's own in front of the server at `url`, and the URL through it.
    func relayed(_ url: String) throws -> (FaultRelay, String) {
        let e = try Endpoint(parsing: url)
        let r = try FaultRelay(upstreamPort: e.port ?? 0)
        relays.append(r)
        return (r, url.replacingOccurrences(of: "127.0.0.1:\(e.port ?? 0)", with: "127.0.0.1:\(r.port)"))
    }

    /// A signal that was not sent (the command ended first) is judged as no fault.
    func judge(_ ended: Ended, fault: Fault, injected: Bool, deadline: Double, stopsCleanly: Bool = false) -> (text: String, problems: [String]) {
        let signal = injected ? fault.signal : nil
        var problems: [String] = []
        let text: String
        if ended.hung {
            text = "HUNG"
            problems.append("ferry did not end within \(Int(deadline)) s")
        } else if ended.signaled {
            let orderly = ended.err.contains(": stopping the copy")
            text = "signal \(ended.status)" + (orderly ? " (stopped itself)" : "")
            // (A signal before the command began, while ferry starts, ends it by the default action.)
            if signal != ended.status { problems.append("ferry died of signal \(ended.status)") }
        } else {
            text = "exit \(ended.status)"
            if ended.status != 0 {
                let wanted: Int32? = signal.map { stopsCleanly ? 0 : 128 + $0 }
                if let wanted, fault != .sigkill, ended.status != wanted {
                    problems.append("exit \(ended.status) after \(fault.rawValue), not \(wanted): \(ended.err.prefix(400))")
                } else if signal == nil && ended.status >= 128 {
                    problems.append("exit \(ended.status) (128 or more) for a fault not sent to ferry")
                } else if ended.status == 2 {
                    // The suite's command lines are right: a fault is a failure (1), never usage.
                    problems.append("exit 2 (a usage error) after \(fault.rawValue): \(ended.err.prefix(400))")
                }
                let errors = ended.err.split(separator: "\n").filter { $0.hasPrefix("ferry: error") }
                if errors.count != 1 { problems.append("\(errors.count) error lines, not one: \(ended.err.prefix(600))") }
            }
        }
        if ended.err.contains("Fatal error") || ended.err.contains("Stack dump") || ended.err.contains("Segmentation") {
            problems.append("a crash report: \(ended.err.prefix(600))")
        }
        return (text, problems)
    }

    /// A plugin outlives the ferry that started it only briefly (it sees its stdin end; the
    /// plugin kit lets an answer under way end for up to 5 s).
    func pluginsLeft() -> [String] {
        var plugins: [Int32] = []
        for _ in 0..<80 {
            plugins = Self.processes(named: "ferry-driver-sq", under: products)
            if plugins.isEmpty { break }
            usleep(100_000)
        }
        return plugins.isEmpty ? [] : ["plugin processes left running: \(plugins)"]
    }

    /// Temporary files ferry left (after a command that ended well).
    func temporaryFilesLeft() -> [String] {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: path("tmp"))) ?? []
        return files.isEmpty ? [] : ["temporary files left: \(files.prefix(5).joined(separator: ", "))"]
    }

    /// Runs an unbroken command until it exits 0 (a server or service killed by the run before
    /// may still be restarting): at most `tries` times, 1 s apart.
    func recover(_ args: [String], tries: Int = 8) throws -> (Ended, Int) {
        var last = try ferry(args)
        var n = 1
        while last.status != 0 && n < tries {
            Thread.sleep(forTimeInterval: 1)
            last = try ferry(args)
            n += 1
        }
        return (last, n)
    }
}
