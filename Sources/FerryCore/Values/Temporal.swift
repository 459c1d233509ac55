/// Conversions between Ferry's canonical temporal forms (days since 1970-01-01, microseconds
/// since midnight, microseconds since the epoch) and ISO-8601 text. Proleptic Gregorian
/// calendar, any year Int64 can reach; no time zones beyond a numeric offset.
public enum Temporal {
    public static let microsPerSecond: Int64 = 1_000_000
    public static let microsPerDay: Int64 = 86_400_000_000

    /// Days since 1970-01-01 of a civil date (H. Hinnant's algorithm).
    public static func days(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// The civil date of a day number.
    public static func civil(days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let y = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? y + 1 : y, m, d)
    }

    // MARK: Formatting

    /// Writes `v` (≥ 0) in decimal, zero-padded to `width` digits, at `p[i]…`, and moves `i`
    /// past it. Formatting writes into one stack buffer and appends it once: digit by digit
    /// into an array was 750 instructions a date (callgrind).
    @inline(__always)
    private static func put(_ v: Int64, width: Int, _ p: UnsafeMutablePointer<UInt8>, _ i: inout Int) {
        var n = 1
        var x = v / 10
        while x > 0 { n += 1; x /= 10 }
        let total = n > width ? n : width
        x = v
        var j = i + total - 1
        while j >= i {
            p[j] = UInt8(truncatingIfNeeded: 48 + x % 10)
            x /= 10
            j -= 1
        }
        i += total
    }

    /// Writes `v` (0...99) as two digits at `p[i]…` and moves `i` past them.
    @inline(__always)
    private static func put2(_ v: Int64, _ p: UnsafeMutablePointer<UInt8>, _ i: inout Int) {
        let u = UInt8(truncatingIfNeeded: v)
        p[i] = 48 &+ u / 10
        p[i + 1] = 48 &+ u % 10
        i += 2
    }

    /// Longest text formatting writes: a timestamp of the widest year (`-` and 19 digits) with
    /// a six-digit fraction.
    private static let scratchBytes = 64

    /// Runs `write` on a stack buffer and appends what it wrote to `out`.
    @inline(__always)
    private static func appending(to out: inout [UInt8], _ write: (UnsafeMutablePointer<UInt8>, inout Int) -> Void) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: scratchBytes) { buf in
            guard let p = buf.baseAddress else { return }
            var i = 0
            write(p, &i)
            out.append(contentsOf: UnsafeBufferPointer(start: p, count: i))
        }
    }

    @inline(__always)
    private static func writeDate(_ days: Int64, _ p: UnsafeMutablePointer<UInt8>, _ i: inout Int) {
        let (y, m, d) = civil(days: days)
        if y < 0 {
            p[i] = 45
            i += 1
        }
        if y >= 1000 && y <= 9999 {
            put2(y / 100, p, &i)
            put2(y % 100, p, &i)
        } else {
            put(y.magnitude > UInt64(Int64.max) ? Int64.max : Int64(y.magnitude), width: 4, p, &i)
        }
        p[i] = 45
        i += 1
        put2(m, p, &i)
        p[i] = 45
        i += 1
        put2(d, p, &i)
    }

    @inline(__always)
    private static func writeTime(_ micros: Int64, fractionDigits: Int?, _ p: UnsafeMutablePointer<UInt8>, _ i: inout Int) {
        let secs = micros / microsPerSecond
        let frac = micros % microsPerSecond
        let hours = secs / 3600
        if hours >= 0 && hours < 100 { put2(hours, p, &i) } else { put(hours, width: 2, p, &i) }
        p[i] = 58
        i += 1
        put2(secs / 60 % 60, p, &i)
        p[i] = 58
        i += 1
        put2(secs % 60, p, &i)
        var digits = 6
        if let f = fractionDigits {
            digits = max(f, 0)
            // Never drop non-zero digits: widen until the value is exact.
            var rest = frac
            var needed = 6
            while needed > 0 && rest % 10 == 0 { rest /= 10; needed -= 1 }
            if frac == 0 { needed = 0 }
            digits = max(digits, needed)
        } else {
            if frac == 0 { return }
            var rest = frac
            while digits > 0 && rest % 10 == 0 { rest /= 10; digits -= 1 }
        }
        if digits == 0 { return }
        p[i] = 46
        i += 1
        var scaled = frac
        for _ in 0..<(6 - digits) { scaled /= 10 }
        put(scaled, width: digits, p, &i)
    }

    /// Appends `YYYY-MM-DD` to `out` (no allocation beyond `out`'s growth).
    public static func appendDate(_ days: Int64, into out: inout [UInt8]) {
        appending(to: &out) { p, i in writeDate(days, p, &i) }
    }

    /// `fractionDigits` nil: the shortest exact form (no fraction when zero, trailing zeros trimmed);
    /// 0...6: exactly that many digits (the value must not need more).
    /// Appends `HH:MM:SS[.ffffff]` to `out`.
    public static func appendTime(_ micros: Int64, fractionDigits: Int?, into out: inout [UInt8]) {
        appending(to: &out) { p, i in writeTime(micros, fractionDigits: fractionDigits, p, &i) }
    }

    /// `YYYY-MM-DD`.
    public static func formatDate(_ days: Int64) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(10)
        appendDate(days, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// `HH:MM:SS[.ffffff]`.
    public static func formatTime(_ micros: Int64, fractionDigits: Int? = nil) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(15)
        appendTime(micros, fractionDigits: fractionDigits, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// `YYYY-MM-DD HH:MM:SS[.ffffff]` followed by `utcSuffix` (e.g. `+00:00` or `Z`) when given.
    public static func formatTimestamp(
        _ micros: Int64, fractionDigits: Int? = nil, separator: UInt8 = 32, utcSuffix: String? = nil
    ) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(32)
        appendTimestamp(micros, fractionDigits: fractionDigits, separator: separator, into: &out)
        if let utcSuffix { out.append(contentsOf: utcSuffix.utf8) }
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends `YYYY-MM-DD HH:MM:SS[.ffffff]` to `out`.
    public static func appendTimestamp(_ micros: Int64, fractionDigits: Int? = nil, separator: UInt8 = 32, into out: inout [UInt8]) {
        appending(to: &out) { p, i in i = write(timestamp: micros, fractionDigits: fractionDigits, separator: separator, to: p) }
    }

    /// The most bytes a `write(…to:)` writes.
    public static let maxTextBytes = scratchBytes

    /// Writes `YYYY-MM-DD HH:MM:SS[.ffffff]` at `p` (room for `maxTextBytes`); returns its length.
    @inline(__always)
    public static func write(timestamp micros: Int64, fractionDigits: Int? = nil, separator: UInt8 = 32, to p: UnsafeMutablePointer<UInt8>) -> Int {
        var days = micros / microsPerDay
        var rest = micros % microsPerDay
        if rest < 0 {
            days -= 1
            rest += microsPerDay
        }
        var i = 0
        writeDate(days, p, &i)
        p[i] = separator
        i += 1
        writeTime(rest, fractionDigits: fractionDigits, p, &i)
        return i
    }

    /// Writes `YYYY-MM-DD` at `p` (room for `maxTextBytes`); returns its length.
    @inline(__always)
    public static func write(date days: Int64, to p: UnsafeMutablePointer<UInt8>) -> Int {
        var i = 0
        writeDate(days, p, &i)
        return i
    }

    /// Writes `HH:MM:SS[.ffffff]` at `p` (room for `maxTextBytes`); returns its length.
    @inline(__always)
    public static func write(time micros: Int64, fractionDigits: Int?, to p: UnsafeMutablePointer<UInt8>) -> Int {
        var i = 0
        writeTime(micros, fractionDigits: fractionDigits, p, &i)
        return i
    }

    // MARK: Parsing

    /// What went wrong parsing temporal text; callers add table, column and key.
    public struct ParseError: Error, CustomStringConvertible {
        public var description: String
    }

    private struct Cursor {
        let b: UnsafeRawBufferPointer
        var i = 0
        var atEnd: Bool { i >= b.count }
        var peek: UInt8? { i < b.count ? b[i] : nil }
        mutating func digits(min: Int, max: Int) -> Int64? {
            var v: Int64 = 0
            var n = 0
            while n < max, i < b.count, b[i] >= 48, b[i] <= 57 {
                v = v * 10 + Int64(b[i] - 48)
                i += 1
                n += 1
            }
            return n >= min ? v : nil
        }
        mutating func eat(_ c: UInt8) -> Bool {
            if peek == c { i += 1; return true }
            return false
        }
    }

    private static func parseDatePart(_ c: inout Cursor, _ text: @autoclosure () -> String) throws -> Int64 {
        let negative = c.eat(45)
        guard let y = c.digits(min: 4, max: 9), c.eat(45), let m = c.digits(min: 1, max: 2), c.eat(45),
              let d = c.digits(min: 1, max: 2)
        else { throw ParseError(description: "'\(text())' is not a date of the form YYYY-MM-DD") }
        let year = negative ? -y : y
        guard (1...12).contains(m), d >= 1, d <= daysIn(month: m, year: year) else {
            throw ParseError(description: "'\(text())' is not a valid calendar date")
        }
        return days(year: year, month: m, day: d)
    }

    private static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    private static func parseTimePart(_ c: inout Cursor, _ text: @autoclosure () -> String, allow24: Bool) throws -> Int64 {
        guard let h = c.digits(min: 1, max: 2), c.eat(58), let mi = c.digits(min: 2, max: 2) else {
            throw ParseError(description: "'\(text())' is not a time of the form HH:MM:SS[.ffffff]")
        }
        var s: Int64 = 0
        var micros: Int64 = 0
        if c.eat(58) {
            guard let sv = c.digits(min: 2, max: 2) else {
                throw ParseError(description: "'\(text())' is not a time of the form HH:MM:SS[.ffffff]")
            }
            s = sv
            if c.eat(46) {
                var n = 0
                while let ch = c.peek, ch >= 48, ch <= 57 {
                    c.i += 1
                    if n < 6 {
                        micros = micros * 10 + Int64(ch - 48)
                    } else if ch != 48 {
                        throw ParseError(description: "'\(text())' has more than 6 fractional digits (Ferry carries microseconds)")
                    }
                    n += 1
                }
                guard n > 0 else { throw ParseError(description: "'\(text())' has an empty fraction") }
                if n < 6 { for _ in n..<6 { micros *= 10 } }
            }
        }
        let total = ((h * 60 + mi) * 60 + s) * microsPerSecond + micros
        guard mi < 60, s < 60, h < 24 || (allow24 && total == microsPerDay) else {
            throw ParseError(description: "'\(text())' is not a valid time of day")
        }
        return total
    }

    /// Parses `YYYY-MM-DD`.
    public static func parseDate(_ text: String) throws -> Int64 {
        var t = text
        return try t.withUTF8 { try parseDate(UnsafeRawBufferPointer($0)) }
    }

    /// The value of the `n` ASCII digits at `p + at`; nil when one is not a digit.
    @inline(__always)
    private static func fixedDigits(_ p: UnsafeRawPointer, _ at: Int, _ n: Int) -> Int64? {
        var v: Int64 = 0
        for k in at..<at + n {
            let d = p.load(fromByteOffset: k, as: UInt8.self) &- 48
            if d > 9 { return nil }
            v = v * 10 + Int64(d)
        }
        return v
    }

    /// The days of a valid `YYYY-MM-DD` at `p` (ten bytes there); nil for anything else, which
    /// the general parser reads or refuses. The form every engine writes, read at its fixed
    /// places: the general parser's cursor took ~160 instructions a date and ~430 a timestamp.
    @inline(__always)
    private static func fixedDate(_ p: UnsafeRawPointer) -> Int64? {
        guard p.load(fromByteOffset: 4, as: UInt8.self) == 45, p.load(fromByteOffset: 7, as: UInt8.self) == 45,
            let y = fixedDigits(p, 0, 4), let m = fixedDigits(p, 5, 2), let d = fixedDigits(p, 8, 2),
            m >= 1, m <= 12, d >= 1, d <= daysIn(month: m, year: y)
        else { return nil }
        return days(year: y, month: m, day: d)
    }

    /// The microseconds of a valid `YYYY-MM-DD HH:MM:SS[.f…]` (a space or `T`, one to six
    /// fractional digits, no offset) spelled by `b`; nil for anything else (see `fixedDate`).
    @inline(__always)
    private static func fixedTimestamp(_ b: UnsafeRawBufferPointer) -> Int64? {
        guard b.count >= 19, b.count <= 26, b.count != 20, let p = b.baseAddress, let days = fixedDate(p) else { return nil }
        let t = p.load(fromByteOffset: 10, as: UInt8.self)
        guard t == 32 || t == 84, p.load(fromByteOffset: 13, as: UInt8.self) == 58, p.load(fromByteOffset: 16, as: UInt8.self) == 58,
            let h = fixedDigits(p, 11, 2), let mi = fixedDigits(p, 14, 2), let s = fixedDigits(p, 17, 2), h < 24, mi < 60, s < 60
        else { return nil }
        var micros: Int64 = 0
        if b.count > 19 {
            guard p.load(fromByteOffset: 19, as: UInt8.self) == 46, let f = fixedDigits(p, 20, b.count - 20) else { return nil }
            micros = f
            for _ in b.count..<26 { micros *= 10 }
        }
        return days * microsPerDay + ((h * 60 + mi) * 60 + s) * microsPerSecond + micros
    }

    /// Parses `YYYY-MM-DD` from UTF-8 bytes.
    public static func parseDate(_ bytes: UnsafeRawBufferPointer) throws -> Int64 {
        if bytes.count == 10, let p = bytes.baseAddress, let d = fixedDate(p) { return d }
        let text = { String(decoding: bytes, as: UTF8.self) }
        var c = Cursor(b: bytes)
        let d = try parseDatePart(&c, text())
        guard c.atEnd else { throw ParseError(description: "'\(text())' is not a date of the form YYYY-MM-DD") }
        return d
    }

    /// Parses `HH:MM[:SS[.ffffff]]` (24:00:00 allowed, as PostgreSQL and MySQL allow it).
    public static func parseTime(_ text: String) throws -> Int64 {
        var t = text
        return try t.withUTF8 { try parseTime(UnsafeRawBufferPointer($0)) }
    }

    /// Parses `HH:MM[:SS[.ffffff]]` from UTF-8 bytes.
    public static func parseTime(_ bytes: UnsafeRawBufferPointer) throws -> Int64 {
        let text = { String(decoding: bytes, as: UTF8.self) }
        var c = Cursor(b: bytes)
        let t = try parseTimePart(&c, text(), allow24: true)
        guard c.atEnd else { throw ParseError(description: "'\(text())' is not a time of the form HH:MM:SS[.ffffff]") }
        return t
    }

    /// Parses `YYYY-MM-DD[( |T)HH:MM[:SS[.ffffff]]][Z|±HH[:MM]]`; an offset is applied, so the
    /// result is UTC when one is present. `hadOffset` tells whether the text carried one.
    public static func parseTimestamp(_ text: String) throws -> (micros: Int64, hadOffset: Bool) {
        var t = text
        return try t.withUTF8 { try parseTimestamp(UnsafeRawBufferPointer($0)) }
    }

    /// Parses a timestamp from UTF-8 bytes (see `parseTimestamp(_: String)`).
    public static func parseTimestamp(_ bytes: UnsafeRawBufferPointer) throws -> (micros: Int64, hadOffset: Bool) {
        if let micros = fixedTimestamp(bytes) { return (micros, false) }
        let text = { String(decoding: bytes, as: UTF8.self) }
        var c = Cursor(b: bytes)
        let d = try parseDatePart(&c, text())
        var micros: Int64 = 0
        if c.eat(32) || c.eat(84) {
            micros = try parseTimePart(&c, text(), allow24: false)
        }
        var hadOffset = false
        if c.eat(90) {
            hadOffset = true
        } else if let sign = c.peek, sign == 43 || sign == 45 {
            c.i += 1
            guard let oh = c.digits(min: 2, max: 2) else {
                throw ParseError(description: "'\(text())' has a malformed UTC offset")
            }
            _ = c.eat(58)
            let om = c.digits(min: 2, max: 2) ?? 0
            let offset = (oh * 60 + om) * 60 * microsPerSecond
            micros -= sign == 43 ? offset : -offset
            hadOffset = true
        }
        guard c.atEnd else { throw ParseError(description: "'\(text())' is not a timestamp of the form YYYY-MM-DD HH:MM:SS[.ffffff]") }
        let (r, overflow) = d.multipliedReportingOverflow(by: microsPerDay)
        guard !overflow else { throw ParseError(description: "'\(text())' is out of range") }
        return (r + micros, hadOffset)
    }
}
