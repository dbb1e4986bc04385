#!/usr/bin/env bash
# Storage-tuning benchmark (issue 14): a fresh 1-node cluster, 100,000 QueryItem objects,
# indexes on k and score, then ordered listings, counts, get and create at 1 and 16 clients,
# 10 s each; rows labelled LABEL. Run it once per build to compare settings (results in
# bench/results/2026-11-23-counts-and-declared-walks.md). Stops the node it started.
# Usage: scripts/bench-query-tuning.sh LABEL  (after `make bench` or a release build)
set -u
cd "$(dirname "$0")/.."
T="${CARGO_TARGET_DIR:-target}/release"
LABEL=${1:-run}
dir=$(mktemp -d)
port=28480
"$T/basalt" dev --nodes 1 --data-dir "$dir" --http-port $port --rpc-port $((port + 1000)) >"$dir/dev.log" 2>&1 &
pid=$!
for _ in $(seq 1 60); do grep -q "Ctrl-C stops" "$dir/dev.log" && break; sleep 1; done
B="$T/basalt-bench --url http://127.0.0.1:$port --credentials $dir/node1/credentials.json --objects 100000"
$B --concurrency 32 --workload load-queries 2>&1 | grep -v "^loaded [0-9]*/"
$B --concurrency 1 --workload declare-indexes 2>&1 | grep "index on"
sleep 5
echo "du: $(du -sh "$dir" | cut -f1)"
for c in 1 16; do
  $B --concurrency $c --seconds 10 --label "$LABEL" --workload q-top --workload q-newest \
    --workload q-newest-counted --workload q-eq --workload q-count --workload q-count-all \
    --workload get --workload create 2>&1 | grep "^|"
done
kill $pid; wait $pid 2>/dev/null
rm -rf "$dir"
