/// A value in the stored form of an engine whose columns hold values of any storage class
/// (SQLite; `Dialect.keepsStoredForm`): one tag byte, then the payload — `i` INTEGER (8 bytes,
/// big-endian two's complement), `r` REAL (8 bytes, big-endian IEEE 754 bits), `t` TEXT (UTF-8),
/// `b` BLOB. Such values travel as binary (`ReadHints.storedForm`) and only the engine's own
/// driver reads or writes them; this is how everyone else shows them.
public enum StoredValue {
    // Computed and inlinable, not stored: another module's read of a stored `static let` goes
    // through its lazy initializer (`swift_once`) on every value.
    @inlinable public static var integer: UInt8 { 0x69 }  // "i"
    @inlinable public static var real: UInt8 { 0x72 }  // "r"
    @inlinable public static var text: UInt8 { 0x74 }  // "t"
    @inlinable public static var blob: UInt8 { 0x62 }  // "b"

    /// The value in one line (`12`, `1.5`, `'12:00:00.500000'`, `x'00ff'`); nil when `bytes`
    /// is not a stored value.
    public static func describe(_ bytes: [UInt8]) -> String? {
        guard let tag = bytes.first else { return nil }
        let payload = Array(bytes.dropFirst())
        func word() -> UInt64 { payload.reduce(0) { $0 << 8 | UInt64($1) } }
        switch tag {
        case integer where payload.count == 8: return String(Int64(bitPattern: word()))
        case real where payload.count == 8: return String(Double(bitPattern: word()))
        case text: return Value.text(String(decoding: payload, as: UTF8.self)).description
        case blob: return Value.binary(payload).description
        default: return nil
        }
    }
}
