# Shared by the benchmark scripts (source it).

# measure LABEL ROWS command… — runs the command under GNU time and prints one markdown row:
# label, rows, wall seconds, rows/s, peak RSS in MB. Fails (showing time's log) when it fails.
measure() {
  local label=$1 rows=$2; shift 2
  local log; log=$(mktemp)
  /usr/bin/time -v "$@" 2>"$log" >/dev/null || { cat "$log" >&2; rm -f "$log"; return 1; }
  local wall rss
  wall=$(grep 'Elapsed (wall clock)' "$log" | awk '{print $NF}' | awk -F: '{ if (NF==3) print $1*3600+$2*60+$3; else print $1*60+$2 }')
  rss=$(grep 'Maximum resident set size' "$log" | awk '{print $NF}')
  rm -f "$log"
  printf '| %-48s | %9d | %7.2f | %10.0f | %7.1f |\n' "$label" "$rows" "$wall" "$(echo "$rows / $wall" | bc -l)" "$(echo "$rss / 1024" | bc -l)"
}

bench_header() {
  echo "| run | rows | seconds | rows/s | peak RSS MB |"
  echo "|---|---:|---:|---:|---:|"
}

# The release build of ferry (built once).
ferry_release() {
  swift build -c release --product ferry >/dev/null
  echo "$(swift build -c release --show-bin-path)/ferry"
}
