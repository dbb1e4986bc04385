#!/usr/bin/env bash
# Push broadcast benchmark (issue 16): a fresh local 3-node cluster, INSTALLATIONS (1,000,000)
# android installations registered through /1/batch, then one push to all of them delivered to
# a webhook that basalt-bench serves on loopback. Prints the table and writes it to
# bench/results/<date>-push.md (RESULT overrides). Bounded: the load ends at INSTALLATIONS, the
# broadcast within an hour.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-target}/release"
N="${INSTALLATIONS:-1000000}"
NODES="${NODES:-3}"
CONC="${CONCURRENCY:-24}"
RESULT="${RESULT:-bench/results/$(date +%Y-%m-%d)-push.md}"
dir=$(mktemp -d)
port=29700
"$TARGET/basalt" dev --nodes "$NODES" --data-dir "$dir" --http-port "$port" --rpc-port $((port + 1000)) \
  >"$dir/dev.log" 2>&1 &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
for _ in $(seq 1 120); do
  grep -q "Ctrl-C stops" "$dir/dev.log" && break
  sleep 1
done
grep -q "Ctrl-C stops" "$dir/dev.log" || { echo "bench-push: the cluster did not start" >&2; cat "$dir/dev.log" >&2; exit 1; }
# Let placement promote the new replicas to voters before loading.
if [ "$NODES" -gt 1 ]; then sleep 15; fi
urls=()
for i in $(seq 0 $((NODES - 1))); do urls+=(--url "http://127.0.0.1:$((port + i))"); done
out=$(mktemp)
started=$(date +%s)
"$TARGET/basalt-bench" "${urls[@]}" --credentials "$dir/node1/credentials.json" \
  --concurrency "$CONC" --objects "$N" --workload load-installations 2>&1 | tee "$out.load" >&2
loaded=$(($(date +%s) - started))
"$TARGET/basalt-bench" "${urls[@]}" --credentials "$dir/node1/credentials.json" \
  --objects "$N" --workload push-broadcast --label "$NODES nodes" | tee "$out.rows"
{
  echo "# Push: a broadcast to $N installations ($(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD))"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed "s/^ //")), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr)."
  echo "A $NODES-node \`basalt dev\` cluster on this machine; the webhook (basalt-bench, on loopback)"
  echo "answers each batch at once. \`make bench-push\` (INSTALLATIONS=$N)."
  echo
  echo "Registering the installations ($CONC clients, batches of 50 through /1/batch): ${loaded} s."
  grep -E "^loaded [0-9]+ installations in" "$out.load" | sed 's/^/    /' || true
  echo
  echo "The broadcast (times from sending \`POST /1/push\`):"
  grep -A2 '^| cluster | installations |' "$out.rows"
} >"$out"
mkdir -p "$(dirname "$RESULT")"
cp "$out" "$RESULT"
echo
cat "$RESULT"
echo "written to $RESULT"
rm -f "$out" "$out.rows" "$out.load"
