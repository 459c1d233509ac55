import FerryCore
import Foundation

/// One frame of the protocol over a driver plugin's stdin and stdout (docs/plugins.md):
/// `TYPE STREAM LENGTH\n` and `LENGTH` bytes of payload.
public struct PluginFrame: Sendable, Equatable {
    public enum Kind: String, Sendable {
        case hello, request, response, body, end, cancel, window
    }
    public var kind: Kind
    public var stream: UInt64
    public var payload: [UInt8]

    public init(_ kind: Kind, stream: UInt64, payload: [UInt8] = []) {
        self.kind = kind
        self.stream = stream
        self.payload = payload
    }

    /// The most payload one frame carries; a longer body is several `body` frames.
    public static let maxPayload = 1 << 20

    /// The request header with which Ferry asks a plugin that announced flow control
    /// (`flow-control="windows"`) to keep the response's body within windows: at most its value
    /// in bytes before the first `window` frame, then as many more as each `window` frame says.
    public static let windowHeader = "Window"
    /// The first window Ferry gives a stream, and how many bytes it reads before it gives more:
    /// what one stream's unread body can take of Ferry's memory (4 MiB and a frame).
    public static let initialWindow = 4 << 20
    public static let windowStep = 1 << 20

    /// A `window` frame: `bytes` more of stream `stream`'s body may be sent.
    public static func window(stream: UInt64, bytes: Int) -> PluginFrame {
        PluginFrame(.window, stream: stream, payload: Array(String(bytes).utf8))
    }

    /// The byte count of a `window` frame's payload.
    public static func parseWindow(_ payload: [UInt8]) throws -> Int {
        guard payload.count <= 12, payload.allSatisfy({ $0 >= 48 && $0 <= 57 }), let n = Int(String(decoding: payload, as: UTF8.self)), n > 0 else {
            throw PluginFrameError.malformed("a window frame must carry a positive number of bytes")
        }
        return n
    }
    /// The longest header line.
    static let maxHeader = 64

    /// Header and payload, ready to write.
    public func encoded() -> [UInt8] {
        var out = Array("\(kind.rawValue) \(stream) \(payload.count)\n".utf8)
        out.reserveCapacity(out.count + payload.count)
        out += payload
        return out
    }

    /// A request's payload: `METHOD TARGET\n` and header lines.
    public static func requestHead(method: String, target: String, headers: [(String, String)] = []) -> [UInt8] {
        var text = "\(method) \(target)\n"
        for (name, value) in headers { text += "\(name): \(value)\n" }
        return Array(text.utf8)
    }

    /// Method, target (path and query) and header fields (names lowercased) of a request payload.
    public static func parseRequestHead(_ payload: [UInt8]) throws -> (method: String, target: String, headers: [String: String]) {
        let lines = String(decoding: payload, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
        let first = lines.first.map { $0.split(separator: " ", maxSplits: 1) } ?? []
        guard first.count == 2, !first[0].isEmpty, first[1].hasPrefix("/") else {
            throw PluginFrameError.malformed("a request frame must start with 'METHOD /path'")
        }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":") else { throw PluginFrameError.malformed("a header line without ':'") }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return (String(first[0]), String(first[1]), headers)
    }

    /// A response's payload: the status code and header lines.
    public static func responseHead(status: Int, headers: [(String, String)] = []) -> [UInt8] {
        var text = "\(status)\n"
        for (name, value) in headers { text += "\(name): \(value)\n" }
        return Array(text.utf8)
    }

    /// The status code of a response payload.
    public static func parseStatus(_ payload: [UInt8]) throws -> Int {
        let first = String(decoding: payload.prefix { $0 != 10 }, as: UTF8.self)
        guard let status = Int(first), (100...599).contains(status) else {
            throw PluginFrameError.malformed("a response frame must start with a status code from 100 to 599")
        }
        return status
    }
}

/// What is wrong with bytes that should have been a frame.
public enum PluginFrameError: Error, CustomStringConvertible, Sendable {
    /// Not a frame: the text of what came instead (printable characters only, shortened).
    case garbage(String)
    case malformed(String)
    /// The stream ended inside a frame.
    case truncated

    public var description: String {
        switch self {
        case .garbage(let text): return "wrote something that is not a frame: \"\(text)\""
        case .malformed(let why): return "sent a malformed frame (\(why))"
        case .truncated: return "stopped in the middle of a frame"
        }
    }
}

/// Reads frames from a byte stream (a pipe), through a buffer.
public final class PluginFrameReader {
    /// Fills the buffer; returns the number of bytes read, 0 at the end of the stream.
    private let fill: (UnsafeMutableRawBufferPointer) throws -> Int
    private var buffer: [UInt8] = []
    private var start = 0

    public init(read: @escaping (UnsafeMutableRawBufferPointer) throws -> Int) { fill = read }

    /// Reads more; false at the end of the stream.
    private func more() throws -> Bool {
        if start > 0 && start >= buffer.count / 2 {
            buffer.removeFirst(start)
            start = 0
        }
        let old = buffer.count
        buffer.append(contentsOf: repeatElement(0, count: 64 * 1024))
        let n = try buffer.withUnsafeMutableBytes { try fill(UnsafeMutableRawBufferPointer(rebasing: $0[old...])) }
        buffer.removeLast(64 * 1024 - max(n, 0))
        return n > 0
    }

    /// The next frame; nil when the stream ended between frames.
    public func next() throws -> PluginFrame? {
        // The header line.
        var newline: Int?
        while true {
            if let i = buffer[start...].prefix(PluginFrame.maxHeader + 1).firstIndex(of: 10) {
                newline = i
                break
            }
            if buffer.count - start > PluginFrame.maxHeader { throw garbage() }
            guard try more() else {
                if buffer.count == start { return nil }
                throw buffer.count - start > 0 && !looksLikeHeader(buffer[start...]) ? garbage() : PluginFrameError.truncated
            }
        }
        guard let newline else { return nil }
        let header = String(decoding: buffer[start..<newline], as: UTF8.self).split(separator: " ", omittingEmptySubsequences: false)
        guard header.count == 3, let kind = PluginFrame.Kind(rawValue: String(header[0])), let stream = UInt64(header[1]),
            let length = Int(header[2]), length >= 0, header[2].allSatisfy(\.isASCII)
        else { throw garbage() }
        guard length <= PluginFrame.maxPayload else { throw PluginFrameError.malformed("a payload of \(length) bytes; at most \(PluginFrame.maxPayload)") }
        start = newline + 1
        while buffer.count - start < length {
            guard try more() else { throw PluginFrameError.truncated }
        }
        let payload = Array(buffer[start..<start + length])
        start += length
        return PluginFrame(kind, stream: stream, payload: payload)
    }

    private func looksLikeHeader(_ bytes: ArraySlice<UInt8>) -> Bool {
        let text = String(decoding: bytes, as: UTF8.self)
        return PluginFrame.Kind.allCasesText.contains { text.hasPrefix($0 + " ") || $0.hasPrefix(text) }
    }

    /// What came instead of a frame, for the one-line error.
    private func garbage() -> PluginFrameError {
        let text = String(decoding: buffer[start...].prefix(40), as: UTF8.self)
        return .garbage(String(text.unicodeScalars.map { $0.properties.generalCategory == .control ? "." : Character($0) }))
    }
}

extension PluginFrame.Kind {
    static let allCasesText = ["hello", "request", "response", "body", "end", "cancel", "window"]
}
