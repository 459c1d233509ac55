#!/usr/bin/env python3
"""Fuzzes a running `ferry serve` (issue 32): random and mutated requests, about half with a
valid token (read and write), the rest with none or a wrong one. Python's standard library only.

    fuzz-serve.py --url http://127.0.0.1:PORT --read-token R --write-token W --pid PID
                  --requests N [--workers K] [--seed S] [--tables T,T] [--docs XML]…

Checks while it runs, and says each failure in one line:
  - every request is answered (a connection refused or reset that is not the request's own
    doing is a crash; no answer within 60 s is a hang),
  - no answer is a 5xx other than 503 (busy, unavailable) and 507 (full): 500 is a bug,
  - a read token never gets a 2xx for a request that writes (anything but GET, HEAD and read
    snapshots), and no token gets one for DDL on a table that is not its own staging table,
  - no answer body carries SQL, a file path or an engine's own error text (but for a row the
    database refused, 422 invalid: its reason, constraint and SQLSTATE, which the client reports),
  - the server's peak RSS (VmHWM) stays at most --max-rss-mb (64).
Prints one summary line of JSON (requests, by status class, failures, peak RSS, seconds).
"""

import argparse
import http.client
import json
import multiprocessing
import os
import random
import socket
import sys
import time
import urllib.parse

READ_ROUTES = {("POST", "/v1/snapshots")}
LEAK_MARKS = ["SELECT ", "INSERT INTO", "CREATE TABLE", "sqlite3_", "SQLSTATE", "syntax error at", "/tmp/", "/var/", ".db\"", "ERROR:  "]


def peak_rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return -1
    return -1


class Generator:
    def __init__(self, rng, tables, docs):
        self.rng = rng
        self.tables = tables
        self.docs = docs

    def name(self):
        r = self.rng.random()
        if r < 0.55:
            return self.rng.choice(self.tables)
        odd = [
            "Artist%00", "t%FF", "%C3%28", "a" * self.rng.choice([63, 64, 65, 300, 5000]), "..", "%2e%2e%2f", "_ferry_append_" + hex(self.rng.getrandbits(32))[2:],
            "_ferry_load_x", "%E2%98%83", "\u2603", "t;DROP TABLE items", "t%27--", "%20", "", "public.items", "a.b.c", "%0d%0aX-Evil:1",
        ]
        # Raw where a request line may carry it, else percent-encoded (escapes stay as they are).
        return urllib.parse.quote(self.rng.choice(odd), safe="%;'.-_")

    def query(self):
        keys = ["limit", "after", "bits", "keyhash", "snapshot", "columns", "key", "into", "upserts", "deletes", "expect", "bytes",
                "compress", "filter", "where", "modulus", "level", "native", "wait", "goal", "name", "reset-serial", "watermark", "table", "reject"]
        vals = ["1", "0", "-1", "99999999999999999999", "integer", "md5", "lookup3", "abc", "%00", "a" * 2000, "", "items", "_ferry_x", "gzip",
                "none", "1=1", "' OR 1=1 --", "id", "NaN", "1e308", "\u2603", "20", "30", "10000", "10001"]
        n = self.rng.randrange(0, 5)
        return "&".join(f"{self.rng.choice(keys)}={urllib.parse.quote(self.rng.choice(vals))}" for _ in range(n))

    def path(self):
        t = self.name()
        pid = hex(self.rng.getrandbits(64))[2:]
        routes = [
            "/v1/capabilities", "/v1/tables", f"/v1/tables/{t}", f"/v1/tables/{t}/count", f"/v1/tables/{t}/rows", f"/v1/tables/{t}/digests",
            "/v1/snapshots", f"/v1/snapshots/{pid}", "/v1/objects", f"/v1/tables/{t}/indexes", f"/v1/tables/{t}/foreign-keys",
            f"/v1/tables/{t}/merge", f"/v1/tables/{t}/swap", f"/v1/tables/{t}/apply", f"/v1/tables/{t}/changes", f"/v1/tables/{t}/reset-serial",
            "/v1/push", f"/v1/push/{pid}", "/v1/feeds", f"/v1/feeds/{pid}", f"/v1/feeds/{pid}/position", f"/v1/feeds/{pid}/lag",
            f"/v1/replicas/{pid}", f"/v1/replicas/{pid}/transactions", f"/v1/tables/{t}/columns", "/healthz", "/", "/v2/tables",
            "/v1/tables/" + "x/" * self.rng.randrange(1, 40), "/v1//tables", "/%00", "/v1/tables?" + "a=" * 500,
        ]
        p = self.rng.choice(routes)
        q = self.query()
        return p + ("?" + q if q and "?" not in p else "")

    def mutate(self, doc):
        b = bytearray(doc)
        for _ in range(self.rng.randrange(1, 8)):
            if not b:
                break
            op = self.rng.randrange(6)
            i = self.rng.randrange(len(b))
            if op == 0:
                b[i] = self.rng.randrange(256)
            elif op == 1:
                del b[i:i + self.rng.randrange(1, 50)]
            elif op == 2:
                b[i:i] = self.rng.choice([b"<r>", b"</r>", b"<v>", b"</v>", b"<v null=\"1\"/>", b"&amp;", b"&#0;", b"&#xD800;", b"<![CDATA[",
                                          b"<!DOCTYPE x [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;\">]>", b"&b;", b"\xff\xfe", b"\x00"])
            elif op == 3:
                j = self.rng.randrange(len(b))
                b[i:i] = b[min(i, j):max(i, j)][:4096]
            elif op == 4:
                b = b[:i]  # truncated
            else:
                b[i:i] = b"<v>" + b"9" * self.rng.choice([20, 400, 100_000]) + b"</v>"
        return bytes(b)

    def body(self, method):
        if method in ("GET", "HEAD", "DELETE") and self.rng.random() < 0.9:
            return None
        r = self.rng.random()
        if r < 0.55 and self.docs:
            return self.mutate(self.rng.choice(self.docs))
        if r < 0.7 and self.docs:
            return self.rng.choice(self.docs)
        if r < 0.9966:
            return os.urandom(self.rng.randrange(0, 4096))
        if r < 0.9999:
            # A huge value.
            return b"<rows><r><v>1</v><v>" + b"x" * self.rng.choice([256 << 10, 1 << 20]) + b"</v></r></rows>"
        # Past --max-body-mb (64): refused with 413, never held.
        return b"<changes><insert>" + b"<r><v>1</v></r>" * ((70 << 20) // 15) + b"</insert></changes>"


def worker(args, wid, count, queue):
    rng = random.Random(args.seed * 1000 + wid)
    docs = [d.encode() for d in args.docs]
    gen = Generator(rng, args.tables, docs)
    host, port = urllib.parse.urlparse(args.url).hostname, urllib.parse.urlparse(args.url).port
    stats = {"requests": 0, "2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0, "503": 0, "failures": []}
    conn = None
    methods = ["GET", "GET", "POST", "POST", "DELETE", "PUT", "HEAD", "PATCH", "OPTIONS"]
    for n in range(count):
        method = rng.choice(methods)
        path = gen.path()
        body = gen.body(method)
        which = rng.random()
        if which < 0.25:
            token, kind = args.read_token, "read"
        elif which < 0.5:
            token, kind = args.write_token, "write"
        elif which < 0.75:
            token, kind = hex(rng.getrandbits(128))[2:], "wrong"
        else:
            token, kind = None, "none"
        headers = {}
        if token:
            headers["Authorization"] = "Bearer " + token
        if body is not None:
            headers["Content-Type"] = "application/xml"
        for attempt in range(2):
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(host, port, timeout=60)
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                status = resp.status
                if resp.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
                break
            except socket.timeout:
                stats["failures"].append(f"hang: {method} {path[:120]} ({kind}) got no answer in 60 s")
                status, data = None, b""
                conn = None
                break
            except (ConnectionError, http.client.HTTPException, OSError) as e:
                # A keep-alive connection the server closed after an earlier answer: asked again once.
                conn = None
                if attempt == 1:
                    stats["failures"].append(f"no answer: {method} {path[:120]} ({kind}): {e}")
                    status, data = None, b""
        stats["requests"] += 1
        if status is None:
            if len(stats["failures"]) > 50:
                break
            continue
        stats[f"{status // 100}xx"] = stats.get(f"{status // 100}xx", 0) + 1
        if status == 503:
            stats["503"] += 1
        if status >= 500 and status not in (503, 507):
            stats["failures"].append(f"{status}: {method} {path[:120]} ({kind}): {data[:200]!r}")
        route = urllib.parse.urlparse(path).path
        writes = method not in ("GET", "HEAD") and (method, route) not in READ_ROUTES and not route.startswith("/v1/snapshots/")
        if kind == "read" and writes and 200 <= status < 300:
            stats["failures"].append(f"read token wrote: {method} {path[:120]} answered {status}")
        if kind in ("wrong", "none") and 200 <= status < 300 and route != "/healthz":
            stats["failures"].append(f"no valid token yet {status}: {method} {path[:120]}")
        ddl = (method == "POST" and route == "/v1/tables") or (method == "DELETE" and route.startswith("/v1/tables/")) \
            or route.endswith("/swap") or route.endswith("/columns") or route.endswith("/indexes") or route.endswith("/foreign-keys")
        target = urllib.parse.unquote(route[len("/v1/tables/"):].split("/")[0]) if route.startswith("/v1/tables/") else ""
        if ddl and 200 <= status < 300 and not (target.startswith("_ferry_") or (route == "/v1/tables" and b'name="_ferry_' in (body or b""))):
            stats["failures"].append(f"DDL outside staging: {method} {path[:120]} ({kind}) answered {status}")
        if status >= 400:
            text = data.decode("utf-8", "replace")
            for mark in LEAK_MARKS:
                # A row the database refused (422 invalid) is answered with the database's reason
                # (its constraint, its SQLSTATE), as a client's reject file keeps it; no SQL, no path.
                if mark == "SQLSTATE" and status == 422 and 'code="invalid"' in text:
                    continue
                if mark in text:
                    stats["failures"].append(f"leak '{mark.strip()}' in {status} to {method} {path[:80]}: {text[:160]}")
                    break
        if len(stats["failures"]) > 50:
            break
    queue.put(stats)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--read-token", required=True)
    p.add_argument("--write-token", required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--requests", type=int, default=10_000)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tables", default="items")
    p.add_argument("--max-rss-mb", type=int, default=64)
    p.add_argument("--docs", action="append", default=[])
    args = p.parse_args()
    args.tables = [t for t in args.tables.split(",") if t]
    start = time.time()
    queue = multiprocessing.Queue()
    per = args.requests // args.workers
    procs = [multiprocessing.Process(target=worker, args=(args, w, per + (1 if w < args.requests % args.workers else 0), queue)) for w in range(args.workers)]
    for pr in procs:
        pr.start()
    total = {"requests": 0, "2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0, "503": 0, "failures": []}
    for _ in procs:
        s = queue.get()
        for k, v in s.items():
            total[k] = total.get(k, 0) + v if k != "failures" else total["failures"] + v
    for pr in procs:
        pr.join()
    alive = os.path.exists(f"/proc/{args.pid}")
    rss = peak_rss_kb(args.pid)
    if not alive:
        total["failures"].append("the service is gone (crashed)")
    if rss > args.max_rss_mb * 1024:
        total["failures"].append(f"peak RSS {rss // 1024} MiB over {args.max_rss_mb}")
    total["peak_rss_mb"] = round(rss / 1024, 1)
    total["seconds"] = round(time.time() - start, 1)
    for f in total["failures"][:40]:
        print("fuzz: " + f, file=sys.stderr)
    total["failure_count"] = len(total["failures"])
    del total["failures"]
    print(json.dumps(total))
    sys.exit(1 if total["failure_count"] else 0)


if __name__ == "__main__":
    main()
