import Foundation

/// Runs blocking database work (C client libraries) off the server's event loops and the
/// cooperative pool, on a queue that may block.
enum Offload {
    static let queue = DispatchQueue(label: "ferry.serve.database", qos: .userInitiated, attributes: .concurrent)

    static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(with: Result { try body() })
            }
        }
    }
}

/// Carries a connection (not Sendable) between the successive blocking steps of one request.
/// Only one step runs at a time, so the connection is never used from two threads at once.
final class Held<T>: @unchecked Sendable {  // unchecked: carrying a non-Sendable connection is its purpose
    var value: T
    init(_ value: T) { self.value = value }
}
