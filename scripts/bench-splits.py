#!/usr/bin/env python3
"""Splits under load (docs/performance.md, "Splitting groups").

A fresh cluster of 3 `basalt serve` processes on loopback (SHARDS data shards, default 16)
behind haproxy (health check `/health?ready=1` every 500 ms), automatic splits turned off
(`basalt admin slots --split-above-mb 0 --split-above-writes-per-s 0`), loaded with OBJECTS
objects of one class (default 4,000,000, `QueryItem`, in batches: `basalt-bench --workload
load-queries`). Through haproxy the bench's WORKLOAD (default `mixed`) runs flat out with
CONCURRENCY clients for PEAK_SECONDS (10) to find the peak, then at half of it
(`--target-rate`): steady for STEADY_SECONDS (20); **splitting**: the size limit set to
FRACTION (0.35) of the median group's size on its leader's disk — every group passes it, its
halves too, its quarters do not — so that the groups split by themselves, one at a time, until
at least WANT_GROUPS (64) data groups hold slots and no split runs (limit SPLIT_LIMIT_SECONDS,
3600); steady. Then a count through haproxy must find every object once. MOVE_KB_PER_S sets
the splits' move rate (`--move-kb-per-s`; unset: the cluster's default, 1024). RATE fixes the
paced rate (ops/s) instead of half the peak, so that runs of two builds (BASALT_BIN) compare
under one load.

Prints the peak, each window's requests, failures and p99, the time to WANT_GROUPS groups and
the splits made, the p99 while splitting against the steady windows around it, and the
splitting window second by second with the groups and the split under way.
Goal (issue 51): at least 64 groups, p99 at most 2x steady, no failed request.

Bounded: every wait has a limit, the load windows end by themselves, every process started is
stopped at the end (KEEP=1 keeps the data dirs).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from benchcluster import (BASALT, BENCH, CONC, WORKLOAD, Haproxy, Node, bench, failures,
                          paced_rate, prepare, row, stop_all, wait)

SHARDS = os.environ.get("SHARDS", "16")
OBJECTS = int(os.environ.get("OBJECTS", "4000000"))
PEAK_SECS = int(os.environ.get("PEAK_SECONDS", "10"))
STEADY_SECS = int(os.environ.get("STEADY_SECONDS", "20"))
SETTLE_SECS = int(os.environ.get("SETTLE_SECONDS", "10"))
WANT_GROUPS = int(os.environ.get("WANT_GROUPS", "64"))
FRACTION = float(os.environ.get("FRACTION", "0.35"))
SPLIT_LIMIT = int(os.environ.get("SPLIT_LIMIT_SECONDS", "3600"))
# The splits' move rate (`basalt admin slots --move-kb-per-s`); unset: the cluster's default.
MOVE_RATE = os.environ.get("MOVE_KB_PER_S")


def admin(node, *args, timeout=60):
    out = subprocess.run([BASALT, "admin", "--rpc", f"127.0.0.1:{node.rpc}", *args],
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"basalt admin {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def slots(node):
    return json.loads(admin(node, "slots"))


def group_bytes(nodes):
    """Each data group's bytes as its leader reports them (`basalt admin status`)."""
    sizes = {}
    for node in nodes:
        status = json.loads(admin(node, "status"))
        for g in status["Status"]["groups"]:
            if g["group"] != 0 and g["state"] == "Leader":
                sizes[g["group"]] = g["bytes"]
    return sizes


def count(url, creds):
    keys = json.load(open(creds))["app"]
    req = urllib.request.Request(f"{url}/1/classes/QueryItem?count=1&limit=0", headers={
        "X-Service-Application-Id": keys["applicationId"],
        "X-Service-REST-API-Key": keys["restKey"]})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)["count"]


def main():
    machine = prepare("bench-splits")
    rate = "default" if MOVE_RATE is None else MOVE_RATE
    print(f"# Splitting groups under load ({machine}; {OBJECTS} objects of one class, "
          f"{SHARDS} shards; move rate {rate} KiB/s)")
    root = tempfile.mkdtemp(prefix="basalt-splits-")
    try:
        run(root)
    finally:
        if os.environ.get("KEEP") == "1":
            print(f"(kept {root})")
        else:
            shutil.rmtree(root, ignore_errors=True)


def run(root):
    nodes = []
    for i in range(1, 4):
        nodes.append(Node(root, i, nodes[0].rpc if nodes else None))
    nodes[0].args += ["--shards", SHARDS]
    for node in nodes:
        node.start()
        wait(f"node {node.i} ready", node.ready, 120)
    proxy = Haproxy(root, nodes)
    load = None
    windows = []
    try:
        wait("the slots feature is on", lambda: "slots" in json.loads(
            admin(nodes[0], "upgrade", "status"))["features"], 60)
        admin(nodes[0], "slots", "--split-above-mb", "0", "--split-above-writes-per-s", "0")
        if MOVE_RATE is not None:
            admin(nodes[0], "slots", "--move-kb-per-s", MOVE_RATE)
        wait("haproxy has every node up", lambda: all(proxy.up(x) for x in nodes), 30)
        url = f"http://127.0.0.1:{proxy.port}"
        creds = os.path.join(nodes[0].dir, "credentials.json")
        t = time.monotonic()
        loaded = os.path.join(root, "load.txt")
        subprocess.run([BENCH, "--url", url, "--credentials", creds, "--concurrency", "8",
                        "--workload", "load-queries", "--objects", str(OBJECTS)],
                       stdout=open(loaded, "w"), stderr=subprocess.STDOUT, check=True,
                       timeout=7200)
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

        steady(f"steady, {SHARDS} groups")
        sizes = group_bytes(nodes)
        median = sorted(sizes.values())[len(sizes) // 2]
        limit_mb = max(1, int(median * FRACTION) >> 20)
        print(f"Groups' sizes on their leaders: {min(sizes.values()) >> 20}–"
              f"{max(sizes.values()) >> 20} MiB (median {median >> 20}); size limit "
              f"{limit_mb} MiB.")
        samples = []

        def split():
            admin(nodes[0], "slots", "--split-above-mb", str(limit_mb))
            stopped = []
            deadline = time.monotonic() + SPLIT_LIMIT
            while time.monotonic() < deadline:
                try:
                    m = slots(nodes[0])
                except (RuntimeError, subprocess.TimeoutExpired, ValueError):
                    time.sleep(1)
                    continue
                under_way = m["splits"][0] if m["splits"] else None
                samples.append((time.time(), len(m["groups"]), under_way))
                if len(m["groups"]) >= WANT_GROUPS:
                    # No more (automatic splits follow each other within seconds): the split
                    # under way ends, and the rest of the run measures the grown cluster.
                    if not stopped:
                        admin(nodes[0], "slots", "--split-above-mb", "0")
                        stopped.append(True)
                    if not m["splits"]:
                        return m
                time.sleep(1)
            raise SystemExit(f"not {WANT_GROUPS} groups within {SPLIT_LIMIT} s")

        out = os.path.join(root, "splitting.txt")
        stop_file = os.path.join(root, "splitting-done")
        load = bench(url, creds, "splitting", out,
                     paced + ["--seconds", str(SPLIT_LIMIT + 60), "--stop-file", stop_file,
                              "--timeline", out + ".timeline"])
        time.sleep(2)
        t0 = time.monotonic()
        grown = split()
        split_secs = time.monotonic() - t0
        time.sleep(2)
        open(stop_file, "w").close()
        load.wait(timeout=120)
        windows.append(("splitting", out))
        steady(f"steady, {len(grown['groups'])} groups")
        counted = count(url, creds)
    finally:
        stop_all(load, proxy, nodes)

    print(f"\nPeak {peak:.0f} ops/s ({WORKLOAD}, {CONC} clients), paced at {rate} ops/s.")
    print("\n| window | seconds | requests | failed | ops/s | p50 ms | p99 ms | p99.9 ms | max ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    failed = 0
    for name, path in windows:
        x = row(path)
        failed += int(x["errors"])
        print(f"| {name} | {x['seconds']} | {x['ops']} | {x['errors']} | {x['ops/s']} | "
              f"{x['p50 ms']} | {x['p99 ms']} | {x['p99.9 ms']} | {x['max ms']} |")
    p99 = [float(row(path)["p99 ms"]) for _, path in windows]
    ratio = p99[1] / ((p99[0] + p99[2]) / 2)
    print(f"\n{SHARDS} → {len(grown['groups'])} groups in {split_secs:.0f} s "
          f"({len(grown['groups']) - int(SHARDS)} splits, one at a time); p99 while splitting "
          f"÷ steady (mean of the windows around it) {ratio:.2f}, ÷ steady before "
          f"{p99[1] / p99[0]:.2f}. Failed requests: {failed}. Counted {counted} objects of "
          f"{OBJECTS} loaded.")
    for _, path in windows:
        for line in failures(path):
            print(f"- {line}")
    print("\nSlots per group at the end: " + ", ".join(
        f"{g}: {n}" for g, n in sorted(grown["groups"].items(), key=lambda x: int(x[0]))))
    print("\nSplitting, second by second (Unix seconds; data groups and the split under way as "
          "`basalt admin slots` said in that second):\n")
    print("| from | requests | failed | p50 ms | p99 ms | max ms | groups | split |")
    print("|---|---|---|---|---|---|---|---|")
    by_sec = {int(t): (n, s) for t, n, s in samples}
    for line in open(out + ".timeline"):
        if line.startswith("#"):
            continue
        sec, reqs, bad, p50, p99v, mx = line.split()
        n, s = by_sec.get(int(float(sec)), ("", None))
        under_way = (f"{s['parent']}→{s['child']} {s['phase']} batch {s.get('batch', 0)} "
                     f"({s.get('slots', '')} slots, {s.get('left', 0)} left)" if s else "")
        print(f"| {sec} | {reqs} | {bad} | {p50} | {p99v} | {mx} | {n} | {under_way} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
