#!/usr/bin/env bash
# A/B of two `basalt` binaries on the query workloads, one after the other in one run on one
# machine: for each binary a fresh `basalt dev` cluster (NODES, default 1) on loopback,
# OBJECTS (default 100,000) loaded through /1/batch, `k` and `score` declared indexed, then
# q-top, q-newest, q-eq, q-count, q-count-all and q-groupby at 1 and 16 clients and create/get
# at 16, SECONDS_PER seconds each (default 10). A_BIN defaults to a copy of an earlier build
# you made; B_BIN to this checkout's release build. Prints one table; every cluster it starts
# is stopped by its process group and its data dir removed.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-target}/release"
A_BIN="${A_BIN:?set A_BIN to the basalt binary to compare against}"
B_BIN="${B_BIN:-$TARGET/basalt}"
NODES="${NODES:-1}"
SECS="${SECONDS_PER:-10}"
OBJECTS="${OBJECTS:-100000}"
port=28180
run_one() {
  local label=$1 bin=$2 dir pid
  dir=$(mktemp -d)
  setsid "$bin" dev --nodes "$NODES" --data-dir "$dir" --http-port "$port" \
    --rpc-port $((port + 1000)) >"$dir/dev.log" 2>&1 &
  pid=$!
  trap 'kill -- -'"$pid"' 2>/dev/null || true; rm -rf '"$dir" EXIT
  for _ in $(seq 1 120); do
    grep -q "Ctrl-C stops" "$dir/dev.log" && break
    sleep 1
  done
  if [ "$NODES" -gt 1 ]; then sleep 15; fi
  local urls=()
  for i in $(seq 0 $((NODES - 1))); do urls+=(--url "http://127.0.0.1:$((port + i))"); done
  bench() {
    "$TARGET/basalt-bench" "${urls[@]}" --credentials "$dir/node1/credentials.json" \
      --objects "$OBJECTS" "$@"
  }
  bench --concurrency 32 --workload load-queries >/dev/null
  bench --concurrency 1 --workload declare-indexes >/dev/null
  for c in 1 16; do
    bench --concurrency "$c" --seconds "$SECS" --label "$label" --workload q-top \
      --workload q-newest --workload q-eq --workload q-count --workload q-count-all \
      --workload q-groupby | grep "^| $label "
  done
  bench --concurrency 16 --seconds "$SECS" --label "$label" --workload create \
    --workload get | grep "^| $label "
  kill -- -"$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
  trap - EXIT
}
echo "## $NODES node(s), $OBJECTS objects"
echo "| cluster | workload | clients | seconds | ops | errors | ops/s | p50 ms | p99 ms | p99.9 ms | max ms |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
run_one "${A_LABEL:-A}" "$A_BIN"
run_one "${B_LABEL:-B}" "$B_BIN"
