#!/usr/bin/env bash
# Installs the servers `make test` runs beside Basalt when they are missing: moto 5.2.5's S3
# server (`moto[s3]` with flask, from PyPI), the S3-compatible service the S3 files backend is
# tested against (node/tests/api/files_s3.rs), into $BASALT_TEST_SERVERS_DIR/moto (default base
# ~/.cache/basalt/test-servers); and Debian's prometheus package, whose promtool checks and
# unit-tests the alert rules (scripts/check-alerts.sh). No-op when present.
set -euo pipefail
. "$(dirname "$0")/pip-into.sh"
. "$(dirname "$0")/apt-install.sh"
base="${BASALT_TEST_SERVERS_DIR:-$HOME/.cache/basalt/test-servers}"

if ! command -v promtool >/dev/null 2>&1; then
  apt_install install-test-servers prometheus
fi

dir="$base/moto"
# Installed when its own copy imports (a moto elsewhere on the system does not count).
if [ -f "$dir/moto/server.py" ] && PYTHONPATH="$dir" python3 -c \
  "import sys, moto, boto3; sys.exit(not moto.__file__.startswith('$dir/'))" >/dev/null 2>&1; then
  exit 0
fi
pip_into install-test-servers "$dir" 'moto[s3]==5.2.5' 'flask>=3,<4' 'flask-cors>=5,<7'
