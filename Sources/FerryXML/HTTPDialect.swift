import FerryCore
import Foundation

/// The service's naming rules on the client side: Ferry quotes nothing itself (names travel in
/// URLs and XML); DDL is not transactional across requests, so a failed create is dropped.
public struct HTTPDialect: Dialect {
    /// The engine whose stored form the service or plugin reads and writes, as it declared
    /// (`stored-form` in its capabilities); nil when it declared none.
    public let storedForm: Engine?
    public init(storedForm: Engine? = nil) { self.storedForm = storedForm }
    public var engine: Engine { .http }
    /// The service checks names against its own engine's limits.
    public var identifierLimit: IdentifierLimit { .unlimited }
    /// Values from a database of the engine behind the service keep their stored form when the
    /// service declared it (SQLite served, SQLite on the other side).
    public func keepsStoredForm(fromEngine engine: Engine) -> Bool { storedForm == engine }
    public var supportsTransactionalDDL: Bool { false }
    /// Upserts and deletes travel as change sets (`POST …/changes`); the service's own engine
    /// writes them in its syntax, and likewise enumerations and serial columns.
    public var upsertSyntax: UpsertSyntax { .driverDefined }
    public var enumSyntax: EnumSyntax { .driverDefined }
    public var identitySyntax: IdentitySyntax { .driverDefined }
    /// The engine behind the service may be MySQL, which needs them: widening an integer end of
    /// a foreign key loses nothing anywhere.
    public var foreignKeysNeedEqualTypes: Bool { true }
    /// Reads page by key range or key-hash bucket; a key list is not a service parameter.
    public var selectsByKeyList: Bool { false }
}

extension Engine {
    /// Ferry's XML service, seen from the client (a schema it describes names the engine behind it).
    public static let http = Engine("http")
}
