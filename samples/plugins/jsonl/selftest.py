#!/usr/bin/env python3
"""Self-test of ferry-driver-jsonl, standard library only: `python3 samples/plugins/jsonl/selftest.py`.

Starts the plugin on temp folders the way Ferry does (environment, frames on stdin/stdout),
and checks the handshake, every endpoint, that every value's wire text comes back exactly as it
was posted, all-or-nothing writes, swap and merge, errors, a source that changes nothing,
primary and unique keys enforced, serial values generated, schema inference, cancel,
interleaved requests and the end of input. Exits non-zero on any
mismatch.
"""

import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGIN = os.path.join(HERE, "ferry-driver-jsonl")
MAX_FRAME = 1 << 20

failures = []
checks = 0


def check(ok, what):
    global checks
    checks += 1
    if not ok:
        failures.append(what)
        print("FAIL:", what)
    return ok


def equal(got, want, what):
    return check(got == want, f"{what}: got {got!r}, want {want!r}")


class Plugin:
    """The plugin as Ferry runs it: one process, frames both ways."""

    def __init__(self, url, role="target", protocol="1"):
        env = dict(os.environ, FERRY_DRIVER_URL=url, FERRY_DRIVER_ROLE=role, FERRY_PROTOCOL=protocol)
        self.p = subprocess.Popen([PLUGIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=env)
        self.stderr = []
        threading.Thread(target=self._errors, daemon=True).start()
        self.stream = 0
        self.frames = 0
        self.backlog = {}  # frames read for a stream other than the one being read

    def _errors(self):
        for line in self.p.stderr:
            self.stderr.append(line.decode("utf-8", "replace").rstrip("\n"))

    def hello(self):
        kind, stream, payload = self.read_frame()
        equal((kind, stream), ("hello", 0), "the first frame is hello 0")
        return payload

    def read_frame(self):
        header = self.p.stdout.readline(66)
        if not header:
            raise EOFError("the plugin closed its stdout")
        check(len(header) <= 65 and header.endswith(b"\n"), f"a frame header of at most 64 bytes: {header[:80]!r}")
        m = re.fullmatch(rb"(hello|response|body|end) ([0-9]+) ([0-9]+)\n", header)
        if not check(m is not None, f"a well-formed frame header: {header!r}"):
            raise RuntimeError("protocol error from the plugin")
        kind, stream, length = m.group(1).decode(), int(m.group(2)), int(m.group(3))
        check(length <= MAX_FRAME, f"a frame of at most 1 MiB ({length})")
        payload = self.p.stdout.read(length)
        equal(len(payload), length, "a whole frame payload")
        self.frames += 1
        return kind, stream, payload

    def send(self, kind, stream, payload=b""):
        self.p.stdin.write(b"%s %d %d\n" % (kind.encode(), stream, len(payload)) + payload)
        self.p.stdin.flush()

    def start(self, method, target, body=b"", piece=MAX_FRAME):
        """Sends a request (the body in frames of `piece` bytes) and returns its stream id."""
        self.stream += 1
        s = self.stream
        self.send("request", s, f"{method} {target}\nAccept: application/xml\n".encode())
        for i in range(0, len(body), piece):
            self.send("body", s, body[i:i + piece])
        self.send("end", s)
        return s

    def answer(self, s, interleaved=False):
        """Reads frames until `end s`: (status, body). With `interleaved`, frames of other
        streams are kept for their own answer()."""
        status, parts = None, []
        while True:
            if self.backlog.get(s):
                kind, payload = self.backlog[s].pop(0)
            else:
                kind, stream, payload = self.read_frame()
                if stream != s:
                    if not interleaved:
                        raise RuntimeError(f"a {kind} frame for stream {stream} while reading {s}")
                    self.backlog.setdefault(stream, []).append((kind, payload))
                    continue
            if kind == "response":
                status = int(payload.split(b"\n")[0])
            elif kind == "body":
                check(status is not None, f"stream {s}: body after response")
                parts.append(payload)
            elif kind == "end":
                return status, b"".join(parts)

    def request(self, method, target, body=b"", piece=MAX_FRAME):
        return self.answer(self.start(method, target, body, piece))

    def close(self, timeout=10):
        self.p.stdin.close()
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return None


def xml_doc(body):
    return ET.fromstring(body)


def error_of(body):
    e = ET.fromstring(body)
    return e.tag, e.attrib


def rows_lines(body):
    """The `<r>…</r>` lines of a rows answer, byte for byte."""
    text = body.decode("utf-8")
    return re.findall(r"<r>.*?</r>", text, re.S)


def cells(body):
    """The cells of a rows answer as (null, enc, text) per value: what Ferry would read."""
    root = ET.fromstring(body)
    out = []
    for r in root.findall("r"):
        out.append([(v.get("null") == "1", v.get("enc"), v.text or "") for v in r.findall("v")])
    return root, out


def esc(s):
    """Ferry's XMLText escaping (& < > " ' and CR)."""
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
            .replace("'", "&apos;").replace("\r", "&#13;"))


def v(text):
    return "<v>" + esc(text) + "</v>"


def vb(data):
    return '<v enc="b64">' + base64.b64encode(data).decode() + "</v>"


NULL = '<v null="1"/>'


def rows_doc(table, rows):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<rows table="%s">\n' % table
            + "".join("<r>" + "".join(r) + "</r>\n" for r in rows) + "</rows>\n").encode()


SCHEMA = """<?xml version="1.0" encoding="UTF-8"?>
<table name="%s" engine="sqlite" rows="0">
  <column name="id" native="INTEGER" type="int64" nullable="false" serial="rowid"/>
  <column name="name" native="TEXT" type="text" nullable="true"/>
  <column name="price" native="NUMERIC(10,2)" type="decimal" precision="10" scale="2" nullable="true"/>
  <column name="ratio" native="REAL" type="float64" nullable="true"/>
  <column name="ratio32" native="FLOAT" type="float32" nullable="true"/>
  <column name="data" native="BLOB" type="binary" nullable="true"/>
  <column name="day" native="DATE" type="date" nullable="true"/>
  <column name="at" native="DATETIME" type="timestamp" timeZone="false" nullable="true"/>
  <column name="atz" native="TIMESTAMPTZ" type="timestamp" timeZone="true" nullable="true"/>
  <column name="t" native="TIME" type="time" nullable="true"/>
  <column name="flag" native="BOOLEAN" type="boolean" nullable="true" defaultKind="boolean" default="false"/>
  <column name="u" native="UUID" type="uuid" nullable="true"/>
  <column name="doc" native="JSON" type="json" nullable="true"/>
  <column name="small" native="SMALLINT" type="int16" nullable="true"/>
  <column name="mood" native="mood" type="enumeration" nullable="true"><label>happy</label><label>sad</label></column>
  <primaryKey><c>id</c></primaryKey>
  <index name="items_name" unique="false"><c>name</c></index>
</table>
"""
COLUMNS = ["id", "name", "price", "ratio", "ratio32", "data", "day", "at", "atz", "t", "flag", "u", "doc", "small",
           "mood"]
QCOLS = "&".join("columns=" + c for c in COLUMNS)

TRICKY = "Fish & chips <3 > \"q\" 'a'\r\nline\ttab  "
BIG = ("0123456789abcdef" * 65536 * 3)[:3 * 1024 * 1024 + 7]  # 3 MiB: more than one frame

BATCH1 = [
    [v("1"), v(TRICKY), v("-12.30"), v("0.1"), v("0.10000000149011612"), vb(b"\x00\x01\xff"), v("2024-02-29"),
     v("2024-01-02T03:04:05.123456"), v("2024-01-02T03:04:05Z"), v("23:59:59.5"), v("true"),
     v("123e4567-e89b-12d3-a456-426614174000"), v('{"a": [1, 2], "b": "&"}'), v("-32768"), v("happy")],
    [v("2"), vb(b"bell\x07 and nul\x00"), v("NaN"), v("NaN"), v("NaN"), vb(b""), NULL, NULL, NULL, NULL, NULL,
     NULL, v(""), NULL, NULL],
    [v("3"), v(""), NULL, v("-0.0"), v("Infinity"), NULL, v("-0044-03-15"), v("1969-12-31T23:59:59.999999"), NULL,
     v("24:00:00"), v("false"), NULL, NULL, v("32767"), NULL],
]
BATCH2 = [
    [v("4"), vb(b"\xff\xfe not UTF-8 \xc3"), v("12345678.99"), v("5e-324"), v("-Infinity"), vb(bytes(range(256))),
     v("9999-12-31"), v("0001-01-01T00:00:00"), v("2262-04-11T23:47:16.854775Z"), v("00:00:00"), v("true"),
     v("00000000-0000-0000-0000-000000000000"), v("[]"), v("0"), v("sad")],
    [v("5"), vb("\uffff and \ufffe".encode()), v("-Infinity"), v("1e+16"), v("1.5"), NULL, NULL,
     v("2024-06-30T12:00:00"), v("1970-01-01T00:00:00Z"), v("12:34:56.000001"), NULL, NULL,
     v("\u2028 unicode \u2713 \U0001F600"), NULL, NULL],
    [v("6"), v("  leading and trailing  "), v("0.00"), v("1.7976931348623157e+308"), v("-3.4028234663852886e+38"),
     NULL, v("1970-01-01"), v("2000-02-29T23:59:59.000001"), NULL, v("01:02:03"), NULL, NULL, v("null"), v("-1"),
     NULL],
    [v("7"), '<v n="%d">' % len(BIG) + BIG + "</v>", v("1"), v("1e-07"), v("0.0"), NULL, NULL, NULL, NULL, NULL,
     NULL, NULL, NULL, NULL, NULL],
]
# A cell written `<v/>` is the empty string: Ferry (and the plugin) write it back as `<v></v>`.
BATCH2_EMPTY = [v("8"), "<v/>", NULL, NULL, NULL, '<v enc="b64"/>', NULL, NULL, NULL, NULL, NULL, NULL, "<v/>", NULL,
                NULL]
BATCH2_EMPTY_BACK = [v("8"), "<v></v>", NULL, NULL, NULL, '<v enc="b64"></v>', NULL, NULL, NULL, NULL, NULL, NULL,
                     "<v></v>", NULL, NULL]


def folder_state(path):
    out = {}
    for e in sorted(os.listdir(path)):
        st = os.stat(os.path.join(path, e))
        out[e] = (st.st_size, st.st_mtime_ns)
    return out


def test_target(folder):
    pl = Plugin("jsonl:" + folder)
    caps = xml_doc(pl.hello())
    equal((caps.tag, caps.get("protocol"), caps.get("name"), caps.get("version")),
          ("capabilities", "1", "ferry-driver-jsonl", "0.1.0"), "the capabilities document")
    equal(sorted(c.get("name") for c in caps.findall("capability")), ["source", "target"], "capabilities")

    st, body = pl.request("GET", "/v1/capabilities")
    equal((st, xml_doc(body).tag), (200, "capabilities"), "GET /v1/capabilities")
    st, body = pl.request("GET", "/v1/tables")
    equal((st, body), (200, b'<?xml version="1.0" encoding="UTF-8"?>\n<tables></tables>\n'), "no tables at first")
    st, body = pl.request("GET", "/v1/objects")
    equal((st, body), (200, b'<?xml version="1.0" encoding="UTF-8"?>\n<objects></objects>\n'), "GET /v1/objects")

    # Create: 201 with the schema as served; the sidecar is the document as posted.
    posted = (SCHEMA % "items").encode()
    st, body = pl.request("POST", "/v1/tables", posted, piece=100)
    equal(st, 201, "POST /v1/tables")
    t = xml_doc(body)
    equal((t.get("name"), t.get("engine"), t.get("rows")), ("items", "jsonl", "0"), "created table attributes")
    equal([c.get("name") for c in t.findall("column")], COLUMNS, "created columns")
    equal([c.text for c in t.find("primaryKey").findall("c")], ["id"], "primary key served")
    equal(t.find("index"), None, "indexes are not served (the files have none)")
    equal(t.find("column[@name='mood']").findall("label")[1].text, "sad", "enumeration labels served")
    with open(os.path.join(folder, "items.schema.xml"), "rb") as f:
        equal(f.read(), posted, "the sidecar holds the document exactly as posted")
    st, body = pl.request("POST", "/v1/tables", posted)
    equal((st, error_of(body)), (409, ("error", {"code": "exists", "table": "items"})), "create twice: 409 exists")

    # Rows in two requests (the second in small frames: values cut across frames).
    st, body = pl.request("POST", "/v1/tables/items/rows?" + QCOLS, rows_doc("items", BATCH1))
    equal((st, body), (200, b'<?xml version="1.0" encoding="UTF-8"?>\n<applied inserted="3"/>\n'), "POST rows 1")
    st, body = pl.request("POST", "/v1/tables/items/rows?" + QCOLS, rows_doc("items", BATCH2 + [BATCH2_EMPTY]),
                          piece=7777)
    equal((st, xml_doc(body).get("inserted")), (200, "5"), "POST rows 2")

    want = ["<r>" + "".join(r) + "</r>" for r in BATCH1 + BATCH2 + [BATCH2_EMPTY_BACK]]
    st, body = pl.request("GET", "/v1/tables/items/rows?limit=50000&" + QCOLS)
    equal(st, 200, "GET rows")
    got = rows_lines(body)
    equal(len(got), len(want), "rows read back")
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            gc = re.findall(r"<v[^>]*/>|<v[^>]*>.*?</v>", g, re.S)
            wc = re.findall(r"<v[^>]*/>|<v[^>]*>.*?</v>", w, re.S)
            for name, a, b in zip(COLUMNS, gc, wc):
                check(a == b, f"row {i + 1} column {name}: got {a[:120]!r}, want {b[:120]!r}")
        else:
            check(True, "")
    check(body.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n<rows table="items">\n'), "rows document head")
    check(body.endswith(b"</rows>\n") and b"<next>" not in body, "one whole document, no <next>")
    root, cs = cells(body)
    equal(cs[1][1], (False, "b64", base64.b64encode(b"bell\x07 and nul\x00").decode()), "control characters as b64")
    equal(cs[1][12], (False, None, ""), "empty string is not NULL")
    equal(cs[2][2], (True, None, ""), "NULL is not the empty string")
    equal(base64.b64decode(cs[3][1][2]), b"\xff\xfe not UTF-8 \xc3", "text that is not UTF-8 comes back exact")
    equal(ET.fromstring(body).findall("r")[0].findall("v")[1].text, TRICKY.replace("\r\n", "\r\n"),
          "text with & < > quotes CR LF TAB reads back (XML parser view)")
    equal(cs[6][1][2], BIG, "a 3 MiB value")

    # What the file holds: the documented JSON forms.
    with open(os.path.join(folder, "items.jsonl"), encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    equal(lines[0]["price"], "-12.30", "decimal stored as a string of its exact text")
    equal(lines[0]["id"], 1, "int64 stored as a JSON integer")
    equal(lines[0]["data"], base64.b64encode(b"\x00\x01\xff").decode(), "binary stored as base64")
    equal(lines[1]["ratio"], "NaN", "NaN stored as a string")
    equal(lines[2]["ratio"], "-0.0", "-0.0 stored as a string")
    equal(lines[2]["ratio32"], "Infinity", "Infinity stored as a string")
    equal(lines[3]["name"], {"$b64": base64.b64encode(b"\xff\xfe not UTF-8 \xc3").decode()}, "non-UTF-8 text as $b64")
    equal(lines[1]["name"], "bell\x07 and nul\x00", "text with control characters as a JSON string")
    equal(lines[1]["doc"], "", "empty string stored as \"\"")
    equal(lines[1]["day"], None, "NULL stored as null")
    with open(os.path.join(folder, "items.jsonl"), "rb") as f:
        raw = f.read().split(b"\n")
    check(b'"ratio":0.1,' in raw[0] and b'"ratio":5e-324,' in raw[3] and b'"ratio":1e+16,' in raw[4],
          "floats stored as JSON numbers with the exact text sent")

    st, body = pl.request("GET", "/v1/tables/items/count")
    equal((st, body), (200, b'<?xml version="1.0" encoding="UTF-8"?>\n<count rows="8"/>\n'), "count")
    st, body = pl.request("GET", "/v1/tables")
    equal(body, b'<?xml version="1.0" encoding="UTF-8"?>\n<tables><table name="items" rows="8"/></tables>\n',
          "tables with exact row counts")
    st, body = pl.request("GET", "/v1/tables/items")
    equal((st, xml_doc(body).get("rows")), (200, "8"), "schema with rows")

    # columns= picks and orders; the key is appended when not asked for; limit is ignored.
    st, body = pl.request("GET", "/v1/tables/items/rows?limit=1&columns=flag&columns=name")
    _, cs = cells(body)
    equal(len(cs), 8, "limit is ignored: the whole table")
    equal(cs[0], [(False, None, "true"), (False, None, TRICKY.replace("\r\n", "\r\n")), (False, None, "1")],
          "columns=flag,name (+ the key id)")
    for q in ("after=3", "upto=3", "order=desc", "buckets=4:1", "snapshot=x"):
        st, body = pl.request("GET", "/v1/tables/items/rows?" + q)
        equal((st, error_of(body)[1].get("code")), (400, "bad_request"), f"rows?{q} is refused")
    st, body = pl.request("GET", "/v1/tables/items/rows?columns=nope")
    equal((st, error_of(body)[1].get("column")), (422, "nope"), "an unknown column")

    # All or nothing: a bad value in row 2 leaves the table as it was.
    bad = [[v("9")] + [NULL] * 14, [v("x")] + [NULL] * 14]
    st, body = pl.request("POST", "/v1/tables/items/rows?" + QCOLS, rows_doc("items", bad))
    equal((st, error_of(body)[1]), (422, {"code": "invalid", "table": "items", "row": "2", "column": "id"}),
          "422 invalid with row and column")
    for what, row in (("a primary key already in the table", [v("1")] + [NULL] * 14),
                      ("decimal(10,2) overflow", [v("10"), NULL, v("123456789.99")] + [NULL] * 12),
                      ("enumeration label", [v("10")] + [NULL] * 13 + [v("angry")]),
                      ("int16 range", [v("10")] + [NULL] * 12 + [v("40000"), NULL]),
                      ("date", [v("10")] + [NULL] * 5 + [v("2023-02-29")] + [NULL] * 8),
                      ("bad base64", [v("10")] + [NULL] * 4 + ['<v enc="b64">QQ</v>'] + [NULL] * 9),
                      ("float", [v("10"), NULL, NULL, v("nan")] + [NULL] * 11)):
        st, body = pl.request("POST", "/v1/tables/items/rows?" + QCOLS, rows_doc("items", [row]))
        equal((st, error_of(body)[1].get("code"), error_of(body)[1].get("row")), (422, "invalid", "1"), what)
    st, body = pl.request("POST", "/v1/tables/items/rows?" + QCOLS, rows_doc("items", [[v("10")]]))
    equal(st, 400, "a row with too few values")
    st, body = pl.request("POST", "/v1/tables/items/rows?" + QCOLS, b"<rows><r><v>1</v>")
    equal(st, 400, "a document cut short")
    st, body = pl.request("POST", "/v1/tables/items/rows?" + QCOLS,
                          b'<?xml version="1.0"?><!DOCTYPE rows [<!ENTITY x "y">]><rows><r><v>&x;</v></r></rows>')
    equal((st, error_of(body)[1].get("code")), (400, "bad_request"), "DOCTYPE/ENTITY refused")
    st, body = pl.request("POST", "/v1/tables", b'<!DOCTYPE table SYSTEM "file:///etc/passwd"><table name="z"/>')
    equal(st, 400, "DOCTYPE refused in a schema document")
    st, body = pl.request("GET", "/v1/tables/items/count")
    equal(xml_doc(body).get("rows"), "8", "refused requests changed nothing")
    # columns= on a write: the others take their default (flag) or NULL.
    st, body = pl.request("POST", "/v1/tables/items/rows?columns=name&columns=id",
                          rows_doc("items", [[v("partial"), v("9")]]))
    equal(st, 200, "POST rows with a subset of the columns")
    st, body = pl.request("GET", "/v1/tables/items/rows?columns=id&columns=flag&columns=day")
    equal(cells(body)[1][-1], [(False, None, "9"), (False, None, "false"), (True, None, "")],
          "omitted columns: default, else NULL")

    # Floats in Swift's shortest form, which is not always Python's (above 2^53 Swift writes an
    # exponent, Python only from 1e16): the text must come back as sent, never re-formatted.
    swift_texts = ["9.007199254740994e+15", "9007199254740992.0", "-9.999999999999998e+15", "1e+16", "0.0001",
                   "1e-05", "123456789012345.6", "2.2250738585072014e-308", "5e-324", "-1.0", "100.0", "0.0"]
    pl.request("POST", "/v1/tables", b'<table name="floats"><column name="f" type="float64"/></table>')
    st, _ = pl.request("POST", "/v1/tables/floats/rows?columns=f", rows_doc("floats", [[v(x)] for x in swift_texts]))
    st, body = pl.request("GET", "/v1/tables/floats/rows")
    equal(rows_lines(body), ["<r>" + v(x) + "</r>" for x in swift_texts], "float texts exactly as sent")
    pl.request("DELETE", "/v1/tables/floats")

    # Indexes, foreign keys, reset-serial.
    st, body = pl.request("POST", "/v1/tables/items/indexes",
                          b'<objects><index name="ix_name" unique="true"><c>name</c></index></objects>')
    equal((st, body), (200, b'<?xml version="1.0" encoding="UTF-8"?>\n<applied indexes="0"><skipped kind="index" '
                            b'name="ix_name" reason="JSON Lines files have no indexes"/></applied>\n'), "indexes")
    st, body = pl.request("POST", "/v1/tables/items/foreign-keys",
                          b'<objects><foreignKey name="fk" table="p"><c references="id">small</c></foreignKey></objects>')
    equal((st, xml_doc(body).find("skipped").get("kind")), (200, "foreign key"), "foreign keys skipped")
    st, body = pl.request("POST", "/v1/tables/items/reset-serial")
    equal((st, body), (200, b'<?xml version="1.0" encoding="UTF-8"?>\n<applied reset="1"/>\n'), "reset-serial")

    # 404s: unknown tables, names that could leave the folder, unknown endpoints.
    for target in ("/v1/tables/nope", "/v1/tables/nope/count", "/v1/tables/nope/rows", "/v1/tables/..%2Fetc",
                   "/v1/tables/a%2Fb", "/v1/tables/%2E%2E", "/v1/tables/x%00y", "/v1/tables/a%5Cb",
                   "/v1/tables/main.items", "/v1/nope", "/v1/tables/items/digests?modulus=4"):
        st, body = pl.request("GET", target)
        equal((st, error_of(body)[1].get("code")), (404, "not_found"), f"GET {target}")
    st, body = pl.request("DELETE", "/v1/tables/nope")
    equal(st, 404, "DELETE an unknown table")
    st, body = pl.request("POST", "/v1/snapshots")
    equal(st, 404, "no snapshots endpoint")
    st, body = pl.request("POST", "/v1/tables", (SCHEMA % "../evil").encode())
    equal(st, 400, "a created name that would leave the folder")
    check(not os.path.exists(os.path.join(os.path.dirname(folder), "evil.jsonl")), "nothing written outside")

    # A name holding a dot travels quoted.
    st, _ = pl.request("POST", "/v1/tables", (SCHEMA % "a.b").encode())
    equal(st, 201, "create a.b")
    st, body = pl.request("GET", "/v1/tables/%22a.b%22/count")
    equal((st, xml_doc(body).get("rows")), (200, "0"), "GET /v1/tables/\"a.b\"/count")
    st, body = pl.request("DELETE", "/v1/tables/%22a.b%22")
    equal((st, body), (200, b'<?xml version="1.0" encoding="UTF-8"?>\n<applied dropped="1"/>\n'), "DELETE \"a.b\"")
    check(not os.path.exists(os.path.join(folder, "a.b.schema.xml")), "the sidecar is dropped too")

    # Swap: the staging table (its rows and its schema) replaces items.
    staging_schema = (SCHEMA % "_ferry_replace_items").replace(
        '<primaryKey>', '<column name="extra" native="TEXT" type="text" nullable="true"/><primaryKey>').encode()
    st, _ = pl.request("POST", "/v1/tables", staging_schema)
    equal(st, 201, "create the swap staging table")
    st, _ = pl.request("POST", "/v1/tables/_ferry_replace_items/rows?columns=id&columns=extra",
                       rows_doc("_ferry_replace_items", [[v("100"), v("new")], [v("101"), NULL]]))
    equal(st, 200, "fill the staging table")
    st, body = pl.request("POST", "/v1/tables/_ferry_replace_items/swap?into=items")
    equal((st, body), (200, b'<?xml version="1.0" encoding="UTF-8"?>\n<applied swapped="1"/>\n'), "swap")
    st, body = pl.request("GET", "/v1/tables/items")
    t = xml_doc(body)
    equal((t.get("name"), t.get("rows"), t.findall("column")[-1].get("name")), ("items", "2", "extra"),
          "swapped: items has the staging table's rows and schema, under its own name")
    st, _ = pl.request("GET", "/v1/tables/_ferry_replace_items")
    equal(st, 404, "swapped: the staging table is gone")
    equal(sorted(os.listdir(folder)), ["items.jsonl", "items.schema.xml"], "no stray files after swap")

    # Merge, same types (lines copied as they are).
    small = SCHEMA.split("\n")
    subset = "\n".join(l for l in small if 'name="id"' in l or 'name="name"' in l or "table" in l) + "\n"
    st, _ = pl.request("POST", "/v1/tables", (subset % "_ferry_append_items").encode())
    equal(st, 201, "create the merge staging table")
    st, _ = pl.request("POST", "/v1/tables/_ferry_append_items/rows?columns=id&columns=name",
                       rows_doc("_ferry_append_items", [[v("102"), v("m1")], [v("103"), vb(b"\x01")]]))
    st, body = pl.request("POST", "/v1/tables/_ferry_append_items/merge?into=items")
    equal((st, body), (200, b'<?xml version="1.0" encoding="UTF-8"?>\n<applied inserted="2"/>\n'), "merge")
    st, body = pl.request("GET", "/v1/tables/items/rows?columns=id&columns=name&columns=extra")
    equal(rows_lines(body), ["<r><v>100</v>" + NULL + "<v>new</v></r>", "<r><v>101</v>" + NULL + NULL + "</r>",
                             "<r><v>102</v><v>m1</v>" + NULL + "</r>",
                             "<r><v>103</v>" + vb(b"\x01") + NULL + "</r>"], "merged rows appended in order")
    st, _ = pl.request("GET", "/v1/tables/_ferry_append_items/count")
    equal(st, 404, "merged: the staging table is gone")

    # Merge with conversion (int64 staging into an int16 column): a value that does not fit
    # fails the merge, which changes nothing; one that fits goes in.
    conv = ('<table name="_ferry_append2"><column name="id" type="int64" nullable="false"/>'
            '<column name="small" type="int64" nullable="true"/></table>')
    pl.request("POST", "/v1/tables", conv.encode())
    pl.request("POST", "/v1/tables/_ferry_append2/rows?columns=id&columns=small",
               rows_doc("_ferry_append2", [[v("104"), v("7")], [v("105"), v("70000")]]))
    st, body = pl.request("POST", "/v1/tables/_ferry_append2/merge?into=items")
    equal((st, error_of(body)[1].get("row"), error_of(body)[1].get("column")), (422, "2", "small"),
          "merge of a value that does not fit")
    st, body = pl.request("GET", "/v1/tables/items/count")
    equal(xml_doc(body).get("rows"), "4", "the failed merge changed nothing")
    pl.request("DELETE", "/v1/tables/_ferry_append2")
    pl.request("POST", "/v1/tables", conv.encode())
    pl.request("POST", "/v1/tables/_ferry_append2/rows?columns=id&columns=small",
               rows_doc("_ferry_append2", [[v("104"), v("7")]]))
    st, body = pl.request("POST", "/v1/tables/_ferry_append2/merge?into=items")
    equal(st, 200, "merge with conversion")
    st, body = pl.request("GET", "/v1/tables/items/rows?columns=id&columns=small")
    equal(rows_lines(body)[-1], "<r><v>104</v><v>7</v></r>", "converted row merged")

    # Merge, same types: the staging table's lines are appended as they are.
    pl.request("POST", "/v1/tables", staging_schema.replace(b"_ferry_replace_items", b"_ferry_append_full"))
    full = [v("105"), v("full"), v("1.10"), v("0.3"), v("2.5"), vb(b"z"), v("2020-01-01"),
            v("2020-01-01T00:00:00.5"), v("2020-01-01T00:00:00Z"), v("10:00:00"), v("true"),
            v("ffffffff-ffff-ffff-ffff-ffffffffffff"), v("{}"), v("12"), v("sad"), v("e")]
    pl.request("POST", "/v1/tables/_ferry_append_full/rows?" + QCOLS + "&columns=extra",
               rows_doc("_ferry_append_full", [full]))
    st, body = pl.request("POST", "/v1/tables/_ferry_append_full/merge?into=items")
    equal(xml_doc(body).get("inserted"), "1", "merge of the same types")
    st, body = pl.request("GET", "/v1/tables/items/rows?" + QCOLS + "&columns=extra")
    equal(rows_lines(body)[-1], "<r>" + "".join(full) + "</r>", "merged row exact")

    # Interleaved requests: the next ones come before the first is answered.
    a = pl.start("GET", "/v1/tables/items/count")
    b = pl.start("GET", "/v1/tables")
    c = pl.start("POST", "/v1/tables/items/reset-serial")
    st_c, _ = pl.answer(c, interleaved=True)
    st_b, body_b = pl.answer(b, interleaved=True)
    st_a, body_a = pl.answer(a, interleaved=True)
    equal((st_a, st_b, st_c, xml_doc(body_a).get("rows")), (200, 200, 200, "6"), "interleaved requests answered")

    # Cancel: a long answer stops early; the plugin goes on with the next request.
    pl.request("POST", "/v1/tables", (subset % "big").encode())
    rows = [[v(str(i)), v("x" * 200)] for i in range(30000)]
    st, _ = pl.request("POST", "/v1/tables/big/rows?columns=id&columns=name", rows_doc("big", rows))
    equal(st, 200, "a 6 MB table")
    s = pl.start("GET", "/v1/tables/big/rows")
    kind, stream, payload = pl.read_frame()
    equal((kind, stream), ("response", s), "the answer starts")
    time.sleep(0.3)  # the plugin fills the pipe and waits
    pl.send("cancel", s)
    got = 0
    while True:
        kind, stream, payload = pl.read_frame()
        if kind == "end":
            break
        got += len(payload)
    check(got < 6_000_000, f"cancel stopped the answer early ({got} bytes sent)")
    st, body = pl.request("GET", "/v1/tables/big/count")
    equal((st, xml_doc(body).get("rows")), (200, "30000"), "requests after a cancel")

    # Rows of more than a frame come in frames of at most 1 MiB (checked by read_frame).
    st, body = pl.request("GET", "/v1/tables/big/rows")
    equal(len(rows_lines(body)), 30000, "a 6 MB answer in frames")

    st, body = pl.request("DELETE", "/v1/tables/big")
    equal(st, 200, "DELETE")
    t0 = time.time()
    equal(pl.close(), 0, "exit status 0 at the end of input")
    check(time.time() - t0 < 5, "exits promptly")
    return pl


def test_keys(folder):
    """Primary and unique keys refused when already stored or earlier in the same write (posted
    rows and merges), and serial values generated for rows that leave them out or send NULL."""
    pl = Plugin("jsonl:" + folder)
    pl.hello()
    schema = ('<table name="%s"><column name="id" type="int64" nullable="false" serial="autoincrement"/>'
              '<column name="code" type="text" nullable="true"/><column name="a" type="int32" nullable="true"/>'
              '<column name="b" type="uuid" nullable="true"/><column name="note" type="text" nullable="false"/>'
              '<primaryKey><c>id</c></primaryKey><unique name="k_code"><c>code</c></unique>'
              '<unique name="k_ab"><c>a</c><c>b</c></unique></table>')
    equal(pl.request("POST", "/v1/tables", (schema % "k").encode())[0], 201, "keys: create")
    cols = "columns=id&columns=code&columns=a&columns=b&columns=note"
    uuid1 = "123e4567-e89b-12d3-a456-426614174000"
    st, body = pl.request("POST", "/v1/tables/k/rows?" + cols, rows_doc("k", [
        [v("1"), v("one"), v("1"), v(uuid1), v("n")],
        [v("2"), NULL, v("1"), NULL, v("n")],   # NULLs never collide (code, and b of (a, b))
        [v("41"), NULL, v("1"), NULL, v("n")]]))
    equal((st, xml_doc(body).get("inserted")), (200, "3"), "keys: rows with NULLs in unique keys go in")
    data = os.path.join(folder, "k.jsonl")

    def refused(rows, row, column, words, what, columns=cols):
        with open(data, "rb") as f:
            before = f.read()
        st, body = pl.request("POST", "/v1/tables/k/rows?" + columns, rows_doc("k", rows))
        tag, a = error_of(body)
        equal((st, a.get("code"), a.get("row"), a.get("column")), (422, "invalid", row, column), what)
        message = ET.fromstring(body).text or ""
        check(all(w in message for w in words), f"{what}: the message names the key and value: {message!r}")
        with open(data, "rb") as f:
            equal(f.read(), before, f"{what}: nothing changed")

    refused([[v("3"), NULL, NULL, NULL, v("n")], [v("1"), NULL, NULL, NULL, v("n")]], "2", "id",
            ["primary key (id) = (1)", "already in table k"], "keys: a primary key already stored")
    refused([[v("5"), v("x"), NULL, NULL, v("n")], [v("6"), v("y"), NULL, NULL, v("n")],
             [v("5"), v("z"), NULL, NULL, v("n")]], "3", "id",
            ["primary key (id) = (5)", "also in row 1 of this request"], "keys: a primary key twice in one request")
    refused([[v("7"), v("one"), NULL, NULL, v("n")]], "1", "code", ["unique key (code) = ('one')"],
            "keys: a unique key already stored")
    refused([[v("8"), NULL, v("1"), v(uuid1.upper()), v("n")]], "1", None,
            ["unique key (a, b) = (1, '" + uuid1 + "')"], "keys: a two-column unique key (UUIDs compared canonical)")
    refused([[v("9"), NULL, NULL, NULL, NULL]], "1", "note", ["NULL into the NOT NULL column note"],
            "keys: NULL into a NOT NULL column that is not serial")

    # Serial values: the largest stored (41) + 1, then above the earlier ones of the same request.
    st, body = pl.request("POST", "/v1/tables/k/rows?columns=note", rows_doc("k", [[v("left out")]]))
    equal(st, 200, "serial: a row without the serial column")
    st, body = pl.request("POST", "/v1/tables/k/rows?columns=note&columns=id", rows_doc("k", [
        [v("null 1"), NULL], [v("explicit"), v("100")], [v("null 2"), NULL]]))
    equal(st, 200, "serial: rows sending NULL")
    st, body = pl.request("GET", "/v1/tables/k/rows?columns=id&columns=note")
    equal(rows_lines(body)[3:], ["<r><v>42</v><v>left out</v></r>", "<r><v>43</v><v>null 1</v></r>",
                                 "<r><v>100</v><v>explicit</v></r>", "<r><v>101</v><v>null 2</v></r>"],
          "serial: generated above the largest value, and above the earlier rows of the request")
    st, body = pl.request("POST", "/v1/tables/k/reset-serial")
    equal((st, xml_doc(body).get("reset")), (200, "1"), "serial: reset-serial answers (and changes nothing)")

    # Merge: the staging table (no keys, as Ferry makes it) is checked against the target's keys.
    stage = ('<table name="_ferry_append_k"><column name="id" type="int64" nullable="true"/>'
             '<column name="note" type="text" nullable="true"/></table>')
    pl.request("POST", "/v1/tables", stage.encode())
    pl.request("POST", "/v1/tables/_ferry_append_k/rows?columns=id&columns=note",
               rows_doc("_ferry_append_k", [[v("200"), v("m")], [v("41"), v("dup")]]))
    with open(data, "rb") as f:
        before = f.read()
    st, body = pl.request("POST", "/v1/tables/_ferry_append_k/merge?into=k")
    a = error_of(body)[1]
    equal((st, a.get("code"), a.get("row"), a.get("column")), (422, "invalid", "2", "id"),
          "merge: a key already in the target")
    check("primary key (id) = (41)" in (ET.fromstring(body).text or ""), "merge: the message names the key")
    with open(data, "rb") as f:
        equal(f.read(), before, "merge: the refused merge changed nothing")
    equal(pl.request("GET", "/v1/tables/_ferry_append_k/count")[0], 200, "merge: the staging table is kept")
    pl.request("DELETE", "/v1/tables/_ferry_append_k")
    pl.request("POST", "/v1/tables", stage.encode())
    pl.request("POST", "/v1/tables/_ferry_append_k/rows?columns=id&columns=note",
               rows_doc("_ferry_append_k", [[v("300"), v("m")], [v("300"), v("again")]]))
    st, body = pl.request("POST", "/v1/tables/_ferry_append_k/merge?into=k")
    equal((st, error_of(body)[1].get("row")), (422, "2"), "merge: a key twice in the staging table")
    check("also in row 1 of _ferry_append_k" in (ET.fromstring(body).text or ""), "merge: names the earlier row")
    pl.request("DELETE", "/v1/tables/_ferry_append_k")
    # A staging table without the serial column (Ferry inserting rows without their key).
    pl.request("POST", "/v1/tables", b'<table name="_ferry_append_k"><column name="note" type="text"/></table>')
    pl.request("POST", "/v1/tables/_ferry_append_k/rows?columns=note",
               rows_doc("_ferry_append_k", [[v("merged 1")], [v("merged 2")]]))
    st, body = pl.request("POST", "/v1/tables/_ferry_append_k/merge?into=k")
    equal((st, xml_doc(body).get("inserted")), (200, "2"), "merge: rows without the serial column")
    st, body = pl.request("GET", "/v1/tables/k/rows?columns=id&columns=note")
    equal(rows_lines(body)[-2:], ["<r><v>102</v><v>merged 1</v></r>", "<r><v>103</v><v>merged 2</v></r>"],
          "merge: serial values generated")
    equal(pl.close(), 0, "keys: exit 0")

    # A new process reads keys and the largest serial value from the file.
    pl = Plugin("jsonl:" + folder)
    pl.hello()
    refused([[v("103"), NULL, NULL, NULL, v("n")]], "1", "id", ["primary key (id) = (103)"],
            "keys: stored keys are found by a new process")
    st, _ = pl.request("POST", "/v1/tables/k/rows?columns=note", rows_doc("k", [[v("fresh")]]))
    st, body = pl.request("GET", "/v1/tables/k/rows?columns=id&columns=note")
    equal(rows_lines(body)[-1], "<r><v>104</v><v>fresh</v></r>", "serial: computed from the file by a new process")
    pl.request("POST", "/v1/tables", (schema % "empty").encode())
    pl.request("POST", "/v1/tables/empty/rows?columns=note", rows_doc("empty", [[v("a")], [v("b")]]))
    st, body = pl.request("GET", "/v1/tables/empty/rows?columns=id")
    equal(rows_lines(body), ["<r><v>1</v></r>", "<r><v>2</v></r>"], "serial: an empty table starts at 1")
    equal(sorted(os.listdir(folder)), ["empty.jsonl", "empty.schema.xml", "k.jsonl", "k.schema.xml"],
          "keys: no stray files")
    equal(pl.close(), 0, "keys: exit 0 again")


def test_source(folder):
    before = folder_state(folder)
    pl = Plugin("jsonl://ignored-host" + os.path.abspath(folder), role="source")
    pl.hello()
    st, body = pl.request("GET", "/v1/tables")
    equal(st, 200, "source: GET /v1/tables")
    st, body = pl.request("GET", "/v1/tables/items/rows?columns=id")
    equal((st, len(rows_lines(body))), (200, 6), "source: rows")
    for method, target, body in (("POST", "/v1/tables", (SCHEMA % "new").encode()),
                                 ("DELETE", "/v1/tables/items", b""),
                                 ("POST", "/v1/tables/items/rows?columns=id", rows_doc("items", [[v("1")]])),
                                 ("POST", "/v1/tables/items/swap?into=x", b""),
                                 ("POST", "/v1/tables/items/reset-serial", b"")):
        st, answer = pl.request(method, target, body)
        equal((st, error_of(answer)[1].get("code")), (403, "read_only"), f"source: {method} {target}")
    equal(pl.close(), 0, "source exits 0")
    equal(folder_state(folder), before, "a source changes nothing")

    missing = os.path.join(folder, "missing")
    pl = Plugin("jsonl:" + missing, role="source")
    equal(pl.p.wait(10), 1, "a source on a missing folder exits 1")
    check(not os.path.exists(missing), "and creates nothing")


def test_inference(folder):
    with open(os.path.join(folder, "people.jsonl"), "w", encoding="utf-8") as f:
        f.write('{"id": 1, "name": "Ann", "score": 1, "active": true, "tags": ["a", "b"], "note": null}\n')
        f.write('\n')
        f.write('{"id": 2, "name": "Bob", "score": 2.50, "active": false, "tags": {"k": 1.0}}\n')
        f.write('{"id": 3, "name": "C\\u00e9\\u0007", "score": -0, "active": true, "tags": "plain", "x": 1e400}')
    pl = Plugin("jsonl:" + folder)
    pl.hello()
    st, body = pl.request("GET", "/v1/tables/people")
    t = xml_doc(body)
    got = [(c.get("name"), c.get("type"), c.get("nullable")) for c in t.findall("column")]
    equal(got, [("id", "int64", "false"), ("name", "text", "false"), ("score", "float64", "false"),
                ("active", "boolean", "false"), ("tags", "text", "false"), ("note", "text", "true"),
                ("x", "float64", "true")], "inferred schema")
    equal(t.get("rows"), "3", "inferred table rows (blank lines are not rows)")
    st, body = pl.request("GET", "/v1/tables/people/rows")
    equal(rows_lines(body), [
        '<r><v>1</v><v>Ann</v><v>1</v><v>true</v>' + v('["a","b"]') + NULL + NULL + "</r>",
        '<r><v>2</v><v>Bob</v><v>2.50</v><v>false</v>' + v('{"k":1.0}') + NULL + NULL + "</r>",
        '<r><v>3</v>' + vb("Cé\x07".encode()) + '<v>-0.0</v><v>true</v><v>plain</v>' + NULL + "<v>Infinity</v></r>",
    ], "inferred rows")
    time.sleep(0.2)
    check(any("people" in line and "infer" in line for line in pl.stderr), f"inference reported: {pl.stderr}")
    check(sum("infer" in line for line in pl.stderr) == 1, "reported once")
    pl.close()


def test_recovery(folder):
    """What a killed run leaves: an append cut short (its journal says where the committed rows
    end) and a swap half done (its journal says what to finish)."""
    os.makedirs(folder)
    schema = b'<table name="t"><column name="id" type="int64" nullable="false"/></table>'
    with open(os.path.join(folder, "t.jsonl"), "wb") as f:
        f.write(b'{"id":1}\n{"id":2}\n{"id":')  # row 2 and a half line were being appended
    with open(os.path.join(folder, "t.schema.xml"), "wb") as f:
        f.write(schema)
    with open(os.path.join(folder, ".t.jsonl.ferry-append"), "wb") as f:
        f.write(b"9")
    for n in ("x", "_s"):
        with open(os.path.join(folder, n + ".schema.xml"), "wb") as f:
            f.write(schema.replace(b'"t"', b'"%s"' % n.encode()))
    with open(os.path.join(folder, "x.jsonl"), "wb") as f:
        f.write(b'{"id":10}\n')
    with open(os.path.join(folder, "_s.jsonl"), "wb") as f:
        f.write(b'{"id":20}\n{"id":21}\n')
    os.replace(os.path.join(folder, "_s.schema.xml"), os.path.join(folder, "x.schema.xml"))  # first rename done
    with open(os.path.join(folder, ".x.jsonl.ferry-swap"), "wb") as f:
        f.write(b'{"from": "_s", "sidecar": true}')

    before = folder_state(folder)
    pl = Plugin("jsonl:" + folder, role="source")
    pl.hello()
    st, body = pl.request("GET", "/v1/tables/t/rows")
    equal(rows_lines(body), ["<r><v>1</v></r>"], "a source reads only the committed rows of a cut append")
    st, body = pl.request("GET", "/v1/tables/t/count")
    equal(xml_doc(body).get("rows"), "1", "and counts only them")
    pl.close()
    equal(folder_state(folder), before, "a source repairs nothing")

    pl = Plugin("jsonl:" + folder)
    pl.hello()
    with open(os.path.join(folder, "t.jsonl"), "rb") as f:
        equal(f.read(), b'{"id":1}\n', "a target cuts the unfinished append back at start")
    st, body = pl.request("GET", "/v1/tables/x/rows")
    equal(rows_lines(body), ["<r><v>20</v></r>", "<r><v>21</v></r>"], "and completes the half-done swap")
    equal(sorted(os.listdir(folder)), ["t.jsonl", "t.schema.xml", "x.jsonl", "x.schema.xml"], "journals gone")
    # An append to a file whose last line has no end starts a new line.
    with open(os.path.join(folder, "t.jsonl"), "ab") as f:
        f.write(b'{"id":3}')
    st, _ = pl.request("POST", "/v1/tables/t/rows?columns=id", rows_doc("t", [[v("4")]]))
    st, body = pl.request("GET", "/v1/tables/t/rows")
    equal(rows_lines(body), ["<r><v>1</v></r>", "<r><v>3</v></r>", "<r><v>4</v></r>"], "append after an open line")
    time.sleep(0.2)
    check(any("earlier run" in line for line in pl.stderr), f"recovery reported: {pl.stderr}")
    equal(pl.close(), 0, "exit 0")


def test_protocol(folder):
    pl = Plugin("jsonl:" + folder, protocol="2")
    out = pl.p.stdout.read()
    equal((pl.p.wait(10), out), (2, b""), "FERRY_PROTOCOL=2: exit 2, nothing on stdout")
    pl = Plugin("jsonl:" + folder)
    pl.hello()
    pl.p.stdin.write(b"garbage\n")
    pl.p.stdin.flush()
    equal(pl.p.wait(10), 1, "garbage on stdin: a protocol error, exit 1")
    pl = Plugin("jsonl:" + folder)
    pl.hello()
    pl.stream = 1
    pl.send("request", 1, b"GET /v1/tables/items/rows\n")
    pl.send("body", 1, b"12")  # the body never ends: Ferry closes our stdin
    equal(pl.close(), 0, "end of input in the middle of a request: exit 0")
    time.sleep(0.2)
    check(not pl.stderr or all("Traceback" not in line for line in pl.stderr), f"no traceback: {pl.stderr}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "db")  # missing: a target creates it
        steps = [("target", lambda: test_target(folder)), ("source", lambda: test_source(folder)),
                 ("keys", lambda: test_keys(os.path.join(tmp, "keys"))),
                 ("inference", lambda: test_inference(os.path.join(tmp, "foreign"))),
                 ("recovery", lambda: test_recovery(os.path.join(tmp, "crashed"))),
                 ("protocol", lambda: test_protocol(folder))]
        os.makedirs(os.path.join(tmp, "foreign"))
        for name, step in steps:
            before = len(failures)
            try:
                step()
            except Exception as e:  # a crash of the test or the plugin: report, go on
                import traceback
                traceback.print_exc()
                failures.append(f"{name}: {e!r}")
            print(f"{name}: {'ok' if len(failures) == before else 'FAILED'}")
    if failures:
        print(f"{len(failures)} of {checks} checks failed")
        return 1
    print(f"all {checks} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
