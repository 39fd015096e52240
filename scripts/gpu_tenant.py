"""What the PyTorch tenants of scripts/gpu-check.sh share (gpu-torch-tenant.py,
gpu-gpt-tenant.py, gpu-serve-tenant.py, gpu-notebook-tenant.py): the start time,
deterministic cuBLAS, the common flags, the barrier and the matrices the matrix-product
tenants hold. Import it before torch."""
import argparse
import os
import time

# The process's start, for the JSON's t_start: torch's import takes seconds.
STARTED = time.time()
# cuBLAS is deterministic only with a fixed workspace; it reads this when it starts.
os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"


def arguments():
    """A parser with the flags every tenant takes."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--barrier", help="write DIR/SEED.ready once set up, then wait for DIR/go")
    parser.add_argument("--cap-s", type=float, help="stop after this long past the start and say so")
    parser.add_argument("--device", default="cuda", help="cpu for a dry run without a GPU")
    return parser


def wait_at_barrier(args):
    """Says this tenant is ready and waits (two minutes at most) for the go, so that a
    pair computes at the same time with both set up; returns the time of the go."""
    if args.barrier:
        open(os.path.join(args.barrier, f"{args.seed}.ready"), "w").close()
        deadline = time.time() + 120
        while not os.path.exists(os.path.join(args.barrier, "go")) and time.time() < deadline:
            time.sleep(0.01)
    return time.time()


def facts(torch, args, go, end, memory=(None, None)):
    """What every tenant's last line ends with: its memory peaks (on a GPU), what
    cudaMemGetInfo said once it was set up (MEMORY: free and total bytes), the PyTorch
    version, the seed, and its start, go and end."""
    cuda = args.device == "cuda"
    return {
        "peak_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else None,
        "peak_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None,
        "mem_get_info_free": memory[0],
        "mem_get_info_total": memory[1],
        "torch": torch.__version__,
        "seed": args.seed,
        "t_start": STARTED,
        "t_go": go,
        "t_end": end,
    }


# 64 MiB per float32 matrix: large enough that a product is one efficient kernel.
MATRIX_SIDE = 4096


def matrices(gib, device, gen):
    """As many random float32 matrices of MATRIX_SIDE squared as fit in GIB, on DEVICE,
    drawn from the generator GEN (deterministic for a seed)."""
    import torch

    side = MATRIX_SIDE
    count = int(gib * 2**30 // (side * side * 4))
    return [torch.randn(side, side, device=device, generator=gen) for _ in range(count)]
