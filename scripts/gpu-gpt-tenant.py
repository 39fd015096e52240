"""A GPT-style trainer for scripts/gpu-check.sh's sharing step (issue 38): about 0.9 B
parameters with random weights and random tokens (nothing is downloaded), bf16 autocast,
AdamW, a fixed number of steps; deterministic, so that the same seed gives the same loss
sequence and the same parameters bit for bit, alone or sharing the GPU under gpuswap.
Prints one JSON line.

    LD_PRELOAD=libgpuswap_cuda.so python3 gpu-gpt-tenant.py --seed 4 --steps 60

Its memory at the defaults (22 layers, d_model 1792, 16 heads, vocab 32000, seq 512,
batch 8), which gpu-check.sh's `--vram 36GiB` is sized from:
  parameters 22 x (12 d^2 + 13 d) + (32000 + 512) d + 2 d = 906,551,296 (0.91 B);
  fp32 parameters, gradients and AdamW's two moments, 16 bytes each: 14.5 GB (13.5 GiB);
  autocast's bf16 copies of the weights, 2 bytes each: 1.8 GB;
  activations kept for the backward pass, about 36 d bytes per token and layer in bf16
  (the fp32 residual and layer-norm inputs included, flash attention keeping no scores):
  36 x 1792 x 4096 tokens x 22 layers = 5.8 GB;
  logits and the loss: 4096 tokens x 32000 x (2 + 4 + 4 + 4 + 2) bytes = 2.1 GB;
  about 24 GB (22.5 GiB) at the peak, before the caching allocator's rounding.
So one fits 36 GiB with 10 GiB to spare and two (45 GiB) do not: each is about 0.6 of
it, as issue 38's G1 asks. The JSON gives the measured peak (`peak_reserved_bytes`).

Issue 40's benchmarks use two more flags. `--cold-gib 12` adds a cold table (G2): a
float32 tensor allocated and filled before the model, then never touched until its
checksum after the timed steps (a frozen embedding table or a replay buffer that a step
does not read); it has its own generator, so the losses are those of the run without
it. `--duration-s` trains until that long past the go instead of a number of steps (the
trainer beside a bursty server, G3). `step_ends_s` gives each step's end from the go,
from which the sharing summary takes the throughput in any window.
"""
import gpu_tenant  # first: it sets what torch reads when it starts

import hashlib
import json
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = gpu_tenant.arguments()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--layers", type=int, default=22)
parser.add_argument("--d-model", type=int, default=1792)
parser.add_argument("--heads", type=int, default=16)
parser.add_argument("--vocab", type=int, default=32000)
parser.add_argument("--seq", type=int, default=512)
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--cold-gib", type=float, default=0.0, help="a cold table of this size (G2)")
parser.add_argument("--duration-s", type=float, help="train until this long past the go (ignores --steps)")
args = parser.parse_args()


class Block(nn.Module):
    """A pre-norm transformer block: causal self-attention, then a GELU MLP."""

    def __init__(self, d, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (
            y.view(b, t, self.heads, d // self.heads).transpose(1, 2)
            for y in self.qkv(self.ln1(x)).split(d, dim=2)
        )
        y = self.attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    """Token and position embeddings, blocks, a final norm, the output tied to the tokens'."""

    def __init__(self, attention):
        super().__init__()
        self.wte = nn.Embedding(args.vocab, args.d_model)
        self.wpe = nn.Embedding(args.seq, args.d_model)
        self.blocks = nn.ModuleList(
            Block(args.d_model, args.heads, attention) for _ in range(args.layers)
        )
        self.ln_f = nn.LayerNorm(args.d_model)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def math_attention(q, k, v):
    """Causal attention from plain products: deterministic wherever matmul is."""
    t = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    return scores.masked_fill(~mask, float("-inf")).softmax(-1).to(v.dtype) @ v


def sdpa_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def pick_attention(device):
    """Recent PyTorch runs flash attention's backward deterministically in deterministic
    mode; where it refuses instead, plain products take its place. A small trial says
    which, before any real work."""
    try:
        shape = (1, 2, 16, args.d_model // args.heads)
        q, k, v = (
            torch.randn(shape, device=device, dtype=torch.bfloat16, requires_grad=True)
            for _ in range(3)
        )
        sdpa_attention(q, k, v).float().sum().backward()
        return sdpa_attention, "sdpa"
    except RuntimeError:
        return math_attention, "math"


def adamw(params, device):
    """AdamW, fused where this PyTorch has it for the device (one pass, no temporaries)."""
    settings = dict(lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    try:
        return torch.optim.AdamW(params, fused=True, **settings), "fused"
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(params, **settings), "foreach"


def init_weights(module):
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear):
        nn.init.zeros_(module.bias)


# The cold table's checksum is taken in pieces of 64 MiB, each summed in float64: a
# float64 copy of the whole table would need twice its size in VRAM.
COLD_PIECE = 16 << 20


def cold_table(device):
    """The cold table (None without --cold-gib), filled from its own generator."""
    if args.cold_gib <= 0:
        return None
    gen = torch.Generator(device=device).manual_seed(args.seed + 2000)
    table = torch.empty(int(args.cold_gib * 2**30) // 4, device=device)
    return table.normal_(generator=gen)


def checksum(table):
    """TABLE's float64 sum, piece by piece (None without a table)."""
    if table is None:
        return None
    return torch.stack([p.double().sum() for p in table.split(COLD_PIECE)]).sum().item()


def main():
    cuda = args.device == "cuda"
    device = torch.device(args.device)
    # First, as a frozen table loaded before the model: the longest time to turn cold.
    cold = cold_table(device)
    cold_sum = checksum(cold)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)

    attention, attention_name = pick_attention(device)
    torch.manual_seed(args.seed)
    with device:
        model = GPT(attention)
    model.apply(init_weights)
    params = list(model.parameters())
    # Gradients exist from the start and are zeroed in place, so that they are allocated
    # before the barrier and the backward pass touches the same memory every step.
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer, optimizer_name = adamw(params, device)
    gen = torch.Generator(device=device).manual_seed(args.seed + 1000)
    # Four batches in turn: the loss falls as the model learns them by heart.
    data = torch.randint(0, args.vocab, (4, args.batch, args.seq + 1), device=device, generator=gen)
    if cuda:
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
    else:
        free = total = None
    build_s = time.time() - gpu_tenant.STARTED
    go = gpu_tenant.wait_at_barrier(args)
    losses, step_times, step_ends = [], [], []
    lower_bound = False
    step = 0

    def more():
        if args.duration_s is None:
            return step < args.steps
        return time.time() - go < args.duration_s

    while more():
        if args.cap_s is not None and time.time() - go >= args.cap_s:
            lower_bound = True
            break
        started = time.time()
        batch = data[step % len(data)]
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.float().view(-1, args.vocab), batch[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        losses.append(loss.item())  # waits for the step: the step times are the GPU's
        step_times.append(time.time() - started)
        step_ends.append(round(time.time() - go, 4))
        step += 1
    end = time.time()
    params_sum = torch.stack([p.detach().double().sum() for p in params]).sum().item()
    # After the timed steps: reading the cold table back costs a remote read of it.
    cold_intact = None if cold is None else checksum(cold) == cold_sum
    steady = step_times[1:] or step_times
    finished = len(losses) == args.steps if args.duration_s is None else not lower_bound
    print(json.dumps({
        "ok": finished and bool(losses) and all(map(math.isfinite, losses)) and cold_intact is not False,
        "steps": len(losses),
        "steps_asked": args.steps if args.duration_s is None else None,
        "duration_s": args.duration_s,
        "lower_bound": lower_bound,
        "wall_s": round(end - go, 3),
        "step_s": round(sum(steady) / max(len(steady), 1), 4),
        "first_step_s": round(step_times[0], 3) if step_times else None,
        "build_s": round(build_s, 3),
        "loss_first": losses[0] if losses else None,
        "loss": losses[-1] if losses else None,
        "loss_hash": hashlib.sha256(json.dumps(losses).encode()).hexdigest()[:16],
        "checksum": params_sum,
        "cold_bytes": 0 if cold is None else cold.numel() * 4,
        "cold_intact": cold_intact,
        "step_ends_s": step_ends,
        "params": sum(p.numel() for p in params),
        "layers": args.layers,
        "d_model": args.d_model,
        "batch": args.batch,
        "seq": args.seq,
        "attention": attention_name,
        "optimizer": optimizer_name,
        **gpu_tenant.facts(torch, args, go, end, (free, total)),
    }), flush=True)


main()
