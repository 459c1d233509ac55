#!/usr/bin/env python3
"""Builds the SQLite side of scripts/bench/copy's data from PostgreSQL's text dumps, so that all
three engines hold the same rows.

usage: load_sqlite.py ORDERS_TSV NARROW_TSV SQLITE_FILE

The TSV files are `\\copy bench_orders TO …` / `\\copy bench_narrow TO …` output (PostgreSQL's
text format: tab separated, \\N for NULL, backslash escapes). The column declarations are the
earlier bench rig's (shared/bench/gen-data.sh); values are stored as that rig stored them:
booleans 0/1, amount as given (NUMERIC affinity makes it REAL or INTEGER), timestamps as text
'YYYY-MM-DD HH:MM:SS.ffffff', ext_ref as text, tag as a BLOB, meta as JSON text.
"""
import re
import sqlite3
import sys

SCHEMA = """
CREATE TABLE bench_orders (
  id          INTEGER PRIMARY KEY,
  customer_id INTEGER      NOT NULL,
  qty         SMALLINT     NOT NULL,
  is_paid     BOOLEAN,
  amount      NUMERIC(12,2),
  weight      DOUBLE,
  sku         VARCHAR(64)  NOT NULL,
  note        TEXT,
  order_date  DATE,
  created_at  DATETIME,
  ext_ref     CHAR(36),
  tag         BLOB,
  meta        TEXT
);
CREATE TABLE bench_narrow (id INTEGER PRIMARY KEY, v INTEGER NOT NULL);
"""

ESCAPES = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r", "b": "\b", "f": "\f", "v": "\v"}
ESCAPE = re.compile(r"\\(.)")


def unescape(field):
    if field == "\\N":
        return None
    if "\\" not in field:
        return field
    return ESCAPE.sub(lambda m: ESCAPES.get(m.group(1), m.group(1)), field)


def fields(path):
    with open(path, encoding="utf-8", newline="\n") as f:
        for line in f:
            yield [unescape(x) for x in line[:-1].split("\t")]


def orders(path):
    for c in fields(path):
        ts = c[9]
        if ts is not None:  # canonical SQLite text form: 'YYYY-MM-DD HH:MM:SS.ffffff'
            base, _, frac = ts.partition(".")
            ts = base + "." + (frac + "000000")[:6]
        yield (int(c[0]), int(c[1]), int(c[2]),
               None if c[3] is None else (1 if c[3] == "t" else 0),
               c[4],  # NUMERIC affinity stores REAL/INTEGER
               None if c[5] is None else float(c[5]),
               c[6], c[7], c[8], ts, c[10],
               None if c[11] is None else bytes.fromhex(c[11][2:]),
               c[12])


def narrow(path):
    for c in fields(path):
        yield (int(c[0]), int(c[1]))


def main(orders_tsv, narrow_tsv, db):
    con = sqlite3.connect(db)
    con.execute("PRAGMA synchronous=OFF")
    con.execute("PRAGMA journal_mode=OFF")
    con.executescript(SCHEMA)
    with con:
        con.executemany("INSERT INTO bench_orders VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", orders(orders_tsv))
        con.executemany("INSERT INTO bench_narrow VALUES (?,?)", narrow(narrow_tsv))
    con.execute("PRAGMA journal_mode=DELETE")
    con.execute("ANALYZE")
    con.close()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:4])
