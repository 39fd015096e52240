#!/bin/bash
# gpuswap's Slurm TaskProlog (slurm.conf: TaskProlog=/etc/slurm/gpuswap-task-prolog.sh),
# run by slurmstepd as the job's user before each task. Slurm reads its standard
# output: each `export NAME=value` line sets a variable of the task. It preloads the
# interposer and names the task's processes after the job (slurm_job_<id>, the name of
# the contract the Prolog wrote: the daemon gives it only to processes of the job's
# uid in the job's cgroup, whatever name they claim).
set -u
conf=${GPUSWAP_SLURM_CONF:-/etc/gpuswap/slurm.conf}
# shellcheck source=/dev/null
[ -r "$conf" ] && . "$conf"
library=${GPUSWAP_LIBRARY:-/usr/local/lib/libgpuswap_cuda.so}
if [ ! -r "$library" ]; then
    echo "print gpuswap: $library is missing: this task runs without gpuswap"
    exit 0
fi
case ":${LD_PRELOAD:-}:" in
    *":$library:"*) ;;
    *) echo "export LD_PRELOAD=$library${LD_PRELOAD:+:$LD_PRELOAD}" ;;
esac
echo "export GPUSWAP_TENANT_NAME=slurm_job_${SLURM_JOB_ID:-unknown}"
echo "export GPUSWAP_DAEMON_USER=${GPUSWAP_DAEMON_USER:-gpuswap}"
# No GPUSWAP_SOCKET: one daemon per GPU (deploy/systemd), named by the GPU's UUID, and
# the interposer finds the daemon of the task's first GPU by that UUID itself, however
# Slurm numbers the devices it gives the task.
exit 0
