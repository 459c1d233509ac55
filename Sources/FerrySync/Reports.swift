import FerryCore
import Foundation

/// What a push or pull does with a row changed on both sides.
public enum ConflictPolicy: String, Sendable, Codable, CaseIterable {
    /// Nothing is applied; every conflict is listed (the default).
    case fail
    /// The local row wins.
    case local
    /// The origin's row wins and replaces the local one.
    case origin
    /// Column by column: changes to different columns are both kept; the same column changed
    /// on both sides (or a row deleted on one side) is a conflict as under `fail`.
    case merge
}

/// A row changed on both sides since the last sync.
public struct SyncConflict: Sendable, Codable {
    public var table: String
    /// The key, column by column (`AlbumId=3`).
    public var key: String
    /// `update/update`, `update/delete`, `delete/update`, `insert/insert`… (local/origin).
    public var kind: String
    /// The columns that differ between the three images (all of them when a row is missing
    /// on one side), with the local, base and origin values (nil: NULL or no row).
    public var columns: [Values]
    /// How the policy resolved it; nil when it was not (the push or pull applied nothing).
    public var resolution: String?

    public struct Values: Sendable, Codable {
        public var column: String
        public var local: String?
        public var base: String?
        public var origin: String?
    }

    /// One line: `table Track (TrackId=3), update/update: Name local 'A' base 'B' origin 'C'`.
    public var line: String {
        "table \(table) \(key), \(kind) (local/origin): "
            + columns.map { "\($0.column) local \($0.local ?? "–") base \($0.base ?? "–") origin \($0.origin ?? "–")" }.joined(separator: "; ")
            + (resolution.map { " → \($0)" } ?? "")
    }
}

/// Pending local changes, as `ferry status` shows them.
public struct StatusReport: Sendable, Codable {
    public var file: String
    public var origin: String
    public var created: String?
    public var lastPush: String?
    public var lastPull: String?
    /// A push whose origin commit is not yet known here (finished by the next push).
    public var pushInFlight: String?
    /// All pending changes, every table.
    public var pending: Int
    public var tables: [Table]
    public struct Table: Sendable, Codable {
        public var name: String
        public var inserts: Int
        public var updates: Int
        public var deletes: Int
        /// With `--verbose`: each pending row's kind and key.
        public var keys: [PendingKey]?
    }
    public struct PendingKey: Sendable, Codable {
        public var kind: ChangeKind
        public var key: String
    }
}

/// What a push did.
public struct PushReport: Sendable, Codable {
    public var origin: String
    /// The id recorded at the origin in the push's transaction (nil when nothing was sent).
    public var pushId: String?
    /// True when the origin committed the changes (false: conflicts stopped it, nothing applied).
    public var applied: Bool
    /// A push interrupted earlier that the origin had committed, finished here.
    public var recovered: String?
    public var tables: [Table]
    public var rekeyed: [Rekey]
    public var conflicts: [SyncConflict]
    public var seconds: Double
    public struct Table: Sendable, Codable {
        public var name: String
        public var inserted: Int64
        public var updated: Int64
        public var deleted: Int64
    }
    public struct Rekey: Sendable, Codable {
        public var table: String
        public var old: Int64
        public var new: Int64
    }
    public var unresolved: Int { conflicts.filter { $0.resolution == nil }.count }
}

/// What a pull did.
public struct PullReport: Sendable, Codable {
    public var origin: String
    /// True when the snapshot took the origin's changes (false: conflicts stopped it).
    public var applied: Bool
    public var tables: [Table]
    public var conflicts: [SyncConflict]
    public var seconds: Double
    public struct Table: Sendable, Codable {
        public var name: String
        public var inserted: Int64 = 0
        public var updated: Int64 = 0
        public var deleted: Int64 = 0
        /// Origin rows read (of differing buckets) and digest levels compared.
        public var rowsRead: Int64 = 0
        public var levels = 0
        /// Columns added at the origin and added to the snapshot.
        public var columnsAdded: [String] = []
    }
    public var unresolved: Int { conflicts.filter { $0.resolution == nil }.count }
}

/// `ferry sync`: a push, then a pull.
public struct SyncReport: Sendable, Codable {
    public var push: PushReport
    public var pull: PullReport?
    public var unresolved: Int { push.unresolved + (pull?.unresolved ?? 0) }
}

extension Value {
    /// The value as a report shows it; nil for NULL.
    var shown: String? { isNull ? nil : description }
}

enum Shown {
    static func key(_ names: [String], _ values: [Value]) -> String {
        "(" + zip(names, values).map { "\($0)=\($1.description)" }.joined(separator: ", ") + ")"
    }

    /// The conflict between local `l`, base `b` and origin `o` (nil: no row).
    static func conflict(_ table: SyncedTable, columns: [Column], key: [Value], local l: [Value]?, base b: [Value]?, origin o: [Value]?) -> SyncConflict {
        /// What a side did to the row since its base.
        func kind(_ row: [Value]?) -> String {
            row == nil ? (b == nil ? "none" : "delete") : (b == nil ? "insert" : "update")
        }
        var values: [SyncConflict.Values] = []
        for (i, c) in columns.enumerated() {
            let lv = l?[i], bv = b?[i], ov = o?[i]
            let differs = !(Row.same(lv ?? .null, bv ?? .null) && Row.same(ov ?? .null, bv ?? .null)) || l == nil || o == nil || b == nil
            if differs { values.append(.init(column: c.name, local: lv?.shown, base: bv?.shown, origin: ov?.shown)) }
        }
        return SyncConflict(
            table: table.local, key: Shown.key(table.key, key), kind: kind(l) + "/" + kind(o), columns: values, resolution: nil)
    }
}
