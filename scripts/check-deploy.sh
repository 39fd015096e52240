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
