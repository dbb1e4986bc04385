#!/usr/bin/env bash
# Backup and restore benchmark (docs/performance.md, "Backups"): a fresh 3-node cluster on
# loopback, OBJECTS (default 1,000,000) objects loaded through /1/batch; the create workload
# for SECONDS_PER seconds (default 8) with CONCURRENCY clients (default 16) alone, then again
# while a backup to a directory runs (started 1 s in: make SECONDS_PER about the backup's time
# plus 2, so that the backup covers most of the window), then alone again, ROUNDS times (default
# 3, one backup each); the write p99 during each backup against the mean of its two steady
# windows, the backup's state bytes, time, MB/s and fence; then a restore into a new cluster of RESTORE_NODES nodes (default 3) — the first node
# made from the backup with `basalt admin restore`, the others joining it — timed until every
# node answers /health 200.
# Prints the figures; the clusters and their data are removed afterwards (KEEP=1 keeps them).
# Bounded: the load ends at OBJECTS objects, every wait has a limit.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-target}/release"
SECS="${SECONDS_PER:-8}"
CONC="${CONCURRENCY:-16}"
OBJECTS="${OBJECTS:-1000000}"
RESTORE_NODES="${RESTORE_NODES:-3}"
ROUNDS="${ROUNDS:-3}"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a number of rounds, 1 or more" >&2; exit 2; }
dir=$(mktemp -d)
port=28280
rpc=$((port + 1000))
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ "${KEEP:-0}" != 1 ]; then rm -rf "$dir"; fi
}
trap cleanup EXIT
now() { date +%s.%N; }
healthy() { curl -fs "http://127.0.0.1:$1/health" >/dev/null 2>&1; }

"$TARGET/basalt" dev --nodes 3 --data-dir "$dir/source" --http-port "$port" --rpc-port "$rpc" \
  >"$dir/dev.log" 2>&1 &
dev=$!
pids+=("$dev")
for _ in $(seq 1 120); do
  grep -q "Ctrl-C stops" "$dir/dev.log" && break
  sleep 1
done
# Let placement promote the new replicas to voters before loading.
sleep 15
urls=(--url "http://127.0.0.1:$port" --url "http://127.0.0.1:$((port + 1))" --url "http://127.0.0.1:$((port + 2))")
bench() {
  "$TARGET/basalt-bench" "${urls[@]}" --credentials "$dir/source/node1/credentials.json" \
    --objects "$OBJECTS" "$@"
}
echo "## 3 nodes, $OBJECTS objects"
bench --concurrency 32 --workload load-queries
echo "du of the data dirs: $(du -sh "$dir/source" | cut -f1)"
echo
echo "### $ROUNDS rounds: creates alone, then while a backup runs, then alone again"
# The goal compares the p99 during a backup with steady state: the mean of the windows before
# and after it (the machine's speed drifts between windows); each round is one backup.
for round in $(seq 1 "$ROUNDS"); do
  bench --concurrency "$CONC" --seconds "$SECS" --workload create --label "round $round: steady, before" \
    >"$dir/before.txt"
  bench --concurrency "$CONC" --seconds "$SECS" --workload create \
    --label "round $round: during the backup" >"$dir/during.txt" &
  load=$!
  sleep 1
  t0=$(now)
  "$TARGET/basalt" admin --rpc "127.0.0.1:$rpc" --certs-dir "$dir/source/certs/admin" \
    backup --to "$dir/backups" >"$dir/manifest.json"
  t1=$(now)
  wait "$load"
  bench --concurrency "$CONC" --seconds "$SECS" --workload create --label "round $round: steady, after" \
    >"$dir/after.txt"
  python3 - "$dir" "$t0" "$t1" "$round" <<'PY' | tee -a "$dir/rounds.txt"
import json, sys
d, t0, t1, rnd = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
def row(name):
    cells = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]
    lines = [l for l in open(f"{d}/{name}.txt").read().splitlines() if l.startswith("|")]
    return dict(zip(cells(lines[0]), cells(lines[-1])))
before, during, after = (row(n) for n in ("before", "during", "after"))
p99 = lambda r: float(r["p99 ms"])
steady = (p99(before) + p99(after)) / 2
m = json.load(open(f"{d}/manifest.json"))
state = sum(g["bytes"] for g in m["groups"])
stored = sum(g["size"] for g in m["groups"])
records = sum(g["records"] for g in m["groups"])
secs = (m["finishedMs"] - m["startedMs"]) / 1000
print(f"| {rnd} | {before['ops/s']} / {during['ops/s']} / {after['ops/s']} | {p99(before):.2f} / "
      f"{p99(during):.2f} / {p99(after):.2f} | {p99(during) / steady:.2f} | {during['max ms']} | "
      f"{m['backup']} | {state/1e6:.1f} | {stored/1e6:.1f} | {records} | {secs:.2f} | "
      f"{state/1e6/secs:.1f} | {m['fenceMs']} | {t1 - t0:.2f} |")
PY
done
echo
echo "| round | creates/s before / during / after | write p99 ms before / during / after | p99 during ÷ steady | max ms during | backup | state MB | stored MB (zstd) | records | seconds | state MB/s | fence ms | command s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
cat "$dir/rounds.txt"
python3 - "$dir/rounds.txt" <<'PY'
import statistics, sys
rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in open(sys.argv[1])]
ratios = sorted(float(r[3]) for r in rows)
fences = sorted(int(r[11]) for r in rows)
rates = sorted(float(r[10]) for r in rows)
print(f"over {len(rows)} rounds: p99 during ÷ steady median {statistics.median(ratios):.2f} "
      f"(worst {ratios[-1]:.2f}); fence median {statistics.median(fences)} ms (worst {fences[-1]}); "
      f"state MB/s median {statistics.median(rates):.1f} (lowest {rates[0]:.1f})")
PY
# The last round's backup is restored.
backup="$dir/backups/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["backup"])' "$dir/manifest.json")"
kill "$dev"
wait "$dev" 2>/dev/null || true

echo
echo "### restore into a new $RESTORE_NODES-node cluster"
rport=$((port + 100))
rrpc=$((rpc + 100))
t2=$(now)
"$TARGET/basalt" admin restore --from "$backup" --data-dir "$dir/restored/node1" \
  --node-id 1 --rpc-addr "127.0.0.1:$rrpc" >/dev/null
cp "$dir/source/node1/secrets.key" "$dir/restored/node1/secrets.key"
t3=$(now)
serve() {
  local i=$1
  shift
  "$TARGET/basalt" serve --node-id "$i" --data-dir "$dir/restored/node$i" \
    --http-addr "127.0.0.1:$((rport + i - 1))" --rpc-addr "127.0.0.1:$((rrpc + i - 1))" "$@" \
    >"$dir/restored-node$i.log" 2>&1 &
  pids+=("$!")
}
serve 1
for _ in $(seq 1 600); do healthy "$rport" && break; sleep 0.2; done
for i in $(seq 2 "$RESTORE_NODES"); do serve "$i" --join "127.0.0.1:$rrpc"; done
all_healthy() {
  for i in $(seq 1 "$RESTORE_NODES"); do healthy $((rport + i - 1)) || return 1; done
}
ready=0
for _ in $(seq 1 3000); do
  if all_healthy; then ready=1; break; fi
  sleep 0.2
done
t4=$(now)
[ "$ready" = 1 ] || { echo "the restored cluster did not get ready"; exit 1; }
creds="$dir/source/node1/credentials.json"
key() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["app"][sys.argv[2]])' "$creds" "$1"; }
count=$(curl -fs "http://127.0.0.1:$((rport + RESTORE_NODES - 1))/1/classes/QueryItem?count=1&limit=0" \
  -H "X-Service-Application-Id: $(key applicationId)" -H "X-Service-REST-API-Key: $(key restKey)" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["count"])' || echo "?")
python3 - "$t2" "$t3" "$t4" "$count" "$RESTORE_NODES" <<'PY'
import sys
t2, t3, t4 = map(float, sys.argv[1:4])
n = sys.argv[5]
print(f"| restore | first node made (s) | until {n} nodes ready (s) | QueryItem count on the last node |")
print("|---|---|---|---|")
print(f"| {n} nodes | {t3-t2:.2f} | {t4-t2:.2f} | {sys.argv[4]} |")
PY
