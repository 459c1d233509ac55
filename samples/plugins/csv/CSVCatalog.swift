import FerryCore
import FerryXML
import Foundation

/// The folder as a catalog: which files are tables, where a table's files are, and its schema
/// (from its sidecar, or inferred from its rows).
///
/// | file | holds |
/// |---|---|
/// | `NAME.csv` | the table `NAME`: a header row of column names, then one record per row |
/// | `NAME.schema.xml` | its schema, `XMLDocuments.schema` (types, keys, nullability, serial columns) |
/// | `.NAME.csv.tmp-…`, `.NAME.schema.xml.tmp-…` | a transaction's new state, renamed over the table's files at commit |
/// | `.NAME.csv.run-…` | a sorted run of an external sort, while a write sorts |
struct CSVCatalog: Sendable {
    /// The folder, as the URL gave it.
    let directory: String
    /// The endpoint as printed (for messages).
    let endpoint: String

    static let engine = Engine("csv")
    /// A folder has no schemas; unqualified names and `main.NAME` are its tables.
    static let defaultSchema = "main"
    /// Longest table name in UTF-8 bytes: `.NAME.schema.xml.tmp-XXXXXXXX` must fit in 255.
    static let maxNameBytes = 200

    // MARK: Names and paths

    /// The file name stem of table `name`; nil when no file in the folder can be that table:
    /// names holding `/`, `\`, `..` or NUL, or starting with `.` would leave the folder or
    /// collide with the driver's own files.
    static func stem(_ name: TableName) -> String? {
        if let schema = name.schema, schema != defaultSchema { return nil }
        return isValidStem(name.name) ? name.name : nil
    }

    static func isValidStem(_ s: String) -> Bool {
        // Bytes, not characters: String's `contains("/")` compares characters, and `/` followed
        // by a combining mark is one character that is not "/" — yet a path separator.
        let bytes = Array(s.utf8)
        guard !bytes.isEmpty, bytes.count <= maxNameBytes, bytes[0] != 0x2E else { return false }
        for (i, b) in bytes.enumerated() {
            if b == 0x2F || b == 0x5C || b == 0 { return false }
            if b == 0x2E && i > 0 && bytes[i - 1] == 0x2E { return false }
        }
        return true
    }

    func csvPath(_ stem: String, in root: String? = nil) -> String { join(root ?? directory, stem + ".csv") }
    func schemaPath(_ stem: String, in root: String? = nil) -> String { join(root ?? directory, stem + ".schema.xml") }

    /// A new temporary name in the folder (the same file system, so a rename can replace the
    /// table's file): `.NAME.csv.tmp-…`, `.NAME.schema.xml.tmp-…`, `.NAME.csv.run-…`.
    func temporaryPath(_ stem: String, _ kind: String) -> String {
        join(directory, "." + stem + "." + kind + "-" + CSVFileSystem.randomSuffix())
    }

    private func join(_ folder: String, _ name: String) -> String {
        folder.hasSuffix("/") ? folder + name : folder + "/" + name
    }

    /// Stems of the tables in `root` (default: the folder): every `NAME.csv` whose name can
    /// be a table.
    func stems(in root: String? = nil) throws -> [String] {
        let folder = root ?? directory
        return try CSVFileSystem.entries(folder).compactMap { file -> String? in
            let bytes = Array(file.utf8)
            guard bytes.count > 4, bytes.suffix(4).elementsEqual(".csv".utf8) else { return nil }
            let stem = String(decoding: bytes.dropLast(4), as: UTF8.self)
            // A file name that is not UTF-8 cannot be a table's name (nor be found again by it).
            guard stem.utf8.elementsEqual(bytes.dropLast(4)) else { return nil }
            guard Self.isValidStem(stem), CSVFileSystem.identity(path: join(folder, file)) != nil else { return nil }
            return stem
        }.sorted()
    }

    // MARK: Schemas

    /// The schema of table `stem` whose rows are in `csv`, from the sidecar at `sidecar` when
    /// there is one, else inferred from the rows.
    func schema(stem: String, csv: String, sidecar: String) throws -> TableSchema {
        let table = TableName(stem)
        // Messages name the folder's files, whichever files (a snapshot's links) are read.
        let shownCSV = csvPath(stem), shownSidecar = schemaPath(stem)
        let source = try CSVRowSource(path: csv, shown: shownCSV, table: table)
        let header = source.header
        let identity = source.identity
        source.close()
        guard CSVFileSystem.exists(sidecar) else {
            return try inferred(stem: stem, csv: csv, header: header, identity: identity)
        }
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: sidecar))
        } catch {
            throw CSVFileError("cannot read \(shownSidecar): \(error.localizedDescription)")
        }
        var schema: TableSchema
        do {
            schema = try XMLDocuments.decodeSchema(data)
        } catch {
            throw FerryError.invalidValue(
                table: table, column: nil, key: nil,
                message: "\(shownSidecar) is not a Ferry schema document (\(error)); fix it, or remove it to have the schema inferred from \(stem).csv")
        }
        schema.name = table
        schema.engine = Self.engine
        schema.rowEstimate = CSVFileFacts.shared.rows(identity)
        let names = schema.columns.map(\.name)
        if let header, header != names {
            throw FerryError.invalidValue(
                table: table, column: nil, key: nil,
                message: "the header of \(shownCSV) (\(header.joined(separator: ", "))) does not name the columns of \(shownSidecar) (\(names.joined(separator: ", "))), in order; fix one or the other")
        }
        for key in [schema.primaryKey] + schema.uniqueKeys {
            for k in key where schema.column(named: k) == nil {
                throw FerryError.invalidValue(table: table, column: k, key: nil, message: "\(shownSidecar) names key column \(k), which is not a column")
            }
        }
        return schema
    }

    /// A table without sidecar: its schema inferred from its rows (once per state of the
    /// file), announced on stderr once.
    private func inferred(stem: String, csv: String, header: [String]?, identity: CSVFileSystem.Identity) throws -> TableSchema {
        let table = TableName(stem)
        guard let header, !header.isEmpty, header != [""] else {
            throw FerryError.invalidValue(
                table: table, column: nil, key: nil,
                message: "\(csvPath(stem)) has no header row and there is no \(stem).schema.xml: the table has no columns")
        }
        if var known = CSVFileFacts.shared.inferred(identity) {
            known.rowEstimate = CSVFileFacts.shared.rows(identity)
            return known
        }
        let schema = try CSVSchemaInference.infer(csv: csv, shown: csvPath(stem), table: table, header: header)
        CSVFileFacts.shared.setInferred(identity, schema)
        if let rows = schema.rowEstimate { CSVFileFacts.shared.setRows(identity, rows) }
        if CSVFileFacts.shared.firstAnnouncement(csvPath(stem), identity) {
            let columns = schema.columns.map { "\($0.name) \($0.logicalType)\($0.isNullable ? "" : " not null")" }.joined(separator: ", ")
            let line = "\(csvPath(stem)) has no \(stem).schema.xml: inferred its schema from its \(schema.rowEstimate ?? 0) rows (\(columns); no key). "
                + "To make it permanent or give it a key, write \(schemaPath(stem)) — `ferry copy csv:\(directory) csv:OTHER --tables \(stem)` "
                + "writes OTHER/\(stem).schema.xml to start from — or write rows into the table through Ferry, which saves the inferred schema\n"
            FileHandle.standardError.write(Data(line.utf8))
        }
        return schema
    }

    /// The schema a table is stored with: the table's columns and keys under the folder's
    /// name for it, types as logical types (a native type is the logical type's name), no
    /// indexes, foreign keys or checks (the files have none), no defaults that are SQL.
    static func stored(_ schema: TableSchema, named stem: String) -> TableSchema {
        var s = TableSchema(
            name: TableName(stem), engine: engine, columns: schema.columns, primaryKey: schema.primaryKey,
            uniqueKeys: schema.uniqueKeys.filter { key in key.allSatisfy { k in schema.column(named: k) != nil } })
        for i in s.columns.indices {
            var c = s.columns[i]
            c.nativeType = c.logicalType.description
            c.defaultExpression = nil
            c.updateExpression = nil
            if case .expression? = c.defaultValue { c.defaultValue = nil }
            c.readHints = []
            c.declaredType = nil
            // The file holds the values: a generated column's are data here.
            c.generated = false
            // A primary key's columns hold no NULL.
            if s.primaryKey.contains(c.name) { c.isNullable = false }
            s.columns[i] = c
        }
        return s
    }

    /// Writes `schema`'s sidecar document to `path` (a temporary name, renamed at commit).
    func writeSidecar(_ schema: TableSchema, to path: String) throws {
        let fd = try CSVFileSystem.createExclusive(path)
        defer { CSVFileSystem.closeFile(fd) }
        do {
            try XMLDocuments.schema(schema).withUnsafeBytes { try CSVFileSystem.writeAll(fd, $0, path: path) }
            try CSVFileSystem.sync(fd, path: path)
        } catch {
            CSVFileSystem.remove(path)
            throw error
        }
    }
}
