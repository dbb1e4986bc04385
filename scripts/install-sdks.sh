#!/usr/bin/env bash
# Installs the real client SDKs that `make test` drives (node/tests/api/sdks.rs) when they are
# missing: python-bmob 1.8.0 from PyPI (with websockets, which it imports) into
# $BASALT_SDKS_DIR/python, and hydrogen-js-sdk 2.7.3 from npm (with Node.js) into
# $BASALT_SDKS_DIR/js/package (default base ~/.cache/basalt/sdks). No-op when present.
set -euo pipefail
. "$(dirname "$0")/pip-into.sh"
base="${BASALT_SDKS_DIR:-$HOME/.cache/basalt/sdks}"
. "$(dirname "$0")/apt-install.sh"

js="$base/js"
if [ ! -f "$js/package/index.js" ]; then
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt_install install-sdks --with-recommends nodejs npm
  fi
  echo "install-sdks: installing hydrogen-js-sdk 2.7.3 into $js"
  rm -rf "$js.part"
  mkdir -p "$js.part"
  (cd "$js.part" && npm pack --silent hydrogen-js-sdk@2.7.3 >/dev/null && tar xzf hydrogen-js-sdk-2.7.3.tgz)
  rm -rf "$js"
  mv "$js.part" "$js"
fi

dir="$base/python"
if PYTHONPATH="$dir" python3 -c "import bmobpy.bmob" >/dev/null 2>&1; then
  exit 0
fi
pip_into install-sdks "$dir" python-bmob==1.8.0
