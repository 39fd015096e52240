#!/bin/bash
# gpuswap's Slurm Prolog (slurm.conf: Prolog=/etc/slurm/gpuswap-prolog.sh), run by
# slurmd as root on each node of a job before its first step (PrologFlags=Alloc: at
# allocation). Writes the job's contract for gpuswap's daemons: a file
# slurm_job_<id>.toml in the contracts folder, bound to the job's uid and cgroup, whose
# VRAM guarantee is what the job's GRES asked on this node (shards, or a memory GRES),
# shared equally among the job's GPUs here. The TaskProlog names the job's processes
# slurm_job_<id>, the epilog removes the file. See deploy/README.md.
#
# What it reads (Slurm's Prolog environment): SLURM_JOB_ID, SLURM_JOB_UID,
# SLURM_JOB_GPUS (the GPUs allocated here; else CUDA_VISIBLE_DEVICES, as the Prolog
# sees it: the physical indices), SLURMD_NODENAME; and the job's GRES, which Slurm
# does not put in the Prolog's environment: from `scontrol -d show job <id>`
# (JOB_GRES=, e.g. gpu:1,shard:2), or from GPUSWAP_JOB_GRES when set (tests, or a
# site's SPANK plugin). Settings: /etc/gpuswap/slurm.conf (gpuswap-slurm.conf here).
#
# It never fails the job for gpuswap's sake (a failed Prolog drains the node): what
# it cannot do, it logs (syslog, tag gpuswap-prolog) and exits 0.
set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
conf=${GPUSWAP_SLURM_CONF:-/etc/gpuswap/slurm.conf}
# shellcheck source=/dev/null
[ -r "$conf" ] && . "$conf"
dir=${GPUSWAP_CONTRACTS_DIR:-/run/gpuswap/contracts}
memory_gres=${GPUSWAP_MEMORY_GRES:-gpumem}

say() {
    logger -t gpuswap-prolog -- "job ${SLURM_JOB_ID:-?}: $*" 2> /dev/null || echo "gpuswap-prolog: $*" >&2
}

# Bytes of a size: a number and K, M, G or T (Slurm's counts, powers of 1024), with
# an optional iB or B (gpuswap's sizes: 10GiB); nothing when it is not one.
to_bytes() {
    local n unit
    if [[ $1 =~ ^([0-9]+)([KMGT]?)(i?B)?$ ]]; then
        n=${BASH_REMATCH[1]}
        unit=${BASH_REMATCH[2]}
        case $unit in
            K) n=$((n << 10)) ;;
            M) n=$((n << 20)) ;;
            G) n=$((n << 30)) ;;
            T) n=$((n << 40)) ;;
        esac
        echo "$n"
    fi
}

job=${SLURM_JOB_ID:-}
uid=${SLURM_JOB_UID:-}
if [[ ! $job =~ ^[0-9_]+$ || ! $uid =~ ^[0-9]+$ ]]; then
    say "no SLURM_JOB_ID or SLURM_JOB_UID: not run as Slurm's Prolog? no contract"
    exit 0
fi
gres=${GPUSWAP_JOB_GRES-$(scontrol -d show job "$job" 2> /dev/null | sed -n 's/.*JOB_GRES=\([^ ]*\).*/\1/p' | head -n 1)}

# The job's GRES on this node: entries name[:type]:count, the parenthesised index
# lists dropped.
shards=0
memory=0
# shellcheck disable=SC2001 # a regular expression: bash's patterns would need extglob
IFS=, read -r -a entries <<< "$(sed 's/([^)]*)//g' <<< "$gres")"
for entry in "${entries[@]}"; do
    name=${entry%%:*}
    count=${entry##*:}
    [[ $entry == *:* ]] || continue
    case $name in
        shard) [[ $count =~ ^[0-9]+$ ]] && shards=$((shards + count)) ;;
        "$memory_gres")
            count=$(to_bytes "$count")
            memory=$((memory + ${count:-0}))
            ;;
    esac
done

bytes=$memory
if [ "$bytes" -eq 0 ] && [ "$shards" -gt 0 ]; then
    shard_bytes=$(to_bytes "${GPUSWAP_SHARD_BYTES:-}")
    if [ -z "$shard_bytes" ]; then
        say "asks for $shards shard(s) but GPUSWAP_SHARD_BYTES is not a size (in $conf): no contract"
        exit 0
    fi
    bytes=$((shards * shard_bytes))
fi
if [ "$bytes" -eq 0 ]; then
    # A whole GPU, or none: nothing to guarantee.
    exit 0
fi
gpus=${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-0}}
IFS=, read -r -a gpu_list <<< "$gpus"
per_gpu=$((bytes / (${#gpu_list[@]} > 0 ? ${#gpu_list[@]} : 1)))

cgroup=${GPUSWAP_SLURM_CGROUP:-auto}
if [ "$cgroup" = auto ]; then
    if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
        cgroup=/system.slice/slurmstepd.scope/job_%j
    else
        cgroup=/slurm/uid_%u/job_%j
    fi
fi
cgroup=${cgroup//%j/$job}
cgroup=${cgroup//%u/$uid}
cgroup=${cgroup//%n/${SLURMD_NODENAME:-}}

limit=""
case ${GPUSWAP_SLURM_AT_LIMIT:-} in
    "") ;;
    spill | fail | wait) limit="memory_limit = \"${per_gpu}B\"
at_limit = \"$GPUSWAP_SLURM_AT_LIMIT\"" ;;
    *) say "GPUSWAP_SLURM_AT_LIMIT=$GPUSWAP_SLURM_AT_LIMIT is not spill, fail or wait: a guarantee only" ;;
esac

if [ ! -d "$dir" ] && ! { mkdir -p "${dir%/*}" && mkdir -m 0755 "$dir"; }; then
    say "cannot make $dir: no contract"
    exit 0
fi
name=slurm_job_$job
staged=$dir/.$name.toml.$$
umask 022
# Written whole, then renamed: the daemon reads no half-written file.
if ! cat > "$staged" <<TOML
# Written by gpuswap's Slurm Prolog for job $job (uid $uid, GRES ${gres:-none}, GPUs $gpus).
[process.$name]
uids = [$uid]
cgroup = "$cgroup"
vram_guarantee = "${per_gpu}B"
$limit
TOML
then
    say "cannot write $staged: no contract"
    rm -f "$staged"
    exit 0
fi
mv -f "$staged" "$dir/$name.toml" || say "cannot rename $staged"
exit 0
