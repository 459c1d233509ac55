import CZlib
import Foundation

/// Streaming gzip for response bodies (`Content-Encoding: gzip` when the client accepts it),
/// chunk by chunk, so compressing a large table keeps memory flat.
final class GzipStream {
    private var stream = z_stream()
    private var open = false
    /// The gzip trailer was written: the stream takes nothing more.
    private var finished = false

    init(level: Int32 = 6) throws {
        guard ferry_deflate_init_gzip(&stream, level) == Z_OK else {
            throw FerryServiceGzipError(message: "zlib could not start a gzip stream")
        }
        open = true
    }

    deinit { if open { deflateEnd(&stream) } }

    /// Compresses `input`; `finish` ends the stream (gzip trailer). Returns the bytes produced.
    func compress(_ input: [UInt8], finish: Bool) throws -> [UInt8] {
        // After Z_STREAM_END deflate makes no progress, and the loop below would never end.
        guard !finished else { throw FerryServiceGzipError(message: "the gzip stream has ended") }
        var out: [UInt8] = []
        var ended = false
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        try input.withUnsafeBufferPointer { inBuf in
            stream.next_in = UnsafeMutablePointer(mutating: inBuf.baseAddress)
            stream.avail_in = uInt(inBuf.count)
            repeat {
                let produced: Int = try chunk.withUnsafeMutableBufferPointer { outBuf in
                    stream.next_out = outBuf.baseAddress
                    stream.avail_out = uInt(outBuf.count)
                    let rc = deflate(&stream, finish ? Z_FINISH : Z_NO_FLUSH)
                    guard rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR else {
                        throw FerryServiceGzipError(message: "zlib deflate failed (\(rc))")
                    }
                    if rc == Z_STREAM_END { ended = true }
                    return outBuf.count - Int(stream.avail_out)
                }
                out.append(contentsOf: chunk[0..<produced])
            } while !ended && (stream.avail_out == 0 || (finish && stream.avail_in > 0))
        }
        if ended { finished = true }
        stream.next_in = nil
        return out
    }
}

struct FerryServiceGzipError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
