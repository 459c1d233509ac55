#!/usr/bin/env bash
# scripts/bench/mirror.sh SOURCE_URL TARGET_URL [ROWS]
#
# Times `ferry copy --mode mirror` of a ROWS-row table (default 1,000,000; the schema of the
# benchmark rig's bench_orders) with 0.1% and 1% of its rows changed at the source, beside a full
# `--mode replace` of the same table, and counts the bytes each run reads from the source and the
# target on the wire (a relay in front of each server: scripts/bench/relay.py). SOURCE_URL must be
# PostgreSQL (the table is generated there); TARGET_URL any engine Ferry writes (a sqlite: target
# has no wire: its column says "-"). The relays sit on loopback, where Ferry would list a local
# server's row hashes whole (docs/keyed-modes.md): each relayed URL gets `digests=sql`, what a
# server on another host gets by default, so the bytes are those of a mirror across a network.
#   eval "$(scripts/test-services start)"
#   scripts/bench/mirror.sh "$FERRY_TEST_POSTGRES_URL" "$FERRY_TEST_MYSQL_URL"
set -euo pipefail
SRC=${1:?source PostgreSQL URL}
DST=${2:?target URL}
ROWS=${3:-1000000}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
FERRY=${FERRY:-$ROOT/.build/release/ferry}
[ -x "$FERRY" ] || { echo "mirror.sh: $FERRY is missing: build it with swift build -c release" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'stop_relays; rm -rf "$WORK"' EXIT

hostport() { echo "$1" | sed -E 's#^[a-z]+://([^@/]*@)?([^/?]*).*#\2#'; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RELAY_URL=""
relay() {  # relay URL NAME: sets RELAY_URL to the URL through a new relay
  local hp; hp=$(hostport "$1"); local port; port=$(free_port)
  python3 "$HERE/relay.py" "$port" "${hp%:*}" "${hp#*:}" "$WORK/$2.count" >/dev/null 2>&1 &
  echo $! >> "$WORK/relays"
  sleep 0.5
  RELAY_URL=$(echo "$1" | sed "s#$hp#127.0.0.1:$port#")
  case "$RELAY_URL" in *\?*) RELAY_URL="$RELAY_URL&digests=sql" ;; *) RELAY_URL="$RELAY_URL?digests=sql" ;; esac
}
stop_relays() {
  [ -f "$WORK/relays" ] || return 0
  while read -r pid; do kill "$pid" 2>/dev/null || true; done < "$WORK/relays"
  sleep 0.3
  rm -f "$WORK/relays"
}
bytes() { cut -d' ' -f1 "$WORK/$1.count" 2>/dev/null || echo -; }

psql_src() { psql -X -q -v ON_ERROR_STOP=1 "$SRC" "$@"; }
echo "== generating $ROWS rows of bench_orders at the source" >&2
psql_src -v rows="$ROWS" -f "$HERE/bench_orders.sql"

run() {  # run LABEL ferry-args…
  local label=$1; shift
  local s d
  relay "$SRC" src; s=$RELAY_URL; d=$DST
  case "$DST" in sqlite:*) ;; *) relay "$DST" dst; d=$RELAY_URL;; esac
  /usr/bin/time -f "%e %M" -o "$WORK/time" "$FERRY" copy "$s" "$d" --tables bench_orders -q "$@"
  stop_relays
  read -r secs rss < "$WORK/time"
  printf "| %-28s | %8.2f | %9.1f | %14s | %14s |\n" "$label" "$secs" "$((rss / 1024))" "$(bytes src)" "$(bytes dst)"
  rm -f "$WORK"/*.count
}

echo "| run | seconds | peak RSS MiB | bytes from source | bytes from target |"
echo "|---|---:|---:|---:|---:|"
run "replace (full copy)" --mode replace
run "mirror, nothing changed" --mode mirror
psql_src -c "UPDATE bench_orders SET note = 'changed ' || id WHERE id % 1000 = 7" >/dev/null
run "mirror, 0.1% changed" --mode mirror
psql_src -c "UPDATE bench_orders SET qty = qty + 1 WHERE id % 100 = 3" >/dev/null
run "mirror, 1% changed" --mode mirror
