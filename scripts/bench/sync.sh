#!/usr/bin/env bash
# scripts/bench/sync.sh POSTGRES_URL [ROWS]
#
# Times the offline-sync commands on the benchmark rig's bench_orders table (default 1,000,000
# mixed rows, generated at the PostgreSQL origin): `ferry snapshot` beside a plain `ferry copy`
# of the same table into SQLite (the baseline: the snapshot adds capture triggers and
# bookkeeping), `ferry pull` with nothing and with 0.1% of the rows changed at the origin, and
# `ferry push` of 10,000 local changes made with the sqlite3 shell. Prints seconds and peak RSS.
#   eval "$(scripts/test-services start)"
#   swift build -c release --product ferry
#   scripts/bench/sync.sh "$FERRY_TEST_POSTGRES_URL"
set -euo pipefail
SRC=${1:?origin PostgreSQL URL}
ROWS=${2:-1000000}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
FERRY=${FERRY:-$ROOT/.build/release/ferry}
[ -x "$FERRY" ] || { echo "sync.sh: $FERRY is missing: build it with swift build -c release --product ferry" >&2; exit 1; }
command -v sqlite3 >/dev/null || { echo "sync.sh: the sqlite3 shell is missing (apt-get install sqlite3)" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
psql_src() { psql -X -q -v ON_ERROR_STOP=1 "$SRC" "$@"; }

echo "== generating $ROWS rows of bench_orders at the origin" >&2
psql_src -v rows="$ROWS" -f "$HERE/bench_orders.sql"
psql_src -c "DROP TABLE IF EXISTS _ferry_sync_pushes" >/dev/null
# As a live table would be: without it, autovacuum's first pass over the million new rows (and
# the hint bits the first scan sets) lands in whichever run comes first.
psql_src -c "VACUUM (ANALYZE) bench_orders" >/dev/null

run() {  # run LABEL ferry-args…
  local label=$1; shift
  /usr/bin/time -f "%e %M" -o "$WORK/time" "$FERRY" "$@" > "$WORK/out" 2> "$WORK/err" || { cat "$WORK/err" >&2; exit 1; }
  read -r secs rss < "$WORK/time"
  printf "| %-42s | %8.2f | %9.1f |\n" "$label" "$secs" "$((rss / 1024))"
}

echo "| run | seconds | peak RSS MiB |"
echo "|---|---:|---:|"
run "copy into SQLite (baseline)" copy "$SRC" "sqlite:$WORK/plain.db" --tables bench_orders -q
run "snapshot" snapshot "$SRC" "$WORK/laptop.db" --tables bench_orders --quiet
run "pull, nothing changed" pull "$WORK/laptop.db" --origin "$SRC"
psql_src -c "UPDATE bench_orders SET note = 'changed at the origin ' || id WHERE id % 1000 = 7" >/dev/null
run "pull, 0.1% changed at the origin" pull "$WORK/laptop.db" --origin "$SRC"
sqlite3 "$WORK/laptop.db" "UPDATE bench_orders SET note = 'changed offline ' || id WHERE id % 100 = 11"
pending=$("$FERRY" status "$WORK/laptop.db" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["pending"])')
run "push of $pending local changes" push "$WORK/laptop.db" --origin "$SRC"
run "pull after the push" pull "$WORK/laptop.db" --origin "$SRC"
"$FERRY" verify "$SRC" "sqlite:$WORK/laptop.db" --tables bench_orders >&2
