#pragma once
#include <zlib.h>

/// deflateInit2 is a macro (it passes the library version and struct size): wrap it.
static inline int ferry_deflate_init_gzip(z_streamp strm, int level) {
    // windowBits 15 + 16: a gzip header and trailer instead of zlib's.
    return deflateInit2(strm, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
}
