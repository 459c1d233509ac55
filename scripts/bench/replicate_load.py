#!/usr/bin/env python3
"""The writing application and the target watcher of scripts/bench/replicate.

  replicate_load.py write ENGINE DSN --rate TPS --seconds S --first TXID --out FILE
      One connection writes transactions of 5 rows (bench_repl: id = txid * 5 + i) at TPS
      transactions per second (0: as fast as the source takes them) for S seconds; each row
      carries the wall-clock microseconds of its transaction's start (ts_source). Writes
      "txid commit_unix_seconds" per transaction to FILE (the moment COMMIT returned).
  replicate_load.py watch ENGINE DSN --until-file F --out FILE [--timeout S]
      Polls the target's max(txid) every 5 ms and writes "unix_seconds max_txid" each time it
      grows, until it reaches the txid written in F (once F exists: the writer's last) (exit 0)
      or S seconds pass (exit 1).
  replicate_load.py lag COMMITS SEEN
      Prints "p50_ms p99_ms max_ms transactions": per transaction, the first poll that saw it at
      the target minus its commit at the source.

ENGINE is pg, my or sq; DSN a libpq conninfo/URL, a mysql://user:pw@host:port/db URL, or a
SQLite file path. Passwords come inside the DSN and are never printed.
"""
import sys
import time
import urllib.parse


def connect(engine, dsn):
    if engine == "pg":
        import psycopg
        return psycopg.connect(dsn, autocommit=False)
    if engine == "my":
        import pymysql
        u = urllib.parse.urlparse(dsn)
        return pymysql.connect(host=u.hostname or "127.0.0.1", port=u.port or 3306, user=urllib.parse.unquote(u.username or ""),
                               password=urllib.parse.unquote(u.password or ""), database=u.path.lstrip("/"), autocommit=False)
    import sqlite3
    c = sqlite3.connect(dsn, timeout=30, isolation_level=None)
    return c


def placeholder(engine):
    return "?" if engine == "sq" else "%s"


def write(engine, dsn, rate, seconds, first, out):
    c = connect(engine, dsn)
    cur = c.cursor()
    p = placeholder(engine)
    sql = f"INSERT INTO bench_repl (id, txid, k, ts_source, payload) VALUES ({p}, {p}, {p}, {p}, {p})"
    commits = []
    start = time.time()
    txid = first
    while True:
        now = time.time()
        if now - start >= seconds:
            break
        if rate > 0:
            due = start + (txid - first) / rate
            if due > now:
                time.sleep(due - now)
        ts = int(time.time() * 1_000_000)
        if engine == "sq":
            cur.execute("BEGIN")
        for i in range(5):
            cur.execute(sql, (txid * 5 + i, txid, i, ts, "payload %d" % txid))
        if engine == "sq":
            cur.execute("COMMIT")
        else:
            c.commit()
        commits.append((txid, time.time()))
        txid += 1
    elapsed = time.time() - start
    with open(out, "w") as f:
        for t, at in commits:
            f.write("%d %.6f\n" % (t, at))
    print("%d %.3f" % (len(commits), elapsed))


def watch(engine, dsn, until_file, out, timeout):
    import os
    deadline = time.time() + timeout
    seen = []
    last = -1
    until = None
    c = None
    while time.time() < deadline:
        if until is None and os.path.exists(until_file):
            text = open(until_file).read().strip()
            until = int(text) if text else None
        try:
            if c is None:
                c = connect(engine, dsn)
            cur = c.cursor()
            cur.execute("SELECT max(txid) FROM bench_repl")
            row = cur.fetchone()
            if engine != "sq":
                c.rollback()
            m = row[0] if row and row[0] is not None else -1
        except Exception:  # the table is not there yet, or the target is busy
            m = last
            if engine != "sq" and c is not None:
                try:
                    c.rollback()
                except Exception:
                    c = None
        if m > last:
            last = m
            seen.append((time.time(), m))
        if until is not None and last >= until:
            break
        time.sleep(0.005)
    with open(out, "w") as f:
        for at, m in seen:
            f.write("%.6f %d\n" % (at, m))
    sys.exit(0 if until is not None and last >= until else 1)


def lag(commits_file, seen_file):
    commits = [(int(a), float(b)) for a, b in (l.split() for l in open(commits_file) if l.strip())]
    seen = [(float(a), int(b)) for a, b in (l.split() for l in open(seen_file) if l.strip())]
    lags = []
    j = 0
    for txid, at in commits:
        while j < len(seen) and seen[j][1] < txid:
            j += 1
        if j == len(seen):
            break
        lags.append(max(0.0, seen[j][0] - at) * 1000)
    if not lags:
        print("- - - 0")
        return
    lags.sort()
    pick = lambda q: lags[min(len(lags) - 1, int(q * len(lags)))]
    print("%.0f %.0f %.0f %d" % (pick(0.50), pick(0.99), lags[-1], len(lags)))


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    mode = argv[1]
    opts = {}
    rest = []
    i = 2
    while i < len(argv):
        if argv[i].startswith("--"):
            opts[argv[i][2:]] = argv[i + 1]
            i += 2
        else:
            rest.append(argv[i])
            i += 1
    if mode == "write":
        write(rest[0], rest[1], float(opts["rate"]), float(opts["seconds"]), int(opts["first"]), opts["out"])
    elif mode == "watch":
        watch(rest[0], rest[1], opts["until-file"], opts["out"], float(opts.get("timeout", "300")))
    elif mode == "lag":
        lag(rest[0], rest[1])
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
