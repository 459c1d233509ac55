#!/usr/bin/env python3
"""The DuckDB peer of scripts/bench/copy: ATTACH the source read-only and the target, then
CREATE TABLE dst.T AS SELECT * FROM src.T (the earlier bench rig's duck_copy.py, adapted).

usage: duck_copy.py SRC DST TABLE      (SRC, DST: pg:DB | my:DB | sqlite:/path/file)
       duck_copy.py --version          (DuckDB's version and the scanner builds it loads)

Servers from the environment (never from the command line, so no password shows in `ps`),
handed to DuckDB as temporary secrets:
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


def literal(value):
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def attach(con, spec, alias, read_only):
    """ATTACH through a temporary secret (host, port, database, user, password), so no password
    sits in a connection string that an error message could quote."""
    kind, _, rest = spec.partition(":")
    opts = ", READ_ONLY" if read_only else ""
    env = os.environ
    if kind in ("pg", "my"):
        prefix, kind_sql, password = {
            "pg": ("FERRY_BENCH_PG_", "postgres", "PGPASSWORD"),
            "my": ("FERRY_BENCH_MY_", "mysql", "MYSQL_PWD"),
        }[kind]
        con.execute(
            f"CREATE TEMPORARY SECRET {alias}_secret (TYPE {kind_sql}, "
            f"HOST {literal(env.get(prefix + 'HOST', '127.0.0.1'))}, PORT {int(env[prefix + 'PORT'])}, "
            f"DATABASE {literal(rest)}, USER {literal(env[prefix + 'USER'])}, "
            f"PASSWORD {literal(env.get(password, ''))})")
        con.execute(f"ATTACH '' AS {alias} (TYPE {kind_sql}, SECRET {alias}_secret{opts})")
    elif kind == "sqlite":
        con.execute(f"ATTACH {literal(rest)} AS {alias} (TYPE sqlite{opts})")
    else:
        sys.exit(f"duck_copy.py: unknown database spec {spec!r} (pg:DB, my:DB, sqlite:/path)")


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
