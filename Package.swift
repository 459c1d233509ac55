// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Ferry",
    platforms: [.macOS(.v13), .iOS(.v16)],
    products: [
        .library(name: "FerryCore", targets: ["FerryCore"]),
        .library(name: "FerrySQLite", targets: ["FerrySQLite"]),
        .library(name: "FerryPostgres", targets: ["FerryPostgres"]),
        .library(name: "FerryMySQL", targets: ["FerryMySQL"]),
        .library(name: "FerryXML", targets: ["FerryXML"]),
        .library(name: "FerryCommands", targets: ["FerryCommands"]),
        .library(name: "FerryDriverTestKit", targets: ["FerryDriverTestKit"]),
        .executable(name: "ferry", targets: ["ferry"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    ],
    targets: [
        // C client libraries, from Debian's -dev packages.
        .systemLibrary(
            name: "CSQLite", path: "Sources/CSQLite", pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]),
        .systemLibrary(
            name: "CLibPQ", path: "Sources/CLibPQ", pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"]), .brew(["libpq"])]),
        .systemLibrary(
            name: "CMariaDB", path: "Sources/CMariaDB", pkgConfig: "libmariadb",
            providers: [.apt(["libmariadb-dev"]), .brew(["mariadb-connector-c"])]),

        // The engine-neutral core: catalog model, values, driver protocols, copy engine.
        .target(name: "FerryCore"),
        // Drivers.
        .target(name: "FerrySQLite", dependencies: ["FerryCore", "CSQLite"]),
        .target(name: "FerryPostgres", dependencies: ["FerryCore", "CLibPQ"]),
        .target(name: "FerryMySQL", dependencies: ["FerryCore", "CMariaDB"]),
        // The XML wire format (shared by the service and its client).
        .target(name: "FerryXML", dependencies: ["FerryCore"]),
        // The conformance suite every driver's tests run.
        .target(name: "FerryDriverTestKit", dependencies: ["FerryCore"]),
        // The command-line commands (testable) and the executable.
        .target(
            name: "FerryCommands",
            dependencies: [
                "FerryCore", "FerrySQLite", "FerryPostgres", "FerryMySQL",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]),
        .executableTarget(name: "ferry", dependencies: ["FerryCommands"]),

        .testTarget(name: "FerryCoreTests", dependencies: ["FerryCore"]),
        .testTarget(
            name: "FerrySQLiteTests",
            dependencies: ["FerrySQLite", "FerryDriverTestKit", "FerryCore"]),
        .testTarget(
            name: "FerryPostgresTests",
            dependencies: ["FerryPostgres", "FerrySQLite", "FerryDriverTestKit", "FerryCore"]),
        .testTarget(
            name: "FerryMySQLTests",
            dependencies: ["FerryMySQL", "FerryPostgres", "FerrySQLite", "FerryDriverTestKit", "FerryCore"]),
        .testTarget(name: "FerryXMLTests", dependencies: ["FerryXML", "FerryCore"]),
        .testTarget(
            name: "FerryCommandsTests",
            dependencies: ["FerryCommands", "FerryDriverTestKit", "FerrySQLite", "ferry"]),
    ],
    swiftLanguageModes: [.v6]
)
