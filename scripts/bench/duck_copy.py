#!/usr/bin/env python3
"""The DuckDB peer of scripts/bench/copy: ATTACH the source read-only and the target, then
CREATE TABLE dst.T AS SELECT * FROM src.T (what DuckDB's own docs give for moving a table
between engines).

usage: duck_copy.py SRC DST TABLE      (SRC, DST: pg:DB | my:DB | sqlite:/path/file)
       duck_copy.py --version          (DuckDB's version and the scanner builds it loads)

Servers from the environment (never from the command line, so no password shows in `ps`):
  FERRY_BENCH_PG_HOST, FERRY_BENCH_PG_PORT, FERRY_BENCH_PG_USER, PGPASSWORD
  FERRY_BENCH_MY_HOST, FERRY_BENCH_MY_PORT, FERRY_BENCH_MY_USER, MYSQL_PWD

The scanner extensions are LOADed from the files of the PyPI wheels installed beside duckdb
(duckdb-extension-{postgres,mysql,sqlite}-scanner, same version as duckdb); autoinstall and
autoload are off, so nothing is ever downloaded at run time.
"""
import importlib.metadata as metadata
import os
import sys

import duckdb

EXTENSIONS = {
    "pg": "duckdb-extension-postgres-scanner",
    "my": "duckdb-extension-mysql-scanner",
    "sqlite": "duckdb-extension-sqlite-scanner",
}


def extension_file(dist):
    """The .duckdb_extension file shipped in the wheel `dist`."""
    files = [f for f in (metadata.files(dist) or []) if str(f).endswith(".duckdb_extension")]
    if not files:
        sys.exit(f"duck_copy.py: the wheel {dist} holds no .duckdb_extension file")
    return str(files[0].locate())


def connect(kinds):
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions=false")
    con.execute("SET autoload_known_extensions=false")
    for kind in sorted(kinds):
        path = extension_file(EXTENSIONS[kind]).replace("'", "''")
        con.execute(f"LOAD '{path}'")
    return con


def quote(value):
    """A libpq / MySQL key=value connection-string value."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def attach(con, spec, alias, read_only):
    kind, _, rest = spec.partition(":")
    opts = ", READ_ONLY" if read_only else ""
    env = os.environ
    if kind == "pg":
        dsn = " ".join([
            f"host={quote(env.get('FERRY_BENCH_PG_HOST', '127.0.0.1'))}",
            f"port={env['FERRY_BENCH_PG_PORT']}",
            f"dbname={quote(rest)}",
            f"user={quote(env['FERRY_BENCH_PG_USER'])}",
            f"password={quote(env.get('PGPASSWORD', ''))}",
        ])
        kind_sql = "postgres"
    elif kind == "my":
        dsn = " ".join([
            f"host={quote(env.get('FERRY_BENCH_MY_HOST', '127.0.0.1'))}",
            f"port={env['FERRY_BENCH_MY_PORT']}",
            f"database={quote(rest)}",
            f"user={quote(env['FERRY_BENCH_MY_USER'])}",
            f"password={quote(env.get('MYSQL_PWD', ''))}",
        ])
        kind_sql = "mysql"
    elif kind == "sqlite":
        dsn = rest
        kind_sql = "sqlite"
    else:
        sys.exit(f"duck_copy.py: unknown database spec {spec!r} (pg:DB, my:DB, sqlite:/path)")
    dsn = dsn.replace("'", "''")
    con.execute(f"ATTACH '{dsn}' AS {alias} (TYPE {kind_sql}{opts})")


def main(argv):
    if argv[1:] == ["--version"]:
        con = connect(EXTENSIONS)
        builds = con.execute(
            "SELECT string_agg(extension_name || ' ' || extension_version, ', ' ORDER BY 1) "
            "FROM duckdb_extensions() WHERE loaded AND extension_name LIKE '%scanner'").fetchone()[0]
        print(f"DuckDB {duckdb.__version__} ({builds}; loaded from the PyPI wheels)")
        return
    if len(argv) != 4:
        sys.exit(__doc__)
    src, dst, table = argv[1:4]
    con = connect({src.partition(":")[0], dst.partition(":")[0]} & set(EXTENSIONS))
    attach(con, src, "src", True)
    attach(con, dst, "dst", False)
    con.execute(f'CREATE TABLE dst."{table}" AS SELECT * FROM src."{table}"')
    print(con.execute(f'SELECT count(*) FROM dst."{table}"').fetchone()[0], "rows")


if __name__ == "__main__":
    try:
        main(sys.argv)
    except duckdb.Error as error:
        # Connection errors may quote the connection string: mask the passwords.
        message = str(error)
        for name in ("PGPASSWORD", "MYSQL_PWD"):
            if os.environ.get(name):
                message = message.replace(os.environ[name], "***")
        sys.exit(f"duck_copy.py: {type(error).__name__}: {message}")
