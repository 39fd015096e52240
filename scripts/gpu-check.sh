#!/usr/bin/env bash
# The real-GPU check of gpuswapd and the interposer (issue 23), for a machine with an
# NVIDIA GPU, CUDA's compiler and PyTorch, and no Rust: run scripts/gpu-bundle.sh where
# Rust is, bring gpu-bundle/ and scripts/ along, then
#   bash scripts/gpu-check.sh [BUNDLE] [OUT]
# Steps (each bounded, about 6 minutes in all on an H100/H200):
#   1. the calibration kit (copy bandwidth, VMM map/unmap latency, host-backed VMM);
#   2. the end-to-end client alone against the real driver (checksums);
#   3. two clients under the daemon (--vram 8GiB) asking 12 GiB together: relocations
#      both ways, checksums (the second finds the driver as libcudart does);
#   4. two PyTorch processes under the daemon (--vram 16GiB), 60 % of it each, doing
#      matrix products: both finish, their data intact, slowdown against running alone.
#   5. a victim killed with SIGKILL in the middle of a relocation: the requester
#      finishes with its data intact and the daemon holds nothing afterwards.
#   6. (chunks, not in the default) step 3's pair, 2 rounds, at chunk sizes of 2, 8
#      and 32 MiB (GPUSWAP_CHECK_CHUNKS, e.g. "2MiB 64MiB", picks others): where a chunk
#      move's time goes (the interposer's per-phase times, the daemon's command-to-answer
#      and drain times) and how it scales with size.
# GPUSWAP_CHECK_STEPS (default "calib alone e2e torch kill") picks steps.
# Results: OUT/summary.jsonl (one line per step) and each step's log, all of it also
# in OUT/results.tar.gz.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bundle=$(realpath "${1:-$here/gpu-bundle}")
out=$(realpath -m "${2:-${OUT:-$here/gpu-check-out}}")
mkdir -p "$out"
cd "$out"
summary=$out/summary.jsonl
: > "$summary"
note() { echo "$1" | tee -a "$summary"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > gpu.txt 2>&1
note "{\"step\":\"device\",\"gpu\":\"$(head -1 gpu.txt)\",\"date\":\"$(date -u +%F)\"}"

steps=" ${GPUSWAP_CHECK_STEPS:-calib alone e2e torch kill} "
want() { [[ $steps == *" $1 "* ]]; }

# 1. Calibration kit.
if want calib && [ -f "$bundle/calib.cu" ]; then
    if nvcc -O2 -arch=native -o calib "$bundle/calib.cu" -lcuda > calib-build.log 2>&1; then
        timeout 120 ./calib > calib.jsonl 2> calib.err
        note "{\"step\":\"calibration\",\"rc\":$?,\"lines\":$(wc -l < calib.jsonl)}"
    else
        note "{\"step\":\"calibration\",\"rc\":\"build failed\"}"
    fi
fi

# 2. The end-to-end client alone, on the real driver.
nvcc -ptx "$bundle/e2e_kernels.cu" -o e2e_kernels.ptx > ptx.log 2>&1
client=("$bundle/gpuswap-e2e-client" --ptx e2e_kernels.ptx)
if want alone; then
    timeout 60 "${client[@]}" --buffers 4 --size 1GiB --rounds 2 --seed 1 > alone.json 2> alone.err
    note "{\"step\":\"e2e-alone\",\"rc\":$?,\"result\":$(cat alone.json 2> /dev/null || echo null)}"
fi

# 3. Two clients under the daemon, 12 GiB asked of 8 GiB managed.
export GPUSWAP_SOCKET=$out/gpuswap.sock
start_daemon() {  # VRAM NAME [more daemon options]
    local vram=$1 name=$2
    shift 2
    "$bundle/gpuswap" daemon --socket "$GPUSWAP_SOCKET" --vram "$vram" "$@" \
        > "daemon-$name.log" 2>&1 &
    daemon=$!
    for _ in $(seq 50); do [ -S "$GPUSWAP_SOCKET" ] && break; sleep 0.1; done
}
stop_daemon() { kill "$daemon" 2> /dev/null; wait "$daemon" 2> /dev/null; }
pre="$bundle/libgpuswap_cuda.so"
if want e2e; then
start_daemon 8GiB e2e
GPUSWAP_TRACE=1 GPUSWAP_TENANT_NAME=a LD_PRELOAD=$pre timeout 120 "${client[@]}" \
    --buffers 6 --size 1GiB --rounds 4 --hold-ms 500 --seed 11 > a.json 2> a.err &
a=$!
sleep 1
GPUSWAP_TRACE=1 GPUSWAP_TENANT_NAME=b LD_PRELOAD=$pre timeout 120 "${client[@]}" \
    --resolve runtime --buffers 6 --size 1GiB --rounds 4 --hold-ms 500 --seed 22 > b.json 2> b.err &
b=$!
sleep 3
"$bundle/gpuswap" top --socket "$GPUSWAP_SOCKET" --json > top-e2e.json 2>&1
wait $a; ra=$?
wait $b; rb=$?
note "{\"step\":\"e2e-daemon\",\"rc_a\":$ra,\"rc_b\":$rb,\"a\":$(cat a.json 2> /dev/null || echo null),\"b\":$(cat b.json 2> /dev/null || echo null)}"
stop_daemon
fi

# 6. Chunk moves by chunk size.
if want chunks; then
    for chunk in ${GPUSWAP_CHECK_CHUNKS:-2MiB 8MiB 32MiB}; do
        start_daemon 8GiB "chunks-$chunk" --chunk-size "$chunk"
        pids=()
        for run in a:41 b:42; do
            who=${run%:*}
            GPUSWAP_TRACE=1 GPUSWAP_TENANT_NAME=$who LD_PRELOAD=$pre timeout 120 "${client[@]}" \
                --buffers 6 --size 1GiB --rounds 2 --hold-ms 500 --seed "${run#*:}" \
                > "chunks-$chunk-$who.json" 2> "chunks-$chunk-$who.err" &
            pids+=($!)
            sleep 1
        done
        wait "${pids[0]}"; ra=$?
        wait "${pids[1]}"; rb=$?
        stop_daemon
        moves=$(grep -h "moves to" "chunks-$chunk-a.err" "chunks-$chunk-b.err" | sed 's/"//g' | paste -sd'|')
        gone=$(grep -h " gone: " "daemon-chunks-$chunk.log" | sed 's/"//g' | paste -sd'|')
        note "{\"step\":\"chunks\",\"chunk\":\"$chunk\",\"rc_a\":$ra,\"rc_b\":$rb,\"moves\":\"$moves\",\"daemon\":\"$gone\"}"
    done
fi

# 4. PyTorch: each process alone, then both together.
if ! want torch; then
    :
elif python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
    # Each tenant allocates, then waits at a barrier, so that the pair computes at
    # the same time with both allocations in place.
    torch_tenant() {
        GPUSWAP_TRACE=1 GPUSWAP_TENANT_NAME=$1 LD_PRELOAD=$pre timeout 200 \
            python3 "$here/scripts/gpu-torch-tenant.py" --gib 9.6 --seed "$2" --barrier "$out/barrier"
    }
    release() {  # waits for the given seeds' ready files, then lets them go
        for _ in $(seq 1200); do
            local all=1
            for s in "$@"; do [ -f "$out/barrier/$s.ready" ] || all=0; done
            [ $all = 1 ] && break
            sleep 0.05
        done
        touch "$out/barrier/go"
    }
    start_daemon 16GiB torch
    rm -rf "$out/barrier" && mkdir "$out/barrier"
    torch_tenant alone 1 > torch-alone.json 2> torch-alone.err &
    release 1
    wait $!
    note "{\"step\":\"torch-alone\",\"rc\":$?,\"result\":$(cat torch-alone.json 2> /dev/null || echo null)}"
    rm -rf "$out/barrier" && mkdir "$out/barrier"
    torch_tenant p 2 > torch-p.json 2> torch-p.err &
    p=$!
    torch_tenant q 3 > torch-q.json 2> torch-q.err &
    q=$!
    release 2 3
    sleep 2
    "$bundle/gpuswap" top --socket "$GPUSWAP_SOCKET" --json > top-torch.json 2>&1
    wait $p; rp=$?
    wait $q; rq=$?
    note "{\"step\":\"torch-pair\",\"rc_p\":$rp,\"rc_q\":$rq,\"p\":$(cat torch-p.json 2> /dev/null || echo null),\"q\":$(cat torch-q.json 2> /dev/null || echo null)}"
    stop_daemon
else
    note "{\"step\":\"torch\",\"rc\":\"no PyTorch with CUDA\"}"
fi
# 5. A victim killed in the middle of a relocation (daemon --vram 4GiB; each client
#    3 x 1 GiB and a scratch).
if want kill; then
    start_daemon 4GiB kill
    # No `timeout` around the victim: the kill must reach the client itself.
    GPUSWAP_TENANT_NAME=victim LD_PRELOAD=$pre "${client[@]}" \
        --buffers 3 --size 1GiB --rounds 2 --hold-ms 4000 --seed 31 > victim.json 2> victim.err &
    victim=$!
    sleep 3
    GPUSWAP_TENANT_NAME=requester LD_PRELOAD=$pre timeout 120 "${client[@]}" \
        --buffers 3 --size 1GiB --rounds 2 --hold-ms 200 --seed 32 > requester.json 2> requester.err &
    requester=$!
    killed=no
    for _ in $(seq 2000); do
        if "$bundle/gpuswap" top --socket "$GPUSWAP_SOCKET" --json 2> /dev/null \
            | python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(0 if any(t['name']=='victim' and t['suspended'] and t['relocations']>0 for t in d['tenants']) else 1)"; then
            kill -9 $victim && killed=yes
            break
        fi
        sleep 0.005
    done
    wait $requester; rr=$?
    sleep 0.5
    "$bundle/gpuswap" top --socket "$GPUSWAP_SOCKET" --json > top-after-kill.json 2>&1
    empty=$(python3 -c "import json; d=json.load(open('top-after-kill.json')); print(str(not d['tenants'] and d['vram_used_bytes']==0 and d['host_used_bytes']==0).lower())")
    note "{\"step\":\"kill-victim\",\"killed_mid_relocation\":\"$killed\",\"rc_requester\":$rr,\"daemon_empty_after\":$empty,\"requester\":$(cat requester.json 2> /dev/null || echo null)}"
    stop_daemon
fi
tar czf "$out/results.tar.gz" --exclude results.tar.gz --exclude calib --exclude gpuswap.sock -C "$out" .
