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
        var out = Self.header(kind, stream: stream, length: payload.count)
        out.reserveCapacity(out.count + payload.count)
        out += payload
        return out
    }

    /// A frame's header line, for a writer that sends the payload from where it is.
    public static func header(_ kind: Kind, stream: UInt64, length: Int) -> [UInt8] {
        Array("\(kind.rawValue) \(stream) \(length)\n".utf8)
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

/// Reads frames from a byte stream (a pipe), through a buffer of raw memory that reads land in
/// directly (an array's room had to be zeroed for each read, and its payloads copied out again).
public final class PluginFrameReader {
    /// Fills the buffer; returns the number of bytes read, 0 at the end of the stream.
    private let fill: (UnsafeMutableRawBufferPointer) throws -> Int
    private var buffer: UnsafeMutableRawPointer
    private var capacity: Int
    /// The bytes not taken yet are `start..<end`.
    private var start = 0
    private var end = 0
    /// How much one read asks for.
    private static let readBytes = 64 * 1024

    public init(read: @escaping (UnsafeMutableRawBufferPointer) throws -> Int) {
        fill = read
        capacity = 2 * Self.readBytes
        buffer = .allocate(byteCount: capacity, alignment: 16)
    }

    deinit { buffer.deallocate() }

    private var pending: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: buffer + start, count: end - start) }

    /// Reads more; false at the end of the stream.
    private func more() throws -> Bool {
        if capacity - end < Self.readBytes {
            // Room at the end: move what is pending to the front, or grow (a payload of a MiB).
            let pendingBytes = end - start
            if start > 0 && capacity - pendingBytes >= Self.readBytes {
                buffer.copyMemory(from: buffer + start, byteCount: pendingBytes)
            } else {
                let grown = UnsafeMutableRawPointer.allocate(byteCount: max(2 * capacity, pendingBytes + Self.readBytes), alignment: 16)
                grown.copyMemory(from: buffer + start, byteCount: pendingBytes)
                buffer.deallocate()
                buffer = grown
                capacity = max(2 * capacity, pendingBytes + Self.readBytes)
            }
            start = 0
            end = pendingBytes
        }
        let n = try fill(UnsafeMutableRawBufferPointer(start: buffer + end, count: min(Self.readBytes, capacity - end)))
        guard n > 0 else { return false }
        end += n
        return true
    }

    /// The next frame; nil when the stream ended between frames.
    public func next() throws -> PluginFrame? {
        guard let (kind, stream, length) = try header() else { return nil }
        try waitForPayload(length)
        let payload = Array(UnsafeRawBufferPointer(start: buffer + start, count: length))
        start += length
        return PluginFrame(kind, stream: stream, payload: payload)
    }

    /// The next frame with its payload as `Data` (a body piece goes on as is, without a second
    /// copy); nil when the stream ended between frames. A payload longer than a read is read
    /// straight into its own memory after the part already buffered, not through the buffer.
    public func nextData() throws -> (kind: PluginFrame.Kind, stream: UInt64, payload: Data)? {
        guard let (kind, stream, length) = try header() else { return nil }
        let buffered = min(end - start, length)
        guard length > Self.readBytes, buffered < length else {
            try waitForPayload(length)
            let payload = Data(bytes: buffer + start, count: length)
            start += length
            return (kind, stream, payload)
        }
        let memory = UnsafeMutableRawPointer.allocate(byteCount: length, alignment: 16)
        memory.copyMemory(from: buffer + start, byteCount: buffered)
        start += buffered
        var filled = buffered
        while filled < length {
            let n: Int
            do { n = try fill(UnsafeMutableRawBufferPointer(start: memory + filled, count: length - filled)) } catch {
                memory.deallocate()
                throw error
            }
            guard n > 0 else {
                memory.deallocate()
                throw PluginFrameError.truncated
            }
            filled += n
        }
        return (kind, stream, Data(bytesNoCopy: memory, count: length, deallocator: .custom { p, _ in p.deallocate() }))
    }

    /// Reads until `length` bytes of payload are buffered from `start`.
    private func waitForPayload(_ length: Int) throws {
        while end - start < length {
            guard try more() else { throw PluginFrameError.truncated }
        }
    }

    /// Reads a header line; its payload starts at `start` (and may not be here yet).
    private func header() throws -> (PluginFrame.Kind, UInt64, Int)? {
        var newline: Int?
        while true {
            if let i = pending.prefix(PluginFrame.maxHeader + 1).firstIndex(of: 10) {
                newline = start + i
                break
            }
            if end - start > PluginFrame.maxHeader { throw garbage() }
            guard try more() else {
                if end == start { return nil }
                throw !looksLikeHeader(pending) ? garbage() : PluginFrameError.truncated
            }
        }
        guard let newline else { return nil }
        let header = String(decoding: UnsafeRawBufferPointer(start: buffer + start, count: newline - start), as: UTF8.self)
            .split(separator: " ", omittingEmptySubsequences: false)
        guard header.count == 3, let kind = PluginFrame.Kind(rawValue: String(header[0])), let stream = UInt64(header[1]),
            let length = Int(header[2]), length >= 0, header[2].allSatisfy(\.isASCII)
        else { throw garbage() }
        guard length <= PluginFrame.maxPayload else { throw PluginFrameError.malformed("a payload of \(length) bytes; at most \(PluginFrame.maxPayload)") }
        start = newline + 1
        return (kind, stream, length)
    }

    private func looksLikeHeader(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let text = String(decoding: bytes, as: UTF8.self)
        return PluginFrame.Kind.allCasesText.contains { text.hasPrefix($0 + " ") || $0.hasPrefix(text) }
    }

    /// What came instead of a frame, for the one-line error.
    private func garbage() -> PluginFrameError {
        let text = String(decoding: pending.prefix(40), as: UTF8.self)
        return .garbage(String(text.unicodeScalars.map { $0.properties.generalCategory == .control ? "." : Character($0) }))
    }
}

extension PluginFrame.Kind {
    static let allCasesText = ["hello", "request", "response", "body", "end", "cancel", "window"]
}
