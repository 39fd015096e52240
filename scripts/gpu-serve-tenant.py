"""A bursty inference server for scripts/gpu-check.sh's sharing step (issue 40, G3): a
decoder shaped like OPT-1.3B (24 layers, d_model 2048, 32 heads, a ReLU MLP of 8192,
vocabulary 50272, learned positions; 1.3 B parameters in fp16, 2.6 GB) built from
torch.nn layers with random weights (nothing is downloaded), and a KV cache allocated
in full before the first request, as vLLM reserves its cache at start. Prints one JSON
line per request as it finishes, then one line for the run.

    LD_PRELOAD=libgpuswap_cuda.so python3 gpu-serve-tenant.py --cycles 3 --idle-s 20 --active-s 10

After the go it runs CYCLES cycles of IDLE_S seconds without a request (the process
launches nothing: the daemon may find it idle and demote it) and ACTIVE_S seconds of
requests arriving at RATE a second (a seeded Poisson process: bursts of arrivals close
together, gaps between them). Requests are served one at a time in arrival order,
greedy decoding, each in a KV cache slot of its own in turn. For each request the line
gives its TTFT (from its arrival to its first token, queueing included), its
inter-token gaps (each token is brought to the host, as a streaming server does) and
whether it was its burst's first: the one that finds the server demoted and pays its
wake-up. The run's line gives the idle windows (from the last request's end to the
next burst's first arrival), from which the sharing summary measures the trainer beside
it while the server idles.

`--selftest` checks the schedule and the bookkeeping without torch; a dry run on the
CPU at a small size takes seconds:

    python3 gpu-serve-tenant.py --device cpu --layers 2 --d-model 64 --heads 4 --ffn 128 \
        --vocab 100 --max-len 256 --kv-gib 0.01 --prompt 16 --new-tokens 4 --cycles 2 \
        --idle-s 1 --active-s 1
"""
import gpu_tenant  # first: it sets what torch reads when it starts

import json
import random
import sys
import time


def parse():
    parser = gpu_tenant.arguments()
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--active-s", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=6.0, help="requests a second while active")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens")
    # 16 tokens: about 0.1 s a request on an H200 by estimate (eager PyTorch, a few ms
    # a token), so that 6 requests a second keep the server about half busy while it
    # bursts and a slowdown beside the trainer shows in the latencies, not only in a queue.
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--kv-gib", type=float, default=6.0, help="the KV cache, allocated at start")
    parser.add_argument("--max-len", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--d-model", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--ffn", type=int, default=8192)
    parser.add_argument("--vocab", type=int, default=50272)
    return parser.parse_args()


def schedule(seed, cycles, idle_s, active_s, rate):
    """The requests' arrivals, seconds past the go, as (cycle, index in its burst, time):
    each cycle idles IDLE_S, then draws exponential gaps at RATE until ACTIVE_S is over.
    A burst without a draw inside its window still gets one request, at its start."""
    rng = random.Random(seed)
    arrivals = []
    for cycle in range(cycles):
        start = cycle * (idle_s + active_s) + idle_s
        at = start + rng.expovariate(rate)
        times = []
        while at < start + active_s:
            times.append(at)
            at += rng.expovariate(rate)
        for index, t in enumerate(times or [start]):
            arrivals.append((cycle, index, t))
    return arrivals


def idle_windows(arrivals, done):
    """Each cycle's idle window, seconds past the go: from the end of the last request
    served before the cycle's first arrival (the go for the first) to that arrival.
    DONE maps an arrival's position in ARRIVALS to its end (missing: not served)."""
    windows, last_end = [], 0.0
    for position, (cycle, index, at) in enumerate(arrivals):
        if index == 0:
            windows.append([round(last_end, 4), round(at, 4)])
        if position in done:
            last_end = max(last_end, done[position])
    return windows


def build(args, torch):
    """The decoder and its KV cache on the device."""
    nn, F = torch.nn, torch.nn.functional
    hd = args.d_model // args.heads

    class Layer(nn.Module):
        """OPT's pre-norm layer: self-attention over the cache, then a ReLU MLP."""

        def __init__(self, d):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, args.ffn), nn.Linear(args.ffn, d)

        def forward(self, x, k_cache, v_cache, pos):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, args.heads, hd).permute(2, 0, 3, 1, 4)
            k_cache[:, pos:pos + t] = k[0]
            v_cache[:, pos:pos + t] = v[0]
            keys, values = k_cache[None, :, :pos + t], v_cache[None, :, :pos + t]
            # A prompt starts at position 0, so its mask is the square causal one.
            y = F.scaled_dot_product_attention(q, keys, values, is_causal=t > 1)
            x = x + self.out(y.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.relu(self.fc1(self.ln2(x))))

    class Decoder(nn.Module):
        """Token and learned position embeddings (OPT's offset of 2), layers, a final
        norm, the output tied to the token embedding; logits of the last position."""

        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(args.vocab, args.d_model)
            self.positions = nn.Embedding(args.max_len + 2, args.d_model)
            self.layers = nn.ModuleList(Layer(args.d_model) for _ in range(args.layers))
            self.ln_f = nn.LayerNorm(args.d_model)

        def forward(self, tokens, cache, pos):
            at = torch.arange(pos, pos + tokens.shape[1], device=tokens.device) + 2
            x = self.tokens(tokens) + self.positions(at)
            for i, layer in enumerate(self.layers):
                x = layer(x, cache[i, 0], cache[i, 1], pos)
            return self.ln_f(x[:, -1]) @ self.tokens.weight.t()

    dtype = torch.float16 if args.device == "cuda" else torch.float32
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    # Built in its dtype: an fp32 model converted afterwards would leave 5 GB of freed
    # blocks in the caching allocator, counted in the peak the step sizes VRAM from.
    torch.set_default_dtype(dtype)
    with device:
        model = Decoder().eval()
    torch.set_default_dtype(torch.float32)
    slot_bytes = args.layers * 2 * args.max_len * args.d_model * (2 if dtype == torch.float16 else 4)
    slots = max(1, int(args.kv_gib * 2**30 // slot_bytes))
    # [slot, layer, key or value, head, position, head dim]: one slot is one view.
    cache = torch.zeros(slots, args.layers, 2, args.heads, args.max_len, hd, dtype=dtype, device=device)
    return model, cache


def generate(args, model, cache, prompt):
    """One request: the prompt's prefill, then greedy decoding; the time of each token
    on the host (bringing it there waits for the GPU)."""
    times = []
    token = model(prompt, cache, 0).argmax(-1)
    token.item()  # the token on the host, as a streaming server sends it
    times.append(time.time())
    pos = prompt.shape[1]
    for _ in range(args.new_tokens - 1):
        token = model(token.view(1, 1), cache, pos).argmax(-1)
        token.item()
        times.append(time.time())
        pos += 1
    return times


def serve(args):
    import torch

    cuda = args.device == "cuda"

    def synchronize():
        if cuda:
            torch.cuda.synchronize()

    # Nothing here is trained: no autograd.
    with torch.no_grad():
        model, cache = build(args, torch)
        gen = torch.Generator(device=args.device).manual_seed(args.seed + 1000)

        def prompt():
            return torch.randint(0, args.vocab, (1, args.prompt), device=args.device, generator=gen)

        # One request before the go: kernels loaded, cuBLAS set up, none of it timed.
        generate(args, model, cache[0], prompt())
        synchronize()
        free, total = torch.cuda.mem_get_info() if cuda else (None, None)
        arrivals = schedule(args.seed, args.cycles, args.idle_s, args.active_s, args.rate)
        prompts = [prompt() for _ in arrivals]
        synchronize()
        go = gpu_tenant.wait_at_barrier(args)
        done, served, lower_bound = {}, 0, False
        for position, (cycle, index, at) in enumerate(arrivals):
            if args.cap_s is not None and time.time() - go >= args.cap_s:
                lower_bound = True
                break
            wait = go + at - time.time()
            if wait > 0:
                time.sleep(wait)  # idle: nothing launched, nothing pending
            start = time.time()
            times = generate(args, model, cache[position % len(cache)], prompts[position])
            done[position] = times[-1] - go
            served += 1
            gaps = [b - a for a, b in zip(times, times[1:])]
            print(json.dumps({
                "kind": "request",
                "cycle": cycle,
                "index": index,
                "first_of_burst": index == 0,
                "arrival_s": round(at, 4),
                "queue_s": round(max(start - go - at, 0.0), 5),
                "ttft_s": round(times[0] - go - at, 5),
                "tpot_s": round(sum(gaps) / len(gaps), 6) if gaps else None,
                "itl_s": [round(g, 6) for g in gaps],
                "e2e_s": round(times[-1] - go - at, 5),
            }), flush=True)
        end = time.time()
    print(json.dumps({
        "kind": "run",
        "ok": not lower_bound and served == len(arrivals),
        "requests": len(arrivals),
        "served": served,
        "lower_bound": lower_bound,
        "wall_s": round(end - go, 3),
        "idle_windows_s": idle_windows(arrivals, done),
        "cycles": args.cycles,
        "idle_s": args.idle_s,
        "active_s": args.active_s,
        "rate": args.rate,
        "prompt": args.prompt,
        "new_tokens": args.new_tokens,
        "params": sum(p.numel() for p in model.parameters()),
        "kv_cache_bytes": cache.numel() * cache.element_size(),
        "kv_slots": len(cache),
        **gpu_tenant.facts(torch, args, go, end, (free, total)),
    }), flush=True)


def selftest():
    """The schedule and the idle windows on made-up ends."""
    a = schedule(7, 3, 20.0, 10.0, 6.0)
    assert a == schedule(7, 3, 20.0, 10.0, 6.0), "the same seed gives the same arrivals"
    for cycle in range(3):
        times = [t for c, _, t in a if c == cycle]
        assert all(20 + 30 * cycle <= t < 30 + 30 * cycle for t in times), times
        assert [i for c, i, _ in a if c == cycle] == list(range(len(times)))
    # About 6 a second for 30 s in all: a Poisson count of mean 180.
    assert 120 < len(a) < 240, len(a)
    # A rate too low for a draw still gives each burst its first request.
    assert [(c, i) for c, i, _ in schedule(1, 2, 1.0, 0.001, 0.001)] == [(0, 0), (1, 0)]
    arrivals = [(0, 0, 2.0), (0, 1, 2.5), (1, 0, 6.0), (1, 1, 6.1)]
    assert idle_windows(arrivals, {0: 2.4, 1: 3.0, 2: 6.5, 3: 6.9}) == [[0.0, 2.0], [3.0, 6.0]]
    # A request still running when the next burst begins leaves that window empty.
    assert idle_windows(arrivals, {0: 2.4, 1: 7.0}) == [[0.0, 2.0], [7.0, 6.0]]
    print("selftest: 5 passed, 0 failed")


if __name__ == "__main__":
    if sys.argv[1:] == ["--selftest"]:
        selftest()
    else:
        serve(parse())
