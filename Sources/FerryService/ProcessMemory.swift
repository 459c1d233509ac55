#if canImport(Glibc)
import Glibc
#endif

/// How a Ferry process has glibc's allocator keep memory. Nothing where the allocator is not
/// glibc's. Each setting is for the whole process: call it before the threads start.
public enum ProcessMemory {
    /// One malloc arena for all threads. glibc gives a thread that allocates while another
    /// holds the lock an arena of its own (up to 8 a core), and each arena keeps what its
    /// threads freed; a service's event loops, decoding and writing threads, which change
    /// from request to request, spread a load's batches over several. `ferry serve` loading
    /// 1,000,000 bench_orders rows into SQLite, four runs: peak RSS 59.8–67.0 MB → 59.3–60.1
    /// MB, no slower (1.86–2.06 s); serving them 56.4–57.7 → 55.1–56.8 MB.
    public static func useOneArena() {
        mallopt(-8, 1)  // M_ARENA_MAX
    }

    /// glibc's `mallopt`, which Swift's Glibc module does not bring (nor malloc.h's `M_…`).
    private static func mallopt(_ parameter: Int32, _ value: Int32) {
        #if canImport(Glibc)
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return }
        typealias MallOpt = @convention(c) (Int32, Int32) -> Int32
        _ = unsafeBitCast(symbol, to: MallOpt.self)(parameter, value)
        #endif
    }
}
