#!/usr/bin/env bash
# Runs the whole reproduction suite (every scenario in scenarios/repro/ but the bench
# sweep) with the release build, one output folder per scenario under OUT, PNG plots
# included, and the fairness timeline.
#   scripts/run-repro.sh [OUT=results/repro]
# Then: scripts/repro_tables.py OLD_OUT OUT prints the tables of docs/reproduction.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-results/repro}
mkdir -p "$out"
(cd "$root" && cargo build --release --locked -q -p gpuswap-cli)
bin="$root/target/release/gpuswap"
for scenario in "$root"/scenarios/repro/*.toml; do
    name=$(basename "$scenario" .toml)
    [ "$name" = bench ] && continue
    start=$(date +%s)
    "$bin" sweep "$scenario" --out "$out/$name" --png --quiet --force
    echo "$name: $(( $(date +%s) - start )) s"
done
"$bin" run "$root/scenarios/repro/fairness.toml" --timeline "$out/fairness.png" > "$out/fairness.txt"
