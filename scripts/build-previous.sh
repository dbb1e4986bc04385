#!/usr/bin/env bash
# Builds the previous release's `basalt` — the commit before issue 51's format changes — for
# the jepsen rolling-upgrade nemesis (`make jepsen-upgrade`), and prints its path.
#
# The sources are a git worktree under $PREVIOUS_DIR (default ~/.cache/basalt/previous) and
# the build has a target dir of its own there: the main target dir is never shared with
# another checkout. A cold build takes about as long as the main one (close to an hour on 2
# cores); later calls print the path at once.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
# The commit before the first of issue 51 (drain, rebalancer, feature gates).
PREVIOUS_RELEASE="${PREVIOUS_RELEASE:-e1f2721^}"
PREVIOUS_DIR="${PREVIOUS_DIR:-$HOME/.cache/basalt/previous}"

commit="$(git -C "$here" rev-parse --verify "${PREVIOUS_RELEASE}^{commit}")"
src="$PREVIOUS_DIR/src-${commit:0:12}"
target="$PREVIOUS_DIR/target"
bin="$target/release/basalt"
stamp="$PREVIOUS_DIR/built-${commit:0:12}"

if [[ -x "$bin" && -f "$stamp" ]]; then
    echo "$bin"
    exit 0
fi
mkdir -p "$PREVIOUS_DIR"
if [[ ! -d "$src" ]]; then
    git -C "$here" worktree add --detach "$src" "$commit" >&2
fi
echo "building the previous release ($commit) into $target" >&2
(cd "$src" && CARGO_TARGET_DIR="$target" cargo build --release -p basalt >&2)
rm -f "$PREVIOUS_DIR"/built-*
touch "$stamp"
echo "$bin"
