#!/usr/bin/env bash
# scripts/bench/shards.sh SOURCE_PG_URL TARGET_URL [ROWS] [ROUNDS]
#
# The figures of docs/large-copies.md: ROWS (default 1,000,000) bench_orders rows generated in
# the PostgreSQL database SOURCE_PG_URL, then copied into TARGET_URL (an empty database or a
# SQLite file, dropped and made again each round) three ways — one `ferry copy`; the plan's
# steps with one unit; `samples/scale-out/parallel.sh` with 4 units, 2 at a time — and a
# `--resume` copy killed (kill -9) once half the rows are committed, then resumed: the rows the
# resumed run read again. Wall seconds by the clock around each step; every run ends verified.
#   eval "$(scripts/test-services start)"
#   scripts/bench/shards.sh "$FERRY_TEST_POSTGRES_URL" "${FERRY_TEST_POSTGRES_URL%/*}/bench_dst"
set -euo pipefail
SRC=${1:?source PostgreSQL URL}
DST=${2:?target URL (a database that may be dropped, or sqlite:FILE)}
ROWS=${3:-1000000}
ROUNDS=${4:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
FERRY=${FERRY:-$ROOT/.build/release/ferry}
[ -x "$FERRY" ] || { echo "shards.sh: $FERRY is missing: build it with swift build -c release" >&2; exit 1; }
command -v parallel >/dev/null || { echo "shards.sh: GNU parallel is missing (apt-get install parallel)" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

psql -X -q -v ON_ERROR_STOP=1 -v rows="$ROWS" "$SRC" -f "$HERE/bench_orders.sql" >/dev/null 2>&1

# An empty target: a PostgreSQL or MySQL database dropped and made again, or a new SQLite file.
reset() {
  case "$DST" in
    sqlite:*) rm -f "${DST#sqlite:}" ;;
    postgres://*|postgresql://*)
      local db=${DST##*/}; db=${db%%\?*}
      psql -X -q "${DST%/*}/postgres" -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" -c "CREATE DATABASE \"$db\"" >/dev/null 2>&1 ;;
    *) echo "shards.sh: give a PostgreSQL database or a sqlite: file as the target" >&2; exit 1 ;;
  esac
}
clock() { date +%s.%N; }
seconds() { printf '%.2f' "$(echo "$2 - $1" | bc)"; }
committed() {  # rows the killed load had committed, read from its record in the target
  case "$DST" in
    sqlite:*) sqlite3 "${DST#sqlite:}" "SELECT max(rows_loaded) FROM _ferry_loads" 2>/dev/null ;;
    *) psql -X -A -t "$DST" -c "SELECT max(rows_loaded) FROM _ferry_loads" 2>/dev/null ;;
  esac
}

echo "| round | one ferry copy | 1 unit (plan, prepare, unit, finish) | 4 units, 2 at a time (parallel.sh) |"
echo "|---|---:|---:|---:|"
for round in $(seq 1 "$ROUNDS"); do
  reset; a=$(clock); "$FERRY" copy "$SRC" "$DST" --tables bench_orders --quiet; b=$(clock)
  reset; c=$(clock)
  "$FERRY" plan "$SRC" "$DST" --tables bench_orders --shards 1 --output "$WORK/one.json" 2>/dev/null
  "$FERRY" copy "$SRC" "$DST" --plan "$WORK/one.json" --prepare --quiet
  "$FERRY" copy "$SRC" "$DST" --plan "$WORK/one.json" --shard 0/1 --quiet
  "$FERRY" copy "$SRC" "$DST" --plan "$WORK/one.json" --finish --quiet
  d=$(clock)
  reset; e=$(clock)
  FERRY=$FERRY PLAN="$WORK/four.json" "$ROOT/samples/scale-out/parallel.sh" "$SRC" "$DST" 4 2 -- --tables bench_orders 2>/dev/null
  f=$(clock)
  "$FERRY" verify "$SRC" "$DST" --tables bench_orders >/dev/null 2>&1 || { echo "shards.sh: the target differs from the source" >&2; exit 1; }
  echo "| $round | $(seconds "$a" "$b") s | $(seconds "$c" "$d") s | $(seconds "$e" "$f") s |"
done

reset
"$FERRY" copy "$SRC" "$DST" --tables bench_orders --resume --quiet &
pid=$!
half=$((ROWS / 2))
until n=$(committed) && [ -n "$n" ] && [ "$n" -ge "$half" ] 2>/dev/null; do
  kill -0 "$pid" 2>/dev/null || { echo "shards.sh: the copy ended before half its rows were committed" >&2; exit 1; }
  sleep 0.02
done
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
a=$(clock)
read_again=$("$FERRY" copy "$SRC" "$DST" --tables bench_orders --resume --json --quiet | python3 -c 'import json,sys; print(json.load(sys.stdin)["summary"]["tables"][0]["rowsRead"])')
b=$(clock)
"$FERRY" verify "$SRC" "$DST" --tables bench_orders >/dev/null 2>&1 || { echo "shards.sh: the target differs from the source" >&2; exit 1; }
echo
echo "--resume: killed with $n of $ROWS rows committed; the resumed run read $read_again rows in $(seconds "$a" "$b") s (verified equal)"
