#pragma once
#include <mariadb/mysql.h>
#include <mariadb/mariadb_rpl.h>
#include <mariadb/ma_pvio.h>

/* mariadb_rpl_optionsv is variadic, which Swift cannot call: one typed wrapper per option
   Ferry sets (the types are those the library reads with va_arg). */
static inline int ferry_rpl_set_filename(MARIADB_RPL *rpl, const char *name, size_t length) {
    return mariadb_rpl_optionsv(rpl, MARIADB_RPL_FILENAME, name, length);
}
static inline int ferry_rpl_set_start(MARIADB_RPL *rpl, unsigned long position) {
    return mariadb_rpl_optionsv(rpl, MARIADB_RPL_START, position);
}
static inline int ferry_rpl_set_server_id(MARIADB_RPL *rpl, unsigned int id) {
    return mariadb_rpl_optionsv(rpl, MARIADB_RPL_SERVER_ID, id);
}
static inline int ferry_rpl_set_flags(MARIADB_RPL *rpl, unsigned int flags) {
    return mariadb_rpl_optionsv(rpl, MARIADB_RPL_FLAGS, flags);
}
static inline MARIADB_RPL *ferry_rpl_init(MYSQL *mysql) {
    return mariadb_rpl_init_ex(mysql, MARIADB_RPL_VERSION);
}

/* True when the client library's read-ahead cache already holds bytes of the next packet
   (a poll of the socket alone would miss them). */
static inline int ferry_mysql_buffered(MYSQL *mysql) {
    MARIADB_PVIO *p = mysql->net.pvio;
    return p && p->cache && p->cache_pos < p->cache + p->cache_size;
}
