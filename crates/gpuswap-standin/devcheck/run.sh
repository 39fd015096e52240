#!/bin/bash
# Temporary device check (not part of the crate): ABI vs NVIDIA's cuda.h, the kernels,
# and the C test programs against the real driver.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
echo "gcc: $(command -v gcc)  nvcc: $(command -v nvcc)"; nvcc --version 2>&1 | tail -2
for d in /usr/local/cuda/include "$(dirname "$(readlink -f "$(command -v nvcc)")")/../include" /usr/include; do
  [ -f "$d/cuda.h" ] && CUDA_INC=$d && break; done
[ -z "$CUDA_INC" ] && CUDA_INC=$(dirname "$(find / -name cuda.h -path '*include*' 2>/dev/null | head -1)")
echo "cuda.h: $CUDA_INC"; grep -m1 "define CUDA_VERSION" "$CUDA_INC/cuda.h"
gcc -std=gnu11 -DREAL -I"$CUDA_INC" devcheck/abi_dump.c -o /tmp/real && /tmp/real > "$OUT/abi_real.txt"
gcc -std=gnu11 -Ic devcheck/abi_dump.c -o /tmp/mine && /tmp/mine > "$OUT/abi_mine.txt"
diff "$OUT/abi_real.txt" "$OUT/abi_mine.txt"; echo "abi-diff-rc=$?"
sh devcheck/protos_check.sh c/cuda_subset.h "$CUDA_INC"; echo "protos-rc=$?"
LIB=$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}'); LIBDIR=$(dirname "$LIB"); echo "libcuda: $LIB -> $(readlink -f "$LIB")"
gcc -shared -fPIC -O2 -Wall -Wextra -Werror -std=gnu11 -fvisibility=hidden -ffp-contract=off -Ic -Wl,-soname,libcuda.so.1 -o /tmp/standin.so c/standin.c -lpthread -ldl -lrt
for s in $(nm -D --defined-only /tmp/standin.so | awk '{print $3}'); do nm -D --defined-only "$LIB" | awk '{print $3}' | grep -qx "$s" || echo "MISSING in real libcuda: $s"; done; echo symbols-checked
nvcc -ptx c/e2e_kernels.cu -o "$OUT/e2e_kernels.ptx"; echo "nvcc-rc=$?"
F="-std=gnu11 -O2 -Wall -Wextra -Werror -ffp-contract=off -Ic"
gcc $F -o /tmp/client c/e2e_client.c -L"$LIBDIR" -l:libcuda.so.1 && gcc $F -o /tmp/probe c/vmm_probe.c -L"$LIBDIR" -l:libcuda.so.1; echo "build-rc=$?"
ldd /tmp/client | grep -i cuda
timeout 120 /tmp/client --ptx "$OUT/e2e_kernels.ptx" --buffers 4 --size 64MiB --rounds 3; echo "client-rc=$?"
timeout 60 /tmp/client --ptx "$OUT/e2e_kernels.ptx" --own-context --buffers 3 --size 1000004 --rounds 2 --seed 77; echo "client-own-rc=$?"
timeout 60 /tmp/client --buffers 1 --size 1MiB --rounds 1; echo "client-builtin-image-rc=$? (the real driver should refuse the stand-in's image)"
timeout 60 /tmp/probe; echo "probe-rc=$?"
