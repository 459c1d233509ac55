#!/usr/bin/env bash
# scripts/bench/documents.sh [MB] [BASELINE_FERRY]
#
# Memory of `ferry serve` for the documents it takes whole (issue 32): one change set and one
# guarded push of about MB megabytes (default 60) sent to a service in front of a SQLite file,
# each in a service of its own, and the service's peak RSS (VmHWM) after it; the rows checked
# in the file after. With BASELINE_FERRY (an older build's binary) the same runs with it first,
# in the same table. With FERRY_TEST_POSTGRES_URL set (scripts/test-services: logical WAL), also
# `ferry replicate` of one PostgreSQL transaction updating ROWS rows (default 300,000) into a
# served SQLite file with --max-body-mb 4, which the client stages, and of one updating
# INLINE_ROWS rows (default 100,000, about 24 MB) with the default --max-body-mb, which the
# document carries: the service's peak while it applies each, and `ferry verify` after. Needs
# python3 (standard library only) and psql.
#   eval "$(scripts/test-services start)"
#   scripts/bench/documents.sh 60 /tmp/ferry-before
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MB=${1:-60}
BASELINE=${2:-}
FERRY=${FERRY:-$ROOT/.build/release/ferry}
[ -x "$FERRY" ] || { echo "documents.sh: $FERRY is missing: build it with swift build -c release" >&2; exit 1; }
echo "| build | document | size | rows | status | seconds | service before | service peak | rows arrived |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---|"
for binary in $BASELINE "$FERRY"; do
  label=$([ "$binary" = "$FERRY" ] && echo "this build" || echo "baseline")
  for kind in changes push; do
    printf '| %s ' "$label"
    python3 "$HERE/documents.py" "$binary" "$MB" "$kind"
  done
done

[ -n "${FERRY_TEST_POSTGRES_URL:-}" ] || exit 0
ROWS=${ROWS:-300000}
INLINE_ROWS=${INLINE_ROWS:-100000}
# replicated BINARY LABEL MAX_BODY_MB ROWS HOW: a replica's transaction applied by the service;
# prints one row.
replicated() {
  local binary=$1 label=$2 max_body=$3 rows=$4 how=$5 work db src token url serve peak
  work=$(mktemp -d)
  db=staged_$RANDOM$$
  psql "$FERRY_TEST_POSTGRES_URL" -qc "CREATE DATABASE $db" >/dev/null
  src=${FERRY_TEST_POSTGRES_URL%/*}/$db
  psql "$src" -q -c "CREATE TABLE orders (id serial PRIMARY KEY, customer_id int NOT NULL, note text)" \
    -c "INSERT INTO orders (customer_id, note) SELECT n % 1000, 'x' FROM generate_series(1, $rows) n" >/dev/null
  token=staged-token-0123456789abcdef
  printf '%s\n' "$token" >"$work/tokens"
  "$binary" serve "sqlite:$work/dst.db" --token-file "$work/tokens" --listen 127.0.0.1:0 --max-body-mb "$max_body" >/dev/null 2>"$work/serve.err" &
  serve=$!
  for _ in $(seq 100); do grep -q "127.0.0.1:[0-9]*/" "$work/serve.err" && break; sleep 0.1; done
  url="http://:$token@$(grep -o '127.0.0.1:[0-9]*/' "$work/serve.err" | head -1)"
  "$binary" replicate "$src" "$url" --until-caught-up -q
  psql "$src" -qc "UPDATE orders SET note = repeat('s', 200)" >/dev/null
  local started=$SECONDS
  "$binary" replicate "$src" "$url" --until-caught-up -q
  peak=$(awk '/VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$serve/status")
  local verified=NO
  "$binary" verify "$src" "$url" >/dev/null 2>&1 && verified=yes
  printf '| %s | one transaction of %s updates, %s (--max-body-mb %s) | %s s | %s MiB | %s |\n' \
    "$label" "$rows" "$how" "$max_body" "$((SECONDS - started))" "$peak" "$verified"
  "$binary" replicate "$src" "$url" --drop -q >/dev/null 2>&1 || true
  kill "$serve"; wait "$serve" 2>/dev/null || true
  psql "$FERRY_TEST_POSTGRES_URL" -qc "DROP DATABASE $db" >/dev/null 2>&1 || true
  rm -rf "$work"
}
echo
echo "| build | replicated into ferry serve (SQLite) | seconds | service peak | verify |"
echo "|---|---|---:|---:|---|"
for binary in $BASELINE "$FERRY"; do
  label=$([ "$binary" = "$FERRY" ] && echo "this build" || echo "baseline")
  replicated "$binary" "$label" 4 "$ROWS" staged
  replicated "$binary" "$label" 64 "$INLINE_ROWS" "in the document"
done
