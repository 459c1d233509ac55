import Foundation

/// The user's cast rules in order (first match wins), and what they decide for each column.
public struct CastRuleSet: Sendable {
    public var rules: [CastRule]

    public init(_ rules: [CastRule] = []) {
        self.rules = rules
    }

    /// Parses `--cast` options (each one rule) and `--casts FILE`s (one rule per line; blank
    /// lines and lines starting with `#` or `--` are ignored), options first.
    public static func load(options: [String], files: [String]) throws -> CastRuleSet {
        var rules: [CastRule] = []
        for (i, text) in options.enumerated() {
            rules.append(try CastRule(parsing: text, origin: "--cast #\(i + 1)"))
        }
        for file in files {
            let data: Data
            do {
                data = try Data(contentsOf: URL(fileURLWithPath: file))
            } catch {
                throw FerryError.invalidOption("cannot read --casts file '\(file)': \((error as NSError).localizedDescription)")
            }
            guard let text = String(data: data, encoding: .utf8) else {
                throw FerryError.invalidOption("--casts file '\(file)' is not UTF-8 text")
            }
            for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                var l = line.trimmingCharacters(in: .whitespacesAndNewlines)
                if l.isEmpty || l.hasPrefix("#") || l.hasPrefix("--") { continue }
                if l.hasSuffix(",") || l.hasSuffix(";") { l.removeLast() }
                rules.append(try CastRule(parsing: l, origin: "\(file):\(n + 1)"))
            }
        }
        return CastRuleSet(rules)
    }

    /// What happens to one column: read how, written as what, and which rule said so.
    public struct Resolution: Sendable {
        /// Index of the deciding rule; nil when the type map decided.
        public var ruleIndex: Int?
        public var decision: ColumnDecision
        /// The column as the reader is asked for it; nil when the column is skipped.
        public var read: Column?
        /// The column as the target gets it; nil when skipped.
        public var write: Column?
        public var skipReason: String?
        /// Transforms to apply between reading and writing (empty when none).
        public var transforms: [CastTransform]

        /// True when values must pass through `ValueConversion` between reader and writer.
        public var converts: Bool {
            guard let read, let write else { return false }
            return read.logicalType != write.logicalType || transforms.contains { $0 != .zeroDatesToNull }
        }
    }

    /// Decides `column` of `table` (described by the `engine` driver). `target` checks native
    /// types a rule names; without one (`ferry describe`) they are shown as named.
    public func resolve(_ column: Column, in table: TableName, engine: Engine, target: (any Dialect)?) throws -> Resolution {
        let mapName = "\(engine) type map"
        guard let index = rules.firstIndex(where: { $0.matches(column, in: table) }) else {
            // Between two databases of an engine whose stored form is the value (SQLite): every
            // column keeps it, byte for byte. Serial integers are the exception that needs none
            // (a rowid is always an INTEGER) and stay typed, so the target's serial is planned.
            if !column.generated, !column.isSerial, let target, target.keepsStoredForm(fromEngine: engine) {
                let carried = column.storedForm
                return Resolution(
                    ruleIndex: nil,
                    decision: ColumnDecision(
                        column: column.name, nativeType: column.nativeType, logicalType: column.logicalType,
                        targetType: (column.nativeType.isEmpty ? "(no type)" : column.nativeType) + " (stored form)",
                        decidedBy: mapName + ", same engine"),
                    read: carried, write: carried, skipReason: nil, transforms: [])
            }
            // Same engine on both sides: a type with no logical type keeps its native type, its
            // values their native binary form.
            if !column.logicalType.isSupported, !column.generated, let target, target.carriesNatively(column, fromEngine: engine),
               NativeTypeName.isPlainDeclaration(column.nativeType)
            {
                var carried = column
                carried.logicalType = .binary(maxLength: nil)
                carried.readHints.insert(.nativeForm)
                var write = carried
                write.declaredType = column.nativeType
                write.defaultExpression = nil
                write.defaultValue = nil
                return Resolution(
                    ruleIndex: nil,
                    decision: ColumnDecision(
                        column: column.name, nativeType: column.nativeType, logicalType: column.logicalType,
                        targetType: column.nativeType + " (native form)", decidedBy: mapName + ", same engine"),
                    read: carried, write: write, skipReason: nil, transforms: [])
            }
            var reason: String?
            if case .unsupported(let native) = column.logicalType {
                reason = SkippedColumn.unsupportedReason(native) + " (--cast 'type \(native) to text' would carry its text form)"
            } else if column.generated {
                reason = SkippedColumn.generatedReason
            }
            return Resolution(
                ruleIndex: nil,
                decision: ColumnDecision(
                    column: column.name, nativeType: column.nativeType, logicalType: column.logicalType,
                    targetType: reason == nil ? column.logicalType.description : "skip", decidedBy: mapName),
                read: reason == nil ? column : nil, write: reason == nil ? column : nil, skipReason: reason, transforms: [])
        }
        let rule = rules[index]
        func decision(_ target: String) -> ColumnDecision {
            ColumnDecision(
                column: column.name, nativeType: column.nativeType, logicalType: column.logicalType, targetType: target,
                decidedBy: "cast rule \(rule)", transforms: rule.transforms)
        }
        if column.generated {
            return Resolution(
                ruleIndex: index, decision: decision("skip"), read: nil, write: nil,
                skipReason: SkippedColumn.generatedReason + " (cast rule \(rule) not applied)", transforms: [])
        }

        let targetLogical: LogicalType
        var declared: String?
        switch rule.target {
        case .skip:
            return Resolution(
                ruleIndex: index, decision: decision("skip"), read: nil, write: nil,
                skipReason: "skipped by cast rule \(rule)", transforms: [])
        case .logical(let t):
            targetLogical = t
        case .native(let name):
            guard let target else {
                // No target to ask (ferry describe): show the rule's choice as written.
                return Resolution(ruleIndex: index, decision: decision(name + " (target type)"), read: column, write: column,
                                  skipReason: nil, transforms: rule.transforms)
            }
            guard let t = target.logicalType(forDeclaredType: name) else {
                throw FerryError.invalidOption(
                    "cast rule \(rule): the target has no type '\(name)' Ferry can write; name a logical type (\(LogicalType.parseableNames)) or another native type")
            }
            targetLogical = t
            declared = name
        }

        // How to read it: a type without a logical type is read in the engine's own JSON or text
        // form; any other is read as usual and converted (canonical text, JSON scalars), the same
        // from every engine and through the XML service.
        var read = column
        if !column.logicalType.isSupported {
            if case .json = targetLogical {
                read.logicalType = .json
                read.readHints.insert(.jsonForm)
            } else {
                read.logicalType = .text
                read.readHints.insert(.textForm)
            }
        }
        for t in rule.transforms {
            guard t.accepts(read.logicalType) else {
                throw FerryError.invalidOption(
                    "cast rule \(rule): transform \(t.rawValue) does not apply to \(table).\(column.name) (\(column.nativeType), read as \(read.logicalType))")
            }
            if t == .zeroDatesToNull { read.readHints.insert(.zeroDatesAsNull) }
        }

        var write = column
        write.logicalType = targetLogical
        write.declaredType = declared
        write.nativeType = declared ?? ""  // the target's type map decides
        write.defaultExpression = nil
        if write.logicalType != column.logicalType { write.defaultValue = nil }
        if write.isSerial, targetLogical.integerRange == nil || targetLogical == .boolean { write.serial = nil }
        return Resolution(
            ruleIndex: index, decision: decision(declared.map { "\($0) (\(targetLogical))" } ?? targetLogical.description),
            read: read, write: write, skipReason: nil, transforms: rule.transforms)
    }

    /// Every column of a table decided at once (those `including` accepts, in order): what the
    /// reader reads, what the target gets, the conversions between them (indexed by position in
    /// `read`), each column's decision, the skipped columns, and the rules that decided any.
    public struct TableResolution: Sendable {
        public var read: [Column] = []
        public var write: [Column] = []
        public var conversions: [ColumnConversion] = []
        public var decisions: [ColumnDecision] = []
        public var skipped: [SkippedColumn] = []
        public var usedRules = Set<Int>()
    }

    public func resolve(
        _ schema: TableSchema, target: (any Dialect)?, including: (Column) -> Bool = { _ in true }
    ) throws -> TableResolution {
        var t = TableResolution()
        for column in schema.columns where including(column) {
            let r = try resolve(column, in: schema.name, engine: schema.engine, target: target)
            if let i = r.ruleIndex { t.usedRules.insert(i) }
            t.decisions.append(r.decision)
            guard let read = r.read, let write = r.write else {
                t.skipped.append(SkippedColumn(column: column.name, reason: r.skipReason ?? "skipped"))
                continue
            }
            if r.converts {
                t.conversions.append(ColumnConversion(index: t.read.count, from: read.logicalType, to: write.logicalType, transforms: r.transforms))
            }
            t.read.append(read)
            t.write.append(write)
        }
        return t
    }

    /// Rules that decided no column, as warnings.
    public func unused(_ used: Set<Int>) -> [String] {
        rules.indices.filter { !used.contains($0) }.map { "cast rule \(rules[$0]) matched no column" }
    }
}

/// Which type a column gets on the target and who decided it: the source's type map or a
/// cast rule. Shown by `ferry describe` and `ferry copy --dry-run`.
public struct ColumnDecision: Sendable, Codable, Hashable {
    public var column: String
    public var nativeType: String
    /// The logical type the source's type map gives the column.
    public var logicalType: LogicalType
    /// What the target gets: a logical type, a native type of the target, or `skip`.
    public var targetType: String
    /// `postgres type map`, or `cast rule --cast #1 'type int[] to text'`.
    public var decidedBy: String
    public var transforms: [CastTransform] = []
    /// Why the target column is nullable although the source's is NOT NULL (values read as NULL).
    public var madeNullable: String?
}

/// One column converted between reader and writer.
public struct ColumnConversion: Sendable, Codable {
    /// Position among the plan's read columns.
    public var index: Int
    public var from: LogicalType
    public var to: LogicalType
    public var transforms: [CastTransform]
}
