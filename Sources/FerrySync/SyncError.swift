import FerryCore

/// What can go wrong in a snapshot, a push or a pull — each one line a user can act on.
public enum SyncError: Error, CustomStringConvertible, Sendable {
    /// FILE is not a snapshot Ferry made (or was made by a newer Ferry).
    case notASnapshot(path: String, reason: String)
    /// FILE exists already; a snapshot never overwrites a file.
    case fileExists(path: String)
    /// Tables that cannot be synchronised (no key, a name used twice).
    case tablesRefused([String])
    /// The origin's table no longer matches the snapshot's copy of its schema.
    case schemaDrift(table: TableName, reason: String)
    /// The origin cannot take a push this way.
    case originCannotPush(origin: String, reason: String)
    /// The origin refused the push (a constraint, a lost connection): it applied none of it.
    case pushFailed(origin: String, reason: String)
    /// The push was sent and its answer lost, and the origin could not be asked whether it
    /// committed: the next push or pull finds out (the push id is recorded in the file).
    case pushUnsettled(origin: String, reason: String)
    /// A push or pull stopped before it changed anything: conflicts under `--on-conflict fail`.
    case conflicts(count: Int)

    public var description: String {
        switch self {
        case let .notASnapshot(path, reason):
            return "\(path) is not a Ferry snapshot: \(reason) (make one with `ferry snapshot ORIGIN \(path)`)"
        case let .fileExists(path):
            return "\(path) exists already; a snapshot is always a new file (choose another name, or delete it first)"
        case let .tablesRefused(reasons):
            return "these tables cannot be synchronised: " + reasons.joined(separator: "; ")
        case let .schemaDrift(table, reason):
            return "table \(table) changed at the origin since the snapshot: \(reason); nothing was pulled and pending local changes are kept (push them first, then take a new snapshot)"
        case let .originCannotPush(origin, reason):
            return "cannot push to \(origin): \(reason); pending local changes are kept"
        case let .pushFailed(origin, reason):
            return "push to \(origin) failed and applied nothing; pending local changes are kept: \(reason)"
        case let .pushUnsettled(origin, reason):
            return "push to \(origin) was sent but its answer was lost (\(reason)); the next push or pull asks the origin whether it committed and settles it; pending local changes are kept until then"
        case let .conflicts(count):
            return "\(count) conflict\(count == 1 ? "" : "s"); nothing was applied (see the list above, or choose --on-conflict local|origin|merge)"
        }
    }
}
