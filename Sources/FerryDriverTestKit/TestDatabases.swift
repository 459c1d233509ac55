import FerryCore
import Foundation

/// Test fixtures shared by every driver's tests.
public enum TestDatabases {
    /// The URL of a test server from the environment (set by scripts/test). A missing URL is a
    /// failure that says how to get the server, never a skip: a test that needs a server runs.
    public static func serverURL(_ variable: String) throws -> String {
        if let url = ProcessInfo.processInfo.environment[variable], !url.isEmpty { return url }
        throw ConformanceFailure(
            "\(variable) is not set: run the tests with scripts/test, which installs PostgreSQL and MariaDB "
                + "and starts throwaway servers (or start them with `eval \"$(scripts/test-services start)\"`)")
    }

    /// The datasets kept in the repository (Tests/Datasets: Chinook, Sakila, Pagila with their
    /// licenses). Missing is a failure naming the folder, never a skip.
    public static func datasetsFolder(file: String = #filePath) throws -> URL {
        let folder = packageRoot(file: file).appendingPathComponent("Tests/Datasets")
        guard FileManager.default.fileExists(atPath: folder.appendingPathComponent("README.md").path) else {
            throw ConformanceFailure("the test datasets are missing at \(folder.path): they are part of the repository; restore them with `git checkout -- Tests/Datasets`")
        }
        return folder
    }

    /// A file of the test datasets (e.g. "chinook/Chinook_Sqlite.sqlite"); missing is a failure naming it.
    public static func dataset(_ path: String, file: String = #filePath) throws -> URL {
        let url = try datasetsFolder(file: file).appendingPathComponent(path)
        guard FileManager.default.fileExists(atPath: url.path) else {
            throw ConformanceFailure("test dataset \(path) is missing at \(url.path): restore it with `git checkout -- Tests/Datasets`")
        }
        return url
    }

    /// The package root (the folder holding Package.swift).
    public static func packageRoot(file: String = #filePath) -> URL {
        var dir = URL(fileURLWithPath: file).deletingLastPathComponent()
        while dir.path != "/" {
            if FileManager.default.fileExists(atPath: dir.appendingPathComponent("Package.swift").path) { return dir }
            dir = dir.deletingLastPathComponent()
        }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
    }
}

/// A uniquely named temporary folder, removed when released.
public final class TemporaryFolder {
    public let url: URL

    public init(prefix: String = "ferry-test") throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    public func path(_ name: String) -> String { url.appendingPathComponent(name).path }

    deinit { try? FileManager.default.removeItem(at: url) }
}

/// Value-by-value comparison of tables in two databases, for copy tests.
public enum TableComparison {
    /// Differences between `table` in `a` and `b` (empty when equal): row counts, then the first
    /// rows that differ, column by column. Rows are compared as sets ordered by their values.
    public static func differences(_ a: any Connection, _ b: any Connection, table: TableName, targetTable: TableName? = nil) throws -> [String] {
        let sa = try a.describe(table)
        let sb = try b.describe(targetTable ?? table.unqualified)
        let carried = sa.columns.filter { $0.logicalType.isSupported && !$0.generated }
        var problems: [String] = []
        // Every carried column must arrive, in order (the target may have more, e.g. after append).
        let namesA = carried.map(\.name)
        let namesB = sb.columns.map(\.name).filter { namesA.contains($0) }
        if namesA != namesB { problems.append("\(table): columns \(namesA) became \(sb.columns.map(\.name))") }
        let colsB = carried.compactMap { c in sb.column(named: c.name).map { col -> Column in
            var x = col
            x.logicalType = c.logicalType  // compare under the source's logical types
            return x
        } }
        let rowsA = try DriverConformance.readAll(a, sa.name, columns: carried).map(\.description).sorted()
        let rowsB = try DriverConformance.readAll(b, sb.name, columns: colsB).map(\.description).sorted()
        if rowsA.count != rowsB.count { problems.append("\(table): \(rowsA.count) rows in the source, \(rowsB.count) in the target") }
        for (ra, rb) in zip(rowsA, rowsB) where ra != rb {
            problems.append("\(table): source row \(ra.prefix(300)) became \(rb.prefix(300))")
            if problems.count > 5 { break }
        }
        return problems
    }
}

extension Array where Element == Value {
    /// Exact text of a row (doubles by bit pattern), for ordering and comparing rows.
    var description: String {
        map { v -> String in
            if case .double(let d) = v { return "d\(d.bitPattern)" }
            if case .text(let t) = v { return "t" + t.debugDescription }
            // Decimals compare by value: 12.5 in a DECIMAL(10,5) column reads back as 12.50000.
            if case .decimal(let t) = v { return "n" + DecimalText.normalized(t) }
            if case .json(let t) = v { return "j" + t.debugDescription }
            return "\(v)"
        }.joined(separator: "|")
    }
}
