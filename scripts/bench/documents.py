#!/usr/bin/env python3
"""One large document sent to `ferry serve` in front of a SQLite file, and the service's peak RSS
(VmHWM) after it: a change set of upserts or a guarded push of inserts, of about MB megabytes,
each row an integer key and a 100-byte text. Checks the rows arrived (count and a sample).

    documents.py FERRY MB changes|push     (scripts/bench/documents.sh runs it)
"""
import http.client, os, re, shutil, sqlite3, subprocess, sys, tempfile, time

ferry, mb, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
work = tempfile.mkdtemp(prefix="ferry-documents-")
db = os.path.join(work, "t.db")
con = sqlite3.connect(db)
con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, note TEXT NOT NULL)")
con.commit()
con.close()
token = "documents-token-0123456789abcdef"
with open(os.path.join(work, "tokens"), "w") as f:
    f.write(token + "\n")
log = os.path.join(work, "serve.err")
serve = subprocess.Popen(
    [ferry, "serve", "sqlite:" + db, "--token-file", os.path.join(work, "tokens"), "--listen", "127.0.0.1:0",
     "--max-body-mb", str(mb + 8), "--max-bodies-mb", str(mb + 8)],
    stdout=subprocess.DEVNULL, stderr=open(log, "w"))
port = None
for _ in range(200):
    m = re.search(r"127\.0\.0\.1:(\d+)/", open(log).read())
    if m:
        port = int(m.group(1))
        break
    time.sleep(0.1)
if port is None:
    sys.exit("ferry serve did not start: " + open(log).read())


def hwm_mib():
    for line in open(f"/proc/{serve.pid}/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024


note = "n" * 100
row = lambda i: f"<r><v>{i}</v><v>{note}</v></r>\n"
n = mb * (1 << 20) // len(row(1_000_000))
rows = "".join(row(i) for i in range(1, n + 1))
if kind == "changes":
    path = "/v1/tables/t/changes?columns=id&columns=note&key=id"
    body = '<?xml version="1.0" encoding="UTF-8"?>\n<changes>\n<upsert>\n' + rows + "</upsert>\n</changes>\n"
else:
    path = "/v1/push"
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<push id="documents-1">\n<table name="t"><column name="id"/>'
            '<column name="note"/><key name="id"/>\n<insert>\n' + rows + "</insert>\n</table>\n</push>\n")
body = body.encode()
del rows
before = hwm_mib()
c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
started = time.time()
c.request("POST", path, body=body, headers={"Authorization": "Bearer " + token, "Content-Type": "application/xml"})
answer = c.getresponse()
text = answer.read().decode("utf-8", "replace")
seconds = time.time() - started
peak = hwm_mib()
serve.terminate()
serve.wait()
con = sqlite3.connect(db)
count, = con.execute("SELECT count(*) FROM t").fetchone()
sample, = con.execute("SELECT note FROM t WHERE id = ?", (n // 2,)).fetchone() or (None,)
con.close()
shutil.rmtree(work, ignore_errors=True)
ok = answer.status == 200 and count == n and sample == note
print(f"| {kind} | {len(body) / (1 << 20):.1f} MiB | {n:,} | {answer.status} | {seconds:.1f} s | {before:.1f} MiB | {peak:.1f} MiB | {'yes' if ok else 'NO'} |")
if not ok:
    sys.exit(f"the rows did not arrive: status {answer.status}, {count} of {n} rows: {text[:300]}")
