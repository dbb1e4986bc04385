#!/usr/bin/env python3
"""`make bench-peers`: Basalt side by side with Parse Server on PostgreSQL and a 3-member etcd.

Starts on loopback, one system at a time: a 1-node Basalt, a 3-node Basalt, Parse Server
(npm's parse-server, with a private PostgreSQL cluster) and a 3-member etcd. Loads the same
OBJECTS (default 100,000) ~200-byte `GameScore` objects into each through its own batch API
(50 per batch), checks each system's answers against the values computed here, and runs ONE
load generator (wrk, with a Lua script per case) against all of them at 1, 16 and 64
connections. Prints, and writes to bench/results/<date>-peers.md and .svg, a table per system
(ops/s, p50, p99, errors, server CPU, wrk CPU), a table of Basalt/peer ratios, the issue's goals
and a chart. Bounded: at most MAX_MINUTES (default 45) in all; every server it started is
stopped by PID (its process group) at the end, also on Ctrl-C or error.

Environment: OBJECTS, SECONDS_PER (10), WARMUP (2), CONNECTIONS ("1,16,64"), SYSTEMS
("basalt-1,basalt-3,parse,etcd"; also `basalt-3-plaintext`, peer links without TLS, and
`basalt-3-https`, the API over HTTPS too: the cost of TLS), CASES (all; e.g. "create,get"),
MAX_MINUTES (45), BASALT (the basalt binary), OUT_DIR
(bench/results), KEEP=1 keeps the work directory. Installs what is missing: Debian's
postgresql, etcd-server, etcd-client and wrk; parse-server 9.10.0 from npm into
~/.cache/basalt/peers/parse (router pinned to 2.2.0: parse-server 9.10.0's batch breaks with
router 2.3.0).
"""

import base64
import datetime
import http.client
import json
import os
import platform
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
BASALT = os.environ.get("BASALT", os.path.join(TARGET, "release", "basalt"))
OBJECTS = int(os.environ.get("OBJECTS", "100000"))
SECONDS = int(os.environ.get("SECONDS_PER", "10"))
WARMUP = int(os.environ.get("WARMUP", "2"))
CONNECTIONS = [int(c) for c in os.environ.get("CONNECTIONS", "1,16,64").split(",")]
SYSTEMS = os.environ.get("SYSTEMS", "basalt-1,basalt-3,parse,etcd").split(",")
CASES = [c for c in os.environ.get("CASES", "").split(",") if c]
# Ports whose servers speak HTTPS (their certificates are the bench's own: not verified).
HTTPS_PORTS = set()
MAX_MINUTES = float(os.environ.get("MAX_MINUTES", "45"))
OUT_DIR = os.environ.get("OUT_DIR", os.path.join(ROOT, "bench", "results"))
PEERS_DIR = os.path.expanduser("~/.cache/basalt/peers")
PG_BIN = "/usr/lib/postgresql/15/bin"
CLASS = "GameScore"
BATCH = 50
LOAD_THREADS = 16
SCORES = 1_000_000
LEVELS = 50
COUNT_WIDTH = SCORES // 10
# The one the issue names, compared first in every table.
RATIO_CONNECTIONS = 16

STARTED = time.monotonic()
DEADLINE = STARTED + MAX_MINUTES * 60
GROUPS = []  # process groups this run started


def log(msg):
    print(f"[{time.monotonic() - STARTED:7.1f}s] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the data

def spread(i):
    """A fixed bijective mix of i (splitmix64), so neighbouring objects get unrelated scores."""
    m = (1 << 64) - 1
    x = (i + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def game_score(i):
    """The i-th object: about 200 bytes of JSON."""
    return {
        "score": spread(i) % SCORES,
        "player": f"player-{i % 1000:04d}",
        "level": i % LEVELS,
        "cheatMode": i % 7 == 0,
        "note": f"game {i:07d} " + "n" * 110,
    }


class Expected:
    """Answers computed here, to check every system's before it is timed."""

    def __init__(self, n):
        scores = [spread(i) % SCORES for i in range(n)]
        self.n = n
        self.top_gt = 500_000
        self.top = sorted((s for s in scores if s > self.top_gt), reverse=True)[:20]
        self.range_lo = 300_000
        self.range_count = sum(1 for s in scores if self.range_lo <= s < self.range_lo + COUNT_WIDTH)
        self.sums = {}
        for i, s in enumerate(scores):
            self.sums[i % LEVELS] = self.sums.get(i % LEVELS, 0) + s


# ---------------------------------------------------------------- processes

def start(name, argv, log_path, user=None, env=None, cwd=None):
    """Starts a server in its own process group, recorded so that it is stopped at the end."""
    out = open(log_path, "ab")
    kwargs = {}
    if user is not None:
        kwargs["user"] = user
        kwargs["group"] = pwd.getpwnam(user).pw_gid
        kwargs["extra_groups"] = []
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=env, cwd=cwd, **kwargs)
    GROUPS.append((name, proc))
    log(f"started {name} (pid {proc.pid})")
    return proc


def stop(proc):
    """Stops a process group: SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        log(f"pid {proc.pid} did not end")


def stop_all():
    while GROUPS:
        name, proc = GROUPS.pop()
        log(f"stopping {name} (pid {proc.pid})")
        stop(proc)


def machine_ticks():
    """(all, idle) jiffies of the machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]


def cores_between(a, b):
    """Cores busy between two `machine_ticks` readings."""
    total = max(b[0] - a[0], 1)
    return (os.cpu_count() or 1) * (1 - (b[1] - a[1]) / total)


def busy_cores(interval=1.0):
    a = machine_ticks()
    time.sleep(interval)
    return cores_between(a, machine_ticks())


def wait_quiet():
    """Waits (up to 30 s) until the machine uses less than half a core."""
    for _ in range(30):
        if busy_cores() < 0.5:
            return
    log("the machine did not become quiet within 30 s; measuring anyway")


def wait_port(port, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


# ---------------------------------------------------------------- HTTP

_local = threading.local()


def request(port, method, path, headers, body=None, timeout=600):
    """One HTTP request on a kept-alive connection of this thread: (status, parsed JSON)."""
    conns = getattr(_local, "conns", None)
    if conns is None:
        conns = _local.conns = {}
    data = None if body is None else json.dumps(body).encode()
    for attempt in range(2):
        conn = conns.get(port)
        if conn is None and port in HTTPS_PORTS:
            import ssl
            conn = conns[port] = http.client.HTTPSConnection(
                "127.0.0.1", port, timeout=timeout, context=ssl._create_unverified_context())
        elif conn is None:
            conn = conns[port] = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            try:
                return resp.status, json.loads(raw) if raw else None
            except ValueError:
                return resp.status, raw.decode(errors="replace")
        except (http.client.HTTPException, OSError):
            conn.close()
            conns.pop(port, None)
            if attempt == 1:
                raise
    raise AssertionError("unreachable")


def query_string(params):
    return urllib.parse.urlencode(params, quote_via=urllib.parse.quote)


# ---------------------------------------------------------------- installs

def install():
    """What the SYSTEMS asked for need and this machine lacks."""
    missing = []
    parse, etcd = "parse" in SYSTEMS, "etcd" in SYSTEMS
    if parse and not os.path.exists(f"{PG_BIN}/initdb"):
        missing.append("postgresql")
    for cmd, pkg, needed in (("etcd", "etcd-server", etcd), ("etcdctl", "etcd-client", etcd),
                             ("wrk", "wrk", True), ("psql", "postgresql-client", parse)):
        if needed and shutil.which(cmd) is None:
            missing.append(pkg)
    if parse and (shutil.which("node") is None or shutil.which("npm") is None):
        missing += ["nodejs", "npm"]
    if missing:
        log(f"installing {' '.join(missing)}")
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True)
        subprocess.run(sudo + ["apt-get", "install", "-y", "-qq"] + missing, check=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    parse_dir = os.path.join(PEERS_DIR, "parse")
    if parse and not os.path.exists(
            os.path.join(parse_dir, "node_modules", "parse-server", "package.json")):
        os.makedirs(parse_dir, exist_ok=True)
        with open(os.path.join(parse_dir, "package.json"), "w") as f:
            json.dump({"name": "basalt-bench-peers", "private": True,
                       "dependencies": {"parse-server": "9.10.0", "router": "2.2.0"},
                       "overrides": {"router": "2.2.0"}}, f, indent=2)
        log("installing parse-server 9.10.0 from npm")
        subprocess.run(["npm", "install", "--no-audit", "--no-fund"], cwd=parse_dir, check=True,
                       timeout=900)
    if not os.path.exists(BASALT):
        raise SystemExit(f"{BASALT} is missing: build it first (make bench-peers does)")


def versions():
    def first_line(argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout \
                .strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return "?"
    parse_pkg = os.path.join(PEERS_DIR, "parse", "node_modules", "parse-server", "package.json")
    try:
        with open(parse_pkg) as f:
            parse_version = json.load(f)["version"]
    except OSError:
        parse_version = "?"
    commit = first_line(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    return {
        "basalt": f"commit {commit}",
        "parse-server": parse_version,
        "postgresql": first_line([f"{PG_BIN}/postgres", "--version"]),
        "etcd": first_line(["etcd", "--version"]),
        "wrk": first_line(["wrk", "--version"]).split(" Copyright")[0],
        "node": first_line(["node", "--version"]),
    }


def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    return (f"{os.cpu_count()} cores ({model}), {mem_kib / 1024 / 1024:.0f} GiB, "
            f"Linux {platform.release()}")


# ---------------------------------------------------------------- the systems

class System:
    """One system under test: how to start, load, index, check and request it."""

    name = ""
    ports = []  # HTTP ports wrk spreads its connections over

    def __init__(self, work, port):
        self.work = work
        self.port = port
        self.procs = []
        self.ids_file = os.path.join(work, f"{self.name}-ids.txt")

    def cases(self):
        """(case, Lua body of `request()`) for each case this system answers, in run order.
        `before index` cases run before `index()`."""
        raise NotImplementedError


class Rest(System):
    """What Basalt and Parse share: the same REST shape (classes, batch, where/order/count)."""

    base = ""
    headers = {}
    master_headers = {}

    def batch_path(self):
        return f"{self.base}/batch"

    def load(self, n):
        ids = [None] * n
        chunks = [range(s, min(s + BATCH, n)) for s in range(0, n, BATCH)]

        def one(k, chunk):
            port = self.ports[k % len(self.ports)]
            body = {"requests": [{"method": "POST", "path": f"{self.base}/classes/{CLASS}",
                                  "body": game_score(i)} for i in chunk]}
            for attempt in range(5):
                status, answer = request(port, "POST", self.batch_path(), self.headers, body)
                if status == 200 and isinstance(answer, list) and all(
                        "success" in a for a in answer):
                    for i, a in zip(chunk, answer):
                        ids[i] = a["success"]["objectId"]
                    return
                if status in (429, 503) and attempt < 4:
                    time.sleep(1)
                    continue
                raise RuntimeError(f"{self.name}: batch answered {status}: {str(answer)[:300]}")

        with ThreadPoolExecutor(LOAD_THREADS) as pool:
            list(pool.map(lambda kc: one(*kc), enumerate(chunks)))
        with open(self.ids_file, "w") as f:
            f.write("\n".join(ids) + "\n")

    def get(self, path, params=None, master=False):
        q = f"?{query_string(params)}" if params else ""
        status, answer = request(self.ports[0], "GET", f"{self.base}{path}{q}",
                                 self.master_headers if master else self.headers)
        if status != 200:
            raise RuntimeError(f"{self.name}: GET {path}{q} answered {status}: {answer}")
        return answer

    def check(self, exp, phase):
        with open(self.ids_file) as f:
            first = f.readline().strip()
        got = self.get(f"/classes/{CLASS}/{first}")
        assert got.get("score") == game_score(0)["score"], f"{self.name}: get {got}"
        rows = self.get(f"/classes/{CLASS}", {
            "where": json.dumps({"score": {"$gt": exp.top_gt}}), "order": "-score",
            "limit": 20})["results"]
        assert [r["score"] for r in rows] == exp.top, f"{self.name}: top 20 {rows[:3]}"
        if phase == "before index":
            return
        rows = self.get(f"/classes/{CLASS}", {"order": "-createdAt", "limit": 20})["results"]
        assert len(rows) == 20, f"{self.name}: newest {len(rows)} rows"
        count = self.get(f"/classes/{CLASS}", {"count": 1, "limit": 0})["count"]
        assert count == exp.n, f"{self.name}: count {count}, expected {exp.n}"
        where = {"score": {"$gte": exp.range_lo, "$lt": exp.range_lo + COUNT_WIDTH}}
        count = self.get(f"/classes/{CLASS}", {"where": json.dumps(where), "count": 1,
                                               "limit": 0})["count"]
        assert count == exp.range_count, f"{self.name}: range count {count} != {exp.range_count}"
        sums = self.group_sums()
        assert sums == exp.sums, f"{self.name}: groupby sums differ: {sorted(sums.items())[:3]}"

    def cases(self):
        base = f"{self.base}/classes/{CLASS}"
        top = ('local w = \'{"score":{"$gt":\' .. math.random(0, 990000) .. \'}}\'\n'
               f'  return wrk.format("GET", "{base}?where=" .. enc(w) .. '
               '"&order=-score&limit=20", H)')
        return [
            ("get", f'return wrk.format("GET", "{base}/" .. ids[math.random(#ids)], H)',
             "before index"),
            ("query, no index", top, "before index"),
            ("query, indexed", top, "after index"),
            ("newest 20", f'return wrk.format("GET", "{base}?order=-createdAt&limit=20", H)',
             "after index"),
            ("count all", f'return wrk.format("GET", "{base}?count=1&limit=0", H)', "after index"),
            ("count range",
             'local lo = math.random(0, 900000)\n'
             '  local w = \'{"score":{"$gte":\' .. lo .. \',"$lt":\' .. (lo + 100000) .. \'}}\'\n'
             f'  return wrk.format("GET", "{base}?where=" .. enc(w) .. "&count=1&limit=0", H)',
             "after index"),
            ("groupby sum", self.groupby_lua(), "after index"),
            ("create",
             'local s = math.random(0, 999999)\n'
             '  local body = \'{"score":\' .. s .. \',"player":"player-\' .. (s % 1000) .. '
             '\'","level":\' .. (s % 50) .. \',"cheatMode":false,"note":"' + "n" * 120 + '"}\'\n'
             f'  return wrk.format("POST", "{base}", H, body)', "after index"),
        ]


class Basalt(Rest):
    base = "/1"

    def __init__(self, work, port, nodes, variant=""):
        """`variant`: "" (peer links over mutual TLS, as `basalt dev` makes them),
        "plaintext" (`--insecure`) or "https" (mutual TLS, and the API over HTTPS)."""
        self.name = f"basalt-{nodes}" + (f"-{variant}" if variant else "")
        super().__init__(work, port)
        self.nodes = nodes
        self.variant = variant
        self.ports = [port + i for i in range(nodes)]

    def start(self):
        data = os.path.join(self.work, self.name)
        log_path = os.path.join(self.work, f"{self.name}.log")
        extra = []
        if self.variant == "plaintext":
            extra = ["--insecure"]
        elif self.variant == "https":
            certs = os.path.join(self.work, f"{self.name}-api-certs")
            ca = os.path.join(certs, "ca")
            subprocess.run([BASALT, "admin", "certs", "create-ca", "--ca-dir", ca], check=True,
                           capture_output=True)
            subprocess.run([BASALT, "admin", "certs", "create-node", "--ca-dir", ca,
                            "--node-id", "1", "--addr", "127.0.0.1", "--out", certs],
                           check=True, capture_output=True)
            extra = ["--tls-cert", os.path.join(certs, "node.pem"),
                     "--tls-key", os.path.join(certs, "node.key")]
            HTTPS_PORTS.update(self.ports)
        self.procs.append(start(self.name, [
            BASALT, "dev", "--nodes", str(self.nodes), "--data-dir", data,
            "--http-port", str(self.port), "--rpc-port", str(self.port + 1000)] + extra,
            log_path))
        end = time.monotonic() + 180
        while time.monotonic() < end:
            with open(log_path, errors="replace") as f:
                if "Ctrl-C stops" in f.read():
                    break
            if self.procs[0].poll() is not None:
                raise RuntimeError(f"{self.name} exited: see {log_path}")
            time.sleep(1)
        else:
            raise RuntimeError(f"{self.name} did not start in 180 s: see {log_path}")
        if self.nodes > 1:
            time.sleep(15)  # placement promotes the new replicas to voters
        with open(os.path.join(data, "node1", "credentials.json")) as f:
            app = json.load(f)["app"]
        self.headers = {"X-Service-Application-Id": app["applicationId"],
                        "X-Service-REST-API-Key": app["restKey"],
                        "Content-Type": "application/json"}
        self.master_headers = dict(self.headers, **{"X-Service-Master-Key": app["masterKey"]})

    def index(self):
        status, answer = request(self.ports[0], "POST", f"/1/schemas/{CLASS}/indexes",
                                 self.master_headers, {"field": "score"}, timeout=3600)
        if status != 200:
            raise RuntimeError(f"{self.name}: declaring the index answered {status}: {answer}")

    def group_sums(self):
        answer = self.get(f"/classes/{CLASS}", {"groupby": "level", "sum": "score"})
        rows = answer if isinstance(answer, list) else answer["results"]  # wrapAggregates
        return {r["level"]: r["_sumScore"] for r in rows}

    def groupby_lua(self):
        return (f'return wrk.format("GET", "/1/classes/{CLASS}?groupby=level&sum=score", H)')


class Parse(Rest):
    name = "parse"
    base = "/parse"

    def __init__(self, work, port):
        super().__init__(work, port)
        self.ports = [port]
        self.pg_port = port + 1
        self.headers = {"X-Parse-Application-Id": "bench", "X-Parse-REST-API-Key": "rest",
                        "Content-Type": "application/json"}
        self.master_headers = dict(self.headers, **{"X-Parse-Master-Key": "bench-master"})

    def start(self):
        pg = os.path.join(self.work, "pg")
        os.makedirs(pg)
        user = None
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            user = "postgres"
            os.chmod(self.work, 0o755)
            info = pwd.getpwnam(user)
            os.chown(pg, info.pw_uid, info.pw_gid)
        subprocess.run([f"{PG_BIN}/initdb", "-D", pg, "-U", "postgres", "--auth=trust",
                        "-E", "UTF8"], check=True, capture_output=True, user=user,
                       group=pwd.getpwnam(user).pw_gid if user else None)
        self.procs.append(start("postgresql", [
            f"{PG_BIN}/postgres", "-D", pg, "-p", str(self.pg_port), "-k", pg,
            "-c", "listen_addresses=127.0.0.1", "-c", "shared_buffers=1GB",
            "-c", "max_connections=200"], os.path.join(self.work, "pg.log"), user=user))
        wait_port(self.pg_port)
        for _ in range(60):
            if subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.pg_port), "-U",
                               "postgres", "-c", "create database parse"],
                              capture_output=True).returncode == 0:
                break
            time.sleep(1)
        parse_dir = os.path.join(PEERS_DIR, "parse")
        config = os.path.join(self.work, "parse.json")
        with open(config, "w") as f:
            json.dump({
                "appId": "bench", "masterKey": "bench-master", "restAPIKey": "rest",
                "maintenanceKey": "bench-maintenance",
                "databaseURI": f"postgres://postgres@127.0.0.1:{self.pg_port}/parse",
                "port": self.port, "mountPath": "/parse",
                "serverURL": f"http://127.0.0.1:{self.port}/parse", "logLevel": "error",
                "masterKeyIps": ["127.0.0.1", "::1"],
            }, f)
        self.procs.append(start("parse-server", [
            "node", os.path.join(parse_dir, "node_modules", "parse-server", "bin",
                                 "parse-server"), config],
            os.path.join(self.work, "parse.log"), cwd=parse_dir,
            env=dict(os.environ, NODE_ENV="production")))
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                status, answer = request(self.port, "GET", "/parse/health", {}, timeout=5)
                if status == 200:
                    break
            except OSError:
                pass
            time.sleep(1)
        else:
            raise RuntimeError("parse-server did not answer /parse/health in 120 s")
        status, answer = request(self.port, "POST", f"/parse/schemas/{CLASS}",
                                 self.master_headers, {"className": CLASS, "fields": {
                                     "score": {"type": "Number"},
                                     "player": {"type": "String"},
                                     "level": {"type": "Number"},
                                     "cheatMode": {"type": "Boolean"},
                                     "note": {"type": "String"}}})
        if status != 200:
            raise RuntimeError(f"parse: creating the class answered {status}: {answer}")

    def index(self):
        status, answer = request(self.port, "PUT", f"/parse/schemas/{CLASS}",
                                 self.master_headers, {"indexes": {"score_idx": {"score": 1}}},
                                 timeout=3600)
        if status != 200:
            raise RuntimeError(f"parse: declaring the index answered {status}: {answer}")

    def group_sums(self):
        pipeline = [{"$group": {"_id": "$level", "total": {"$sum": "$score"}}}]
        rows = self.get(f"/aggregate/{CLASS}", {"pipeline": json.dumps(pipeline)},
                        master=True)["results"]
        return {int(r["objectId"]): int(r["total"]) for r in rows}

    def groupby_lua(self):
        pipeline = json.dumps([{"$group": {"_id": "$level", "total": {"$sum": "$score"}}}])
        return (f'return wrk.format("GET", "/parse/aggregate/{CLASS}?pipeline={quote(pipeline)}", '
                'M)')


def quote(s):
    return urllib.parse.quote(s, safe="")


def b64(s):
    return base64.b64encode(s.encode()).decode()


class Etcd(System):
    """A 3-member etcd through its JSON gateway: get, create and count only (it has no queries)."""

    name = "etcd"

    def __init__(self, work, port):
        super().__init__(work, port)
        self.ports = [port + 10 * m for m in range(3)]
        self.headers = {"Content-Type": "application/json"}

    def start(self):
        cluster = ",".join(f"e{m}=http://127.0.0.1:{p + 1}" for m, p in enumerate(self.ports))
        for m, p in enumerate(self.ports):
            self.procs.append(start(f"etcd e{m}", [
                "etcd", "--name", f"e{m}", "--data-dir", os.path.join(self.work, f"etcd{m}"),
                "--listen-client-urls", f"http://127.0.0.1:{p}",
                "--advertise-client-urls", f"http://127.0.0.1:{p}",
                "--listen-peer-urls", f"http://127.0.0.1:{p + 1}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{p + 1}",
                "--initial-cluster", cluster, "--initial-cluster-state", "new",
                "--initial-cluster-token", "basalt-bench"],
                os.path.join(self.work, f"etcd{m}.log")))
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                if all(request(p, "GET", "/health", {}, timeout=5)[1].get("health") == "true"
                       for p in self.ports):
                    return
            except (OSError, AttributeError):
                pass
            time.sleep(1)
        raise RuntimeError("etcd did not become healthy in 120 s")

    def load(self, n):
        def one(k, start_i):
            ops = [{"requestPut": {"key": b64(f"gs/{i:08d}"),
                                   "value": b64(json.dumps(game_score(i)))}}
                   for i in range(start_i, min(start_i + BATCH, n))]
            status, answer = request(self.ports[k % 3], "POST", "/v3/kv/txn", self.headers,
                                     {"success": ops})
            if status != 200:
                raise RuntimeError(f"etcd: txn answered {status}: {answer}")

        with ThreadPoolExecutor(LOAD_THREADS) as pool:
            list(pool.map(lambda ks: one(*ks), enumerate(range(0, n, BATCH))))
        with open(self.ids_file, "w") as f:
            f.write("\n".join(b64(f"gs/{i:08d}") for i in range(n)) + "\n")

    def index(self):
        pass

    def count_body(self):
        return {"key": b64("gs/"), "range_end": b64("gs0"), "count_only": True}

    def check(self, exp, phase):
        _, answer = request(self.ports[0], "POST", "/v3/kv/range", self.headers,
                            {"key": b64("gs/00000000")})
        value = json.loads(base64.b64decode(answer["kvs"][0]["value"]))
        assert value == game_score(0), f"etcd: get {value}"
        _, answer = request(self.ports[0], "POST", "/v3/kv/range", self.headers,
                            self.count_body())
        assert int(answer["count"]) == exp.n, f"etcd: count {answer}"

    def cases(self):
        value = b64(json.dumps(game_score(0)))
        count = json.dumps(self.count_body())
        # A new key: "gs/" (base64 "Z3Mv") then 12 random bytes, written as 16 base64 letters.
        return [
            ("get", 'return wrk.format("POST", "/v3/kv/range", H, '
                    '\'{"key":"\' .. ids[math.random(#ids)] .. \'"}\')', "before index"),
            ("count all", f"return wrk.format(\"POST\", \"/v3/kv/range\", H, '{count}')",
             "after index"),
            ("create",
             'local k = {}\n'
             '  for j = 1, 16 do local r = math.random(62); k[j] = ALNUM:sub(r, r) end\n'
             '  k = table.concat(k)\n'
             '  return wrk.format("POST", "/v3/kv/put", H, \'{"key":"Z3Mv\' .. k .. '
             f'\'","value":"{value}"}}\')', "after index"),
        ]


# ---------------------------------------------------------------- wrk

LUA_PRELUDE = r'''
local ids = {}
ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
local thread_no = 0
function setup(thread)
  thread_no = thread_no + 1
  thread:set("tid", thread_no)
end
function enc(s)
  return (s:gsub("[^%w%-_%.~]", function(c) return string.format("%%%02X", string.byte(c)) end))
end
function init(args)
  math.randomseed(os.time() * 1000 + (tid or 0) * 7919 + tonumber(args[1] or "0"))
  local f = io.open(IDS_FILE, "r")
  if f then
    for line in f:lines() do if #line > 0 then ids[#ids + 1] = line end end
    f:close()
  end
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,' ..
    '"status":%d,"timeout":%d,"p50_us":%d,"p99_us":%d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
'''


def lua_table(headers):
    return "{" + ", ".join(f'["{k}"] = "{v}"' for k, v in headers.items()) + "}"


def write_script(system, case, body):
    path = os.path.join(system.work, f"{system.name}-{re.sub(r'[^a-z0-9]+', '-', case)}.lua")
    with open(path, "w") as f:
        f.write(f'IDS_FILE = "{system.ids_file}"\n')
        f.write(f"H = {lua_table(system.headers)}\n")
        f.write(f"M = {lua_table(getattr(system, 'master_headers', system.headers))}\n")
        f.write(LUA_PRELUDE)
        f.write(f"request = function()\n  {body}\nend\n")
    return path


def split(connections, ports):
    """Connections spread over the system's HTTP ports (1 connection: the first port only)."""
    k = min(connections, len(ports))
    return [(ports[j], connections // k + (1 if j < connections % k else 0)) for j in range(k)]


def run_wrk(system, script, connections, seconds, salt):
    """Runs wrk against every port at once; sums requests and errors, takes the worst p50/p99
    of the instances (each sees its own share of the connections). Returns the figures, the
    server's CPU seconds and wrk's."""
    procs = []
    ticks0 = machine_ticks()
    t0 = time.monotonic()
    for j, (port, conns) in enumerate(split(connections, system.ports)):
        scheme = "https" if port in HTTPS_PORTS else "http"
        argv = ["wrk", "-t", str(min(2, conns)), "-c", str(conns), "-d", f"{seconds}s",
                "--timeout", "10s", "-s", script, f"{scheme}://127.0.0.1:{port}", "--",
                str(salt * 10 + j)]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outs, wrk_cpu = [], 0.0
    for p in procs:
        out = p.stdout.read()
        _, _, usage = os.wait4(p.pid, 0)
        p.returncode = 0
        wrk_cpu += usage.ru_utime + usage.ru_stime
        outs.append(out)
    wall = time.monotonic() - t0
    # The machine was quiet before the case: what it used beside wrk is the system's (a
    # process tree would miss PostgreSQL's short-lived parallel workers).
    server_cores = max(cores_between(ticks0, machine_ticks()) - wrk_cpu / wall, 0.0)
    figures = []
    for out in outs:
        m = re.search(r"^BENCHJSON (.*)$", out, re.M)
        if not m:
            raise RuntimeError(f"wrk printed no figures: {out[-500:]}")
        figures.append(json.loads(m.group(1)))
    requests = sum(f["requests"] for f in figures)
    duration = max(f["duration_us"] for f in figures) / 1e6
    errors = sum(f[k] for f in figures for k in ("connect", "read", "write", "status", "timeout"))
    # Requests still unanswered when wrk stopped count as timed out when none came back at
    # all (wrk then reports no latency, and no timeouts either).
    unanswered = connections if requests == 0 else 0
    return {
        "ops": (requests - errors) / duration if duration else 0.0,
        "requests": requests,
        "errors": errors,
        "timeouts": sum(f["timeout"] for f in figures) + unanswered,
        "unanswered": unanswered,
        "p50_ms": max(f["p50_us"] for f in figures) / 1000,
        "p99_ms": max(f["p99_us"] for f in figures) / 1000,
        "server_cores": server_cores,
        "wrk_cores": wrk_cpu / wall,
    }


# ---------------------------------------------------------------- the run

def measure(system, exp, results, salt):
    """Starts, loads, checks and times one system; always stops it."""
    t = time.monotonic()
    system.start()
    results["start_s"] = time.monotonic() - t
    log(f"{system.name}: loading {OBJECTS} objects")
    t = time.monotonic()
    system.load(OBJECTS)
    results["load_ops"] = OBJECTS / (time.monotonic() - t)
    log(f"{system.name}: loaded at {results['load_ops']:.0f} objects/s")
    cases = [c for c in system.cases() if not CASES or c[0] in CASES]
    indexed = False
    for case, body, phase in cases:
        if phase == "after index" and not indexed:
            system.check(exp, "before index")
            t = time.monotonic()
            system.index()
            results["index_s"] = time.monotonic() - t
            if system.name != "etcd":
                log(f"{system.name}: index on score declared in {results['index_s']:.1f} s")
            system.check(exp, "after index")
            indexed = True
        script = write_script(system, case, body)
        for c in CONNECTIONS:
            left = DEADLINE - time.monotonic()
            if left < SECONDS + WARMUP + 30:
                log(f"{system.name} {case} @{c}: skipped, {left:.0f} s left of MAX_MINUTES")
                results["cases"][(case, c)] = None
                continue
            wait_quiet()
            if WARMUP:
                run_wrk(system, script, c, WARMUP, salt)
            salt += 1
            r = run_wrk(system, script, c, SECONDS, salt)
            results["cases"][(case, c)] = r
            log(f"{system.name} {case} @{c}: {r['ops']:.1f} ops/s p50 {r['p50_ms']:.2f} ms "
                f"p99 {r['p99_ms']:.2f} ms errors {r['errors']} cpu {r['server_cores']:.2f}")
    if not indexed:
        system.check(exp, "before index")
    return salt


def fmt_ops(v):
    if v is None:
        return "—"
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def tables(all_results, case_order):
    lines = []
    for name, res in all_results.items():
        if not res.get("cases"):
            lines += [f"### {name}", "", f"not measured: {res.get('error', '?')}", ""]
            continue
        lines += [f"### {name}", "",
                  f"Bulk load ({LOAD_THREADS} clients, batches of {BATCH}): "
                  f"{res.get('load_ops', 0):,.0f} objects/s."
                  + (f" Index on score declared in {res['index_s']:.1f} s."
                     if "index_s" in res and name != "etcd" else ""), "",
                  "| case | conns | ops/s | p50 ms | p99 ms | errors | server CPU | wrk CPU |",
                  "|---|---|---|---|---|---|---|---|"]
        for case in case_order:
            for c in CONNECTIONS:
                if (case, c) not in res["cases"]:
                    continue
                r = res["cases"][(case, c)]
                if r is None:
                    lines.append(f"| {case} | {c} | skipped (time) | | | | | |")
                    continue
                if r.get("unanswered"):
                    lines.append(f"| {case} | {c} | 0 | none answered in {SECONDS} s | | "
                                 f"{r['unanswered']} unanswered | {r['server_cores']:.2f} | "
                                 f"{r['wrk_cores']:.2f} |")
                    continue
                lines.append(f"| {case} | {c} | {fmt_ops(r['ops'])} | {r['p50_ms']:.2f} | "
                             f"{r['p99_ms']:.2f} | {r['errors']} | {r['server_cores']:.2f} | "
                             f"{r['wrk_cores']:.2f} |")
        if res.get("error"):
            lines.append(f"\nstopped early: {res['error']}")
        lines.append("")
    return lines


def ops(all_results, name, case, c):
    r = all_results.get(name, {}).get("cases", {}).get((case, c))
    if case == "bulk load":
        return all_results.get(name, {}).get("load_ops")
    return None if r is None else r["ops"]


def ratio_table(all_results, case_order):
    pairs = [("basalt-1", "parse"), ("basalt-3", "parse"), ("basalt-3", "etcd"),
             ("basalt-3", "basalt-3-plaintext"), ("basalt-3-https", "basalt-3-plaintext")]
    pairs = [(a, b) for a, b in pairs if a in all_results and b in all_results]
    lines = ["| case | conns | " + " | ".join(f"{a} / {b}" for a, b in pairs) + " |",
             "|---|---|" + "---|" * len(pairs)]
    for case in ["bulk load"] + case_order:
        for c in ([LOAD_THREADS] if case == "bulk load" else CONNECTIONS):
            cells = []
            for a, b in pairs:
                x, y = ops(all_results, a, case, c), ops(all_results, b, case, c)
                cells.append("—" if x is None or not y else f"{x / y:.2f}×")
            if any(cell != "—" for cell in cells):
                lines.append(f"| {case} | {c} | " + " | ".join(cells) + " |")
    return lines


def goals(all_results):
    def r(name, case, c):
        return all_results.get(name, {}).get("cases", {}).get((case, c))

    def ratio(a, b, case, c=RATIO_CONNECTIONS):
        x, y = ops(all_results, a, case, c), ops(all_results, b, case, c)
        return None if x is None or not y else x / y

    rows = []

    def goal(text, value, target, shown):
        met = "—" if value is None else ("met" if value >= target else "not met")
        rows.append(f"| {text} | {shown if value is not None else '—'} | {met} |")

    for a, target in (("basalt-1", 2.0), ("basalt-3", 1.0)):
        v = ratio(a, "parse", "query, indexed")
        goal(f"indexed ordered query, {a} ≥ {target:g}× Parse with index (16 conns)", v, target,
             f"{v:.2f}×" if v else "")
    for a in ("basalt-1", "basalt-3"):
        x, y = ops(all_results, a, "query, no index", 16), ops(all_results, "parse",
                                                                "query, no index", 16)
        v = None if x is None or not y else x / y
        goal(f"the query with no declared index, {a} ≥ 1× Parse's unindexed (16 conns)", v, 1.0,
             f"{v:.2f}×" if v else "")
        v = ratio(a, "parse", "count all")
        goal(f"whole-class count, {a} ≥ 10× Parse's exact count (16 conns)", v, 10.0,
             f"{v:.2f}×" if v else "")
        v = ratio(a, "parse", "count range")
        goal(f"indexed range count, {a} ≥ 2× Parse's (16 conns)", v, 2.0,
             f"{v:.2f}×" if v else "")
    newest = r("basalt-3", "newest 20", 1)
    if newest:
        v = 10.0 / newest["p50_ms"] if newest["p50_ms"] else None
        goal(f"`order=-createdAt&limit=20`, 3 nodes, p50 < 10 ms at {OBJECTS:,} objects "
             "(goal set at 1,000,000)", v, 1.0, f"{newest['p50_ms']:.2f} ms")
    group = r("basalt-3", "groupby sum", 1)
    if group:
        v = 1000.0 / group["p50_ms"] if group["p50_ms"] else None
        goal(f"groupby with sum, 3 nodes, < 1 s at {OBJECTS:,} objects (goal set at 1,000,000)",
             v, 1.0, f"{group['p50_ms']:.0f} ms")
    # Issue 47: what TLS costs 3-node creates and gets, against plaintext peer links.
    for a in ("basalt-3", "basalt-3-https"):
        for case in ("create", "get"):
            v = ratio(a, "basalt-3-plaintext", case)
            goal(f"{a} {case}s within 10 % of plaintext peer links (16 conns)",
                 None if v is None else v / 0.9, 1.0, f"{v:.2f}×" if v else "")
    # Issue 19: writes and linearizable reads at etcd's speed on 3 nodes, bulk loads.
    for c in (16, 64):
        v = ratio("basalt-3", "etcd", "create", c)
        goal(f"3-node creates ≥ 1.0× etcd-3 puts ({c} conns)", v, 1.0, f"{v:.2f}×" if v else "")
    created = r("basalt-3", "create", 16)
    if created:
        v = 30.0 / created["p99_ms"] if created["p99_ms"] else None
        goal("3-node create p99 < 30 ms (16 conns)", v, 1.0, f"{created['p99_ms']:.1f} ms")
    v = ratio("basalt-3", "etcd", "get")
    goal("3-node get by id ≥ 1.5× etcd-3 linearizable reads (16 conns)", v, 1.5,
         f"{v:.2f}×" if v else "")
    v = ratio("basalt-3", "parse", "bulk load", LOAD_THREADS)
    goal("3-node bulk load through /1/batch ≥ 2× Parse Server's", v, 2.0,
         f"{v:.2f}×" if v else "")
    load = all_results.get("basalt-3", {}).get("load_ops")
    if load:
        minutes = OBJECTS / load / 60
        shown = (f"{minutes:.1f} min for {OBJECTS:,}" if OBJECTS >= 1_000_000 else
                 f"{1_000_000 / load / 60:.1f} min at this rate ({OBJECTS:,} loaded)")
        goal("3-node load of 1,000,000 objects < 3 min", 3.0 / (1_000_000 / load / 60), 1.0,
             shown)
    for a in ("basalt-1", "basalt-3"):
        res = all_results.get(a, {}).get("cases", {})
        at64 = [v for (case, c), v in res.items() if c == 64 and v is not None]
        if at64:
            t = sum(v["timeouts"] for v in at64)
            rows.append(f"| no timeouts at 64 connections, {a} | {t} timed out or unanswered | "
                        f"{'met' if t == 0 else 'not met'} |")
    return ["| goal | figure | |", "|---|---|---|"] + rows


def svg_chart(all_results, case_order, c=RATIO_CONNECTIONS):
    """Horizontal bars, log scale: ops/s of each system per case at c connections."""
    import math
    colours = {"basalt-1": "#1f77b4", "basalt-3": "#6baed6", "parse": "#d62728", "etcd": "#2ca02c"}
    names = [n for n in all_results if all_results[n].get("cases")]
    rows = []
    for case in ["bulk load"] + case_order:
        for n in names:
            v = ops(all_results, n, case, LOAD_THREADS if case == "bulk load" else c)
            if v is not None:
                rows.append((case, n, v))
    if not rows:
        return None
    top = max(v for _, _, v in rows)
    decades = max(1, math.ceil(math.log10(max(top, 10))))
    left, width, bar, gap = 170, 560, 13, 8
    cases_seen, y, body = [], 40, []
    for case, n, v in rows:
        if case not in cases_seen:
            cases_seen.append(case)
            y += gap
            body.append(f'<text x="{left - 8}" y="{y + bar}" text-anchor="end" '
                        f'font-weight="bold">{case}</text>')
        w = width * max(math.log10(max(v, 1)), 0.02) / decades
        body.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar - 2}" '
                    f'fill="{colours.get(n, "#888")}"><title>{n} {case}: {v:,.1f} ops/s</title>'
                    f'</rect><text x="{left + w + 4:.1f}" y="{y + bar - 3}" font-size="10">'
                    f'{n} {fmt_ops(v)}</text>')
        y += bar
    grid = []
    for d in range(decades + 1):
        x = left + width * d / decades
        grid.append(f'<line x1="{x:.1f}" y1="40" x2="{x:.1f}" y2="{y + 5}" stroke="#ddd"/>'
                    f'<text x="{x:.1f}" y="{y + 18}" text-anchor="middle" font-size="10">'
                    f'{10 ** d:,}</text>')
    h = y + 30
    title = (f"ops/s at {c} connections (bulk load: objects/s, {LOAD_THREADS} clients), "
             f"log scale, {OBJECTS:,} objects")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 140}" height="{h}" '
            f'font-family="sans-serif" font-size="11">'
            f'<rect width="100%" height="100%" fill="white"/>'
            f'<text x="10" y="20" font-size="13">{title}</text>' + "".join(grid) + "".join(body)
            + "</svg>")


def main():
    install()
    exp = Expected(OBJECTS)
    work = tempfile.mkdtemp(prefix="basalt-bench-peers-")
    log(f"work directory {work}")
    all_results = {}
    ports = {"basalt-1": 28380, "basalt-3": 28390, "parse": 28410, "etcd": 28420,
             "basalt-3-plaintext": 28430, "basalt-3-https": 28440}
    makers = {
        "basalt-1": lambda: Basalt(work, ports["basalt-1"], 1),
        "basalt-3": lambda: Basalt(work, ports["basalt-3"], 3),
        "basalt-3-plaintext": lambda: Basalt(work, ports["basalt-3-plaintext"], 3, "plaintext"),
        "basalt-3-https": lambda: Basalt(work, ports["basalt-3-https"], 3, "https"),
        "parse": lambda: Parse(work, ports["parse"]),
        "etcd": lambda: Etcd(work, ports["etcd"]),
    }
    case_order = []

    def on_signal(signum, _frame):
        stop_all()
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    salt = 0
    try:
        for name in SYSTEMS:
            if name not in makers:
                raise SystemExit(f"unknown system {name} (known: {', '.join(makers)})")
            system = makers[name]()
            for case, _, _ in system.cases():
                if case not in case_order:
                    case_order.append(case)
            res = all_results[name] = {"cases": {}}
            try:
                salt = measure(system, exp, res, salt)
            except Exception as e:  # noqa: BLE001 - recorded in the results, the run goes on
                res["error"] = str(e)[:500]
                log(f"{name}: {res['error']}")
            finally:
                for proc in reversed(system.procs):
                    GROUPS.remove(next(g for g in GROUPS if g[1] is proc))
                    stop(proc)
                log(f"{name}: stopped")
    finally:
        stop_all()
        if os.environ.get("KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)

    date = datetime.date.today().isoformat()
    os.makedirs(OUT_DIR, exist_ok=True)
    stem = os.path.join(OUT_DIR, f"{date}-peers")
    k = 2
    while os.path.exists(stem + ".md"):
        stem = os.path.join(OUT_DIR, f"{date}-peers-{k}")
        k += 1
    chart = svg_chart(all_results, case_order)
    v = versions()
    doc = [f"# Side by side: Basalt, Parse Server on PostgreSQL, etcd ({date})", "",
           "Made by `make bench-peers` (scripts/bench-peers.py); every figure below comes from "
           "this one run on one machine.", "",
           f"- Machine: {machine()}.",
           "- Versions: " + ", ".join(f"{k} {x}" for k, x in v.items()) + ".",
           f"- {OBJECTS:,} `{CLASS}` objects of about 200 bytes, loaded through each system's "
           f"batch API ({BATCH} per batch, {LOAD_THREADS} clients). One wrk per HTTP endpoint "
           "(3-node Basalt and etcd: connections spread over the members; p50/p99 are the "
           "worst of the instances), "
           f"{WARMUP} s warm-up then {SECONDS} s per case, one case at a time after the "
           "machine is quiet. Errors: non-2xx answers, timeouts (10 s) and socket errors. "
           "CPU: cores the machine used during the case beside wrk (the system's), and wrk's.",
           "- Requests: the REST (client) key, except Parse's aggregate, which needs its master "
           "key. Basalt: `groupby=level&sum=score`; Parse: `$group` by `$level` with `$sum`. "
           "`query`: `where={\"score\":{\"$gt\":N}}&order=-score&limit=20` (random N); `count "
           "range`: `count=1&limit=0` of a random 10 % score range. etcd: linearizable range "
           "(get, count_only) and put through its JSON gateway.",
           "- Answers were checked against values computed by the bench (the top 20, counts, "
           "sums per level) before each system was timed.", ""]
    doc += ["## Ratios (Basalt / peer, ops/s)", ""] + ratio_table(all_results, case_order)
    doc += ["", "## Goals (issues 14 and 19)", ""] + goals(all_results)
    if chart:
        doc += ["", f"![chart]({os.path.basename(stem)}.svg)"]
    doc += ["", "## Figures", ""] + tables(all_results, case_order)
    text = "\n".join(doc) + "\n"
    with open(stem + ".md", "w") as f:
        f.write(text)
    if chart:
        with open(stem + ".svg", "w") as f:
            f.write(chart)
    print(text)
    log(f"written {stem}.md" + (f" and {stem}.svg" if chart else ""))
    if any("error" in r for r in all_results.values()):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
