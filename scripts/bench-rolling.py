#!/usr/bin/env python3
"""Rolling-restart benchmark (docs/performance.md, "Rolling restart").

For each cluster size in NODES (default "3 5"): a fresh cluster of `basalt serve` processes on
loopback behind haproxy (Debian's package, installed when missing), which health-checks every
node's `/health?ready=1` every 500 ms. Through haproxy the bench's WORKLOAD (default `mixed`:
half reads, half creates) first runs flat out with CONCURRENCY clients (default 32) for
PEAK_SECONDS (10) to find the peak, then at half of it (`--target-rate`, latency counted from
when each request was due), after SETTLE_SECONDS (10) at that rate not measured (the flat-out
run's compactions):
  steady for STEADY_SECONDS (20), then ROUNDS (3) times: a rolling restart — every node in turn
  stopped with SIGTERM (it drains: unready, --drain-wait 5 s, leaderships handed over,
  in-flight requests finished, exit 0), started again on its data dir, and once its
  /health?ready=1 answers 200 and haproxy has it up again, the next — then steady again.
Prints per size: the peak, each window's requests, failures (with what failed) and p99, each
round's p99 during the restart against the mean of the steady windows before and after it,
each node's drain and restart times, and the worst round second by second. Goal: 0 failed
requests, p99 during a rolling restart at most 2x steady.

Bounded: every wait has a limit, the load windows end by themselves, every process started is
stopped at the end (KEEP=1 keeps the data dirs).
RATE fixes the paced rate (ops/s) instead of half the peak and BASALT_BIN runs another build,
so that two builds compare under one load.
"""

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchcluster import (CONC, WORKLOAD, Haproxy, Node, bench, failures, paced_rate, prepare,
                          row, stop_all, wait)

SIZES = [int(n) for n in os.environ.get("NODES", "3 5").split()]
PEAK_SECS = int(os.environ.get("PEAK_SECONDS", "10"))
STEADY_SECS = int(os.environ.get("STEADY_SECONDS", "20"))
SETTLE_SECS = int(os.environ.get("SETTLE_SECONDS", "10"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
STEP_MS = int(os.environ.get("TIMELINE_STEP_MS", "1000"))


def rolling_restart(nodes, proxy, events):
    """Restarts every node in turn; one row per node."""
    restarts = []
    for node in nodes:
        t0 = time.monotonic()
        events.append((time.time(), f"SIGTERM node {node.i}"))
        node.stop()
        try:
            code = node.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            node.stop(signal.SIGKILL)
            code = f"{node.proc.wait(timeout=30)} (killed after 90 s)"
        t1 = time.monotonic()
        events.append((time.time(), f"node {node.i} exited {code}, started again"))
        node.start()
        wait(f"node {node.i} ready after its restart", node.ready, 180)
        t2 = time.monotonic()
        events.append((time.time(), f"node {node.i} ready"))
        wait(f"haproxy has node {node.i} up again", lambda: proxy.up(node), 30)
        t3 = time.monotonic()
        events.append((time.time(), f"node {node.i} up in haproxy"))
        restarts.append((node.i, code, t1 - t0, t2 - t1, t3 - t0))
    return restarts


def run_size(n, root):
    nodes = []
    for i in range(1, n + 1):
        node = Node(root, i, nodes[0].rpc if nodes else None)
        node.start()
        nodes.append(node)
        wait(f"node {i} ready", node.ready, 120)
    proxy = Haproxy(root, nodes)
    rounds = []
    load = None
    try:
        # Let placement promote the joined nodes' replicas to voters and spread the leaders.
        time.sleep(15)
        wait("every node ready", lambda: all(x.ready() for x in nodes), 120)
        wait("haproxy has every node up", lambda: all(proxy.up(x) for x in nodes), 30)
        url = f"http://127.0.0.1:{proxy.port}"
        creds = os.path.join(nodes[0].dir, "credentials.json")
        peak_out = os.path.join(root, "peak.txt")
        bench(url, creds, f"{n} nodes, peak", peak_out, ["--seconds", str(PEAK_SECS)]).wait()
        peak = float(row(peak_out)["ops/s"])
        rate = paced_rate(peak)
        paced = ["--target-rate", str(rate)]

        # The flat-out run leaves compactions behind: a window at the paced rate lets them
        # finish before steady state is measured.
        bench(url, creds, f"{n} nodes, settling", os.path.join(root, "settle.txt"),
              paced + ["--seconds", str(SETTLE_SECS)]).wait()

        def steady(name):
            out = os.path.join(root, f"{name}.txt")
            bench(url, creds, f"{n} nodes, {name}", out,
                  paced + ["--seconds", str(STEADY_SECS), "--timeline", out + ".timeline"]).wait()
            return out

        before = steady("steady-0")
        for r in range(1, ROUNDS + 1):
            during = os.path.join(root, f"rolling-{r}.txt")
            stop_file = os.path.join(root, f"rolling-{r}-done")
            load = bench(url, creds, f"{n} nodes, rolling restart {r}", during,
                         paced + ["--seconds", "900", "--stop-file", stop_file,
                                  "--timeline", during + ".timeline",
                                  "--timeline-step-ms", str(STEP_MS)])
            time.sleep(2)
            events = []
            t_start = time.monotonic()
            restarts = rolling_restart(nodes, proxy, events)
            time.sleep(2)
            secs = time.monotonic() - t_start
            open(stop_file, "w").close()
            load.wait(timeout=120)
            after = steady(f"steady-{r}")
            rounds.append((before, during, after, restarts, events, secs))
            before = after
    finally:
        stop_all(load, proxy, nodes)

    print(f"\n## {n} nodes: peak {peak:.0f} ops/s ({WORKLOAD}, {CONC} clients), paced at {rate} ops/s")
    print("\n| round | window | seconds | requests | failed | ops/s | p50 ms | p99 ms | p99.9 ms | max ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    shown = set()
    ratios, failed = [], 0
    for r, (before, during, after, _, _, _) in enumerate(rounds, 1):
        for name, path in (("steady", before), ("rolling restart", during), ("steady", after)):
            if path in shown:
                continue
            shown.add(path)
            x = row(path)
            failed += int(x["errors"])
            print(f"| {r} | {name} | {x['seconds']} | {x['ops']} | {x['errors']} | {x['ops/s']} | "
                  f"{x['p50 ms']} | {x['p99 ms']} | {x['p99.9 ms']} | {x['max ms']} |")
        steady_p99 = (float(row(before)["p99 ms"]) + float(row(after)["p99 ms"])) / 2
        ratios.append(float(row(during)["p99 ms"]) / steady_p99)
    print(f"\np99 during a rolling restart ÷ steady (mean of the windows before and after it), "
          f"by round: {', '.join(f'{x:.2f}' for x in ratios)} (median {statistics.median(ratios):.2f}, "
          f"worst {max(ratios):.2f}); failed requests: {failed}")
    for before, during, after, _, _, _ in rounds:
        for path in (before, during, after):
            for line in failures(path):
                print(f"- {line}")
    print("\n| round | node | exit code | SIGTERM to exit s | start to ready s | SIGTERM to up in haproxy s |")
    print("|---|---|---|---|---|---|")
    for r, (_, _, _, restarts, _, secs) in enumerate(rounds, 1):
        for i, code, drain, start, total in restarts:
            print(f"| {r} | {i} | {code} | {drain:.1f} | {start:.1f} | {total:.1f} |")
    _, during, _, _, events, _ = max(rounds, key=lambda x: float(row(x[1])["p99 ms"]))
    print(f"\nThe round with the highest p99, {STEP_MS} ms by {STEP_MS} ms (Unix seconds; a "
          "request counts in the step it was due):\n")
    print("| from | requests | failed | p50 ms | p99 ms | max ms | events |")
    print("|---|---|---|---|---|---|---|")
    for line in open(during + ".timeline"):
        if line.startswith("#"):
            continue
        sec, reqs, bad, p50, p99, mx = line.split()
        step = round(float(sec) * 1000) // STEP_MS
        what = "; ".join(e for t, e in events if int(t * 1000) // STEP_MS == step)
        print(f"| {sec} | {reqs} | {bad} | {p50} | {p99} | {mx} | {what} |")
    sys.stdout.flush()


def main():
    if ROUNDS < 1:
        raise SystemExit("ROUNDS must be 1 or more")
    print(f"# Rolling restart through haproxy ({prepare('bench-rolling')})")
    for n in SIZES:
        root = tempfile.mkdtemp(prefix=f"basalt-rolling-{n}-")
        try:
            run_size(n, root)
        finally:
            if os.environ.get("KEEP") == "1":
                print(f"(kept {root})")
            else:
                shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
