#!/bin/bash
# gpuswap's Slurm Epilog (slurm.conf: Epilog=/etc/slurm/gpuswap-epilog.sh), run by
# slurmd as root when a job ends: removes the contract the Prolog wrote. The daemons
# notice within 2 s (or at the next process's hello); processes still connected keep
# the contract they had. It never fails (a failed Epilog drains the node).
set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
conf=${GPUSWAP_SLURM_CONF:-/etc/gpuswap/slurm.conf}
# shellcheck source=/dev/null
[ -r "$conf" ] && . "$conf"
dir=${GPUSWAP_CONTRACTS_DIR:-/run/gpuswap/contracts}
job=${SLURM_JOB_ID:-}
if [[ $job =~ ^[0-9_]+$ ]]; then
    rm -f "$dir/slurm_job_$job.toml"
fi
exit 0
