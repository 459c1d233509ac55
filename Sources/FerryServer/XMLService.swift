import FerryCore
import FerryService
import FerryXML
import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import HTTPTypes
import Logging
import NIOCore
import NIOSSL

/// The XML-over-HTTP data service (protocol v1, docs/xml-protocol.md): HTTP mapped onto the
/// protocol's handlers (`ServiceHandlers`, in FerryService), with bearer tokens and TLS.
public struct XMLService: Sendable {
    public let configuration: ServerConfiguration
    /// The protocol's handlers, shared by every request.
    public let handlers: ServiceHandlers
    private let inFlight = Locked(RequestCounts())

    /// Requests being answered now (a request whose client went away still counts until the
    /// service has finished it: its transaction committed or rolled back).
    public var requestsInFlight: Int { inFlight.withLock { $0.answering } }

    /// Requests begun since the service started (answered or not).
    public var requestsStarted: Int { inFlight.withLock { $0.started } }

    public init(configuration: ServerConfiguration) {
        self.configuration = configuration
        handlers = ServiceHandlers(configuration: configuration.service)
    }

    /// Builds the application; `onRunning` receives the bound port (useful with port 0).
    public func application(logger: Logger, onRunning: @escaping @Sendable (Int) async -> Void = { _ in }) throws -> some ApplicationProtocol {
        let router = Router(context: ServiceRequestContext.self)
        handlers.startSweeping()
        router.add(middleware: ErrorAndLogMiddleware(inFlight: inFlight, metrics: ServiceMetrics(handlers: handlers)))
        router.add(middleware: AuthMiddleware(
            tokens: configuration.scopedTokens, labels: configuration.tokenLabels, files: configuration.tokenFiles,
            maxRequestsPerToken: configuration.maxRequestsPerToken, logger: logger))
        // The route table: every endpoint of the protocol, onto its handler.
        let handlers = self.handlers
        for route in ProtocolRoute.allCases {
            guard let method = HTTPRequest.Method(route.method) else { continue }
            router.on(RouterPath(route.pattern), method: method) { request, context in
                Self.response(to: await handlers.respond(Self.request(route, request, context)))
            }
        }
        let health = HealthCheck(handlers: handlers)
        router.on(RouterPath(Self.healthPath), method: .get) { _, _ in await health.response() }
        router.on(RouterPath(Self.healthPath), method: .head) { _, _ in await health.response() }
        // A connection that sends no complete request for this long (between requests, or a
        // client holding it open with half a request: slowloris) is closed.
        let http1 = HTTP1Channel.Configuration(idleTimeout: .milliseconds(Int64(configuration.idleSeconds * 1000)))
        var server: HTTPServerBuilder = .http1(configuration: http1)
        if let cert = configuration.tlsCertificate, let key = configuration.tlsKey {
            let chain = try NIOSSLCertificate.fromPEMFile(cert).map { NIOSSLCertificateSource.certificate($0) }
            let tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(try NIOSSLPrivateKey(file: key, format: .pem)))
            server = try .tls(.http1(configuration: http1), tlsConfiguration: tls)
        }
        return Application(
            router: router, server: server,
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "ferry"),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) },
            logger: logger)
    }

    /// `GET /healthz`: answered without a token (see `HealthCheck`).
    public static let healthPath = "/healthz"

    /// An HTTP request as the handlers take it.
    static func request(_ route: ProtocolRoute, _ request: Request, _ context: ServiceRequestContext) -> ServiceRequest {
        var parameters: [String: String] = [:]
        for name in ["table", "id"] { if let v = context.parameters.get(name) { parameters[name] = v } }
        var headers: [String: String] = [:]
        if let e = request.headers[.acceptEncoding] { headers["accept-encoding"] = e }
        if let n = request.headers[.contentLength] { headers["content-length"] = n }
        let body = BodyIterator(request.body.makeAsyncIterator())
        return ServiceRequest(
            route: route, parameters: parameters, query: request.uri.queryParameters.map { (String($0.key), String($0.value)) },
            headers: headers, body: FerryService.RequestBody { try await body.next() }, principal: context.principal, logger: context.logger)
    }

    /// A handler's answer as an HTTP response.
    static func response(to r: ServiceResponse) -> Response {
        var headers: HTTPFields = [.contentType: "application/xml; charset=utf-8"]
        for (name, value) in r.headers { if let n = HTTPField.Name(name) { headers[n] = value } }
        switch r.body {
        case .bytes(let data):
            return Response(status: .init(code: r.status), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
        case .stream(let produce):
            return Response(status: .init(code: r.status), headers: headers, body: ResponseBody { writer in
                try await produce { bytes in try await writer.write(bytes.withUnsafeBytes { ByteBuffer(bytes: $0) }) }
                try await writer.finish(nil)
            })
        }
    }
}

/// A request body's iterator, read by one handler step at a time.
final class BodyIterator: @unchecked Sendable {  // unchecked: one request's handler reads it, one piece at a time
    private var iterator: HummingbirdCore.RequestBody.AsyncIterator
    init(_ iterator: HummingbirdCore.RequestBody.AsyncIterator) { self.iterator = iterator }
    func next() async throws -> [UInt8]? {
        guard let buffer = try await iterator.next() else { return nil }
        return Array(buffer.readableBytesView)
    }
}

/// `GET /healthz` (no token): 200 when the service can open a connection to its database, 503
/// when it cannot — for a load balancer or an orchestrator. The answer is kept for a second,
/// so that probes, which need no token, cannot make the service open a connection each.
actor HealthCheck {
    let handlers: ServiceHandlers
    private var last: (at: Date, ok: Bool)?

    init(handlers: ServiceHandlers) { self.handlers = handlers }

    func response() async -> Response {
        let ok: Bool
        if let last, Date().timeIntervalSince(last.at) < 1 {
            ok = last.ok
        } else {
            ok = await handlers.databaseReachable()
            last = (Date(), ok)
        }
        let body = ok ? "<health status=\"ok\"/>\n" : "<health status=\"unavailable\">the service cannot reach its database</health>\n"
        return Response(
            status: ok ? .ok : .serviceUnavailable, headers: [.contentType: "application/xml; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: Array(body.utf8))))
    }
}
