# Basalt: `make run` starts a one-node cluster with its data in ./data; `make test` runs the
# whole suite. Everything builds with one cargo profile (release), so RocksDB's C++ build is
# done once and shared by run, test, bench and jepsen.

CARGO ?= cargo
PROFILE_FLAGS := --release
BASALT = $(or $(CARGO_TARGET_DIR),target)/release/basalt
NODES ?= 1

JEPSEN_SECONDS ?= 120
JEPSEN_NODES ?= 3

.PHONY: run dev test lint deps sdks test-servers build bench bench-backup bench-rolling bench-rebalance bench-splits bench-files bench-functions bench-push bench-realtime bench-queries bench-peers bench-store bench-encoding jepsen jepsen-upgrade fuzz clean-data

## Install the system packages the build needs (libclang for rust-rocksdb's bindgen).
deps:
	@./scripts/install-deps.sh

## The real client SDKs the suite drives (python-bmob from PyPI, hydrogen-js-sdk from npm),
## into ~/.cache/basalt/sdks.
sdks:
	@./scripts/install-sdks.sh

## The servers the suite runs beside Basalt (moto's S3 server from PyPI, for the S3 files
## backend, into ~/.cache/basalt/test-servers; Debian's prometheus for promtool).
test-servers:
	@./scripts/install-test-servers.sh

build: deps
	$(CARGO) build $(PROFILE_FLAGS) --workspace --all-targets

## Build the binaries (`basalt`, `basalt-cli`) and start a one-node cluster: HTTP on
## 127.0.0.1:8080, data in ./data. Only what the binaries need is built, no test targets
## (docs/decisions/0035): RocksDB's C++ build is shared with `make test`, which builds the
## node's crates again with the tests' fail points.
run: deps
	$(CARGO) build $(PROFILE_FLAGS) -p basalt -p basalt-client --bins
	$(BASALT) dev --nodes $(NODES) --data-dir ./data --http-port 8080

## The same with three nodes (HTTP on 8080-8082).
dev: NODES = 3
dev: run

## The whole suite: lints, unit tests, HTTP scenarios, multi-process cluster tests and the
## jepsen smoke run (about 40 s of load per workload under kill and partition nemeses, and
## list-append under a rolling upgrade).
test: deps sdks test-servers lint
	./scripts/check-alerts.sh
	$(CARGO) test $(PROFILE_FLAGS) --workspace --all-targets

lint:
	$(CARGO) fmt --all -- --check
	python3 scripts/module-cycles.py
	python3 scripts/test-shapes.py
	$(CARGO) clippy $(PROFILE_FLAGS) --workspace --all-targets -- -D warnings

## Load benchmark against fresh 1-node and 3-node local clusters (see docs/performance.md).
bench: deps
	$(CARGO) build $(PROFILE_FLAGS) -p basalt -p basalt-bench
	./scripts/bench.sh

## Backup and restore: 1,000,000 objects on 3 nodes, creates alone and during a backup, the
## backup's MB/s and fence, a restore into 3 new nodes (OBJECTS, SECONDS_PER, CONCURRENCY
## override; see docs/performance.md).
bench-backup: deps
	$(CARGO) build $(PROFILE_FLAGS) -p basalt -p basalt-bench
	./scripts/bench-backup.sh

## Rolling restart: 3 and 5 nodes behind haproxy (Debian's, installed when missing) checking
## /health?ready=1, the bench at half of its peak; every node restarted in turn (SIGTERM: it
## drains), ROUNDS (3) times; failed requests and p99 against steady state (NODES, ROUNDS,
## CONCURRENCY, STEADY_SECONDS, WORKLOAD override; see docs/performance.md).
bench-rolling: deps
	$(CARGO) build $(PROFILE_FLAGS) -p basalt -p basalt-bench
	python3 scripts/bench-rolling.py

## Adding 2 nodes to 3 holding OBJECTS (1,000,000) objects and removing them again, under the
## bench at half its peak behind haproxy: time to balanced, p99 against steady state
## (scripts/bench-rebalance.py; SHARDS, LIMITS, STEADY_SECONDS, DISK_LOW, KEEP override).
bench-rebalance: deps
	$(CARGO) build $(PROFILE_FLAGS) -p basalt -p basalt-bench
	python3 scripts/bench-rebalance.py

## One class of OBJECTS (4,000,000) objects on 3 nodes grows from SHARDS (16) to WANT_GROUPS (64)
## groups by automatic splits under the bench at half its peak behind haproxy: time, p99 against
## steady state (scripts/bench-splits.py; FRACTION, STEADY_SECONDS, KEEP override).
bench-splits: deps
	$(CARGO) build $(PROFILE_FLAGS) -p basalt -p basalt-bench
	python3 scripts/bench-splits.py

## File uploads and downloads (1 KiB, 1 MiB, 20 MiB) on 1 and 3 nodes, with copies on disk and
## in an S3 bucket (moto's server), beside the raw disk's speed; writes
## bench/results/<date>-files.md (SECONDS_PER, CONCURRENCY override).
bench-files: deps test-servers
	$(CARGO) build $(PROFILE_FLAGS) -p basalt -p basalt-bench
	./scripts/bench-files.sh

## Cloud functions: calls per second and latency of a trivial function, one that queries and
## one that writes, on 1 and 3 nodes; writes bench/results/<date>-functions.md
## (SECONDS_PER, CONCURRENCY override).
bench-functions: deps
	$(CARGO) build $(PROFILE_FLAGS) -p basalt -p basalt-bench
	./scripts/bench-functions.sh

## Realtime: events per second to 1,000 WebSocket subscribers on 3 nodes while creates run,
## and the latency from a create's acknowledgement to its event; writes
## bench/results/<date>-realtime.md (SUBSCRIBERS, RATES, SECONDS_PER, NODES override).
bench-realtime: deps
	$(CARGO) build $(PROFILE_FLAGS) -p basalt -p basalt-bench
	./scripts/bench-realtime.sh

## Push benchmark: one push to 1,000,000 installations on 3 nodes, delivered to a webhook;
## writes bench/results/<date>-push.md (INSTALLATIONS, NODES, CONCURRENCY override).
bench-push: deps
	$(CARGO) build $(PROFILE_FLAGS) -p basalt -p basalt-bench
	./scripts/bench-push.sh

## Query benchmark: 1,000,000 objects on 3 nodes, queries with and without indexes
## (OBJECTS, SECONDS_PER, CONCURRENCY override; see docs/performance.md).
bench-queries: deps
	$(CARGO) build $(PROFILE_FLAGS) -p basalt -p basalt-bench
	./scripts/bench-queries.sh

## Side by side with the peers (Parse Server on PostgreSQL, a 3-member etcd) and 1- and
## 3-node Basalt, one load generator (wrk) for all: installs the peers if missing, runs
## at most MAX_MINUTES (45), writes bench/results/<date>-peers.md and .svg. OBJECTS,
## SECONDS_PER, CONNECTIONS, SYSTEMS override (scripts/bench-peers.py).
bench-peers: build
	python3 scripts/bench-peers.py

## RocksDB settings, each turned off alone against all on, on a store read past the page
## cache (cluster/src/storage/settings_bench.rs; BASALT_BENCH_STORE_OBJECTS and
## BASALT_BENCH_STORE_CACHE_MB override 300,000 objects and 16 MiB).
bench-store: deps
	$(CARGO) test $(PROFILE_FLAGS) -p basalt-cluster --lib store_settings -- --ignored --nocapture

## Log entry encodings: bytes and encode/decode time of JSON (v1) and MessagePack (v2)
## entries, and a clone from the log cache (cluster/src/encoding.rs).
bench-encoding: deps
	$(CARGO) test $(PROFILE_FLAGS) -p basalt-cluster --lib encoding_speed -- --ignored --nocapture

## Jepsen: every workload under every nemesis (JEPSEN_SECONDS of load each), then a table.
## Run directories (history, node logs, summary, plot) go to ./jepsen-runs.
jepsen: deps
	$(CARGO) build $(PROFILE_FLAGS) -p basalt -p basalt-jepsen
	$(or $(CARGO_TARGET_DIR),target)/release/basalt-jepsen --out jepsen-runs --nodes $(JEPSEN_NODES) --seconds $(JEPSEN_SECONDS) matrix

## Jepsen's rolling-upgrade nemesis: each workload on a cluster started with the previous
## release's binary (scripts/build-previous.sh builds it once, in a worktree and target dir of
## its own: about an hour cold), rolled node by node to this build under load.
jepsen-upgrade: deps
	$(CARGO) build $(PROFILE_FLAGS) -p basalt -p basalt-jepsen
	previous=$$(scripts/build-previous.sh) && $(or $(CARGO_TARGET_DIR),target)/release/basalt-jepsen --out jepsen-runs --nodes $(JEPSEN_NODES) --seconds $(JEPSEN_SECONDS) --previous-binary "$$previous" upgrade

## Longer run of the request-decoding fuzzer (property tests in node/tests/fuzz.rs; make test
## runs 256 cases per property).
FUZZ_CASES ?= 100000
fuzz: deps
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test $(PROFILE_FLAGS) -p basalt --test fuzz

clean-data:
	rm -rf ./data
