import FerryCore

/// A table schema a client posts to be created. The service takes no SQL from a request, and
/// a schema's native details are SQL text when they come from the served engine itself (a
/// default is an expression; a native type is pasted into CREATE TABLE): they are kept only
/// when they are plain type names, and defaults never cross (see docs/xml-protocol.md).
enum RequestSchema {
    static func sanitized(_ schema: TableSchema) -> TableSchema {
        var s = schema
        for i in s.columns.indices {
            s.columns[i].defaultExpression = nil
            s.columns[i].updateExpression = nil
            if case .expression? = s.columns[i].defaultValue { s.columns[i].defaultValue = nil }
            s.columns[i].declaredType = nil
            s.columns[i].readHints = []
            // Not a plain name (`varchar(20)`, `numeric(10,2)`, `int unsigned`, `text[]`): the
            // target's type map decides from the logical type instead.
            if !NativeTypeName.isPlainDeclaration(s.columns[i].nativeType) { s.columns[i].nativeType = "" }
        }
        // Structured objects only: no SQL text reaches the service's engine.
        s.checks = []
        s.withheld = []
        s.indexes = s.indexes.filter(\.isStructured)
        return s
    }
}
