#!/usr/bin/env python3
"""Scale-out and scale-in benchmark (docs/performance.md, "Adding and removing nodes").

A fresh cluster of 3 `basalt serve` processes on loopback (SHARDS data shards, default 16)
behind haproxy (health check `/health?ready=1` every 500 ms; slots for 2 more nodes), loaded
with OBJECTS objects (default 1,000,000, in batches: `basalt-bench --workload load-queries`).
Through haproxy the bench's WORKLOAD (default `mixed`) runs flat out with CONCURRENCY clients
for PEAK_SECONDS (10) to find the peak, then at half of it (`--target-rate`):
  steady for STEADY_SECONDS (20); nodes 4 and 5 join with the rebalancer paused (they serve
  but hold nothing: what two more processes cost here, apart from the moves); steady;
  **grow**: the rebalancer resumed while the load runs, until `basalt admin rebalance status`
  says balanced (limit GROW_LIMIT_SECONDS, 1200); steady; **shrink**: `basalt admin
  remove-node 5`, then 4, while the load runs; steady. Nodes run with `--disk-low DISK_LOW`
  (3 %, `benchcluster`).
The rebalancer runs with its default limits (LIMITS, e.g. "--replica-moves-per-node 2",
changes them first). Prints the peak, each window's requests, failures and p99, the time to
balanced and the moves made, each node's share after growing, the p99 of each change against
the steady windows around it, the grow window second by second with the moves in flight, and
each node's data dir on disk at the end of the steady windows (a moved replica is erased).
Goal: balanced within 10 minutes, p99 at most 2x steady, no failed request.

Bounded: every wait has a limit, the load windows end by themselves, every process started is
stopped at the end (KEEP=1 keeps the data dirs).
RATE fixes the paced rate (ops/s) instead of half the peak and BASALT_BIN runs another build,
so that two builds compare under one load.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchcluster import (BASALT, BENCH, CONC, WORKLOAD, Haproxy, Node, bench, failures,
                          paced_rate, prepare, row, stop_all, wait)

SHARDS = os.environ.get("SHARDS", "16")
OBJECTS = int(os.environ.get("OBJECTS", "1000000"))
PEAK_SECS = int(os.environ.get("PEAK_SECONDS", "10"))
STEADY_SECS = int(os.environ.get("STEADY_SECONDS", "20"))
SETTLE_SECS = int(os.environ.get("SETTLE_SECONDS", "10"))
GROW_LIMIT = int(os.environ.get("GROW_LIMIT_SECONDS", "1200"))
LIMITS = os.environ.get("LIMITS", "").split()


def admin(node, *args, timeout=60):
    out = subprocess.run([BASALT, "admin", "--rpc", f"127.0.0.1:{node.rpc}", *args],
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"basalt admin {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def rebalance_status(node):
    return json.loads(admin(node, "rebalance", "status"))


def main():
    machine = prepare("bench-rebalance")
    print(f"# Adding and removing nodes under load ({machine}; {OBJECTS} objects, "
          f"{SHARDS} shards)")
    root = tempfile.mkdtemp(prefix="basalt-rebalance-")
    try:
        run(root)
    finally:
        if os.environ.get("KEEP") == "1":
            print(f"(kept {root})")
        else:
            shutil.rmtree(root, ignore_errors=True)


def run(root):
    nodes = []
    for i in range(1, 6):
        nodes.append(Node(root, i, nodes[0].rpc if nodes else None))
    nodes[0].args += ["--shards", SHARDS]
    for node in nodes[:3]:
        node.start()
        wait(f"node {node.i} ready", node.ready, 120)
    proxy = Haproxy(root, nodes)
    load = None
    windows = []
    disk = {}
    try:
        wait("the rebalancer balanced", lambda: rebalance_status(nodes[0])["balanced"], 120)
        if LIMITS:
            admin(nodes[0], "rebalance", "limits", *LIMITS)
        wait("haproxy has nodes 1-3 up", lambda: all(proxy.up(x) for x in nodes[:3]), 30)
        url = f"http://127.0.0.1:{proxy.port}"
        creds = os.path.join(nodes[0].dir, "credentials.json")
        t = time.monotonic()
        loaded = os.path.join(root, "load.txt")
        subprocess.run([BENCH, "--url", url, "--credentials", creds, "--concurrency", "8",
                        "--workload", "load-queries", "--objects", str(OBJECTS)],
                       stdout=open(loaded, "w"), stderr=subprocess.STDOUT, check=True,
                       timeout=3600)
        load_secs = time.monotonic() - t
        print(f"\nLoaded {OBJECTS} objects in {load_secs:.0f} s.")
        peak_out = os.path.join(root, "peak.txt")
        bench(url, creds, "3 nodes, peak", peak_out, ["--seconds", str(PEAK_SECS)]).wait()
        peak = float(row(peak_out)["ops/s"])
        rate = paced_rate(peak)
        paced = ["--target-rate", str(rate)]
        bench(url, creds, "settling", os.path.join(root, "settle.txt"),
              paced + ["--seconds", str(SETTLE_SECS)]).wait()

        def steady(name):
            out = os.path.join(root, f"{name}.txt")
            bench(url, creds, name, out, paced + ["--seconds", str(STEADY_SECS)]).wait()
            windows.append((name, out))
            return out

        def under_load(name, change):
            nonlocal load
            out = os.path.join(root, f"{name}.txt")
            stop_file = os.path.join(root, f"{name}-done")
            load = bench(url, creds, name, out,
                         paced + ["--seconds", "3600", "--stop-file", stop_file,
                                  "--timeline", out + ".timeline"])
            time.sleep(2)
            t0 = time.monotonic()
            result = change()
            secs = time.monotonic() - t0
            time.sleep(2)
            open(stop_file, "w").close()
            load.wait(timeout=120)
            windows.append((name, out))
            return out, secs, result

        steady("steady before growing")
        disk["before growing"] = {n.i: dir_bytes(n.dir) for n in nodes[:3]}
        # The two new nodes join with the rebalancer paused: they serve (forwarding every
        # request) but hold nothing, which measures what two more processes cost on this
        # machine apart from the moves.
        admin(nodes[0], "rebalance", "pause")
        for node in nodes[3:]:
            node.start()
        for node in nodes[3:]:
            wait(f"node {node.i} ready", node.ready, 120)
        wait("haproxy has every node up", lambda: all(proxy.up(x) for x in nodes), 30)
        steady("steady, 5 nodes, paused")
        samples = []

        def grow():
            admin(nodes[0], "rebalance", "resume")
            deadline = time.monotonic() + GROW_LIMIT
            while time.monotonic() < deadline:
                try:
                    s = rebalance_status(nodes[0])
                except (RuntimeError, subprocess.TimeoutExpired, ValueError):
                    time.sleep(1)
                    continue
                samples.append((time.time(), len(s["inFlight"]), s["queued"]))
                if s["balanced"] and len(s["nodes"]) == 5:
                    return s
                time.sleep(1)
            raise SystemExit(f"not balanced within {GROW_LIMIT} s")

        grown, grow_secs, balanced = under_load("growing 3 to 5", grow)
        steady("steady at 5 nodes")
        disk["at 5 nodes"] = {n.i: dir_bytes(n.dir) for n in nodes}

        def shrink():
            for node in (nodes[4], nodes[3]):
                admin(nodes[0], "remove-node", str(node.i),
                      "--wait-secs", str(GROW_LIMIT), timeout=GROW_LIMIT + 60)
            return rebalance_status(nodes[0])

        _, shrink_secs, _ = under_load("shrinking 5 to 3", shrink)
        steady("steady at 3 nodes")
        disk["at 3 nodes"] = {n.i: dir_bytes(n.dir) for n in nodes[:3]}
    finally:
        stop_all(load, proxy, nodes)

    print(f"\nPeak {peak:.0f} ops/s ({WORKLOAD}, {CONC} clients), paced at {rate} ops/s; "
          f"limits {json.dumps(balanced['settings'])}.")
    print("\n| window | seconds | requests | failed | ops/s | p50 ms | p99 ms | p99.9 ms | max ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    failed = 0
    for name, path in windows:
        x = row(path)
        failed += int(x["errors"])
        print(f"| {name} | {x['seconds']} | {x['ops']} | {x['errors']} | {x['ops/s']} | "
              f"{x['p50 ms']} | {x['p99 ms']} | {x['p99.9 ms']} | {x['max ms']} |")
    p99 = {name: float(row(path)["p99 ms"]) for name, path in windows}
    grow_ratio = p99["growing 3 to 5"] / ((p99["steady, 5 nodes, paused"]
                                           + p99["steady at 5 nodes"]) / 2)
    grow_vs_3 = p99["growing 3 to 5"] / p99["steady before growing"]
    shrink_ratio = p99["shrinking 5 to 3"] / ((p99["steady at 5 nodes"]
                                               + p99["steady at 3 nodes"]) / 2)
    print(f"\nGrowing 3 → 5 (nodes joined with the rebalancer paused, then resumed): balanced "
          f"{grow_secs:.0f} s after the resume, {balanced['movesBegun']} moves begun since the "
          f"start; p99 ÷ steady at 5 nodes (mean of the windows around it) {grow_ratio:.2f}, "
          f"÷ steady at 3 nodes before {grow_vs_3:.2f}.")
    print(f"Shrinking 5 → 3 (remove-node 5, then 4): {shrink_secs:.0f} s; "
          f"p99 ÷ steady {shrink_ratio:.2f}. Failed requests: {failed}.")
    for _, path in windows:
        for line in failures(path):
            print(f"- {line}")
    print("\nEach node's share once balanced at 5 nodes:\n")
    print("| node | replicas | MB | weighted | preferred leaders | leaders |")
    print("|---|---|---|---|---|---|")
    for n in balanced["nodes"]:
        print(f"| {n['node']} | {n['replicas']} | {n['bytes'] / 1e6:.0f} | {n['weighted']} | "
              f"{n['preferredLeaders']} | {n['leaders']} |")
    print("\nEach node's data dir (MB on disk, without its ballast) at the end of the steady "
          "windows: a replica moved off a node is erased there\n")
    print("| node | " + " | ".join(disk) + " |")
    print("|---|" + "---|" * len(disk))
    for i in sorted({i for sizes in disk.values() for i in sizes}):
        cells = [f"{sizes[i] / 1e6:.0f}" if i in sizes else "" for sizes in disk.values()]
        print(f"| {i} | " + " | ".join(cells) + " |")
    print("\nGrowing, second by second (Unix seconds; moves in flight and left as "
          "`rebalance status` said in that second):\n")
    print("| from | requests | failed | p50 ms | p99 ms | max ms | in flight | left |")
    print("|---|---|---|---|---|---|---|---|")
    by_sec = {int(t): (f, q) for t, f, q in samples}
    for line in open(grown + ".timeline"):
        if line.startswith("#"):
            continue
        sec, reqs, bad, p50, p99v, mx = line.split()
        f, q = by_sec.get(int(float(sec)), ("", ""))
        print(f"| {sec} | {reqs} | {bad} | {p50} | {p99v} | {mx} | {f} | {q} |")
    sys.stdout.flush()


def dir_bytes(path):
    """Bytes the files under `path` take on disk, but the disk-full ballast (a fixed 1 GiB)."""
    total = 0
    for top, _, files in os.walk(path):
        for f in files:
            if f == "BASALT-BALLAST":
                continue
            try:
                total += os.lstat(os.path.join(top, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


if __name__ == "__main__":
    main()
