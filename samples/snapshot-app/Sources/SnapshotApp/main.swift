// Opens the snapshot baked into this app's resources (Resources/seed.db, written by
// `swift package … ferry snapshot …`, see README.md) and lists its tables with FerryKit.
import FerryKit
import Foundation

guard let seed = Bundle.module.url(forResource: "seed", withExtension: "db") else {
    print("Resources/seed.db is missing: make it first with `swift package --allow-writing-to-package-directory ferry snapshot ORIGIN Sources/SnapshotApp/Resources/seed.db`")
    exit(1)
}
do {
    for table in try await Ferry.describe("sqlite:" + seed.path) {
        print("\(table.name): \(table.columns.count) columns, key (\(table.preferredKey?.columns.joined(separator: ", ") ?? "none"))")
    }
} catch {
    print("cannot read the bundled snapshot: \(error)")
    exit(1)
}
