// A program that embeds Ferry as a library (FerryKit): copies a database into another,
// printing progress as it goes, then verifies the copy value by value.
//
//   swift run ferry-embedding-sample [SOURCE_URL] [TARGET_URL]
//
// Defaults: samples/chinook.sqlite into a new SQLite file in the temporary folder.
import FerryKit
import Foundation

let arguments = CommandLine.arguments.dropFirst()
let source = arguments.first ?? "sqlite:samples/chinook.sqlite"
let target = arguments.dropFirst().first
    ?? "sqlite:" + FileManager.default.temporaryDirectory.appendingPathComponent("ferry-embedding-\(getpid()).sqlite").path

var options = CopyOptions()
options.mode = .replace

do {
    let outcome = try await Ferry.copy(from: source, to: target, options: options) { event in
        if case let .finished(table, rows, seconds, error) = event {
            print(error.map { "\(table): failed: \($0)" } ?? "\(table): \(rows) rows in \(String(format: "%.2f", seconds)) s")
        }
    }
    guard outcome.succeeded else {
        print("the copy failed for \(outcome.tables.filter { $0.status != .ok }.count) tables")
        exit(1)
    }
    let report = try await Ferry.verify(source, against: target)
    print("copied \(outcome.rowsCopied) rows in \(outcome.tables.count) tables; verify: \(report.equal ? "equal" : "different")")
    exit(report.equal ? 0 : 3)
} catch {
    print("error: \(error)")
    exit(1)
}
