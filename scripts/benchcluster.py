"""What the cluster benchmarks share (`bench-rolling.py`, `bench-rebalance.py`): `basalt serve`
processes on loopback (`Node`), haproxy in front of them health-checking `/health?ready=1`
(`Haproxy`), `basalt-bench` runs (`bench`), reading their tables (`row`, `failures`) and stopping it all
(`stop_all`).

Bounded: every wait has a limit (`wait`).
"""

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release")
# BASALT_BIN runs another build of the server (an A/B of two builds with one bench).
BASALT = os.environ.get("BASALT_BIN", os.path.join(TARGET, "basalt"))
BENCH = os.path.join(TARGET, "basalt-bench")
CONC = int(os.environ.get("CONCURRENCY", "32"))
WORKLOAD = os.environ.get("WORKLOAD", "mixed")
DRAIN_WAIT = os.environ.get("DRAIN_WAIT", "5")
# RATE fixes the paced rate (ops/s) of every window after the peak, so that two builds
# (BASALT_BIN) compare under one load; unset, half the peak. Read at once: a bad value stops
# the run before anything starts.
FIXED_RATE = int(float(os.environ.get("RATE") or 0))
if FIXED_RATE < 0:
    raise SystemExit("RATE must be a positive number of ops/s")
# A development machine's disk is often fuller than a node's would be: below its low mark
# (10 % free by default) a node compacts what deletes free within seconds and is spared new
# replicas, which a benchmark should not measure by accident. DISK_LOW=10 measures that too.
DISK_LOW = os.environ.get("DISK_LOW", "3")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def wait(what, check, limit):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise SystemExit(f"gave up after {limit} s waiting for {what}")


class Node:
    def __init__(self, root, i, first_rpc):
        self.i = i
        self.http = free_port()
        self.rpc = free_port()
        self.dir = os.path.join(root, f"node{i}")
        self.log = os.path.join(root, f"node{i}.log")
        self.args = [
            BASALT, "serve", "--node-id", str(i), "--data-dir", self.dir,
            "--http-addr", f"127.0.0.1:{self.http}", "--rpc-addr", f"127.0.0.1:{self.rpc}",
            "--drain-wait", DRAIN_WAIT, "--disk-low", DISK_LOW,
        ]
        self.args += ["--init"] if first_rpc is None else ["--join", f"127.0.0.1:{first_rpc}"]
        self.proc = None

    def start(self):
        log = open(self.log, "a")
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                     env=dict(os.environ, RUST_LOG=os.environ.get("NODE_LOG", "info,openraft=error")))

    def ready(self):
        return status(f"http://127.0.0.1:{self.http}/health?ready=1") == 200

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)


class Haproxy:
    def __init__(self, root, nodes):
        self.port = free_port()
        self.sock = os.path.join(root, "haproxy.sock")
        cfg = os.path.join(root, "haproxy.cfg")
        servers = "\n".join(f"  server n{n.i} 127.0.0.1:{n.http} check" for n in nodes)
        with open(cfg, "w") as f:
            f.write(f"""global
  maxconn 4096
  stats socket {self.sock} mode 600 level admin
defaults
  mode http
  timeout connect 2s
  timeout client 120s
  timeout server 120s
  # A connection refused or reset before the request went out is tried on another node;
  # a request a node received is never sent twice.
  retries 3
  option redispatch 1
  retry-on conn-failure
  option httpchk GET /health?ready=1
  default-server inter 500ms fall 1 rise 2
frontend api
  bind 127.0.0.1:{self.port}
  default_backend nodes
backend nodes
  balance roundrobin
  http-reuse safe
{servers}
""")
        self.proc = subprocess.Popen(["haproxy", "-f", cfg, "-db"],
                                     stdout=open(os.path.join(root, "haproxy.log"), "w"),
                                     stderr=subprocess.STDOUT)

    def up(self, node):
        """Whether haproxy's health check has node `node` up."""
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(2)
                s.connect(self.sock)
                s.sendall(b"show servers state nodes\n")
                out = b""
                while chunk := s.recv(65536):
                    out += chunk
        except OSError:
            return False
        for line in out.decode().splitlines():
            cells = line.split()
            # be_id be_name srv_id srv_name srv_addr srv_op_state ...; 2 = running
            if len(cells) > 5 and cells[3] == f"n{node.i}":
                return cells[5] == "2"
        return False


def paced_rate(peak):
    """The paced rate after a flat-out run of `peak` ops/s: RATE, else half the peak."""
    return FIXED_RATE or max(1, int(peak / 2))


def bench(url, creds, label, out, extra):
    cmd = [BENCH, "--url", url, "--credentials", creds, "--concurrency", str(CONC),
           "--workload", WORKLOAD, "--label", label] + extra
    return subprocess.Popen(cmd, stdout=open(out, "w"), stderr=open(out + ".err", "w"))


def row(path):
    lines = [l for l in open(path).read().splitlines() if l.startswith("|")]
    cells = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]
    return dict(zip(cells(lines[0]), cells(lines[-1])))


def failures(path):
    return [l.strip() for l in open(path + ".err") if " failed: " in l]


def stop_all(load, proxy, nodes):
    """Stops the bench run `load` (None: none), haproxy and every node."""
    if load is not None and load.poll() is None:
        load.kill()
        load.wait(timeout=30)
    proxy.proc.terminate()
    proxy.proc.wait(timeout=10)
    for node in nodes:
        node.stop(signal.SIGKILL)
    for node in nodes:
        if node.proc:
            node.proc.wait(timeout=30)


def prepare(target):
    """Checks that the binaries `make <target>` builds are there and installs haproxy when
    missing (Debian's package); answers the machine as a results file describes it."""
    for path in (BASALT, BENCH):
        if not os.path.exists(path):
            raise SystemExit(f"{path} is missing: make {target} builds it")
    if shutil.which("haproxy") is None:
        subprocess.run(["bash", "-c", f". {ROOT}/scripts/apt-install.sh; "
                        f"apt_install {target} haproxy"], check=True)
    host = subprocess.run(["uname", "-srm"], capture_output=True, text=True).stdout.strip()
    haproxy = subprocess.run(["haproxy", "-v"], capture_output=True, text=True).stdout
    return f"{host}, {os.cpu_count()} CPUs; {haproxy.splitlines()[0]}"
