// swift-tools-version:6.2
// An app package that bakes an offline snapshot of a database into its resources with Ferry's
// command plugin, then opens it with FerryKit. See README.md.
import PackageDescription

let package = Package(
    name: "SnapshotApp",
    platforms: [.macOS(.v14), .iOS(.v17)],
    dependencies: [
        // In your package: .package(url: "https://github.com/…/ferry", from: "0.1.0").
        .package(name: "Ferry", path: "../.."),
    ],
    targets: [
        .executableTarget(
            name: "SnapshotApp",
            dependencies: [.product(name: "FerryKit", package: "Ferry")],
            resources: [.copy("Resources/seed.db")]),
    ],
    swiftLanguageModes: [.v6]
)
