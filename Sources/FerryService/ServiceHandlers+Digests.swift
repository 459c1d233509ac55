import FerryCore
import FerryXML
import Foundation

/// Range digests of key-hash buckets, computed next to the data (see docs/xml-protocol.md).
extension ServiceHandlers {
    func digests(_ r: ServiceRequest) async throws -> ServiceResponse {
        let name = try r.table()
        guard let modulus = r.value("modulus").flatMap({ Int64($0) }), modulus >= 1, modulus <= 1 << 31 else {
            throw ServiceError.badRequest("modulus must be a whole number from 1 to 2147483648", table: name.description)
        }
        let columnNames = r.values("columns")
        let keyNames = r.values("key")
        let native = r.values("native")
        let within = try Self.bucketParameter(r.value("within"), key: keyNames, table: name)
        // One answer line per bucket: without `within`, at most 2^20 buckets.
        guard within != nil || modulus <= 1 << 20 else {
            throw ServiceError.badRequest("modulus above 1048576 needs within= (buckets of a coarser level)", table: name.description)
        }
        let hashText = r.value("keyhash")
        let delimitedNames = Set(r.values("delimited"))
        let snapshot = r.value("snapshot")
        let (answer, digests) = try await Offload.run { [self] () -> (Int64, [BucketDigest]) in
            let lease = try read(snapshot: snapshot)
            defer { lease.release() }
            let c = lease.connection
            let schema = try c.describe(try served(name, in: c), rowEstimate: false)
            let hash = try Self.keyHashParameter(hashText, table: name)
            func columns(_ names: [String]) throws -> [Column] {
                try names.map { n in
                    guard let col = schema.column(named: n), col.logicalType.isSupported else { throw FerryError.columnNotFound(table: schema.name, column: n) }
                    return try requested(col, native: native, table: schema.name)
                }
            }
            let key = try columns(keyNames.isEmpty ? schema.preferredKey?.columns ?? [] : keyNames)
            guard !key.isEmpty else { throw ServiceError.badRequest("table \(schema.name) has no key: digests need one (key=…)", table: schema.name.description) }
            if hash == .integer && KeyHash.suited(to: key) != .integer {
                throw ServiceError.badRequest("keyhash=integer needs a key of one integer column", table: schema.name.description)
            }
            let digested = try columns(columnNames.isEmpty ? schema.columns.filter(\.logicalType.isSupported).map(\.name) : columnNames)
            for n in delimitedNames where !digested.contains(where: { $0.name == n && CanonicalText.isDelimitable($0) }) {
                throw ServiceError.badRequest("delimited=\(n.prefix(64)) is not a digested column of a type whose text can be delimited", table: schema.name.description)
            }
            let request = DigestRequest(
                key: key, columns: digested, modulus: modulus,
                within: within.map { BucketFilter(key: key, modulus: $0.modulus, residues: $0.residues, hash: hash) },
                keyHash: hash, delimited: digested.map { delimitedNames.contains($0.name) })
            return (modulus, try c.bucketDigests(schema, request: request))
        }
        // Written a piece at a time: 2^20 buckets are about 60 MB of XML.
        return ServiceResponse(body: .stream { write in
            var writer = DigestsWriter(modulus: answer, digests)
            while let piece = writer.next() { try await write(Data(piece)) }
        })
    }
}
