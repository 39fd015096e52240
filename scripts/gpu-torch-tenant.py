"""A PyTorch tenant for scripts/gpu-check.sh: holds GIB of matrices on the GPU and
multiplies each by a small one, round after round; checks at the end that every matrix
still sums as it did at the start (the data survived relocations); prints one JSON line.
Deterministic: the same seed gives the same accumulator, whose float64 sum is the
`checksum` the sharing step compares with the tenant's run alone.

    LD_PRELOAD=libgpuswap_cuda.so python3 gpu-torch-tenant.py --gib 9.6 --rounds 300
"""
import gpu_tenant  # first: it sets what torch reads when it starts

import json
import time

import torch

parser = gpu_tenant.arguments()
parser.add_argument("--gib", type=float, required=True)
parser.add_argument("--rounds", type=int, default=300)
args = parser.parse_args()
cuda = args.device == "cuda"
torch.use_deterministic_algorithms(True)


def synchronize():
    if cuda:
        torch.cuda.synchronize()


start = time.time()
gen = torch.Generator(device=args.device).manual_seed(args.seed)
side = gpu_tenant.MATRIX_SIDE
mats = gpu_tenant.matrices(args.gib, args.device, gen)
count = len(mats)
sums = [m.double().sum().item() for m in mats]
free, total = torch.cuda.mem_get_info() if cuda else (None, None)
w = torch.randn(side, 64, device=args.device, generator=gen)
synchronize()
alloc_s = time.time() - start
compute = gpu_tenant.wait_at_barrier(args)
acc = torch.zeros(side, 64, device=args.device)
rounds_done = 0
lower_bound = False
for _ in range(args.rounds):
    if args.cap_s is not None:
        # Only with a cap: a round's wait costs about 1 % of its 10 ms alone.
        synchronize()
        if time.time() - compute >= args.cap_s:
            lower_bound = True
            break
    for m in mats:
        acc += m @ w
    rounds_done += 1
synchronize()
end = time.time()
compute_s = end - compute
intact = all(m.double().sum().item() == s for m, s in zip(mats, sums))
print(json.dumps({
    "ok": intact and not lower_bound,
    "intact": intact,
    "matrices": count,
    "gib": round(count * side * side * 4 / 2**30, 2),
    "rounds": args.rounds,
    "rounds_done": rounds_done,
    "lower_bound": lower_bound,
    "alloc_s": round(alloc_s, 3),
    "compute_s": round(compute_s, 3),
    "wall_s": round(compute_s, 3),
    "mem_get_info_free": free,
    "mem_get_info_total": total,
    "acc_finite": bool(torch.isfinite(acc).all().item()),
    "checksum": acc.double().sum().item(),
    "seed": args.seed,
    "t_start": gpu_tenant.STARTED,
    "t_go": compute,
    "t_end": end,
}), flush=True)
