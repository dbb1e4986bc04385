#!/usr/bin/env bash
# Query benchmark (issue 5): a fresh 3-node cluster on loopback, OBJECTS (default 1,000,000)
# objects loaded through /1/batch, then indexed equality, range+order+limit, count and groupby
# timed for SECONDS_PER seconds each (default 20) with CONCURRENCY clients (default 1) — first
# without indexes, then after declaring them (and once more with CONCURRENCY_HIGH clients,
# default 4). Prints the tables; the cluster and its data dir are removed afterwards (KEEP=1
# keeps the dir). Bounded: the load ends at OBJECTS objects.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-target}/release"
SECS="${SECONDS_PER:-20}"
CONC="${CONCURRENCY:-1}"
CONC_HIGH="${CONCURRENCY_HIGH:-4}"
OBJECTS="${OBJECTS:-1000000}"
NODES="${NODES:-3}"
dir=$(mktemp -d)
port=28180
"$TARGET/basalt" dev --nodes "$NODES" --data-dir "$dir" --http-port "$port" --rpc-port $((port + 1000)) >"$dir/dev.log" 2>&1 &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if [ "${KEEP:-0}" != 1 ]; then rm -rf "$dir"; fi
}
trap cleanup EXIT
for _ in $(seq 1 120); do
  grep -q "Ctrl-C stops" "$dir/dev.log" && break
  sleep 1
done
# Let placement promote the new replicas to voters before loading.
if [ "$NODES" -gt 1 ]; then sleep 15; fi
urls=()
for i in $(seq 0 $((NODES - 1))); do urls+=(--url "http://127.0.0.1:$((port + i))"); done
bench() {
  "$TARGET/basalt-bench" "${urls[@]}" --credentials "$dir/node1/credentials.json" \
    --objects "$OBJECTS" "$@"
}
echo "## $NODES nodes, $OBJECTS objects"
bench --concurrency 32 --workload load-queries
echo "du of the data dir: $(du -sh "$dir" | cut -f1)"
echo
echo "### without indexes"
bench --concurrency "$CONC" --seconds "$SECS" --label "no index" \
  --workload q-eq --workload q-range --workload q-count --workload q-groupby
bench --concurrency 1 --workload declare-indexes
echo
echo "### with indexes on k and score"
for c in "$CONC" "$CONC_HIGH"; do
  bench --concurrency "$c" --seconds "$SECS" --label "indexed" \
    --workload q-eq --workload q-range --workload q-top --workload q-top-unindexed \
    --workload q-newest --workload q-newest-counted --workload q-count \
    --workload q-count-unindexed --workload q-count-all --workload q-groupby
done
