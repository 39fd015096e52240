#!/usr/bin/env bash
# Checks deploy/ as far as this machine can: the systemd unit with systemd-analyze
# verify (pointed at the built binary), the Kubernetes manifests parsed as YAML with
# the fields a DaemonSet and a Pod must have. Each check is skipped, with a line, where
# its tool is missing. Usage: bash scripts/check-deploy.sh [GPUSWAP_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-target/debug/gpuswap}")
if command -v systemd-analyze > /dev/null; then
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    sed "s#/usr/local/bin/gpuswap#$bin#" deploy/systemd/gpuswap@.service > "$dir/gpuswap@0.service"
    out=$(systemd-analyze verify "$dir/gpuswap@0.service" 2>&1 || true)
    # Only the unit's own lines count: the host's other units may have their own noise.
    if grep "gpuswap@0.service" <<< "$out"; then
        echo "deploy/systemd/gpuswap@.service: systemd-analyze verify complained" >&2
        exit 1
    fi
    echo "deploy/systemd/gpuswap@.service: verified"
else
    echo "skipped the systemd unit's check: no systemd-analyze"
fi
if python3 -c "import yaml" 2> /dev/null; then
    python3 - <<'PY'
import sys, yaml
want = {
    "deploy/kubernetes/daemonset.yaml": ("DaemonSet", ["spec", "template", "spec", "containers"]),
    "deploy/kubernetes/pod-snippet.yaml": ("Pod", ["spec", "containers"]),
}
for path, (kind, keys) in want.items():
    doc = yaml.safe_load(open(path))
    if doc.get("kind") != kind:
        sys.exit(f"{path}: kind {doc.get('kind')!r}, expected {kind!r}")
    node = doc
    for k in keys:
        if k not in node:
            sys.exit(f"{path}: no {'.'.join(keys)}")
        node = node[k]
    for c in node:
        for field in ("name", "image"):
            if field not in c:
                sys.exit(f"{path}: a container without {field}")
    print(f"{path}: a {kind} with {len(node)} container(s)")
PY
else
    echo "skipped the manifests' check: no python3-yaml"
fi
# The Slurm scripts: shellcheck where installed, else bash's own parse; then the
# Prolog run for two fake jobs (shards, a memory GRES) into a folder of its own, what
# it wrote checked by `gpuswap daemon --check-contracts`, the Epilog removing it and
# the TaskProlog's export lines.
for script in deploy/slurm/*.sh; do
    if command -v shellcheck > /dev/null; then
        shellcheck "$script"
    else
        bash -n "$script"
    fi
done
if command -v shellcheck > /dev/null; then
    echo "deploy/slurm/*.sh: shellcheck passed"
else
    echo "deploy/slurm/*.sh: parsed by bash -n (no shellcheck here)"
fi
slurm=$(mktemp -d)
chmod 0755 "$slurm"
# shellcheck disable=SC2064
trap "rm -rf '$slurm' '${dir:-}'" EXIT
fake_job() {
    env -i PATH="$PATH" GPUSWAP_SLURM_CONF=/dev/null GPUSWAP_CONTRACTS_DIR="$slurm/contracts" \
        GPUSWAP_SHARD_BYTES=10GiB GPUSWAP_SLURM_CGROUP=/system.slice/slurmstepd.scope/job_%j \
        "$@" bash deploy/slurm/prolog.sh
}
fake_job SLURM_JOB_ID=42 SLURM_JOB_UID=1001 SLURM_JOB_GPUS=0 GPUSWAP_JOB_GRES="gpu:1(IDX:0),shard:2(2/8)"
fake_job SLURM_JOB_ID=43 SLURM_JOB_UID=1002 SLURM_JOB_GPUS=0,1 GPUSWAP_JOB_GRES="gpumem:40G" \
    GPUSWAP_SLURM_AT_LIMIT=spill
expect() {
    local file=$1 wanted=$2 out
    out=$("$bin" daemon --check-contracts "$file")
    if ! grep -qF "$wanted" <<< "$out"; then
        echo "deploy/slurm/prolog.sh wrote $file, whose check says:" >&2
        echo "$out" >&2
        echo "(expected: $wanted)" >&2
        exit 1
    fi
}
expect "$slurm/contracts/slurm_job_42.toml" \
    "guarantee 20.0 GiB: to processes of uid 1001 in cgroup /system.slice/slurmstepd.scope/job_42"
expect "$slurm/contracts/slurm_job_43.toml" \
    "guarantee 20.0 GiB, memory limit 20.0 GiB (spill): to processes of uid 1002 in cgroup /system.slice/slurmstepd.scope/job_43"
env -i GPUSWAP_SLURM_CONF=/dev/null GPUSWAP_CONTRACTS_DIR="$slurm/contracts" SLURM_JOB_ID=42 \
    bash deploy/slurm/epilog.sh
if [ -e "$slurm/contracts/slurm_job_42.toml" ]; then
    echo "deploy/slurm/epilog.sh left job 42's contract" >&2
    exit 1
fi
touch "$slurm/libgpuswap_cuda.so"
exports=$(env -i GPUSWAP_SLURM_CONF=/dev/null GPUSWAP_LIBRARY="$slurm/libgpuswap_cuda.so" \
    SLURM_JOB_ID=42 bash deploy/slurm/task_prolog.sh)
if ! grep -qx "export LD_PRELOAD=$slurm/libgpuswap_cuda.so" <<< "$exports" \
    || ! grep -qx "export GPUSWAP_TENANT_NAME=slurm_job_42" <<< "$exports"; then
    echo "deploy/slurm/task_prolog.sh printed:" >&2
    echo "$exports" >&2
    exit 1
fi
echo "deploy/slurm: the Prolog's contracts check, the Epilog removes them, the TaskProlog exports the preload"
