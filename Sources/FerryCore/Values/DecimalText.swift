/// Exact decimal text: validation and the plain (non-exponent) form of a Double.
public enum DecimalText {
    /// True for `[+-]digits[.digits]`, `[+-].digits`, and `NaN`/`Infinity`/`-Infinity`.
    public static func isValid(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var i = 0
        let n = bytes.count
        if n == 0 { return false }
        if bytes[0] == 43 || bytes[0] == 45 { i = 1 }
        if n - i == 8 || n - i == 3 {
            let word = UnsafeRawBufferPointer(rebasing: bytes[i...])
            if word.elementsEqual("Infinity".utf8) || (i == 0 && word.elementsEqual("NaN".utf8)) { return true }
        }
        var digits = 0
        var dot = false
        while i < n {
            let c = bytes[i]
            if c >= 48 && c <= 57 {
                digits += 1
            } else if c == 46 && !dot {
                dot = true
            } else {
                return false
            }
            i += 1
        }
        return digits > 0
    }

    public static func isValid(_ text: String) -> Bool {
        var t = text
        return t.withUTF8 { isValid(UnsafeRawBufferPointer($0)) }
    }

    /// The shortest decimal that reads back as `value`, written without an exponent
    /// (`1e+20` becomes `100000000000000000000`, `1e-7` becomes `0.0000001`).
    public static func exact(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value < 0 ? "-Infinity" : "Infinity" }
        let s = "\(value)"
        guard let e = s.firstIndex(where: { $0 == "e" || $0 == "E" }) else {
            return s.hasSuffix(".0") ? String(s.dropLast(2)) : s
        }
        var mantissa = String(s[..<e])
        guard let exponent = Int(s[s.index(after: e)...]) else { return s }
        let negative = mantissa.hasPrefix("-")
        if negative { mantissa.removeFirst() }
        var intPart = mantissa
        var fracPart = ""
        if let dot = mantissa.firstIndex(of: ".") {
            intPart = String(mantissa[..<dot])
            fracPart = String(mantissa[mantissa.index(after: dot)...])
        }
        var digits = intPart + fracPart
        var point = intPart.count + exponent
        if point <= 0 {
            digits = String(repeating: "0", count: -point + 1) + digits
            point = 1
        } else if point > digits.count {
            digits += String(repeating: "0", count: point - digits.count)
        }
        var whole = String(digits.prefix(point))
        var frac = String(digits.dropFirst(point))
        while frac.hasSuffix("0") { frac.removeLast() }
        while whole.count > 1 && whole.hasPrefix("0") { whole.removeFirst() }
        return (negative ? "-" : "") + whole + (frac.isEmpty ? "" : "." + frac)
    }

    /// The shortest text of the same number: no `+`, no leading or trailing zeros, no `-0`
    /// (`+001.500` → `1.5`, `-0.00` → `0`). Special values and text that is not a number are kept.
    public static func normalized(_ text: String) -> String {
        guard isValid(text), !text.hasSuffix("Infinity"), text != "NaN" else { return text }
        var s = Substring(text)
        var negative = false
        if s.first == "+" || s.first == "-" {
            negative = s.first == "-"
            s = s.dropFirst()
        }
        var whole = s
        var fraction: Substring = ""
        if let dot = s.firstIndex(of: ".") {
            whole = s[..<dot]
            fraction = s[s.index(after: dot)...]
        }
        while whole.first == "0" { whole = whole.dropFirst() }
        while fraction.last == "0" { fraction = fraction.dropLast() }
        let digits = (whole.isEmpty ? "0" : String(whole)) + (fraction.isEmpty ? "" : "." + fraction)
        return negative && digits != "0" ? "-" + digits : digits
    }
}
