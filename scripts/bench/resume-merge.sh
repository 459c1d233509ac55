#!/usr/bin/env bash
# scripts/bench/resume-merge.sh SOURCE_PG_URL TARGET_PG_URL [ROWS] [ROUNDS]
#
# What --resume costs an append and an upsert (docs/large-copies.md): ROWS (default 1,000,000)
# bench_orders rows generated in the PostgreSQL database SOURCE_PG_URL; the target (a PostgreSQL
# database that may be dropped) holds the first half, every tenth row changed, before each run.
# Each round: the second half appended in one transaction, then with --resume (chunks into a
# staging table, merged at the end); every row upserted in one transaction, then with --resume.
# Wall seconds by the clock and peak RSS (GNU time); the last run ends verified.
#   eval "$(scripts/test-services start)"
#   scripts/bench/resume-merge.sh "${FERRY_TEST_POSTGRES_URL%/*}/bench_src" "${FERRY_TEST_POSTGRES_URL%/*}/bench_dst"
set -euo pipefail
SRC=${1:?source PostgreSQL URL}
DST=${2:?target PostgreSQL URL (a database that may be dropped)}
ROWS=${3:-1000000}
ROUNDS=${4:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
FERRY=${FERRY:-$ROOT/.build/release/ferry}
[ -x "$FERRY" ] || { echo "resume-merge.sh: $FERRY is missing: build it with swift build -c release" >&2; exit 1; }
command -v /usr/bin/time >/dev/null || { echo "resume-merge.sh: GNU time is missing (apt-get install time)" >&2; exit 1; }
HALF=$((ROWS / 2))
for url in "$SRC" "$DST"; do
  db=${url##*/}; db=${db%%\?*}
  psql -X -q "${url%/*}/postgres" -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" -c "CREATE DATABASE \"$db\"" >/dev/null 2>&1
done
psql -X -q -v ON_ERROR_STOP=1 -v rows="$ROWS" "$SRC" -f "$HERE/bench_orders.sql" >/dev/null 2>&1
"$FERRY" copy "$SRC" "$DST" --tables bench_orders --where "id <= $HALF" --quiet
reset() {
  psql -X -q "$DST" -c "DELETE FROM bench_orders WHERE id > $HALF" -c "UPDATE bench_orders SET qty = qty + 1 WHERE id % 10 = 0" \
    -c "VACUUM bench_orders" -c "DROP TABLE IF EXISTS _ferry_loads, _ferry_leases" >/dev/null 2>&1
}
run() {
  local label=$1; shift
  reset
  local rss; rss=$(mktemp)
  local t0; t0=$(date +%s.%N)
  /usr/bin/time -f "%M" -o "$rss" "$FERRY" copy "$SRC" "$DST" --tables bench_orders --quiet "$@"
  local t1; t1=$(date +%s.%N)
  printf '%-20s %6.2f s  %s KB peak RSS\n' "$label" "$(echo "$t1 - $t0" | bc)" "$(cat "$rss")"
  rm -f "$rss"
}
for round in $(seq "$ROUNDS"); do
  echo "round $round"
  run "append" --mode append --where "id > $HALF"
  run "append --resume" --mode append --where "id > $HALF" --resume
  run "upsert" --mode upsert
  run "upsert --resume" --mode upsert --resume
done
"$FERRY" verify "$SRC" "$DST" --tables bench_orders
