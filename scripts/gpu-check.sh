#!/usr/bin/env bash
# The real-GPU check of gpuswapd and the interposer (issue 23), for a machine with an
# NVIDIA GPU, CUDA's compiler and PyTorch, and no Rust: run scripts/gpu-bundle.sh where
# Rust is, bring gpu-bundle/ and scripts/ along, then
#   bash scripts/gpu-check.sh [--quick] [BUNDLE] [OUT]
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
#   7. (sharing, not in the default; about 10 minutes on an H200 by estimate, not yet
#      run there, about 5 with --quick; the caps and why are with the step below)
#      issue 38's benchmark: two pairs of PyTorch jobs that each fit the
#      managed VRAM alone but not together, step 4's matrix products (--vram 16GiB) and
#      GPT-style trainers of 0.9 B parameters (scripts/gpu-gpt-tenant.py, --vram 36GiB).
#      Each job alone under the daemon, the two alone one after the other
#      (back-to-back), then the pair under the daemon's default (gpu_time=auto), with
#      `--set gpu_time=turns` and with `--set gpu_time=concurrent`: makespan, slowdowns,
#      STP, ANTT, handovers, auto's choices and switches, bytes moved and GB/s per bulk
#      move, whether each job's loss and checksum are those of its run alone, and issue
#      38's goals G1 and G4. Then issue 40's: the GPT pair with a cold 12 GiB table each
#      in VRAM their tables overflow against enough VRAM (G2: makespan within 1.05x); a
#      bursty OPT-1.3B-shaped server beside a GPT trainer (scripts/gpu-serve-tenant.py;
#      G3: p99 TTFT and time per token within 1.25x of the server alone, the trainer at
#      90 % of its throughput alone while the server idles); six mostly idle 7 GiB
#      notebooks under --vram 24GiB (scripts/gpu-notebook-tenant.py; cell latency,
#      wake-up delay, out-of-memory errors: none). scripts/gpu-sharing-summary.py does
#      the arithmetic. GPUSWAP_CHECK_SHARING (default "mm gpt cold burst notebooks")
#      picks the workloads.
#   8. (allocators, not in the default; about 2 minutes by estimate, not yet run on a
#      GPU) issue 41's programs that map their memory themselves: gpuswap-vmm-client (an
#      expandable-segments-like allocator, handles mapped in part and at two addresses,
#      then torch_memory_saver's pause and resume: unmapped, released, created and
#      mapped again at the same addresses) beside the e2e client, 8 GiB asked of 6;
#      then step 4's PyTorch pair with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
#      (PyTorch maps its segments itself) and with backend:cudaMallocAsync (stream-ordered
#      pools). Data checked, times, and what the daemon
#      counts for each (GiB, from `top --json`).
# GPUSWAP_CHECK_STEPS (default "calib alone e2e torch kill") picks steps;
# GPUSWAP_CHECK_STEPS=sharing runs step 7 alone. --quick (or GPUSWAP_CHECK_QUICK=1)
# shortens step 7 (the jobs' rounds and steps, the server's cycles, the notebooks' time,
# and the caps).
# Results: OUT/summary.jsonl (one line per step) and each step's log, all of it also
# in OUT/results.tar.gz.
set -uo pipefail
quick=${GPUSWAP_CHECK_QUICK:-0}
if [ "${1:-}" = --quick ]; then
    quick=1
    shift
fi
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
    # A killed daemon leaves its socket file: waiting for the socket must not find it.
    rm -f "$GPUSWAP_SOCKET"
    "$bundle/gpuswap" daemon --socket "$GPUSWAP_SOCKET" --vram "$vram" "$@" \
        > "daemon-$name.log" 2>&1 &
    daemon=$!
    for _ in $(seq 50); do
        [ -S "$GPUSWAP_SOCKET" ] && break
        kill -0 "$daemon" 2> /dev/null || break
        sleep 0.1
    done
}
stop_daemon() { kill "$daemon" 2> /dev/null; wait "$daemon" 2> /dev/null; }
# Whether any of the given processes is still running.
any_alive() {
    local pid
    for pid in "$@"; do kill -0 "$pid" 2> /dev/null && return 0; done
    return 1
}
# Lets the tenants waiting at $out/barrier go once each given seed's ready file is
# there, or after a minute, or as soon as none of the processes in $waiting (if any)
# is alive to get ready.
waiting=()
release() {
    for _ in $(seq 1200); do
        local all=1
        for s in "$@"; do [ -f "$out/barrier/$s.ready" ] || all=0; done
        [ $all = 1 ] && break
        if [ ${#waiting[@]} -gt 0 ] && ! any_alive "${waiting[@]}"; then break; fi
        sleep 0.05
    done
    touch "$out/barrier/go"
}
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
# 7. Sharing (issues 38 and 40). Issue 38's pairs that fit alone but not together:
#    alone, back-to-back, and under auto (the default), turns and concurrent (G1); issue
#    40's cold pair (G2), bursty server beside a trainer and idle notebooks (G3). A run
#    RUN leaves RUN-WHO.{json,err,rc,cap,killed}, top-RUN-N.json and daemon-RUN.log;
#    gpu-sharing-summary.py reads them.
summary_of() { python3 "$here/scripts/gpu-sharing-summary.py" "$@"; }
sharing_daemon() {  # VRAM [daemon options]: starts run $run's daemon, or says it did not
    rm -f "$run.nodaemon" "$run"-*.{json,err,rc,cap,killed} "top-$run"-*.json
    start_daemon "$1" "$run" "${@:2}"
    kill -0 "$daemon" 2> /dev/null && [ -S "$GPUSWAP_SOCKET" ] && return 0
    touch "$run.nodaemon"
    return 1
}
# Starts run $run's tenant WHO in the background. CAP seconds past the barrier it stops
# itself and reports a lower bound; the timeout only covers what comes before.
sharing_tenant() {  # WHO SEED CAP SCRIPT [ARGS]
    local who=$1 seed=$2 cap=$3 base=$run-$1
    shift 3
    echo "$cap" > "$base.cap"
    GPUSWAP_TRACE=1 GPUSWAP_TENANT_NAME=$base LD_PRELOAD=$pre timeout -k 5 $((cap + 120)) \
        python3 "$@" --seed "$seed" --cap-s "$cap" --barrier "$out/barrier" \
        > "$base.json" 2> "$base.err" &
    waiting+=($!)
    whos+=("$who")
    caps+=("$cap")
}
# Lets run $run's tenants go together, takes the daemon's snapshot each second, ends a
# tenant still running 10 s past its cap (one blocked in the driver cannot stop itself),
# and records the exit statuses and a last snapshot.
sharing_go() {  # SEED...
    release "$@"
    local started=$SECONDS i=0 k
    while any_alive "${waiting[@]}"; do
        for k in "${!waiting[@]}"; do
            if kill -0 "${waiting[$k]}" 2> /dev/null && ((SECONDS - started > caps[k] + 10)) \
                && [ ! -e "$run-${whos[$k]}.killed" ]; then
                touch "$run-${whos[$k]}.killed"
                kill -TERM "${waiting[$k]}"
            fi
        done
        timeout 5 "$bundle/gpuswap" top --socket "$GPUSWAP_SOCKET" --json > "top-$run-$i.json" 2>&1
        i=$((i + 1))
        sleep 1
    done
    for k in "${!waiting[@]}"; do
        wait "${waiting[$k]}"
        echo $? > "$run-${whos[$k]}.rc"
    done
    timeout 5 "$bundle/gpuswap" top --socket "$GPUSWAP_SOCKET" --json > "top-$run-$i.json" 2>&1
    waiting=() whos=() caps=()
}
pair_cap() {  # ALONE_JSON: a pair tenant's cap in seconds, from its time alone
    summary_of cap --alone "$1" --times "$cap_times" --floor "$cap_floor" \
        --ceiling "$cap_ceiling" --default "$cap_ceiling" || echo "$cap_ceiling"
}
fresh_barrier() { rm -rf "$out/barrier" && mkdir "$out/barrier"; }
# One workload: p and q alone one after the other, then the pair under each gpu_time.
sharing_workload() {  # NAME VRAM_GIB SEED_P SEED_Q SCRIPT [ARGS]
    local wl=$1 gib=$2 seed_p=$3 seed_q=$4 gpu_time cap_p cap_q how
    shift 4
    run=$wl-alone
    if sharing_daemon "${gib}GiB"; then
        fresh_barrier
        sharing_tenant p "$seed_p" "$alone_limit" "$@"
        sharing_go "$seed_p"
        fresh_barrier
        sharing_tenant q "$seed_q" "$alone_limit" "$@"
        sharing_go "$seed_q"
        stop_daemon
    fi
    note "$(summary_of alone --dir "$out" --workload "$wl" || echo "{\"step\":\"sharing-alone\",\"run\":\"$run\",\"rc\":\"no summary\"}")"
    cap_p=$(pair_cap "$wl-alone-p.json")
    cap_q=$(pair_cap "$wl-alone-q.json")
    # auto is the daemon's default (issue 40): its run gives no --set, as an operator
    # who sets nothing runs it. G1 must hold there too.
    for gpu_time in auto turns concurrent; do
        run=$wl-$gpu_time
        how=(--set "gpu_time=$gpu_time")
        [ "$gpu_time" = auto ] && how=()
        if sharing_daemon "${gib}GiB" ${how[@]+"${how[@]}"}; then
            fresh_barrier
            sharing_tenant p "$seed_p" "$cap_p" "$@"
            sharing_tenant q "$seed_q" "$cap_q" "$@"
            sharing_go "$seed_p" "$seed_q"
            stop_daemon
        fi
        note "$(summary_of pair --dir "$out" --workload "$wl" --gpu-time "$gpu_time" \
            --vram-bytes $((gib << 30)) || echo "{\"step\":\"sharing-pair\",\"run\":\"$run\",\"rc\":\"no summary\"}")"
    done
}
# G2 (issue 40): the GPT pair, each with a cold 12 GiB table (allocated and filled
# first, then untouched until its checksum after the timed steps), under the daemon's
# default (auto) in VRAM that holds their hot sets at 0.9 of it (their peaks alone, from
# the gpt workload's runs, over 0.9; 50 GiB without them) but not the tables (about
# 1.35x), against the same pair with enough VRAM (the peaks and tables with a tenth to
# spare; 76 GiB without them), both within what the device holds. Same seeds as the gpt
# pair: each job's loss sequence must be that of its run alone. Caps as the gpt pair's.
sharing_cold() {
    local tight enough cap_p cap_q name vram
    tight=$(summary_of vram --default-gib 50 --ceiling-gib "$device_gib" \
        gpt-alone-p.json:1.111 gpt-alone-q.json:1.111 || echo 50)
    enough=$(summary_of vram --default-gib 76 --ceiling-gib "$device_gib" --plus-gib 26.4 \
        gpt-alone-p.json:1.1 gpt-alone-q.json:1.1 || echo 76)
    cap_p=$(pair_cap gpt-alone-p.json)
    cap_q=$(pair_cap gpt-alone-q.json)
    for name in enough tight; do
        run=cold-$name
        vram=$enough
        [ "$name" = tight ] && vram=$tight
        if sharing_daemon "${vram}GiB"; then
            fresh_barrier
            sharing_tenant p 4 "$cap_p" "$gpt" --steps "$gpt_steps" --cold-gib 12
            sharing_tenant q 5 "$cap_q" "$gpt" --steps "$gpt_steps" --cold-gib 12
            sharing_go 4 5
            stop_daemon
        fi
    done
    note "$(summary_of cold --dir "$out" --workload cold --reference gpt-alone || echo '{"step":"sharing-cold","rc":"no summary"}')"
}
# G3 (issue 40): a server shaped like OPT-1.3B with a 6 GiB KV cache
# (scripts/gpu-serve-tenant.py: $burst_cycles cycles of $burst_idle s idle and
# $burst_active s of requests at 6 a second) alone, the GPT trainer alone for
# $trainer_alone_s s, then the two together, the trainer training for as long as the
# server's cycles last, in VRAM that holds the trainer's peak and half the server's (the
# two alone ran in 64 GiB, which holds both). Each tenant's cap: its length and 30 s,
# room for requests queued past the last burst; a server still serving then is slower
# than any goal allows, and its latencies are a lower bound.
sharing_burst() {
    local length=$((burst_cycles * (burst_idle + burst_active))) vram
    local serve=("$here/scripts/gpu-serve-tenant.py" --cycles "$burst_cycles"
        --idle-s "$burst_idle" --active-s "$burst_active" --rate 6)
    run=burst-server
    if sharing_daemon "$((device_gib < 64 ? device_gib : 64))GiB"; then
        fresh_barrier
        sharing_tenant server 7 $((length + 30)) "${serve[@]}"
        sharing_go 7
        stop_daemon
    fi
    run=burst-trainer
    if sharing_daemon "$((device_gib < 64 ? device_gib : 64))GiB"; then
        fresh_barrier
        sharing_tenant trainer 8 $((trainer_alone_s + 30)) "$gpt" --duration-s "$trainer_alone_s"
        sharing_go 8
        stop_daemon
    fi
    vram=$(summary_of vram --default-gib 28 --ceiling-gib "$device_gib" \
        burst-trainer-trainer.json:1 burst-server-server.json:0.5 || echo 28)
    run=burst-pair
    if sharing_daemon "${vram}GiB"; then
        fresh_barrier
        sharing_tenant server 7 $((length + 30)) "${serve[@]}"
        sharing_tenant trainer 8 $((length + 30)) "$gpt" --duration-s "$length"
        sharing_go 7 8
        stop_daemon
    fi
    note "$(summary_of burst --dir "$out" --workload burst || echo '{"step":"sharing-burst","rc":"no summary"}')"
}
# G3 (issue 40): six notebooks of 7 GiB each (scripts/gpu-notebook-tenant.py) under
# --vram 24GiB, 42 GiB asked of 24: cells at seeded exponential pauses of mean
# $nb_think s for $nb_duration s. Each tenant's cap: its length and 30 s, room for its
# last cell (a second or so) and a wake-up many times the goal's.
sharing_notebooks() {
    local i seeds=()
    run=notebooks
    if sharing_daemon 24GiB; then
        fresh_barrier
        for i in 1 2 3 4 5 6; do
            sharing_tenant "n$i" $((60 + i)) $((nb_duration + 30)) "$here/scripts/gpu-notebook-tenant.py" \
                --gib 7 --think-s "$nb_think" --duration-s "$nb_duration"
            seeds+=($((60 + i)))
        done
        sharing_go "${seeds[@]}"
        stop_daemon
    fi
    note "$(summary_of notebooks --dir "$out" --workload notebooks || echo '{"step":"sharing-notebooks","rc":"no summary"}')"
}
if ! want sharing; then
    :
elif python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
    # Durations and caps, full (--quick). The step's length by estimate on an H200 (not
    # yet run there), a torch process's start-up (import, context, model, fill) taken
    # as 5-8 s: mm about 80 s (50), gpt 110 s (70), cold 60 s (40), burst 220 s (95),
    # notebooks 110 s (50); in all about 10 minutes (about 5 with --quick, which must
    # fit beside the other steps in the device's 15 minutes). A full run of all five
    # is at the 10 minutes one device command may take: there, run it as two
    # (GPUSWAP_CHECK_SHARING="mm gpt cold", then "burst notebooks" into the same OUT,
    # where cold and burst find the runs alone they size their VRAM from).
    # - A matrix job 3 s alone (step 4's), a GPT job 60 steps (about 10 s). A pair's cap
    #   is 6x a job's time alone, within 30-60 s (15-30 s): a pair slower than that has
    #   missed G1 anyway, and concurrent's 20x slowdown would otherwise take minutes.
    # - G3's server: issue 40's 3 cycles of 20 s idle and 10 s of requests (3 of 7 s
    #   and 4 s: idle still past the daemon's demote_after of 5 s, so that each burst
    #   finds the server demoted); the trainer alone 15 s (6 s), enough for a steady
    #   step time at about 0.1 s a step.
    # - The notebooks: 90 s (30 s) of cells at pauses of mean 20 s (8 s), longer than
    #   demote_after, so that most cells wake a demoted notebook.
    mm_rounds=300 gpt_steps=60 alone_limit=120 cap_times=6 cap_floor=30 cap_ceiling=60
    burst_cycles=3 burst_idle=20 burst_active=10 trainer_alone_s=15 nb_duration=90 nb_think=20
    if [ "$quick" = 1 ]; then
        mm_rounds=150 gpt_steps=30 alone_limit=60 cap_floor=15 cap_ceiling=30
        burst_idle=7 burst_active=4 trainer_alone_s=6 nb_duration=30 nb_think=8
    fi
    # What the device holds, as the daemon's default takes it (nine tenths), in GiB:
    # the most a run sized from measured peaks may ask.
    device_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2> /dev/null | head -1)
    [[ $device_mib =~ ^[0-9]+$ ]] || device_mib=81559
    device_gib=$((device_mib * 9 / 10 / 1024))
    gpt=$here/scripts/gpu-gpt-tenant.py
    whos=() caps=()
    for wl in ${GPUSWAP_CHECK_SHARING:-mm gpt cold burst notebooks}; do
        case $wl in
            mm) sharing_workload mm 16 2 3 "$here/scripts/gpu-torch-tenant.py" --gib 9.6 --rounds "$mm_rounds" ;;
            gpt) sharing_workload gpt 36 4 5 "$gpt" --steps "$gpt_steps" ;;
            cold) sharing_cold ;;
            burst) sharing_burst ;;
            notebooks) sharing_notebooks ;;
            *) note "{\"step\":\"sharing\",\"rc\":\"unknown workload $wl\"}" ;;
        esac
    done
else
    note "{\"step\":\"sharing\",\"rc\":\"no PyTorch with CUDA\"}"
fi
# 8. Allocators (issue 41): a program's own VMM memory, managed.
# What a `top --json` snapshot (file $1) counts for each tenant, in GiB of VRAM and host
# memory together: {"name": GiB}, or null without a snapshot.
counted_gib() {
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(json.dumps({t["name"]: round((t["vram_bytes"] + t["host_bytes"]) / 2**30, 2) for t in d["tenants"]}))' \
        "$1" 2> /dev/null || echo null
}
if want allocators; then
    # The VMM client, 8 x 512 MiB (and a scratch), beside the e2e client's 4 x 1 GiB:
    # 8 GiB asked of 6, so that both are moved.
    start_daemon 6GiB allocators-saver
    GPUSWAP_TENANT_NAME=alloc LD_PRELOAD=$pre timeout 120 "${client[@]}" \
        --buffers 4 --size 1GiB --rounds 4 --hold-ms 500 --seed 51 > saver-alloc.json 2> saver-alloc.err &
    a=$!
    sleep 1
    GPUSWAP_TRACE=1 GPUSWAP_TENANT_NAME=saver LD_PRELOAD=$pre timeout 120 "$bundle/gpuswap-vmm-client" \
        --ptx e2e_kernels.ptx --segments 8 --segment 512MiB --rounds 4 --hold-ms 500 \
        --pause-resume --export > saver.json 2> saver.err &
    s=$!
    sleep 3
    "$bundle/gpuswap" top --socket "$GPUSWAP_SOCKET" --json > top-allocators-saver.json 2>&1
    wait $a; ra=$?
    wait $s; rs=$?
    refused=$(grep -q "cuMemExportToShareableHandle is not managed" saver.err && echo true || echo false)
    note "{\"step\":\"allocators-saver\",\"rc_alloc\":$ra,\"rc_saver\":$rs,\"export_refused\":$refused,\"counted_gib\":$(counted_gib top-allocators-saver.json),\"saver\":$(cat saver.json 2> /dev/null || echo null),\"alloc\":$(cat saver-alloc.json 2> /dev/null || echo null)}"
    stop_daemon
    if python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
        # Step 4's pair, their segments mapped by PyTorch itself (expandable segments),
        # then from stream-ordered pools (cudaMallocAsync, served as managed allocations).
        for conf in expandable_segments:True backend:cudaMallocAsync; do
            tag=${conf%%:*}
            start_daemon 16GiB "allocators-$tag"
            rm -rf "$out/barrier" && mkdir "$out/barrier"
            pids=()
            for run in p:2 q:3; do
                PYTORCH_CUDA_ALLOC_CONF=$conf GPUSWAP_TRACE=1 \
                    GPUSWAP_TENANT_NAME=${run%:*} LD_PRELOAD=$pre timeout 200 \
                    python3 "$here/scripts/gpu-torch-tenant.py" --gib 9.6 --seed "${run#*:}" \
                    --barrier "$out/barrier" > "$tag-${run%:*}.json" 2> "$tag-${run%:*}.err" &
                pids+=($!)
            done
            release 2 3
            sleep 2
            "$bundle/gpuswap" top --socket "$GPUSWAP_SOCKET" --json > "top-allocators-$tag.json" 2>&1
            wait "${pids[0]}"; rp=$?
            wait "${pids[1]}"; rq=$?
            note "{\"step\":\"allocators-torch\",\"alloc_conf\":\"$conf\",\"rc_p\":$rp,\"rc_q\":$rq,\"counted_gib\":$(counted_gib "top-allocators-$tag.json"),\"p\":$(cat "$tag-p.json" 2> /dev/null || echo null),\"q\":$(cat "$tag-q.json" 2> /dev/null || echo null)}"
            stop_daemon
        done
    else
        note "{\"step\":\"allocators-torch\",\"rc\":\"no PyTorch with CUDA\"}"
    fi
fi
tar czf "$out/results.tar.gz" --exclude results.tar.gz --exclude calib --exclude gpuswap.sock -C "$out" .
