#!/usr/bin/env bash
# Checks the alert rules (docs/ops/alerts.yml) with Prometheus's promtool and runs their unit
# tests (docs/ops/alerts.test.yml): every alert fires on the series that should raise it and
# stays quiet on a healthy one. Also parses every query of the Grafana dashboard
# (docs/ops/grafana-dashboard.json), each turned into a recording rule for promtool. Run by
# `make test` (promtool comes with Debian's prometheus package, which
# scripts/install-test-servers.sh installs).
set -euo pipefail
cd "$(dirname "$0")/.."
promtool check rules docs/ops/alerts.yml
promtool test rules docs/ops/alerts.test.yml
panels="$(mktemp --suffix=.yml)"
trap 'rm -f "$panels"' EXIT
python3 - "$panels" <<'PY'
import json, sys
dash = json.load(open("docs/ops/grafana-dashboard.json"))
lines = ["groups:", "  - name: dashboard", "    rules:"]
for p in dash["panels"]:
    for t in p["targets"]:
        lines.append(f"      - record: panel_{p['id']}_{t['refId']}")
        lines.append(f"        expr: {json.dumps(t['expr'])}")
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
promtool check rules "$panels"
