import FerryCore
import FerryXML

extension HTTPDriver {
    /// The http(s) driver on this platform's transport: async-http-client (SwiftNIO) on Linux,
    /// URLSession elsewhere. What Ferry's command line and FerryKit use.
    public static var standard: HTTPDriver {
        #if canImport(AsyncHTTPClient)
        HTTPDriver { try AsyncHTTPTransport(endpoint: $0) }
        #else
        HTTPDriver()
        #endif
    }
}
