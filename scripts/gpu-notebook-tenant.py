"""A mostly idle "notebook" for scripts/gpu-check.sh's sharing step (issue 40, G3): holds
GIB of float32 matrices (a model and its data, loaded once) and now and then runs a
cell: ROUNDS rounds of multiplying each matrix by a small one, so that a cell reads all
of its memory. Between cells it thinks: seeded exponential pauses of mean THINK_S
seconds, in which it launches nothing (the daemon may find it idle and demote it).
Prints one JSON line per cell as it ends, then one line for the run.

    LD_PRELOAD=libgpuswap_cuda.so python3 gpu-notebook-tenant.py --gib 7 --think-s 20 --duration-s 100

A cell's first operation is a tiny one (a sum of one element, brought to the host): its
time is the cell's wake-up delay, since the interposer holds a demoted process's first
launch until its memory is back. Each cell line gives the pause before it, the wake-up,
the whole cell's time and whether it met an out-of-memory error (the benchmark's must be
0: a notebook under gpuswap waits or spills, it never fails); the run's line counts
them and says whether every matrix still sums as it did at the start.

`--selftest` checks the schedule without torch; a dry run on the CPU at a small size:

    python3 gpu-notebook-tenant.py --device cpu --gib 0.0625 --rounds 1 --think-s 0.5 --duration-s 2
"""
import gpu_tenant  # first: it sets what torch reads when it starts

import json
import random
import sys
import time


def parse():
    parser = gpu_tenant.arguments()
    parser.add_argument("--gib", type=float, default=7.0)
    parser.add_argument("--think-s", type=float, default=20.0, help="the mean pause between cells")
    parser.add_argument("--duration-s", type=float, default=100.0, help="no cell starts after this")
    parser.add_argument("--rounds", type=int, default=10, help="rounds over the matrices in a cell")
    return parser.parse_args()


def pauses(seed, think_s, duration_s):
    """When the cells start, seconds past the go: the first after a uniform share of one
    mean pause (so that the notebooks do not start together), then exponential pauses
    of mean THINK_S; every start before DURATION_S. The pauses are from one cell's
    start to the next's; a cell that runs longer delays the ones after it."""
    rng = random.Random(seed)
    at, starts = rng.uniform(0, think_s), []
    while at < duration_s:
        starts.append(at)
        at += rng.expovariate(1 / think_s)
    return starts


def out_of_memory(torch, error):
    """Whether ERROR is PyTorch's out-of-memory error (a RuntimeError before 1.13)."""
    kind = getattr(torch.cuda, "OutOfMemoryError", None)
    return (kind is not None and isinstance(error, kind)) or "out of memory" in str(error)


def run(args):
    import torch

    cuda = args.device == "cuda"

    def synchronize():
        if cuda:
            torch.cuda.synchronize()

    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    try:
        mats = gpu_tenant.matrices(args.gib, args.device, gen)
        w = torch.randn(gpu_tenant.MATRIX_SIDE, 64, device=args.device, generator=gen)
        sums = [m.double().sum().item() for m in mats]
    except RuntimeError as error:
        if not out_of_memory(torch, error):
            raise
        print(json.dumps({"kind": "run", "ok": False, "ooms": 1, "oom_at": "load", "seed": args.seed}), flush=True)
        sys.exit(1)
    synchronize()
    memory = torch.cuda.mem_get_info() if cuda else (None, None)
    go = gpu_tenant.wait_at_barrier(args)
    cells, ooms, previous_end, lower_bound = 0, 0, 0.0, False
    for at in pauses(args.seed, args.think_s, args.duration_s):
        if args.cap_s is not None and time.time() - go >= args.cap_s:
            lower_bound = True
            break
        wait = go + at - time.time()
        if wait > 0:
            time.sleep(wait)  # thinking: nothing launched, nothing pending
        start = time.time()
        oom = False
        wake_s = None
        try:
            mats[0][0, :1].sum().item()
            wake_s = time.time() - start
            acc = torch.zeros(gpu_tenant.MATRIX_SIDE, 64, device=args.device)
            for _ in range(args.rounds):
                for m in mats:
                    acc += m @ w
            acc.sum().item()
        except RuntimeError as error:
            if not out_of_memory(torch, error):
                raise
            oom = True
            ooms += 1
        end = time.time()
        cells += 1
        print(json.dumps({
            "kind": "cell",
            "start_s": round(start - go, 4),
            "idle_before_s": round(start - go - previous_end, 4),
            "wake_s": None if wake_s is None else round(wake_s, 5),
            "cell_s": round(end - start, 5),
            "oom": oom,
        }), flush=True)
        previous_end = end - go
    end = time.time()
    intact = all(m.double().sum().item() == s for m, s in zip(mats, sums))
    print(json.dumps({
        "kind": "run",
        "ok": intact and ooms == 0 and not lower_bound,
        "intact": intact,
        "cells": cells,
        "ooms": ooms,
        "lower_bound": lower_bound,
        "wall_s": round(end - go, 3),
        "bytes": sum(m.numel() * 4 for m in mats),
        "matrices": len(mats),
        "rounds": args.rounds,
        "think_s": args.think_s,
        "duration_s": args.duration_s,
        **gpu_tenant.facts(torch, args, go, end, memory),
    }), flush=True)


def selftest():
    starts = pauses(61, 20.0, 100.0)
    assert starts == pauses(61, 20.0, 100.0), "the same seed gives the same cells"
    assert starts and starts[0] < 20.0 and all(s < 100.0 for s in starts), starts
    assert starts == sorted(starts), starts
    # Over many notebooks, about DURATION / THINK cells each.
    counts = [len(pauses(seed, 20.0, 100.0)) for seed in range(200)]
    assert 3.5 < sum(counts) / len(counts) < 6.5, sum(counts) / len(counts)
    assert pauses(1, 20.0, 0.0) == []
    print("selftest: 4 passed, 0 failed")


if __name__ == "__main__":
    if sys.argv[1:] == ["--selftest"]:
        selftest()
    else:
        run(parse())
