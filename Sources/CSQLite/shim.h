#pragma once
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro casting -1 to a function pointer, which Swift cannot import.
static inline sqlite3_destructor_type ferry_sqlite_transient(void) { return SQLITE_TRANSIENT; }

#if defined(__linux__)
#include <unistd.h>
#include <sys/syscall.h>
/// Starts writing the dirty pages of `fd`'s file back to its disk without waiting for them
/// (Linux's sync_file_range with SYNC_FILE_RANGE_WRITE, which glibc declares only under
/// _GNU_SOURCE). -1 where the system has no such call.
static inline int ferry_start_writeback(int fd) {
#ifdef SYS_sync_file_range
    return (int)syscall(SYS_sync_file_range, fd, (long)0, (long)0, 2u);
#else
    (void)fd;
    return -1;
#endif
}
#endif
