"""A PyTorch tenant for scripts/gpu-check.sh: holds GIB of matrices on the GPU and
multiplies each by a small one, round after round; checks at the end that every matrix
still sums as it did at the start (the data survived relocations); prints one JSON line.

    LD_PRELOAD=libgpuswap_cuda.so python3 gpu-torch-tenant.py --gib 9.6 --rounds 300
"""
import argparse
import json
import os
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--gib", type=float, required=True)
parser.add_argument("--rounds", type=int, default=300)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--barrier", help="write DIR/SEED.ready once allocated, then wait for DIR/go")
args = parser.parse_args()

start = time.time()
gen = torch.Generator(device="cuda").manual_seed(args.seed)
side = 4096  # 64 MiB per float32 matrix
count = int(args.gib * 2**30 // (side * side * 4))
mats = [torch.randn(side, side, device="cuda", generator=gen) for _ in range(count)]
sums = [m.double().sum().item() for m in mats]
free, total = torch.cuda.mem_get_info()
w = torch.randn(side, 64, device="cuda", generator=gen)
torch.cuda.synchronize()
alloc_s = time.time() - start
if args.barrier:
    open(os.path.join(args.barrier, f"{args.seed}.ready"), "w").close()
    deadline = time.time() + 120
    while not os.path.exists(os.path.join(args.barrier, "go")) and time.time() < deadline:
        time.sleep(0.01)
compute = time.time()
acc = torch.zeros(side, 64, device="cuda")
for _ in range(args.rounds):
    for m in mats:
        acc += m @ w
torch.cuda.synchronize()
compute_s = time.time() - compute
intact = all(m.double().sum().item() == s for m, s in zip(mats, sums))
print(json.dumps({
    "ok": intact,
    "matrices": count,
    "gib": round(count * side * side * 4 / 2**30, 2),
    "rounds": args.rounds,
    "alloc_s": round(alloc_s, 3),
    "compute_s": round(compute_s, 3),
    "mem_get_info_free": free,
    "mem_get_info_total": total,
    "acc_finite": bool(torch.isfinite(acc).all().item()),
}))
