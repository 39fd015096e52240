#!/usr/bin/env bash
# Writes the reference outputs of one gpuswap binary into OUT: `run --json` for every
# scenario in scenarios/, the benchmark sweep with one seed, and two reproduction sweeps.
# The scenario files always come from this checkout, so two binaries (an old commit and
# the working tree) run exactly the same inputs. compare-outputs.sh calls this twice.
#   scripts/reference-outputs.sh target/release/gpuswap /tmp/ref-new
set -euo pipefail
bin=$(realpath "$1")
out=$2
cd "$(dirname "$0")/.."
mkdir -p "$out/run"
for f in scenarios/*.toml; do
    "$bin" run --json "$f" > "$out/run/$(basename "$f" .toml).json" 2> /dev/null || true
done
"$bin" sweep scenarios/repro/bench.toml --runs 1 --out "$out/bench" > /dev/null
for s in backprop-memory eviction-latency-contention; do
    "$bin" sweep "scenarios/repro/$s.toml" --out "$out/$s" > /dev/null
done
