#if canImport(Glibc)
import Glibc
#endif

/// How a serving process (`ferry serve`, a driver plugin) has glibc's allocator keep memory.
public enum ProcessMemory {
    /// One malloc arena for all threads. glibc gives a thread that allocates while another
    /// holds the lock an arena of its own (up to 8 a core), and each arena keeps what its
    /// threads freed; a service's event loops, decoding and writing threads, which change
    /// from request to request, spread a load's batches over several. `ferry serve` loading
    /// 1,000,000 bench_orders rows into SQLite, four runs: peak RSS 59.8–67.0 MB → 59.3–60.1
    /// MB, no slower (1.86–2.06 s); serving them 56.4–57.7 → 55.1–56.8 MB. Call it before
    /// the threads start. Nothing where the allocator is not glibc's.
    public static func useOneArena() {
        #if canImport(Glibc)
        // `mallopt` and `M_ARENA_MAX` (-8, glibc's malloc.h) are not in Swift's Glibc module.
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return }
        typealias MallOpt = @convention(c) (Int32, Int32) -> Int32
        _ = unsafeBitCast(symbol, to: MallOpt.self)(-8, 1)
        #endif
    }
}
