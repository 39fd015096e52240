#!/usr/bin/env bash
# DymGPU's five mixed-utilization sets of 15 VMs (lightsmark / firefox-asteroids /
# urbanterror: 11/2/2, 2/2/11, 3/6/6, 6/3/6, 6/6/3), each under every placement, from
# scenarios/vgpu/fifteen-vms.toml with its counts replaced.
#   scripts/vgpu-mixed-sets.sh            # builds the release binary first
#   GPUSWAP_BIN=path/to/gpuswap scripts/vgpu-mixed-sets.sh   # uses that one, no build
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${GPUSWAP_BIN:-}
if [ -z "$bin" ]; then
    (cd "$root" && cargo build --release --locked -q -p gpuswap-cli)
    bin="$root/target/release/gpuswap"
fi
work=$(mktemp -d)
for set in 11/2/2 2/2/11 3/6/6 6/3/6 6/6/3; do
    IFS=/ read -r low medium high <<< "$set"
    file="$work/set-${low}-${medium}-${high}.toml"
    awk -v counts="$low $medium $high" 'BEGIN { split(counts, c, " ") }
        /^count = / { n++; print "count = " c[n]; next } { print }' \
        "$root/scenarios/vgpu/fifteen-vms.toml" > "$file"
    echo "== $set"
    "$bin" compare "$file"
done
rm -rf "$work"
