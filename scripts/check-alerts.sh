#!/usr/bin/env bash
# Checks the alert rules (docs/ops/alerts.yml) with Prometheus's promtool and runs their unit
# tests (docs/ops/alerts.test.yml): every alert fires on the series that should raise it and
# stays quiet on a healthy one. Run by `make test` (promtool comes with Debian's prometheus
# package, which scripts/install-test-servers.sh installs).
set -euo pipefail
cd "$(dirname "$0")/.."
promtool check rules docs/ops/alerts.yml
promtool test rules docs/ops/alerts.test.yml
