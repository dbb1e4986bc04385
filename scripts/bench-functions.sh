#!/usr/bin/env bash
# Cloud functions benchmark (issue 17): fresh local clusters of 1 and 3 nodes, each running
# calls of a trivial function, one that runs a query and one that writes an object (and plain
# creates and gets beside them), SECONDS_PER (10) seconds each with CONCURRENCY (16) clients.
# Prints the tables and writes them to bench/results/<date>-functions.md (RESULT overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-target}/release"
SECS="${SECONDS_PER:-10}"
CONC="${CONCURRENCY:-16}"
RESULT="${RESULT:-bench/results/$(date +%Y-%m-%d)-functions.md}"
rows=$(mktemp)
run_cluster() {
  local nodes=$1 dir port pid
  dir=$(mktemp -d)
  port=$((29800 + nodes * 10))
  "$TARGET/basalt" dev --nodes "$nodes" --data-dir "$dir" --http-port "$port" --rpc-port $((port + 1000)) >"$dir/dev.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 120); do
    grep -q "Ctrl-C stops" "$dir/dev.log" && break
    sleep 1
  done
  grep -q "Ctrl-C stops" "$dir/dev.log" || { echo "bench-functions: the cluster did not start" >&2; kill "$pid"; exit 1; }
  # Let placement promote the new replicas to voters before measuring.
  if [ "$nodes" -gt 1 ]; then sleep 15; fi
  local urls=()
  for i in $(seq 0 $((nodes - 1))); do urls+=(--url "http://127.0.0.1:$((port + i))"); done
  "$TARGET/basalt-bench" "${urls[@]}" --credentials "$dir/node1/credentials.json" \
    --concurrency "$CONC" --seconds "$SECS" --workload fn-trivial --workload fn-query \
    --workload fn-write --workload create --workload get --label "$nodes node(s)" | tee -a "$rows"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
}
run_cluster 1
run_cluster 3
{
  echo "# Cloud functions: calls per second ($(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD))"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed "s/^ //")), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr)."
  echo "\`basalt dev\` clusters of 1 and 3 nodes on this machine, basalt-bench with $CONC clients spread"
  echo "over the nodes, ${SECS} s per workload (\`make bench-functions\`). fn-trivial: \`return"
  echo "request.params.n + 1\`; fn-query: \`Basalt.find\` of 5 of 1,000 objects by an indexed value;"
  echo "fn-write: \`Basalt.create\` of one object. create and get: the same requests without a function."
  echo
  grep -m1 '^| cluster |' "$rows"
  grep -m1 '^|---' "$rows"
  grep -E '^\| [0-9]+ node' "$rows"
} >"$RESULT.tmp"
mkdir -p "$(dirname "$RESULT")"
mv "$RESULT.tmp" "$RESULT"
rm -f "$rows"
echo
cat "$RESULT"
echo "written to $RESULT"
