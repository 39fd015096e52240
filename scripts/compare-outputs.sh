#!/usr/bin/env bash
# Compares the outputs of the working tree's build with those of BASE (a commit; by
# default HEAD, so that a refactor in progress is checked against the last commit). A
# refactor must leave them identical; new report fields and CSV columns are allowed
# (additions), changed or missing ones are not. Exit status 1 when they differ.
#   scripts/compare-outputs.sh [BASE]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=$(git -C "$root" rev-parse --short "${1:-HEAD}")
work=${COMPARE_DIR:-/tmp/gpuswap-compare}
mkdir -p "$work"
if [ ! -x "$work/base-$base/target/release/gpuswap" ]; then
    rm -rf "$work/base-$base"
    git -C "$root" worktree add --detach "$work/base-$base" "$base" > /dev/null
    (cd "$work/base-$base" && cargo build --release --locked -q -p gpuswap-cli)
fi
(cd "$root" && cargo build --release --locked -q -p gpuswap-cli)
rm -rf "$work/old" "$work/new"
"$root/scripts/reference-outputs.sh" "$work/base-$base/target/release/gpuswap" "$work/old"
"$root/scripts/reference-outputs.sh" "$root/target/release/gpuswap" "$work/new"
python3 "$root/scripts/compare_outputs.py" "$work/old" "$work/new"
