import ArgumentParser
import Foundation

/// A size given on the command line: bytes, or with KB, MB, GB, TB (powers of 1024).
struct ByteSize: ExpressibleByArgument, Sendable {
    var bytes: Int64

    init(bytes: Int64) { self.bytes = bytes }

    init?(argument: String) {
        let text = argument.trimmingCharacters(in: .whitespaces).uppercased()
        let units: [(String, Int64)] = [("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10), ("B", 1)]
        var factor: Int64 = 1
        var number = Substring(text)
        for (suffix, f) in units where text.hasSuffix(suffix) {
            factor = f
            number = text.dropLast(suffix.count)
            break
        }
        guard let n = Int64(number.trimmingCharacters(in: .whitespaces)), n >= 0 else { return nil }
        let (v, overflow) = n.multipliedReportingOverflow(by: factor)
        guard !overflow else { return nil }
        bytes = v
    }

    var defaultValueDescription: String { Self.text(bytes) }

    /// `bytes` for people: 1.5 GB, 12 MB, 900 B.
    static func text(_ bytes: Int64) -> String {
        let units: [(String, Double)] = [("TB", 1_099_511_627_776), ("GB", 1_073_741_824), ("MB", 1_048_576), ("KB", 1024)]
        for (u, f) in units where Double(bytes) >= f {
            let v = Double(bytes) / f
            return (v >= 10 ? String(format: "%.0f", v) : String(format: "%.1f", v)) + " " + u
        }
        return "\(bytes) B"
    }
}
