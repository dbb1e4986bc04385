#!/usr/bin/env bash
# Runs basalt-bench against fresh local clusters of 1 and 3 nodes (bounded: SECONDS_PER
# workload, default 10) and prints the tables. Each cluster runs in a temp dir on loopback and
# is stopped afterwards. BENCH_BIN picks the load generator (default: the one beside basalt), so
# an A/B of two servers can drive both with the same client.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-target}/release"
SECS="${SECONDS_PER:-10}"
CONC="${CONCURRENCY:-16}"
BENCH="${BENCH_BIN:-$TARGET/basalt-bench}"
run_cluster() {
  local nodes=$1 dir port
  dir=$(mktemp -d)
  port=$((28080 + nodes * 10))
  "$TARGET/basalt" dev --nodes "$nodes" --data-dir "$dir" --http-port "$port" --rpc-port $((port + 1000)) >"$dir/dev.log" 2>&1 &
  pid=$!
  trap 'kill "${pid:-}" 2>/dev/null || true' EXIT
  for _ in $(seq 1 120); do
    grep -q "Ctrl-C stops" "$dir/dev.log" && break
    sleep 1
  done
  # Let placement promote the new replicas to voters before measuring.
  if [ "$nodes" -gt 1 ]; then sleep 15; fi
  local urls=()
  for i in $(seq 0 $((nodes - 1))); do urls+=(--url "http://127.0.0.1:$((port + i))"); done
  "$BENCH" "${urls[@]}" --credentials "$dir/node1/credentials.json" \
    --concurrency "$CONC" --seconds "$SECS" --workload create --workload get --workload get-session --workload update --workload login \
    --label "$nodes node(s)"
  kill $pid; wait $pid 2>/dev/null || true
  trap - EXIT
  rm -rf "$dir"
}
run_cluster 1
run_cluster 3
