/// A decimal's exact value, in a form that compares numerically: sign, the digits before the
/// point without leading zeros, the digits after it without trailing zeros.
struct CSVDecimalKey: Hashable, Sendable {
    enum Kind: Int, Hashable, Sendable {
        case negativeInfinity, finite, infinity, nan
    }
    var kind: Kind
    var negative = false
    var integer: [UInt8] = []
    var fraction: [UInt8] = []

    /// Parses text that `DecimalText.isValid` accepts.
    init(_ text: String) {
        switch text {
        case "NaN": kind = .nan
        case "Infinity", "+Infinity": kind = .infinity
        case "-Infinity": kind = .negativeInfinity
        default:
            kind = .finite
            var digits = Substring(text)
            if digits.first == "-" {
                negative = true
                digits = digits.dropFirst()
            } else if digits.first == "+" {
                digits = digits.dropFirst()
            }
            let parts = digits.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
            integer = Array((parts.first ?? "").utf8.drop { $0 == 0x30 })
            if parts.count > 1 {
                var f = Array(parts[1].utf8)
                while f.last == 0x30 { f.removeLast() }
                fraction = f
            }
            if integer.isEmpty && fraction.isEmpty { negative = false }
        }
    }

    /// The normalized text (`-1.5`, `0`), for messages.
    var text: String {
        switch kind {
        case .nan: return "NaN"
        case .infinity: return "Infinity"
        case .negativeInfinity: return "-Infinity"
        case .finite:
            let i = integer.isEmpty ? "0" : String(decoding: integer, as: UTF8.self)
            let f = fraction.isEmpty ? "" : "." + String(decoding: fraction, as: UTF8.self)
            return (negative ? "-" : "") + i + f
        }
    }

    static func compare(_ a: CSVDecimalKey, _ b: CSVDecimalKey) -> Int {
        if a.kind != b.kind { return a.kind.rawValue < b.kind.rawValue ? -1 : 1 }
        guard a.kind == .finite else { return 0 }
        if a.negative != b.negative { return a.negative ? -1 : 1 }
        let magnitude = compareMagnitude(a, b)
        return a.negative ? -magnitude : magnitude
    }

    private static func compareMagnitude(_ a: CSVDecimalKey, _ b: CSVDecimalKey) -> Int {
        if a.integer.count != b.integer.count { return a.integer.count < b.integer.count ? -1 : 1 }
        for (p, q) in zip(a.integer, b.integer) where p != q { return p < q ? -1 : 1 }
        for (p, q) in zip(a.fraction, b.fraction) where p != q { return p < q ? -1 : 1 }
        return a.fraction.count < b.fraction.count ? -1 : a.fraction.count == b.fraction.count ? 0 : 1
    }
}
