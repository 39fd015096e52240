#!/usr/bin/env bash
# The long churn of issue 39 on the CPU stand-in: rounds of three processes allocating
# past the daemon's VRAM while one is killed or stopped at random and now and then the
# daemon is stopped; every process that ends on its own must have verified every byte
# and the daemon must hold nothing afterwards. CI runs 3 rounds (the same test); this
# runs many and prints the counts.
#   scripts/churn.sh [ROUNDS]     (default 100; about 1.2 s a round)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-100}
CHURN_ROUNDS=$rounds cargo test --release -p gpuswap-cli --test real_gpu \
    churn_loses_no_byte_and_leaves_nothing_booked -- --nocapture
