import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Reports per-table progress on stderr: rows, rows/s and ETA when a row estimate exists.
/// On a terminal one status line is redrawn in place; otherwise plain lines (one when a
/// table starts being written, one when it ends, and one every few seconds for long tables);
/// nothing at all when quiet. Safe to call from several threads.
public final class ProgressReporter: Sendable {
    public enum Style: Sendable {
        case terminal, lines, quiet
    }

    private struct Entry {
        var name: String
        var estimate: Int64?
        var rows: Int64 = 0
        var started: Date
        var lastLine: Date
    }

    /// What a copy reports as it goes, to a library caller's observer.
    public enum Event: Sendable, Equatable {
        /// A table started being written; `estimatedRows` from the source's catalog when it has one.
        case started(table: String, estimatedRows: Int64?)
        /// `rows` more rows of the table were written (not yet committed).
        case advanced(table: String, rows: Int)
        /// The table ended: committed with `rows` rows, or rolled back with `error`.
        case finished(table: String, rows: Int64, seconds: Double, error: String?)
        /// A warning (a skipped column, an unused cast rule, …).
        case note(String)
    }

    public let style: Style
    private let observer: (@Sendable (Event) -> Void)?
    /// What is on screen: the tables being written, in the order they started.
    private struct Screen {
        var active: [String: Entry] = [:]
        var order: [String] = []
        var lastDraw = Date.distantPast
        var drawnWidth = 0
    }
    private let screen = Locked(Screen())
    private let write: @Sendable (String) -> Void

    /// `quiet` wins; otherwise the style follows whether stderr is a terminal.
    public convenience init(quiet: Bool) {
        let style: Style = quiet ? .quiet : (isatty(2) == 1 ? .terminal : .lines)
        self.init(style: style) { text in FileHandle.standardError.write(Data(text.utf8)) }
    }

    public init(style: Style, write: @escaping @Sendable (String) -> Void) {
        self.style = style
        self.write = write
        self.observer = nil
    }

    /// Reports events to `observer` (from the copy's threads) and writes nothing.
    public init(observer: @escaping @Sendable (Event) -> Void) {
        self.style = .quiet
        self.write = { _ in }
        self.observer = observer
    }

    public func started(_ table: String, estimate: Int64?) {
        observer?(.started(table: table, estimatedRows: estimate))
        guard style != .quiet else { return }
        screen.withLock { screen in
            let now = Date()
            screen.active[table] = Entry(name: table, estimate: estimate, started: now, lastLine: now)
            screen.order.append(table)
            if style == .lines {
                write("\(table): copying" + (estimate.map { " (~\($0) rows)" } ?? "") + "\n")
            } else {
                draw(&screen, force: true)
            }
        }
    }

    /// A better estimate of the rows `table` will move, once known (a mirror knows it after
    /// comparing digests: the rows of the buckets that differ).
    public func reestimate(_ table: String, rows: Int64?) {
        guard style != .quiet else { return }
        screen.withLock { screen in screen.active[table]?.estimate = rows }
    }

    public func advanced(_ table: String, by rows: Int) {
        observer?(.advanced(table: table, rows: rows))
        guard style != .quiet else { return }
        screen.withLock { screen in
            guard var e = screen.active[table] else { return }
            e.rows += Int64(rows)
            let now = Date()
            if style == .lines, now.timeIntervalSince(e.lastLine) >= 5 {
                e.lastLine = now
                write(line(e, now: now) + "\n")
            }
            screen.active[table] = e
            if style == .terminal { draw(&screen, force: false) }
        }
    }

    public func finished(_ table: String, rows: Int64, seconds: Double, error: String?) {
        observer?(.finished(table: table, rows: rows, seconds: seconds, error: error))
        guard style != .quiet else { return }
        screen.withLock { screen in
            screen.active[table] = nil
            screen.order.removeAll { $0 == table }
            clearLine(&screen)
            let rate = seconds > 0 ? Double(rows) / seconds : 0
            if let error {
                write("\(table): FAILED after \(rows) rows: \(error)\n")
            } else {
                write("\(table): \(rows) rows in \(Self.format(seconds: seconds)) (\(Self.format(rate: rate)) rows/s)\n")
            }
            if style == .terminal { draw(&screen, force: true) }
        }
    }

    /// A message that interrupts the status line (warnings).
    public func note(_ text: String) {
        observer?(.note(text))
        guard style != .quiet else { return }
        screen.withLock { screen in
            clearLine(&screen)
            write(text + "\n")
            if style == .terminal { draw(&screen, force: true) }
        }
    }

    private func line(_ e: Entry, now: Date) -> String {
        let elapsed = now.timeIntervalSince(e.started)
        let rate = elapsed > 0 ? Double(e.rows) / elapsed : 0
        var s = "\(e.name): \(e.rows)"
        if let est = e.estimate, est > 0 {
            let pct = min(100, Int(Double(e.rows) * 100 / Double(est)))
            s += "/\(est) (\(pct)%)"
        }
        s += " \(Self.format(rate: rate)) rows/s"
        if let est = e.estimate, rate > 0, est > e.rows {
            s += " ETA \(Self.format(seconds: Double(est - e.rows) / rate))"
        }
        return s
    }

    private func clearLine(_ screen: inout Screen) {
        if style == .terminal && screen.drawnWidth > 0 {
            write("\r\u{1B}[K")
            screen.drawnWidth = 0
        }
    }

    private func draw(_ screen: inout Screen, force: Bool) {
        let now = Date()
        guard force || now.timeIntervalSince(screen.lastDraw) >= 0.1 else { return }
        screen.lastDraw = now
        let text = screen.order.compactMap { screen.active[$0] }.map { line($0, now: now) }.joined(separator: " | ")
        let cut = text.count > 200 ? String(text.prefix(199)) + "…" : text
        write("\r\u{1B}[K" + cut)
        screen.drawnWidth = cut.count
    }

    static func format(rate: Double) -> String {
        if rate >= 1_000_000 { return String(format: "%.2fM", rate / 1_000_000) }
        if rate >= 1_000 { return String(format: "%.1fk", rate / 1_000) }
        return String(format: "%.0f", rate)
    }

    static func format(seconds: Double) -> String {
        if seconds < 60 { return String(format: "%.2fs", seconds) }
        let s = Int(seconds)
        return s >= 3600 ? "\(s / 3600)h\(s / 60 % 60)m" : "\(s / 60)m\(s % 60)s"
    }
}
