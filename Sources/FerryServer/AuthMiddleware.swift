import Foundation
import Hummingbird

/// Every request needs a bearer token; writes (anything but GET and HEAD) need a read-write one.
/// Tokens are compared in constant time, and never logged.
struct AuthMiddleware<Context: RequestContext>: RouterMiddleware {
    let readWrite: [[UInt8]]
    let readOnly: [[UInt8]]

    init(readWrite: [String], readOnly: [String]) {
        self.readWrite = readWrite.map { Array($0.utf8) }
        self.readOnly = readOnly.map { Array($0.utf8) }
    }

    /// Equal length and bytes, in time that depends only on the lengths.
    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var diff = UInt8(truncatingIfNeeded: a.count ^ b.count)
        for i in 0..<max(a.count, b.count) {
            let x = i < a.count ? a[i] : 0
            let y = i < b.count ? b[i] : 0
            diff |= x ^ y
        }
        return diff == 0
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else { throw ServiceError.unauthorized }
        let token = Array(header.dropFirst(7).utf8)
        // Check every token (no early exit), so timing does not say which one nearly matched.
        var writer = false
        var reader = false
        for t in readWrite where Self.constantTimeEqual(token, t) { writer = true }
        for t in readOnly where Self.constantTimeEqual(token, t) { reader = true }
        guard writer || reader else { throw ServiceError.unauthorized }
        if !writer && request.method != .get && request.method != .head { throw ServiceError.forbidden }
        return try await next(request, context)
    }
}

/// Turns every error into an XML error document with its status (never an HTML page or a
/// stack trace), and logs each request: method, path, status, time — never a token.
struct ErrorAndLogMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let started = Date()
        let response: Response
        do {
            response = try await next(request, context)
        } catch {
            var e = ServiceError.from(error, table: nil)
            if let http = error as? HTTPError {
                e = ServiceError(status: Int(http.status.code), code: http.status.code == 404 ? "not_found" : "http_error", message: http.body ?? http.status.reasonPhrase)
                if http.status.code == 404 { e.message = "no such endpoint: \(request.method) \(request.uri.path)" }
                if http.status.code == 413 { e.code = "too_large" }
            }
            if let detail = e.detail { context.logger.error("\(request.method) \(request.uri.path): \(detail)") }
            response = Response(
                status: .init(code: e.status), headers: [.contentType: "application/xml; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(bytes: e.document)))
        }
        context.logger.info(
            "\(request.method) \(request.uri.path) \(response.status.code) \(String(format: "%.1f", Date().timeIntervalSince(started) * 1000)) ms")
        return response
    }
}
