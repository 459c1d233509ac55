#!/usr/bin/env bash
# samples/scale-out/parallel.sh SOURCE TARGET [UNITS] [AT-ONCE] [-- ferry plan options…]
#
# One copy cut into UNITS work units (default 4) and run AT-ONCE at a time (default 2) by GNU
# parallel on this machine: plan, prepare, the units, finish. The one-liner at its heart:
#
#   seq 0 3 | parallel -j 2 --halt now,fail=1 ferry copy --plan plan.json --shard {}/4
#
# Credentials stay out of the plan: give them as usual (PGPASSWORD, MYSQL_PWD, ~/.pgpass,
# --password-file, --token-file), or in the URLs you pass here, which this script hands to each
# unit on its command line (visible in the process list: prefer the environment on shared hosts).
#
# With HOLD_SNAPSHOT=1 (PostgreSQL or a Ferry service as the source) a `ferry plan
# --hold-snapshot` process holds one source snapshot that every unit reads, until the units
# are in; the plan file appears once it holds it.
#
# Examples:
#   samples/scale-out/parallel.sh postgres://dba@db/shop postgres://dba@dw/shop 8 4 -- --tables orders
#   HOLD_SNAPSHOT=1 PLAN=/tmp/orders-plan.json samples/scale-out/parallel.sh postgres://dba@db/shop mysql://app@dw/shop
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,20p' "$0" >&2
  exit 2
fi
SOURCE=$1
TARGET=$2
UNITS=${3:-4}
AT_ONCE=${4:-2}
shift $(( $# < 4 ? $# : 4 ))
if [ "${1:-}" = "--" ]; then shift; fi
FERRY=${FERRY:-ferry}
PLAN=${PLAN:-plan.json}
command -v parallel >/dev/null || { echo "parallel.sh: GNU parallel is missing (apt-get install parallel)" >&2; exit 2; }

holder=
stop_holder() { if [ -n "$holder" ]; then kill -TERM "$holder" 2>/dev/null || true; wait "$holder" 2>/dev/null || true; fi; }
trap stop_holder EXIT

rm -f "$PLAN"
if [ "${HOLD_SNAPSHOT:-0}" = 1 ]; then
  "$FERRY" plan "$SOURCE" "$TARGET" --shards "$UNITS" --output "$PLAN" --hold-snapshot "$@" &
  holder=$!
  # The plan is written whole once the snapshot is held.
  while [ ! -s "$PLAN" ]; do
    kill -0 "$holder" 2>/dev/null || { wait "$holder"; exit 1; }
    sleep 0.2
  done
else
  "$FERRY" plan "$SOURCE" "$TARGET" --shards "$UNITS" --output "$PLAN" "$@"
fi

"$FERRY" copy "$SOURCE" "$TARGET" --plan "$PLAN" --prepare
# Each unit on its own; a unit that fails stops the others (run it again: units are idempotent).
seq 0 $((UNITS - 1)) | parallel -j "$AT_ONCE" --halt now,fail=1 \
  "$FERRY" copy "$SOURCE" "$TARGET" --plan "$PLAN" --shard {}/"$UNITS" --quiet
"$FERRY" copy "$SOURCE" "$TARGET" --plan "$PLAN" --finish
