#!/usr/bin/env bash
# Builds what scripts/gpu-check.sh runs on a GPU machine (which needs no Rust) and puts
# it in gpu-bundle/: the gpuswap binary (the daemon), the interposer, the end-to-end
# client, the VMM client and the kernels' source, and the calibration kit if ../shared
# has it.
#   scripts/gpu-bundle.sh && scp -r gpu-bundle scripts gpu-host:gpuswap/
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release
rm -rf gpu-bundle && mkdir gpu-bundle
cp target/release/gpuswap target/release/libgpuswap_cuda.so \
   target/release/standin/gpuswap-e2e-client target/release/standin/gpuswap-vmm-client \
   crates/gpuswap-standin/c/e2e_kernels.cu gpu-bundle/
if [ -f ../shared/calibration-kit/calib.cu ]; then
    cp ../shared/calibration-kit/calib.cu gpu-bundle/
fi
# Line tables are not needed there; the bundle travels.
strip gpu-bundle/gpuswap gpu-bundle/libgpuswap_cuda.so 2> /dev/null || true
du -sh gpu-bundle
