/// What a connection can do, as a plugin or a service declares it (`GET /v1/capabilities`,
/// docs/plugins.md). Built-in drivers can do everything; the planner refuses, before anything
/// is written, work that needs what a connection did not declare.
public struct Capabilities: OptionSet, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// Tables, schemas, counts and rows can be read.
    public static let source = Capabilities(rawValue: 1 << 0)
    /// Tables can be created, dropped, swapped, filled and merged.
    public static let target = Capabilities(rawValue: 1 << 1)
    /// Rows come in key order and page by key (bounds, largest-first, key-hash buckets).
    public static let keyedReads = Capabilities(rawValue: 1 << 2)
    /// Range digests are computed next to the data, and key-hash bucket filters applied there,
    /// in the digests' second form (wire name `digests-2`: integer key hashes, `keyhash=` and
    /// `delimited=`, one 64-bit sum). A peer declaring only the first form's `digests` has its
    /// digests computed and its buckets filtered by Ferry, beside it.
    public static let digests = Capabilities(rawValue: 1 << 3)
    /// A read snapshot can be held and shared by every connection of a run.
    public static let snapshots = Capabilities(rawValue: 1 << 4)
    /// Keyed writes (upsert, delete by key), applied all or nothing.
    public static let keyedWrites = Capabilities(rawValue: 1 << 5)
    /// Guarded multi-table pushes in one transaction (offline sync).
    public static let atomicPush = Capabilities(rawValue: 1 << 6)

    /// A change feed (`ferry replicate` from it): a capture started with the snapshot where its
    /// stream begins, and the stream read in commit order.
    public static let changeFeed = Capabilities(rawValue: 1 << 7)
    /// A replica's changes of several tables and its record applied in one transaction
    /// (`ferry replicate` into it).
    public static let replicaApply = Capabilities(rawValue: 1 << 8)
    /// Rows read only above a value of one column (`sincecolumn=`, `since=`): an incremental
    /// copy's watermark, as structured parameters (never SQL).
    public static let sinceFilter = Capabilities(rawValue: 1 << 9)
    /// An apply of a table's staged upserts that moves an incremental copy's watermark in the
    /// same transaction, only if it still holds the value the copy read (`watermark=` on `…/apply`).
    public static let applyWatermark = Capabilities(rawValue: 1 << 10)
    /// Rows the database refuses in a load are set aside on the service's side and sent back
    /// with their reasons instead of failing it (`reject=N` on `…/rows`, `…/merge` and
    /// `…/apply`): `ferry copy --on-error reject` into it.
    public static let rejects = Capabilities(rawValue: 1 << 11)

    public static let all: Capabilities = [
        .source, .target, .keyedReads, .digests, .snapshots, .keyedWrites, .atomicPush, .changeFeed, .replicaApply, .sinceFilter, .applyWatermark, .rejects,
    ]

    /// Wire names, in documentation order.
    public static let names: [(String, Capabilities)] = [
        ("source", .source), ("target", .target), ("keyed-reads", .keyedReads), ("digests-2", .digests),
        ("snapshots", .snapshots), ("keyed-writes", .keyedWrites), ("atomic-push", .atomicPush),
        ("change-feed", .changeFeed), ("replica-apply", .replicaApply), ("since-filter", .sinceFilter), ("apply-watermark", .applyWatermark),
        ("rejects", .rejects),
    ]

    /// The wire names of these capabilities.
    public var list: [String] { Self.names.filter { contains($0.1) }.map(\.0) }

    public var description: String { list.isEmpty ? "none" : list.joined(separator: ", ") }

    /// Refuses, naming `what` needs `needed` and where: "… does not declare keyed-writes, which
    /// upsert needs".
    public func require(_ needed: Capabilities, for what: String, endpoint: String) throws {
        let missing = needed.subtracting(self)
        guard missing.isEmpty else {
            throw FerryError.invalidOption(
                "\(endpoint) does not declare \(missing.list.joined(separator: " and ")), which \(what) needs; nothing was written (its capabilities: \(description))")
        }
    }
}
