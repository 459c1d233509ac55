import Foundation
import PackagePlugin

/// `swift package ferry …`: runs the `ferry` tool, built from this package, with the arguments
/// given, from the package's folder (so `Resources/seed.db` lands in the package). For example,
/// to bake an offline snapshot into an app's resources:
///
///     swift package --allow-network-connections all --allow-writing-to-package-directory \
///         ferry snapshot postgres://app@db/shop Sources/App/Resources/seed.db
@main
struct FerryCommand: CommandPlugin {
    func performCommand(context: PluginContext, arguments: [String]) async throws {
        let ferry = try context.tool(named: "ferry")
        let process = Process()
        process.executableURL = ferry.url
        process.arguments = arguments
        process.currentDirectoryURL = context.package.directoryURL
        try process.run()
        process.waitUntilExit()
        // Ferry printed its own one-line error; SwiftPM learns the command failed.
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            throw FerryCommandError(status: process.terminationStatus)
        }
    }
}

struct FerryCommandError: Error, CustomStringConvertible {
    var status: Int32
    var description: String { "ferry exited with status \(status) (0 ok, 1 failed, 2 usage, 3 differences)" }
}
