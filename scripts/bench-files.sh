#!/usr/bin/env bash
# File upload and download benchmark (issue 15): basalt-bench's file workloads against fresh
# local clusters of 1 and 3 nodes keeping files as copies on their disks, then 1 and 3 nodes
# keeping them in an S3 bucket served by moto's S3 server on loopback (installed by
# scripts/install-test-servers.sh), beside the machine's raw disk write speed (dd). Bounded:
# SECONDS_PER (10) per workload, CONCURRENCY (8) clients. Prints the tables and writes them to
# bench/results/<date>-files.md (RESULT overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-target}/release"
SECS="${SECONDS_PER:-10}"
CONC="${CONCURRENCY:-8}"
RESULT="${RESULT:-bench/results/$(date +%Y-%m-%d)-files.md}"
MOTO="${BASALT_TEST_SERVERS_DIR:-$HOME/.cache/basalt/test-servers}/moto"
WORKLOADS=(upload-1k upload-1m upload-20m download-1k download-1m download-20m)
out=$(mktemp)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

disk_speed() {
  local dir f
  dir=$(mktemp -d -p "${TMPDIR:-/tmp}")
  f="$dir/dd.bin"
  echo "## Raw disk (the clusters' temp dirs: $(df -h --output=source "$dir" | tail -1))"
  echo
  echo '```'
  echo "# 1 GiB in 1 MiB writes, fdatasync at the end"
  dd if=/dev/zero of="$f" bs=1M count=1024 conv=fdatasync 2>&1 | tail -1
  echo "# 1,000 writes of 4 KiB, each synced (O_DSYNC): what an fsync costs"
  dd if=/dev/zero of="$f" bs=4k count=1000 oflag=dsync 2>&1 | tail -1
  echo "# 200 writes of 1 MiB, each synced"
  dd if=/dev/zero of="$f" bs=1M count=200 oflag=dsync 2>&1 | tail -1
  echo '```'
  rm -rf "$dir"
}

# run_cluster <nodes> <label> [serve options...]
run_cluster() {
  local nodes=$1 label=$2 dir port pid
  shift 2
  dir=$(mktemp -d)
  port=$((29080 + nodes * 10))
  "$TARGET/basalt" dev --nodes "$nodes" --data-dir "$dir" --http-port "$port" --rpc-port $((port + 1000)) \
    --max-file-mb 100 "$@" >"$dir/dev.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 1 120); do
    grep -q "Ctrl-C stops" "$dir/dev.log" && break
    sleep 1
  done
  # Let placement promote the new replicas to voters before measuring.
  if [ "$nodes" -gt 1 ]; then sleep 15; fi
  local urls=() wl=()
  for i in $(seq 0 $((nodes - 1))); do urls+=(--url "http://127.0.0.1:$((port + i))"); done
  for w in "${WORKLOADS[@]}"; do wl+=(--workload "$w"); done
  "$TARGET/basalt-bench" "${urls[@]}" --credentials "$dir/node1/credentials.json" \
    --concurrency "$CONC" --seconds "$SECS" "${wl[@]}" --label "$label" | tee -a "$out.rows"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
}

{
  echo "# Files: uploads and downloads ($(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD))"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed "s/^ //")), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr)."
  echo "basalt-bench, $CONC clients, $SECS s per workload; MB = 2^20 bytes. \`make bench-files\`."
  echo
  disk_speed
  echo
} >"$out"

run_cluster 1 "1 node"
run_cluster 3 "3 nodes"

if [ -d "$MOTO/moto" ]; then
  s3port=$((29500 + RANDOM % 400))
  PYTHONPATH="$MOTO" python3 -m moto.server -H 127.0.0.1 -p "$s3port" >/dev/null 2>&1 &
  pids+=("$!")
  for _ in $(seq 1 60); do
    curl -sf -X PUT "http://127.0.0.1:$s3port/bench-files" >/dev/null && break
    sleep 0.5
  done
  s3=(--files-backend s3://bench-files/basalt --s3-endpoint "http://127.0.0.1:$s3port"
    --s3-region us-east-1 --s3-access-key-id bench --s3-secret-access-key bench)
  run_cluster 1 "1 node, S3 (moto)" "${s3[@]}"
  run_cluster 3 "3 nodes, S3 (moto)" "${s3[@]}"
else
  echo "bench-files: no moto in $MOTO (scripts/install-test-servers.sh): S3 rows skipped" >&2
fi

{
  echo "## Uploads and downloads"
  echo
  echo "| cluster | workload | clients | seconds | ops | errors | files/s | MB/s | p50 ms | p99 ms | p99.9 ms | max ms |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  grep '^| [0-9]' "$out.rows"
} >>"$out"
mkdir -p "$(dirname "$RESULT")"
cp "$out" "$RESULT"
echo
cat "$RESULT"
echo "written to $RESULT"
rm -f "$out" "$out.rows"
