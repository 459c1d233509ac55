// ferry-driver-csv: a folder of CSV files as a Ferry database, source and target, through
// FerryPluginKit (docs/plugins.md). The format is in this folder's README.md.
//
//   export FERRY_DRIVER_PATH=$PWD/.build/debug
//   ferry copy sqlite:samples/chinook.sqlite csv:/tmp/chinook-csv
//   ferry copy csv:/tmp/chinook-csv sqlite:/tmp/back.db
import FerryCore
import FerryPluginKit
import Foundation

// The plugin takes no options: say so once, rather than ignore a typo silently.
if let url = ProcessInfo.processInfo.environment["FERRY_DRIVER_URL"], let endpoint = try? Endpoint(parsing: url), !endpoint.parameters.isEmpty {
    let names = endpoint.parameters.map(\.0).joined(separator: ", ")
    FileHandle.standardError.write(Data("ignoring the URL's query (\(names)): ferry-driver-csv takes no options\n".utf8))
}

// A source folder that is not there fails the run at once, in one line of its own (answered
// per request instead, it would reach Ferry as the service's generic failure).
let env = ProcessInfo.processInfo.environment
if env["FERRY_DRIVER_ROLE"] != "target", let url = env["FERRY_DRIVER_URL"], let endpoint = try? Endpoint(parsing: url) {
    do {
        try CSVDriver().connect(endpoint, role: .source).close()
    } catch {
        FileHandle.standardError.write(Data("\(error)\n".utf8))
        exit(1)
    }
}

FerryPlugin.main(
    driver: CSVDriver(), name: "ferry-driver-csv", version: "0.1.0",
    capabilities: [.source, .target, .keyedReads, .digests, .snapshots, .keyedWrites])
