// swift-tools-version:6.2
import PackageDescription

let package = Package(
    name: "Ferry",
    platforms: [.macOS(.v14), .iOS(.v17)],
    products: [
        // Ferry as a library: `Ferry.copy/verify/describe` with the drivers of the platform.
        .library(name: "FerryKit", targets: ["FerryKit"]),
        .library(name: "FerryCore", targets: ["FerryCore"]),
        .library(name: "FerrySQLite", targets: ["FerrySQLite"]),
        .library(name: "FerryPostgres", targets: ["FerryPostgres"]),
        .library(name: "FerryMySQL", targets: ["FerryMySQL"]),
        .library(name: "FerryXML", targets: ["FerryXML"]),
        .library(name: "FerryService", targets: ["FerryService"]),
        .library(name: "FerryServer", targets: ["FerryServer"]),
        // Turns any Driver into a driver plugin executable (docs/plugins.md).
        .library(name: "FerryPluginKit", targets: ["FerryPluginKit"]),
        .library(name: "FerryPlugins", targets: ["FerryPlugins"]),
        .library(name: "FerrySync", targets: ["FerrySync"]),
        .library(name: "FerryCommands", targets: ["FerryCommands"]),
        .library(name: "FerryDriverTestKit", targets: ["FerryDriverTestKit"]),
        .executable(name: "ferry", targets: ["ferry"]),
        .executable(name: "ferry-embedding-sample", targets: ["ferry-embedding-sample"]),
        .executable(name: "ferry-sync-model", targets: ["ferry-sync-model"]),
        // `swift package ferry …` in any package that depends on Ferry.
        .plugin(name: "FerryCommand", targets: ["FerryCommand"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.0.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.20.0", traits: []),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.0.0"),
        // The http(s) driver's transport on Linux (URLSession on Apple platforms).
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.26.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.26.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.27.0"),
        // Driver plugins: child processes (Linux and macOS; never in FerryKit's iOS build).
        .package(url: "https://github.com/swiftlang/swift-subprocess", from: "1.0.0"),
        .package(url: "https://github.com/apple/swift-system", from: "1.5.0"),
        // RFC 4180 CSV, streamed (the sample CSV plugin).
        .package(url: "https://github.com/yaslab/CSV.swift", from: "2.5.0"),
        // YAML: replication files, and the scale-out sample's manifest read back by its test.
        .package(url: "https://github.com/jpsim/Yams", from: "6.0.0"),
        // `swift package generate-documentation --target FerryKit` (DocC).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.4.0"),
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
            name: "CZlib", path: "Sources/CZlib", pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"]), .brew(["zlib"])]),
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
        // `HTTPDriver.standard`: the http(s) driver on the platform's transport — async-http-client
        // on Linux, URLSession elsewhere (kept out of FerryXML, which plugins link).
        .target(
            name: "FerryHTTPClient",
            dependencies: [
                "FerryCore", "FerryXML",
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: .when(platforms: [.linux])),
                .product(name: "NIOCore", package: "swift-nio", condition: .when(platforms: [.linux])),
                .product(name: "NIOFoundationCompat", package: "swift-nio", condition: .when(platforms: [.linux])),
                .product(name: "NIOPosix", package: "swift-nio", condition: .when(platforms: [.linux])),
                .product(name: "NIOHTTP1", package: "swift-nio", condition: .when(platforms: [.linux])),
                .product(name: "NIOHTTPCompression", package: "swift-nio-extras", condition: .when(platforms: [.linux])),
                .product(name: "NIOSSL", package: "swift-nio-ssl", condition: .when(platforms: [.linux])),
            ]),
        // The protocol's handlers, free of any transport (no web server, NIO or TLS): served over
        // HTTP by FerryServer and over a pipe by FerryPluginKit.
        .target(
            name: "FerryService",
            dependencies: ["FerryCore", "FerryXML", "CZlib", .product(name: "Logging", package: "swift-log")]),
        // `ferry serve`: any connection exposed through the XML service (imports no concrete driver).
        .target(
            name: "FerryServer",
            dependencies: [
                "FerryCore", "FerryXML", "FerryService",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]),
        // Driver plugins: `ferry-driver-SCHEME` executables found on FERRY_DRIVER_PATH or PATH,
        // spoken to over their stdin/stdout (the CLI injects them into its registry).
        .target(
            name: "FerryPlugins",
            dependencies: [
                "FerryCore", "FerryXML",
                .product(name: "Subprocess", package: "swift-subprocess"),
                .product(name: "SystemPackage", package: "swift-system"),
            ]),
        // The plugin kit: a Driver served over stdin/stdout through the service's handlers.
        .target(
            name: "FerryPluginKit",
            dependencies: ["FerryCore", "FerryXML", "FerryService", .product(name: "Logging", package: "swift-log")]),
        // Sample plugins, built by scripts/test: Ferry's SQLite driver through the kit (how the
        // tests prove the transport), and a folder of CSV files.
        .executableTarget(name: "ferry-driver-sqlitekit", dependencies: ["FerryPluginKit", "FerrySQLite"], path: "samples/plugins/sqlitekit"),
        .executableTarget(
            name: "ferry-driver-csv",
            dependencies: ["FerryPluginKit", "FerryXML", "FerryCore", .product(name: "CSV", package: "CSV.swift")],
            path: "samples/plugins/csv", exclude: ["README.md"]),
        // Offline snapshots and two-way sync: a SQLite snapshot file against any origin (drivers
        // come from the caller's registry; never the server).
        .target(name: "FerrySync", dependencies: ["FerryCore", "FerrySQLite"]),
        // The library façade: SQLite and http everywhere, PostgreSQL and MySQL where libpq and
        // libmariadb exist (not on iOS).
        .target(
            name: "FerryKit",
            dependencies: [
                "FerryCore", "FerrySQLite", "FerryXML", "FerryHTTPClient",
                .target(name: "FerryPostgres", condition: .when(platforms: [.linux, .macOS])),
                .target(name: "FerryMySQL", condition: .when(platforms: [.linux, .macOS])),
            ]),
        // A program embedding FerryKit, built and run by the tests.
        .executableTarget(name: "ferry-embedding-sample", dependencies: ["FerryKit"], path: "samples/embedding"),
        // The conformance suite every driver's tests run.
        .target(name: "FerryDriverTestKit", dependencies: ["FerryCore"]),
        // The command-line commands (testable) and the executable.
        .target(
            name: "FerryCommands",
            dependencies: [
                "FerryCore", "FerryKit", "FerrySQLite", "FerryPostgres", "FerryMySQL", "FerryXML", "FerryServer", "FerryService", "FerrySync", "FerryPlugins",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Yams", package: "Yams"),
            ]),
        .executableTarget(name: "ferry", dependencies: ["FerryCommands"]),
        // `swift package ferry …`: runs the tool with the permissions it needs declared.
        .plugin(
            name: "FerryCommand",
            capability: .command(
                intent: .custom(verb: "ferry", description: "Run the ferry tool (copy, snapshot, verify, …) from the package's folder."),
                permissions: [
                    .allowNetworkConnections(scope: .all(), reason: "Ferry connects to the databases named on its command line."),
                    .writeToPackageDirectory(reason: "Ferry writes the copy or snapshot named on its command line into the package (e.g. Resources/seed.db)."),
                ]),
            dependencies: ["ferry"],
            path: "Plugins/FerryCommand"),

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
        .testTarget(name: "FerryXMLTests", dependencies: ["FerryXML", "FerryCore", "FerryDriverTestKit"]),
        // The randomized sync model (issue 15), shared by SyncModelTests and its optimized
        // runner: `swift build -c release --product ferry-sync-model` builds no server.
        .target(
            name: "FerrySyncModel",
            dependencies: ["FerrySync", "FerrySQLite", "FerryPostgres", "FerryMySQL", "FerryXML", "FerryHTTPClient", "FerryDriverTestKit", "FerryCore"],
            path: "Tests/FerrySyncModel"),
        .executableTarget(name: "ferry-sync-model", dependencies: ["FerrySyncModel"], path: "Tests/SyncModelRunner"),
        // The failure-injection suite (issue 32): scripts/chaos runs it; ChaosTests a short run.
        .executableTarget(name: "ferry-chaos", dependencies: ["FerryDriverTestKit", "FerryCore"], path: "Tests/ChaosRunner"),
        .testTarget(
            name: "FerryServerTests",
            dependencies: ["FerryServer", "FerryXML", "FerryHTTPClient", "FerrySQLite", "FerryPostgres", "FerryMySQL", "FerryDriverTestKit", "FerryCore", "FerrySync", "FerrySyncModel"]),
        .testTarget(
            name: "FerryPluginTests",
            dependencies: [
                "FerryPlugins", "FerryDriverTestKit", "FerryCore", "FerrySQLite", "FerryPostgres", "FerryMySQL",
                "ferry", "ferry-driver-sqlitekit", "ferry-driver-csv",
            ]),
        .testTarget(
            name: "FerryCommandsTests",
            dependencies: ["FerryCommands", "FerryKit", "FerryDriverTestKit", "FerrySQLite", "ferry", "ferry-embedding-sample", .product(name: "Yams", package: "Yams")]),
    ],
    swiftLanguageModes: [.v6]
)
