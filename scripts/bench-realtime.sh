#!/usr/bin/env bash
# Realtime benchmark (issue 18): a fresh local cluster of 3 nodes, SUBSCRIBERS (1000) WebSocket
# subscribers spread over the nodes, creates at each rate of RATES ("100 200 400") per second
# for SECONDS_PER (20) seconds; events delivered per second and the latency from a create's
# acknowledgement to its event's arrival. Prints the table and writes it to
# bench/results/<date>-realtime.md (RESULT overrides). NODES (3) picks the cluster size.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-target}/release"
SECS="${SECONDS_PER:-20}"
SUBS="${SUBSCRIBERS:-1000}"
RATES="${RATES:-100 200 400}"
NODES="${NODES:-3}"
RESULT="${RESULT:-bench/results/$(date +%Y-%m-%d)-realtime.md}"
rows=$(mktemp)
dir=$(mktemp -d)
port=29900
# Every subscriber holds a connection from 127.0.0.1: more than the default per-IP cap.
ulimit -n 65536 2>/dev/null || true
"$TARGET/basalt" dev --nodes "$NODES" --data-dir "$dir" --http-port "$port" --rpc-port $((port + 1000)) \
  --max-connections-per-ip 4096 >"$dir/dev.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir" "$rows"' EXIT
for _ in $(seq 1 120); do
  grep -q "Ctrl-C stops" "$dir/dev.log" && break
  sleep 1
done
grep -q "Ctrl-C stops" "$dir/dev.log" || { echo "bench-realtime: the cluster did not start" >&2; exit 1; }
# Let placement promote the new replicas to voters before measuring.
if [ "$NODES" -gt 1 ]; then sleep 15; fi
urls=()
for i in $(seq 0 $((NODES - 1))); do urls+=(--url "http://127.0.0.1:$((port + i))"); done
for rate in $RATES; do
  "$TARGET/basalt-bench" "${urls[@]}" --credentials "$dir/node1/credentials.json" \
    --concurrency 16 --seconds "$SECS" --subscribers "$SUBS" --rate "$rate" \
    --workload realtime --label "$NODES node(s)" | tee -a "$rows"
done
{
  echo "# Realtime: events to $SUBS subscribers ($(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD))"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed "s/^ //")), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr)."
  echo "A \`basalt dev\` cluster of $NODES nodes on this machine; basalt-bench on the same machine opens"
  echo "$SUBS WebSocket subscribers to \`/1/realtime\` spread over the nodes, each subscribed to every"
  echo "create of one class, then creates at a fixed rate (each row) through the nodes in turn for ${SECS} s"
  echo "(\`make bench-realtime\`). Latency: from a create's acknowledgement to its event's arrival at a"
  echo "subscriber (0 when the event beats the acknowledgement)."
  echo
  grep -m1 '^| cluster | subscribers |' "$rows"
  grep -m1 '^|---' "$rows"
  grep -E '^\| [0-9]+ node' "$rows"
} >"$RESULT.tmp"
mkdir -p "$(dirname "$RESULT")"
mv "$RESULT.tmp" "$RESULT"
echo
cat "$RESULT"
echo "written to $RESULT"
