import Foundation

/// UTC times as Ferry writes them in its bookkeeping (`2026-11-24T07:13:28.123Z`): the sync
/// file's last push and pull, the origin's push ledger. A format style, not a formatter
/// object: nothing to create per call, and safe on any thread.
public enum ISOTime {
    public static func string(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }

    /// The time `string` wrote, or nil for other text.
    public static func date(_ text: String) -> Date? {
        try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text)
    }
}
