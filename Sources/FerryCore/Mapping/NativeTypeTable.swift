/// One built-in type of an engine, as data: how a column of it is declared, the logical type
/// the driver's catalog gives it, and sample values (SQL expressions in that engine) covering
/// its edges. Each driver keeps one table of these (`…TypeMap.nativeTypes`); the fidelity
/// matrix creates a column per entry, checks the catalog's logical type, carries the samples
/// to every other engine and back, and docs/type-mapping.md is rendered from the tables.
public struct NativeTypeEntry: Sendable {
    /// The column declaration, e.g. `varchar(20)`, `tinyint(1)`, `numeric(38,10)`.
    public var declaration: String
    /// What the catalog maps it to; `.unsupported` entries are skipped unless a cast says otherwise.
    public var logical: LogicalType
    /// Two SQL expressions for two rows (a third row holds NULL).
    public var samples: [String]
    /// Engines (driver names) that must refuse the samples with an error naming table, column
    /// and key — a value they cannot hold exactly — unless a cast allows the change.
    public var refusedBy: [String]
    /// One line for the docs.
    public var note: String

    public init(_ declaration: String, _ logical: LogicalType, _ samples: [String], refusedBy: [String] = [], note: String = "") {
        self.declaration = declaration
        self.logical = logical
        self.samples = samples
        self.refusedBy = refusedBy
        self.note = note
    }
}

/// Renders the per-engine mapping tables of docs/type-mapping.md from the drivers' data.
public enum TypeMappingDocument {
    /// One engine's part of the document.
    public struct Section: Sendable {
        public var title: String
        public var entries: [NativeTypeEntry]
        public var dialect: any Dialect
        public init(title: String, entries: [NativeTypeEntry], dialect: any Dialect) {
            self.title = title
            self.entries = entries
            self.dialect = dialect
        }
    }

    public static let beginMarker = "<!-- generated from the drivers' nativeTypes tables: do not edit by hand (scripts/gen-type-docs) -->"
    public static let endMarker = "<!-- end of generated tables -->"

    /// One markdown table per source engine: native type → logical type → what each target creates.
    public static func render(_ engines: [Section]) -> String {
        var out = [beginMarker, ""]
        for source in engines {
            out.append("### From \(source.title)")
            out.append("")
            var header = "| \(source.title) type | logical type |"
            var rule = "|---|---|"
            for t in engines {
                header += " → \(t.title) |"
                rule += "---|"
            }
            out.append(header + " notes |")
            out.append(rule + "---|")
            for e in source.entries {
                var row = "| `\(e.declaration)` | "
                if case .unsupported = e.logical {
                    row += "none |"
                    let column = Column(name: "c", nativeType: e.declaration, logicalType: e.logical)
                    for t in engines {
                        row += t.dialect.carriesNatively(column, fromEngine: source.dialect.engine) ? " same (native form) |" : " — |"
                    }
                    let cast = "skipped where — ; `--cast 'type \(NativeTypeName(e.declaration).base) to text'` carries its text form"
                    out.append(row + " " + (e.note.isEmpty ? cast : e.note + "; " + cast) + " |")
                    continue
                }
                row += "\(e.logical) |"
                for t in engines {
                    if t.dialect.engine == source.dialect.engine {
                        row += " same |"
                    } else if e.refusedBy.contains(t.dialect.engine.rawValue) {
                        row += " " + (t.dialect.ddlType(for: e.logical).map { "`\($0)`, " } ?? "") + "wider values refused¹ |"
                    } else if case .enumeration = e.logical, t.dialect.ddlType(for: e.logical) == nil {
                        row += " enum type |"
                    } else {
                        row += " " + (t.dialect.ddlType(for: e.logical).map { "`\($0)`" } ?? "—") + " |"
                    }
                }
                out.append(row + " \(e.note) |")
            }
            out.append("")
        }
        out.append("¹ The target cannot hold these values exactly: the copy stops with an error naming table, column and key; "
            + "a cast (e.g. `--cast 'column t.c to text'`) carries them changed, on purpose.")
        out.append("")
        out.append("### Transforms a cast rule can apply (`using …`)")
        out.append("")
        out.append("| transform | what it does |")
        out.append("|---|---|")
        for t in CastTransform.allCases { out.append("| `\(t.rawValue)` | \(t.summary) |") }
        out.append("")
        out.append(endMarker)
        return out.joined(separator: "\n")
    }

    /// `document` with its generated section replaced by `generated`; nil when the markers are missing.
    public static func replacingGenerated(in document: String, with generated: String) -> String? {
        guard let b = document.range(of: beginMarker), let e = document.range(of: endMarker), b.lowerBound < e.lowerBound else {
            return nil
        }
        return String(document[..<b.lowerBound]) + generated + String(document[e.upperBound...])
    }
}
