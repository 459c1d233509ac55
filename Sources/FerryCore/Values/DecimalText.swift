/// Exact decimal text: validation and the plain (non-exponent) form of a Double.
public enum DecimalText {
    /// True for `[+-]digits[.digits]`, `[+-].digits`, and `NaN`/`Infinity`/`-Infinity`.
    public static func isValid(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var i = 0
        let n = bytes.count
        if n == 0 { return false }
        if bytes[0] == 43 || bytes[0] == 45 { i = 1 }
        // Only a word that starts as one: an 8-digit amount is not compared with "Infinity"
        // (the generic comparison cost 100 instructions a value, callgrind).
        if (n - i == 8 && bytes[i] == UInt8(ascii: "I")) || (n - i == 3 && bytes[i] == UInt8(ascii: "N")) {
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

    /// `normalized` of the text in `bytes`, appended to `out` without a String (the digests'
    /// canonical text of every decimal value).
    public static func appendNormalized(_ bytes: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        withNormalized(bytes) { out.append(bytes: $0) }
    }

    /// `body` of the text `appendNormalized` appends, without an array: the input's own bytes
    /// where the normalized text is a piece of them (`12.50` → `12.5`, `-3` → `-3`), else a
    /// buffer on the stack (what the `lookup3` row hash hashes for every decimal value).
    public static func withNormalized<R>(_ bytes: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        let n = bytes.count
        guard isValid(bytes), n > 0, bytes[n - 1] != UInt8(ascii: "y"), bytes[n - 1] != UInt8(ascii: "N") else {
            return body(bytes)
        }
        var i = 0
        var negative = false
        if bytes[0] == UInt8(ascii: "+") || bytes[0] == UInt8(ascii: "-") {
            negative = bytes[0] == UInt8(ascii: "-")
            i = 1
        }
        var dot = i
        while dot < n && bytes[dot] != UInt8(ascii: ".") { dot += 1 }
        var wholeStart = i
        while wholeStart < dot && bytes[wholeStart] == UInt8(ascii: "0") { wholeStart += 1 }
        var fractionEnd = n
        while fractionEnd > dot + 1 && bytes[fractionEnd - 1] == UInt8(ascii: "0") { fractionEnd -= 1 }
        let hasFraction = fractionEnd > dot + 1
        let end = hasFraction ? fractionEnd : dot
        if wholeStart == i && wholeStart < dot {
            // No zero dropped in front: the sign (a minus, not a plus) and the digits as they are.
            return body(UnsafeRawBufferPointer(rebasing: bytes[(negative ? 0 : i)..<end]))
        }
        if wholeStart == dot && !hasFraction {
            var zero = UInt8(ascii: "0")
            return withUnsafeBytes(of: &zero) { body($0) }
        }
        return withUnsafeTemporaryAllocation(byteCount: n + 2, alignment: 1) { buffer in
            guard let out = buffer.baseAddress else { return body(bytes) }
            var w = 0
            if negative {
                out.storeBytes(of: UInt8(ascii: "-"), toByteOffset: w, as: UInt8.self)
                w += 1
            }
            if wholeStart == dot {
                out.storeBytes(of: UInt8(ascii: "0"), toByteOffset: w, as: UInt8.self)
                w += 1
            } else if let base = bytes.baseAddress {
                (out + w).copyMemory(from: base + wholeStart, byteCount: dot - wholeStart)
                w += dot - wholeStart
            }
            if hasFraction, let base = bytes.baseAddress {
                (out + w).copyMemory(from: base + dot, byteCount: fractionEnd - dot)
                w += fractionEnd - dot
            }
            return body(UnsafeRawBufferPointer(start: out, count: w))
        }
    }

    /// The shortest text of the same number: no `+`, no leading or trailing zeros, no `-0`
    /// (`+001.500` → `1.5`, `-0.00` → `0`). Special values and text that is not a number are kept.
    public static func normalized(_ text: String) -> String {
        guard var (negative, whole, fraction) = parts(text) else { return text }
        while whole.first == "0" { whole = whole.dropFirst() }
        while fraction.last == "0" { fraction = fraction.dropLast() }
        let digits = (whole.isEmpty ? "0" : String(whole)) + (fraction.isEmpty ? "" : "." + fraction)
        negative = negative && digits != "0"
        return negative ? "-" + digits : digits
    }

    /// Sign, digits before and after the point of a valid finite decimal; nil for NaN,
    /// infinities and text that is not a decimal.
    static func parts(_ text: String) -> (negative: Bool, whole: Substring, fraction: Substring)? {
        guard isValid(text), !text.hasSuffix("Infinity"), text != "NaN" else { return nil }
        var s = Substring(text)
        var negative = false
        if s.first == "+" || s.first == "-" {
            negative = s.first == "-"
            s = s.dropFirst()
        }
        guard let dot = s.firstIndex(of: ".") else { return (negative, s, "") }
        return (negative, s[..<dot], s[s.index(after: dot)...])
    }

    /// `text` rounded to `scale` fraction digits, half away from zero (`2.345` → `2.35` at 2,
    /// `-2.5` → `-3` at 0); shorter fractions are kept as they are. NaN and infinities pass.
    public static func rounded(_ text: String, scale: Int) -> String {
        guard let (negative, whole, fraction) = parts(text) else { return text }
        guard fraction.count > scale else { return text }
        var digits = Array((whole.isEmpty ? "0" : String(whole)) + fraction.prefix(scale)).map { Int($0.asciiValue ?? 48) - 48 }
        let roundUp = (fraction.dropFirst(scale).first?.asciiValue ?? 48) >= 53
        if roundUp {
            var i = digits.count - 1
            while i >= 0 {
                if digits[i] == 9 {
                    digits[i] = 0
                    i -= 1
                } else {
                    digits[i] += 1
                    break
                }
            }
            if i < 0 { digits.insert(1, at: 0) }
        }
        let text = digits.map(String.init).joined()
        let wholeCount = text.count - scale
        let result = String(text.prefix(wholeCount)) + (scale > 0 ? "." + text.suffix(scale) : "")
        let isZero = digits.allSatisfy { $0 == 0 }
        return (negative && !isZero ? "-" : "") + result
    }
}
