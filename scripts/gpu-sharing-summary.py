"""The arithmetic of scripts/gpu-check.sh's sharing step (issues 38 and 40): reads what
the step left in its folder and prints one JSON line.

    gpu-sharing-summary.py cap --alone FILE --times 6 --floor 30 --ceiling 60 --default 60
    gpu-sharing-summary.py vram --default-gib 50 --ceiling-gib 128 [--plus-gib 24] FILE:FACTOR...
    gpu-sharing-summary.py alone --dir OUT --workload mm
    gpu-sharing-summary.py pair --dir OUT --workload mm --gpu-time turns --vram-bytes N
    gpu-sharing-summary.py cold --dir OUT --workload cold --reference gpt-alone
    gpu-sharing-summary.py burst --dir OUT --workload burst
    gpu-sharing-summary.py notebooks --dir OUT --workload notebooks
    gpu-sharing-summary.py --selftest

A run RUN (`mm-alone`, `mm-turns`, ...) left, for each tenant WHO (p, q): RUN-WHO.json
(the tenant's JSON line), RUN-WHO.rc (its exit status), RUN-WHO.cap (its cap in seconds),
RUN-WHO.killed (present if the step ended it at its cap); top-RUN-N.json (`gpuswap top
--json` during the run, the last after it), daemon-RUN.log, and RUN.nodaemon if the
daemon did not start. The alone runs ran one after the other: back-to-back.

Issue 40's runs leave the same files under their own names: `cold-enough` and
`cold-tight` (the GPT pair with a cold table each, tenants p and q), `burst-server`,
`burst-trainer` and `burst-pair` (tenants server and trainer), `notebooks` (tenants n1
to n6). The server and the notebooks write a JSON line per request or cell before their
run's line, which comes last.
"""
import argparse
import glob
import json
import math
import os
import re
import statistics
import sys

WHO = ("p", "q")
# Issue 38's goals.
G1_MAKESPAN_X = 1.10
G1_SLOWDOWN_X = 2.3
G4_BATCH_CHUNKS = 256
G4_GB_PER_S = 25.0
# Issue 40's goals: G2's makespan against the same pair with enough VRAM; G3's p99
# latencies against the server alone, the trainer's share of its alone throughput while
# the server idles, and a demoted tenant's wake-up (its hot bytes at 25 GB/s, plus 50 ms).
G2_MAKESPAN_X = 1.05
G3_P99_X = 1.25
G3_TRAINER_SHARE = 0.90
G3_WAKE_GB_PER_S = 25.0
G3_WAKE_EXTRA_S = 0.05
# The daemon demotes an idle tenant after demote_after (default 5 s): the trainer's
# throughput is also given for the server's idle windows past it, once it has settled.
DEMOTE_AFTER_S = 5.0
# What must match the tenant's run alone, where the tenant reports it.
RESULT_KEYS = ("checksum", "loss", "loss_hash")


def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def read_json_line(path):
    """The last line of PATH that parses as a JSON object for the whole run (not a
    request's or a cell's line, which say their "kind"), else None."""
    for line in reversed((read_text(path) or "").splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("kind", "run") == "run":
            return value
    return None


def read_json_lines(path, kind):
    """The JSON objects of PATH whose "kind" is KIND, in order."""
    rows = []
    for line in (read_text(path) or "").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("kind") == kind:
            rows.append(value)
    return rows


def read_json(path):
    try:
        value = json.loads(read_text(path) or "")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def read_number(path):
    try:
        return float((read_text(path) or "").strip())
    except ValueError:
        return None


def cap_s(alone, times, floor, ceiling, default):
    """A run's cap: TIMES its time alone, within FLOOR and CEILING; DEFAULT without one."""
    wall = (alone or {}).get("wall_s")
    if not wall or (alone or {}).get("lower_bound"):
        return int(default)
    return int(math.ceil(min(max(times * wall, floor), ceiling)))


def vram_gib(specs, plus_gib, default_gib, ceiling_gib):
    """VRAM for a run in whole GiB, from the peaks of runs alone: the sum of each FILE's
    peak_reserved_bytes times its FACTOR (SPECS are FILE:FACTOR), plus PLUS_GIB; at most
    CEILING_GIB (what the device holds); DEFAULT_GIB (capped alike) where a peak is missing."""
    total = 0.0
    for spec in specs:
        path, factor = spec.rsplit(":", 1)
        peak = (read_json_line(path) or {}).get("peak_reserved_bytes")
        if not peak:
            return int(min(default_gib, ceiling_gib))
        total += peak * float(factor) / 2**30
    return int(min(math.ceil(total + plus_gib), ceiling_gib))


def percentile(values, q):
    """The Q-th percentile of VALUES, interpolated between the closest ranks (numpy's
    default); None for none."""
    ordered = sorted(values)
    if not ordered:
        return None
    at = (len(ordered) - 1) * q / 100
    low = int(math.floor(at))
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def spread(values, digits=5):
    """p50, p99 and the maximum of VALUES, rounded; None for none."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {
        "count": len(values),
        "p50": round(percentile(values, 50), digits),
        "p99": round(percentile(values, 99), digits),
        "max": round(max(values), digits),
    }


def tenant(folder, run, who):
    """One tenant of a run: its time from the start (or a lower bound), and its result."""
    base = os.path.join(folder, f"{run}-{who}")
    result = read_json_line(base + ".json")
    rc = read_number(base + ".rc")
    cap = read_number(base + ".cap")
    killed = os.path.exists(base + ".killed")
    row = {"rc": None if rc is None else int(rc), "result": result}
    if result is not None and result.get("wall_s") is not None:
        row["time_s"] = result["wall_s"]
        row["lower_bound"] = bool(result.get("lower_bound"))
    elif killed or row["rc"] in (124, 137):
        # Ended at its cap without a word: it needed at least the cap.
        row["time_s"] = cap
        row["lower_bound"] = True
    else:
        row["time_s"] = None
        row["lower_bound"] = False
    row["finished"] = row["rc"] == 0 and bool(result and result.get("ok"))
    return row


def shown(row):
    """A tenant's row as a summary line gives it: its result without lists of more than
    16 entries (a trainer's step ends), which stay in the tenant's own file."""
    result = row["result"]
    if result:
        result = {k: v for k, v in result.items() if not (isinstance(v, list) and len(v) > 16)}
    return dict(row, result=result)


def alone_summary(folder, workload):
    run = f"{workload}-alone"
    rows = {who: tenant(folder, run, who) for who in WHO}
    times = [rows[w]["time_s"] for w in WHO]
    exact = all(t is not None for t in times) and not any(rows[w]["lower_bound"] for w in WHO)
    starts = [(rows[w]["result"] or {}).get("t_start") for w in WHO]
    ends = [(rows[w]["result"] or {}).get("t_end") for w in WHO]
    line = {
        "step": "sharing-alone",
        "workload": workload,
        "daemon": daemon_state(folder, run),
        "back_to_back_s": round(sum(times), 3) if exact else None,
        # The same two runs from the first's start to the second's end, start-ups in.
        "back_to_back_process_s": round(ends[1] - starts[0], 3)
        if starts[0] and ends[1] else None,
    }
    for who in WHO:
        line[who] = shown(rows[who])
    return line


def run_times(folder, run, whos):
    """A run's tenants, its makespan (None unless every tenant has a time) and whether
    any time is a lower bound."""
    rows = {who: tenant(folder, run, who) for who in whos}
    times = [rows[w]["time_s"] for w in whos]
    makespan = round(max(times), 3) if all(t is not None for t in times) else None
    return rows, makespan, any(rows[w]["lower_bound"] for w in whos)


def daemon_state(folder, run):
    if os.path.exists(os.path.join(folder, f"{run}.nodaemon")):
        log = (read_text(os.path.join(folder, f"daemon-{run}.log")) or "").strip()
        return {"started": False, "log": log.splitlines()[-3:]}
    return {"started": True}


def snapshots(folder, run):
    """The daemon's snapshots during and after RUN, in the order taken."""
    paths = glob.glob(os.path.join(folder, f"top-{run}-*.json"))
    number = lambda p: int(re.sub(r"\D", "", p.rsplit("-", 1)[-1]) or 0)  # noqa: E731
    return [s for s in (read_json(p) for p in sorted(paths, key=number)) if s]


def batch_direction(batch):
    to_host, to_vram = batch.get("to_host_chunks", 0), batch.get("to_vram_chunks", 0)
    if to_vram == 0:
        return "to_host"
    if to_host == 0:
        return "to_vram"
    return "mixed"


def moves(snaps):
    """Handovers, bulk moves and their GB/s from the snapshots (fields that an older
    daemon lacks are left out)."""
    out = {}
    said = [s["gpu_time"] for s in snaps if "gpu_time" in s]
    if said:
        # What the daemon says it did, beside what the step asked of it.
        out["daemon_gpu_time"] = said[-1]
    for key in ("handovers", "batch_moved_bytes", "switches"):
        values = [s[key] for s in snaps if key in s]
        if values:
            out[key] = max(values)
    choices = [s["choice"] for s in snaps if s.get("choice")]
    if choices:
        # Under auto: how the GPU's time was taken (share or turns), as first seen.
        out["choices_seen"] = list(dict.fromkeys(choices))
    rows = [t for s in snaps for t in s.get("tenants") or []]
    slowdowns = {}
    for t in rows:
        if t.get("slowdown"):
            slowdowns.setdefault(t.get("name", "?"), []).append(t["slowdown"])
    if slowdowns:
        out["slowdown_estimates"] = {n: {"last": round(v[-1], 3), "max": round(max(v), 3)} for n, v in slowdowns.items()}
    if any(t.get("turn") == "demoted" for t in rows):
        # Snapshots (one a second) in which each tenant was seen demoted.
        out["demoted_snapshots"] = {}
        for t in rows:
            if t.get("turn") == "demoted":
                name = t.get("name", "?")
                out["demoted_snapshots"][name] = out["demoted_snapshots"].get(name, 0) + 1
    turns = [[t.get("turn") for t in s.get("tenants") or []] for s in snaps]
    if any(any(turn) for turn in turns):
        # Under turns one tenant at most holds the GPU at any moment.
        out["most_holders_seen"] = max(turn.count("holder") for turn in turns)
    # A snapshot keeps the latest 16 batches: the union over the snapshots, in order.
    seen, batches = set(), []
    for snap in snaps:
        for b in snap.get("batches") or []:
            key = json.dumps(b, sort_keys=True)
            if key not in seen:
                seen.add(key)
                batches.append(b)
    if any("batches" in snap for snap in snaps):
        out["batches"] = len(batches)
        by_dir = {}
        for b in batches:
            by_dir.setdefault(batch_direction(b), []).append(b)
        out["batch_gb_per_s"] = {
            d: {
                "count": len(bs),
                "chunks": sum(b.get("to_host_chunks", 0) + b.get("to_vram_chunks", 0) for b in bs),
                "min": round(min(b.get("gb_per_s", 0.0) for b in bs), 2),
                "median": round(statistics.median(b.get("gb_per_s", 0.0) for b in bs), 2),
                "max": round(max(b.get("gb_per_s", 0.0) for b in bs), 2),
            }
            for d, bs in sorted(by_dir.items())
        }
        out["g4_by_direction"] = {d: g4(by_dir.get(d, [])) for d in ("to_host", "to_vram")}
    return out


def g4(batches):
    """Whether every batch of 256 or more chunks moved at 25 GB/s or more; None if none did."""
    large = [
        b for b in batches
        if b.get("to_host_chunks", 0) + b.get("to_vram_chunks", 0) >= G4_BATCH_CHUNKS
    ]
    if not large:
        return None
    return all(b.get("gb_per_s", 0.0) >= G4_GB_PER_S for b in large)


def daemon_totals(folder, run):
    """Each tenant's bytes moved, from the daemon's line when it left."""
    log = read_text(os.path.join(folder, f"daemon-{run}.log")) or ""
    names = dict(re.findall(r'connected: pid (\d+), "([^"]*)"', log))
    totals = {}
    gone = r"\(pid (\d+)\) gone: [^;]*; (\d+) bytes evicted, (\d+) returned, (\d+) chunk moves"
    for pid, evicted, returned, chunk_moves in re.findall(gone, log):
        totals[names.get(pid, pid)] = {
            "evicted_bytes": int(evicted),
            "returned_bytes": int(returned),
            "chunk_moves": int(chunk_moves),
        }
    return totals


def daemon_switches(folder, run):
    """Auto's switches as the daemon logged them: the way it took and its reason."""
    log = read_text(os.path.join(folder, f"daemon-{run}.log")) or ""
    return [{"to": to, "reason": why} for to, why in re.findall(r"gpu time: (\w+) \((.*)\)\s*$", log, re.M)]


def same_result(pair_result, alone_result):
    """Whether the pair's run of a job ended as its run alone; None if either did not end."""
    if not pair_result or not alone_result:
        return None
    if pair_result.get("lower_bound") or alone_result.get("lower_bound"):
        return None
    keys = [k for k in RESULT_KEYS if k in alone_result]
    if not keys:
        return None
    return all(pair_result.get(k) == alone_result[k] for k in keys) and bool(pair_result.get("ok"))


def verdict(measured_x, lower_bound, limit):
    """A goal's boolean: met, missed (a lower bound past the limit misses too), or None."""
    return at_most(measured_x, limit, lower_bound, False)


def at_most(x, limit, is_lower_bound, is_upper_bound):
    """Whether a measured X is within LIMIT, where X may be a lower bound (the truth is
    X or more: it can only miss) or an upper bound (the truth is X or less: it can only
    meet); None where the bounds leave it open."""
    if x is None or (is_lower_bound and is_upper_bound):
        return None
    if x > limit:
        return None if is_upper_bound else False
    return None if is_lower_bound else True


def pair_summary(folder, workload, gpu_time, vram_bytes):
    run = f"{workload}-{gpu_time}"
    line = {"step": "sharing-pair", "workload": workload, "gpu_time": gpu_time, "daemon": daemon_state(folder, run)}
    alone = {who: tenant(folder, f"{workload}-alone", who) for who in WHO}
    pair, line["makespan_s"], bound = run_times(folder, run, WHO)
    alone_s = {w: alone[w]["time_s"] for w in WHO}
    alone_exact = all(alone_s[w] and not alone[w]["lower_bound"] for w in WHO)
    times = {w: pair[w]["time_s"] for w in WHO}
    line["back_to_back_s"] = round(sum(alone_s.values()), 3) if alone_exact else None
    line["lower_bound"] = bound
    if alone_exact and line["makespan_s"] is not None:
        slow = {w: times[w] / alone_s[w] for w in WHO}
        line["slowdown"] = {w: round(slow[w], 3) for w in WHO}
        # With a lower bound on a time, STP is an upper bound and ANTT a lower one.
        line["stp"] = round(sum(1 / slow[w] for w in WHO), 3)
        line["antt"] = round(sum(slow.values()) / len(WHO), 3)
        line["makespan_x_back_to_back"] = round(line["makespan_s"] / line["back_to_back_s"], 3)
    line["same_as_alone"] = {w: same_result(pair[w]["result"], alone[w]["result"]) for w in WHO}
    line["rc"] = {w: pair[w]["rc"] for w in WHO}
    line["tenants"] = {w: shown(row) for w, row in pair.items()}
    line.update(moves(snapshots(folder, run)))
    line["switches_logged"] = daemon_switches(folder, run)
    line["daemon_totals"] = daemon_totals(folder, run)
    peaks = [(alone[w]["result"] or {}).get("peak_reserved_bytes") for w in WHO]
    if vram_bytes and all(peaks):
        # The sizing the step relies on: each alone fits, the two together do not.
        line["each_fits_alone"] = max(peaks) <= vram_bytes
        line["pair_exceeds_vram"] = sum(peaks) > vram_bytes
    line["g1"] = g1(line, pair)
    line["g4"] = goal_g4(line.get("g4_by_direction"))
    return line


def g1(line, pair):
    """G1: makespan within 1.10x of back-to-back, neither job slowed more than 2.3x, both
    finished with the results they have alone."""
    if "slowdown" not in line:
        return None
    failed = any(
        pair[w]["time_s"] is not None and not pair[w]["lower_bound"] and not pair[w]["finished"]
        for w in WHO
    )
    wrong = any(v is False for v in line["same_as_alone"].values())
    if failed or wrong:
        return False
    goals = [
        verdict(line["makespan_x_back_to_back"], line["lower_bound"], G1_MAKESPAN_X),
        verdict(max(line["slowdown"].values()), line["lower_bound"], G1_SLOWDOWN_X),
    ]
    if False in goals:
        return False
    if None in goals or None in line["same_as_alone"].values():
        return None
    return True


def goal_g4(by_direction):
    if not by_direction:
        return None
    values = list(by_direction.values())
    if False in values:
        return False
    return True if all(v is True for v in values) else None


def result_of(row, key):
    return (row["result"] or {}).get(key)


def cold_run(folder, run, reference):
    """One run of the cold pair: makespan, how far its memory overflowed the VRAM (the
    tenants' peaks over the managed VRAM, with and without their cold tables), whether
    each job ended as its REFERENCE run alone (same seeds, no table) and kept its table."""
    rows, makespan, bound = run_times(folder, run, WHO)
    snaps = snapshots(folder, run)
    vram = max((s.get("vram_bytes") or 0 for s in snaps), default=0)
    entry = {"daemon": daemon_state(folder, run), "vram_bytes": vram or None,
             "makespan_s": makespan, "lower_bound": bound}
    peaks = [result_of(rows[w], "peak_reserved_bytes") for w in WHO]
    colds = [result_of(rows[w], "cold_bytes") for w in WHO]
    if vram and all(peaks) and all(c is not None for c in colds):
        entry["allocated_x_vram"] = round(sum(peaks) / vram, 3)
        entry["hot_x_vram"] = round((sum(peaks) - sum(colds)) / vram, 3)
    entry["cold_intact"] = {w: result_of(rows[w], "cold_intact") for w in WHO}
    entry["same_as_alone"] = {
        w: same_result(rows[w]["result"], tenant(folder, reference, w)["result"]) for w in WHO
    }
    entry["failed"] = [
        w for w in WHO
        if rows[w]["time_s"] is not None and not rows[w]["lower_bound"] and not rows[w]["finished"]
    ]
    entry["rc"] = {w: rows[w]["rc"] for w in WHO}
    entry["tenants"] = {w: shown(row) for w, row in rows.items()}
    entry.update(moves(snaps))
    entry["switches_logged"] = daemon_switches(folder, run)
    entry["daemon_totals"] = daemon_totals(folder, run)
    return entry


def cold_summary(folder, workload, reference):
    """G2: the pair with a cold table each under the daemon's default (auto) in VRAM
    that their allocations overflow (`WORKLOAD-tight`) against the same pair with enough
    VRAM (`WORKLOAD-enough`): the makespan within 1.05x, both jobs finished with their
    results alone and their tables intact."""
    runs = {name: cold_run(folder, f"{workload}-{name}", reference) for name in ("enough", "tight")}
    line = {"step": "sharing-cold", "workload": workload, **runs}
    tight, enough = runs["tight"], runs["enough"]
    line["g2"] = None
    if tight["makespan_s"] and enough["makespan_s"]:
        line["makespan_x_enough"] = round(tight["makespan_s"] / enough["makespan_s"], 3)
        line["g2"] = at_most(line["makespan_x_enough"], G2_MAKESPAN_X, tight["lower_bound"], enough["lower_bound"])
    # Sized as intended: the tight run overflowed, the other did not.
    sized = [tight.get("allocated_x_vram", 2.0) > 1.0, enough.get("allocated_x_vram", 0.0) <= 1.0]
    wrong = [
        v for r in runs.values()
        for v in list(r["same_as_alone"].values()) + list(r["cold_intact"].values())
    ]
    if tight["failed"] or False in wrong:
        line["g2"] = False
    elif not all(sized):
        line["g2"] = None
        line["g2_note"] = "the tight run did not overflow its VRAM or the other run did"
    return line


def latencies(requests):
    """A server run's latencies: TTFT, time per output token (each request's mean gap),
    inter-token gaps (all of them) and the whole request, over the requests other than
    each burst's first (those find the server idle, demoted perhaps); the firsts' TTFT
    apart."""
    rest = [r for r in requests if not r.get("first_of_burst")]
    return {
        "requests": len(requests),
        "measured": len(rest),
        "ttft_s": spread(r.get("ttft_s") for r in rest),
        "tpot_s": spread(r.get("tpot_s") for r in rest),
        "itl_s": spread(g for r in rest for g in r.get("itl_s") or []),
        "e2e_s": spread(r.get("e2e_s") for r in rest),
        "first_of_burst_ttft_s": [r.get("ttft_s") for r in requests if r.get("first_of_burst")],
    }


def step_durations(result, skip_first=True):
    """A trainer's steps as (start, end) in seconds since the epoch, from its go and
    step_ends_s (a step starts where the one before it ended); the first, which warms
    up, left out."""
    if not result or result.get("t_go") is None:
        return []
    ends = [result["t_go"] + e for e in result.get("step_ends_s") or []]
    steps = list(zip([result["t_go"]] + ends, ends))
    return steps[1:] if skip_first else steps


def mean_step_s(steps, windows=None):
    """The mean time of STEPS, of those within one of WINDOWS where given; None for none."""
    if windows is not None:
        steps = [(a, b) for a, b in steps if any(w0 <= a and b <= w1 for w0, w1 in windows)]
    return sum(b - a for a, b in steps) / len(steps) if steps else None


def trainer_share(trainer, server, settle_s):
    """The trainer's throughput in the server's idle windows (each from SETTLE_S past its
    start) over its throughput ALONE: its mean step time alone over its mean step time
    in those windows. TRAINER is (alone result, pair result)."""
    alone, pair = trainer
    if not server or not server.get("t_go"):
        return None
    windows = [
        (server["t_go"] + a + settle_s, server["t_go"] + b)
        for a, b in server.get("idle_windows_s") or [] if b - a > settle_s
    ]
    alone_s = mean_step_s(step_durations(alone))
    idle_s = mean_step_s(step_durations(pair), windows)
    if not alone_s or not idle_s:
        return None
    return round(alone_s / idle_s, 3)


def burst_summary(folder, workload):
    """G3's server and trainer: the server alone (`WORKLOAD-server`), the trainer alone
    (`WORKLOAD-trainer`), the two together (`WORKLOAD-pair`): the server's p99 TTFT and
    time per token within 1.25x of alone, the trainer at 90 % of its alone throughput
    while the server idles."""
    run = f"{workload}-pair"
    server_alone = tenant(folder, f"{workload}-server", "server")
    trainer_alone = tenant(folder, f"{workload}-trainer", "trainer")
    pair, _, bound = run_times(folder, run, ("server", "trainer"))
    requests = lambda r: read_json_lines(os.path.join(folder, f"{r}-server.json"), "request")  # noqa: E731
    line = {
        "step": "sharing-burst",
        "workload": workload,
        "daemon": {r: daemon_state(folder, f"{workload}-{r}") for r in ("server", "trainer", "pair")},
        "server_alone": latencies(requests(f"{workload}-server")),
        "server_pair": latencies(requests(run)),
        "lower_bound": bound or server_alone["lower_bound"],
        "rc": {"server_alone": server_alone["rc"], "trainer_alone": trainer_alone["rc"],
               **{w: pair[w]["rc"] for w in pair}},
        "finished": {w: pair[w]["finished"] for w in pair},
    }
    p99_x = {}
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        a, b = line["server_alone"][key], line["server_pair"][key]
        if a and b and a["p99"]:
            p99_x[key[:-2]] = round(b["p99"] / a["p99"], 3)
    line["p99_x_alone"] = p99_x
    judged = [p99_x.get("ttft"), p99_x.get("tpot")]
    line["g3_latency"] = None
    if None not in judged:
        # A server stopped at its cap left requests unserved: its p99s can only miss.
        goals = [verdict(x, line["lower_bound"], G3_P99_X) for x in judged]
        line["g3_latency"] = False if False in goals else (None if None in goals else True)
    trainer = (trainer_alone["result"], pair["trainer"]["result"])
    server = pair["server"]["result"]
    line["trainer_share_idle"] = trainer_share(trainer, server, 0.0)
    line["trainer_share_idle_past_demote_after"] = trainer_share(trainer, server, DEMOTE_AFTER_S)
    share = line["trainer_share_idle"]
    line["g3_trainer"] = None if share is None else share >= G3_TRAINER_SHARE
    peaks = [result_of(r, "peak_reserved_bytes") for r in (server_alone, trainer_alone)]
    snaps = snapshots(folder, run)
    vram = max((s.get("vram_bytes") or 0 for s in snaps), default=0)
    if vram and all(peaks):
        line["allocated_x_vram"] = round(sum(peaks) / vram, 3)
    line["tenants"] = {w: shown(row) for w, row in pair.items()}
    line.update(moves(snaps))
    line["switches_logged"] = daemon_switches(folder, run)
    line["daemon_totals"] = daemon_totals(folder, run)
    return line


def notebooks_summary(folder, workload):
    """G3's notebooks (`WORKLOAD`, tenants n1, n2, ...): their cells' latencies and
    wake-up delays, each wake-up within the notebook's bytes at 25 GB/s plus 50 ms, and
    out-of-memory errors (must be 0)."""
    caps = glob.glob(os.path.join(folder, f"{workload}-n*.cap"))
    whos = sorted((os.path.basename(c)[len(workload) + 1:-4] for c in caps), key=lambda w: int(w[1:] or 0))
    rows = {w: tenant(folder, workload, w) for w in whos}
    cells, per, ooms, late = [], {}, 0, 0
    for w in whos:
        base = os.path.join(folder, f"{workload}-{w}")
        mine = read_json_lines(base + ".json", "cell")
        run = rows[w]["result"] or {}
        # Where the process died of it before its last line, its error output says so.
        died = not run and "out of memory" in (read_text(base + ".err") or "").lower()
        oom = sum(1 for c in mine if c.get("oom")) + (1 if run.get("oom_at") or died else 0)
        ooms += oom
        goal_s = run["bytes"] / (G3_WAKE_GB_PER_S * 1e9) + G3_WAKE_EXTRA_S if run.get("bytes") else None
        wakes = [c.get("wake_s") for c in mine if c.get("wake_s") is not None]
        slow = sum(1 for x in wakes if goal_s is not None and x > goal_s)
        late += slow
        per[w] = {"cells": len(mine), "ooms": oom, "intact": run.get("intact"), "rc": rows[w]["rc"],
                  "wake_goal_s": None if goal_s is None else round(goal_s, 4), "wakes_past_goal": slow,
                  "wake_s": spread(wakes)}
        cells += mine
    snaps = snapshots(folder, workload)
    line = {
        "step": "sharing-notebooks",
        "workload": workload,
        "daemon": daemon_state(folder, workload),
        "notebooks": len(whos),
        "cells": len(cells),
        "ooms": ooms,
        "cell_s": spread(c.get("cell_s") for c in cells),
        "wake_s": spread(c.get("wake_s") for c in cells),
        # The cells that came after a pause long enough for a demotion.
        "wake_after_long_idle_s": spread(
            c.get("wake_s") for c in cells if (c.get("idle_before_s") or 0) > DEMOTE_AFTER_S
        ),
        "wakes_past_goal": late,
        "per_notebook": per,
    }
    line.update(moves(snaps))
    finished = all(rows[w]["finished"] for w in whos) and bool(whos)
    line["no_oom"] = False if ooms else (True if finished else None)
    line["g3_wake"] = None if not cells else late == 0
    return line


def fake_file(folder, name, text):
    """The selftest's made-up output files."""
    with open(os.path.join(folder, name), "w") as f:
        f.write(text)


def fake_job(folder, run, who, result, rc=0, cap=30, killed=False, lines=()):
    """A made-up tenant: its JSON (LINES, then RESULT last), exit status, cap, kill mark."""
    text = "noise\n" + "".join(json.dumps(x) + "\n" for x in lines)
    fake_file(folder, f"{run}-{who}.json", text + ("" if result is None else json.dumps(result) + "\n"))
    fake_file(folder, f"{run}-{who}.rc", f"{rc}\n")
    fake_file(folder, f"{run}-{who}.cap", f"{cap}\n")
    if killed:
        fake_file(folder, f"{run}-{who}.killed", "")


def fake_gpt(wall, seed, **more):
    """A made-up GPT trainer's last line."""
    return dict({"ok": True, "wall_s": wall, "lower_bound": False, "loss": 1.5 + seed,
                 "loss_hash": f"h{seed}", "checksum": 10.0 * seed,
                 "peak_reserved_bytes": 24 << 30, "t_start": 100.0, "t_end": 100.0 + wall}, **more)


def selftest():
    """Made-up runs in a temporary folder: the arithmetic and the verdicts."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        fake_job(d, "gpt-alone", "p", fake_gpt(10.0, 4))
        fake_job(d, "gpt-alone", "q", fake_gpt(12.0, 5))
        # Turns: 23 s for 22 s back-to-back, both results as alone, two good batches.
        fake_job(d, "gpt-turns", "p", fake_gpt(11.0, 4))
        fake_job(d, "gpt-turns", "q", fake_gpt(23.0, 5))
        fake_file(d, "top-gpt-turns-0.json", json.dumps({"gpu_time": "turns", "handovers": 1, "batch_moved_bytes": 1 << 30, "batches": [
            {"tenant": 0, "to_host_chunks": 300, "to_vram_chunks": 0, "bytes": 300 << 21, "elapsed_ns": 1, "gb_per_s": 30.0}]}))
        fake_file(d, "top-gpt-turns-1.json", json.dumps({"gpu_time": "turns", "handovers": 2, "batch_moved_bytes": 2 << 30, "batches": [
            {"tenant": 0, "to_host_chunks": 300, "to_vram_chunks": 0, "bytes": 300 << 21, "elapsed_ns": 1, "gb_per_s": 30.0},
            {"tenant": 1, "to_host_chunks": 0, "to_vram_chunks": 300, "bytes": 300 << 21, "elapsed_ns": 1, "gb_per_s": 26.0},
            {"tenant": 1, "to_host_chunks": 0, "to_vram_chunks": 10, "bytes": 10 << 21, "elapsed_ns": 1, "gb_per_s": 3.0}]}))
        fake_file(d, "top-gpt-turns-2.json", "error: no daemon")
        fake_file(d, "top-gpt-turns-3.json", json.dumps({"tenants": [{"turn": "holder"}, {"turn": "held"}]}))
        fake_file(d, "daemon-gpt-turns.log", 'gpuswapd: tenant 0 connected: pid 7, "gpt-turns-p"\n'
              "gpuswapd: tenant 0 (pid 7) gone: disconnected; 5 bytes evicted, 6 returned, 3 chunk moves taking 1.0 ms\n")
        t = pair_summary(d, "gpt", "turns", 36 << 30)
        assert t["back_to_back_s"] == 22.0 and t["makespan_s"] == 23.0, t
        assert t["slowdown"] == {"p": 1.1, "q": 1.917} and t["stp"] == round(1 / 1.1 + 12 / 23, 3), t
        assert t["antt"] == round((1.1 + 23 / 12) / 2, 3) and t["makespan_x_back_to_back"] == 1.045, t
        assert t["same_as_alone"] == {"p": True, "q": True} and t["g1"] is True, t
        assert t["handovers"] == 2 and t["batches"] == 3 and t["g4"] is True, t
        assert t["gpu_time"] == "turns" and t["daemon_gpu_time"] == "turns", t
        assert t["most_holders_seen"] == 1, t
        assert t["batch_gb_per_s"]["to_vram"]["min"] == 3.0 and t["g4_by_direction"]["to_vram"] is True, t
        assert t["daemon_totals"] == {"gpt-turns-p": {"evicted_bytes": 5, "returned_bytes": 6, "chunk_moves": 3}}, t
        assert t["each_fits_alone"] is True and t["pair_exceeds_vram"] is True, t
        # Concurrent: q killed at its 30 s cap, p's checksum differs, a slow batch.
        fake_job(d, "gpt-concurrent", "p", fake_gpt(20.0, 4, checksum=-1.0))
        fake_job(d, "gpt-concurrent", "q", None, rc=143, killed=True)
        fake_file(d, "top-gpt-concurrent-0.json", json.dumps({"batches": [
            {"tenant": 0, "to_host_chunks": 256, "to_vram_chunks": 0, "bytes": 1, "elapsed_ns": 1, "gb_per_s": 2.0}]}))
        c = pair_summary(d, "gpt", "concurrent", 36 << 30)
        assert c["lower_bound"] and c["makespan_s"] == 30.0 and c["slowdown"]["q"] == 2.5, c
        assert c["same_as_alone"] == {"p": False, "q": None} and c["g1"] is False, c
        assert c["g4_by_direction"] == {"to_host": False, "to_vram": None} and c["g4"] is False, c
        assert "handovers" not in c and "most_holders_seen" not in c, c
        # A lower bound within the goals says nothing; a finished pair without batches has no G4.
        fake_job(d, "gpt-concurrent", "p", fake_gpt(11.0, 4))
        fake_job(d, "gpt-concurrent", "q", fake_gpt(15.0, 5, lower_bound=True))
        os.remove(os.path.join(d, "top-gpt-concurrent-0.json"))
        c = pair_summary(d, "gpt", "concurrent", 36 << 30)
        assert c["g1"] is None and c["g4"] is None and c["same_as_alone"]["q"] is None, c
        # An older daemon that did not start.
        fake_file(d, "mm-turns.nodaemon", "")
        fake_file(d, "daemon-mm-turns.log", "error: --set \"gpu_time=turns\": unknown key\n")
        n = pair_summary(d, "mm", "turns", 16 << 30)
        assert n["daemon"]["started"] is False and n["makespan_s"] is None and n["g1"] is None, n
        a = alone_summary(d, "gpt")
        assert a["back_to_back_s"] == 22.0 and a["back_to_back_process_s"] == 12.0, a
        assert cap_s(fake_gpt(3.0, 1), 6, 30, 60, 60) == 30 and cap_s(fake_gpt(9.0, 1), 6, 30, 60, 60) == 54
        assert cap_s(fake_gpt(20.0, 1), 6, 30, 60, 60) == 60 and cap_s(None, 6, 30, 60, 45) == 45
        json.dumps([t, c, n, a])
    checks = [selftest_helpers, selftest_cold, selftest_burst, selftest_notebooks]
    for check in checks:
        with tempfile.TemporaryDirectory() as d:
            check(d)
    print(f"selftest: {5 + len(checks)} passed, 0 failed")


def selftest_helpers(d):
    """Percentiles, bounds against a limit, VRAM from peaks."""
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([5], 99) == 5 and percentile([], 50) is None
    assert percentile(list(range(101)), 99) == 99 and spread([None]) is None
    assert at_most(1.0, 1.05, False, False) is True and at_most(1.1, 1.05, True, False) is False
    assert at_most(1.0, 1.05, True, False) is None and at_most(1.1, 1.05, False, True) is None
    assert at_most(1.0, 1.05, False, True) is True and at_most(1.0, 1.05, True, True) is None
    fake_job(d, "gpt-alone", "p", fake_gpt(10.0, 4))
    files = [os.path.join(d, "gpt-alone-p.json")] * 2
    # The cold pair's two sizes: hot sets at 0.9 of the VRAM; their allocations (12 GiB
    # tables each) with a tenth to spare, within what the device holds.
    assert vram_gib([f + ":1.111" for f in files], 0, 50, 128) == 54
    assert vram_gib([f + ":1.1" for f in files], 26.4, 76, 128) == 80
    assert vram_gib([f + ":1.1" for f in files], 26.4, 76, 72) == 72
    assert vram_gib([os.path.join(d, "none.json:1")], 0, 50, 40) == 40


def selftest_cold(d):
    """G2 met, then missed by a wrong result, then left open by a lower bound or a
    sizing that did not overflow."""
    fake_job(d, "gpt-alone", "p", fake_gpt(10.0, 4))
    fake_job(d, "gpt-alone", "q", fake_gpt(12.0, 5))
    cold = dict(cold_bytes=12 << 30, cold_intact=True, peak_reserved_bytes=36 << 30)
    fake_job(d, "cold-enough", "p", fake_gpt(20.0, 4, **cold))
    fake_job(d, "cold-enough", "q", fake_gpt(21.0, 5, **cold))
    fake_file(d, "top-cold-enough-0.json", json.dumps({"vram_bytes": 80 << 30, "gpu_time": "auto", "choice": "share"}))
    fake_job(d, "cold-tight", "p", fake_gpt(21.5, 4, **cold))
    fake_job(d, "cold-tight", "q", fake_gpt(22.0, 5, **cold))
    fake_file(d, "top-cold-tight-0.json", json.dumps({"vram_bytes": 54 << 30, "gpu_time": "auto", "choice": "turns", "switches": 0}))
    fake_file(d, "top-cold-tight-1.json", json.dumps({"vram_bytes": 54 << 30, "gpu_time": "auto", "choice": "share", "switches": 1, "tenants": [
        {"name": "cold-tight-p", "slowdown": 1.02, "turn": "running"}, {"name": "cold-tight-q", "slowdown": 0.0}]}))
    fake_file(d, "daemon-cold-tight.log", "gpuswapd: gpu time: share (every busy tenant within 1.05)\n")
    c = cold_summary(d, "cold", "gpt-alone")
    assert c["makespan_x_enough"] == round(22.0 / 21.0, 3) and c["g2"] is True, c
    t = c["tight"]
    assert t["allocated_x_vram"] == 1.333 and t["hot_x_vram"] == 0.889, t
    assert t["same_as_alone"] == {"p": True, "q": True} and t["cold_intact"] == {"p": True, "q": True}, t
    assert t["choices_seen"] == ["turns", "share"] and t["switches"] == 1, t
    assert t["slowdown_estimates"] == {"cold-tight-p": {"last": 1.02, "max": 1.02}}, t
    assert t["switches_logged"] == [{"to": "share", "reason": "every busy tenant within 1.05"}], t
    fake_job(d, "cold-tight", "q", fake_gpt(22.0, 5, **dict(cold, cold_intact=False)))
    assert cold_summary(d, "cold", "gpt-alone")["g2"] is False
    fake_job(d, "cold-tight", "q", fake_gpt(22.0, 5, lower_bound=True, **cold))
    assert cold_summary(d, "cold", "gpt-alone")["g2"] is None
    fake_job(d, "cold-tight", "q", fake_gpt(30.0, 5, lower_bound=True, **cold))
    assert cold_summary(d, "cold", "gpt-alone")["g2"] is False
    fake_job(d, "cold-tight", "q", fake_gpt(22.0, 5, **cold))
    fake_file(d, "top-cold-enough-0.json", json.dumps({"vram_bytes": 54 << 30}))
    c = cold_summary(d, "cold", "gpt-alone")
    assert c["g2"] is None and "g2_note" in c and c["enough"]["allocated_x_vram"] == 1.333, c


def fake_requests(first_ttft, ttft, tpot):
    """Three bursts of ten requests, the first of each slower."""
    return [
        {"kind": "request", "cycle": c, "index": i, "first_of_burst": i == 0,
         "ttft_s": first_ttft if i == 0 else ttft, "tpot_s": tpot, "itl_s": [tpot] * 3,
         "e2e_s": (first_ttft if i == 0 else ttft) + 3 * tpot}
        for c in range(3) for i in range(10)
    ]


def fake_trainer(go, fast_s, slow_s, windows):
    """A trainer's last line: a 0.5 s first step, then FAST_S a step within WINDOWS (past
    GO) and SLOW_S outside, for 90 s."""
    ends, t = [0.5], 0.5
    while t < 90:
        t += fast_s if any(a <= t < b for a, b in windows) else slow_s
        ends.append(round(t, 4))
    return {"kind": "run", "ok": True, "wall_s": t, "lower_bound": False, "t_go": go,
            "step_ends_s": ends, "peak_reserved_bytes": 24 << 30}


def selftest_burst(d):
    """G3's server and trainer: both goals met, then the latency missed."""
    windows = [[0.0, 20.0], [31.0, 50.0], [61.0, 80.0]]
    server = {"kind": "run", "ok": True, "wall_s": 90.0, "lower_bound": False, "t_go": 1000.0,
              "idle_windows_s": windows, "peak_reserved_bytes": 10 << 30}
    fake_job(d, "burst-server", "server", dict(server, t_go=0.0), lines=fake_requests(0.3, 0.020, 0.004))
    fake_job(d, "burst-trainer", "trainer", fake_trainer(500.0, 0.1, 0.1, []))
    fake_job(d, "burst-pair", "server", server, lines=fake_requests(0.9, 0.024, 0.0048))
    fake_job(d, "burst-pair", "trainer", fake_trainer(1000.0, 0.105, 0.3, windows))
    fake_file(d, "top-burst-pair-0.json", json.dumps({"vram_bytes": 29 << 30, "tenants": [
        {"name": "burst-pair-server", "turn": "demoted"}, {"name": "burst-pair-trainer", "turn": "running"}]}))
    b = burst_summary(d, "burst")
    assert b["server_alone"]["measured"] == 27 and b["server_alone"]["first_of_burst_ttft_s"] == [0.3] * 3, b
    assert b["p99_x_alone"] == {"ttft": 1.2, "tpot": 1.2, "itl": 1.2, "e2e": 1.2}, b
    assert b["g3_latency"] is True and b["g3_trainer"] is True, b
    assert b["trainer_share_idle"] == round(0.1 / 0.105, 3), b
    assert b["trainer_share_idle_past_demote_after"] == round(0.1 / 0.105, 3), b
    assert b["allocated_x_vram"] == 1.172 and b["demoted_snapshots"] == {"burst-pair-server": 1}, b
    # The summary line leaves the trainer's step ends in its file.
    assert "step_ends_s" not in b["tenants"]["trainer"]["result"] and b["tenants"]["trainer"]["result"]["t_go"], b
    fake_job(d, "burst-pair", "server", server, lines=fake_requests(0.9, 0.024, 0.0065))
    fake_job(d, "burst-pair", "trainer", fake_trainer(1000.0, 0.2, 0.3, windows))
    b = burst_summary(d, "burst")
    assert b["g3_latency"] is False and b["g3_trainer"] is False and b["trainer_share_idle"] == 0.5, b


def selftest_notebooks(d):
    """Six notebooks: no OOM, one wake-up past its goal; then one dies of an OOM."""
    def cells(wake):
        return [{"kind": "cell", "start_s": 10.0 * i, "idle_before_s": 8.0, "wake_s": wake, "cell_s": wake + 0.1, "oom": False}
                for i in range(3)]
    run = {"kind": "run", "ok": True, "intact": True, "ooms": 0, "lower_bound": False, "wall_s": 40.0, "bytes": 7 << 30}
    for i in range(1, 7):
        fake_job(d, "notebooks", f"n{i}", run, lines=cells(0.5 if i == 6 else 0.2))
    fake_file(d, "top-notebooks-0.json", json.dumps({"tenants": [{"name": "notebooks-n1", "turn": "demoted"}]}))
    n = notebooks_summary(d, "notebooks")
    assert n["notebooks"] == 6 and n["cells"] == 18 and n["ooms"] == 0 and n["no_oom"] is True, n
    assert n["per_notebook"]["n6"]["wakes_past_goal"] == 3 and n["wakes_past_goal"] == 3 and n["g3_wake"] is False, n
    assert n["per_notebook"]["n1"]["wake_goal_s"] == round((7 << 30) / 25e9 + 0.05, 4), n
    assert n["wake_s"]["p50"] == 0.2 and n["wake_s"]["max"] == 0.5 and n["cell_s"]["p50"] == 0.3, n
    assert n["wake_after_long_idle_s"]["count"] == 18 and n["demoted_snapshots"] == {"notebooks-n1": 1}, n
    fake_job(d, "notebooks", "n3", None, rc=1, lines=cells(0.2)[:1])
    fake_file(d, "notebooks-n3.err", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB\n")
    n = notebooks_summary(d, "notebooks")
    assert n["ooms"] == 1 and n["no_oom"] is False and n["per_notebook"]["n3"]["rc"] == 1, n


def main():
    if sys.argv[1:] == ["--selftest"]:
        return selftest()
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("cap")
    cap.add_argument("--alone", required=True)
    for name in ("times", "floor", "ceiling", "default"):
        cap.add_argument("--" + name, type=float, required=True)
    vram = sub.add_parser("vram")
    vram.add_argument("specs", nargs="+", metavar="FILE:FACTOR")
    for name in ("default-gib", "ceiling-gib"):
        vram.add_argument("--" + name, type=float, required=True)
    vram.add_argument("--plus-gib", type=float, default=0.0)
    runs = {name: sub.add_parser(name) for name in ("alone", "pair", "cold", "burst", "notebooks")}
    for p in runs.values():
        p.add_argument("--dir", required=True)
        p.add_argument("--workload", required=True)
    runs["pair"].add_argument("--gpu-time", required=True)
    runs["pair"].add_argument("--vram-bytes", type=int)
    runs["cold"].add_argument("--reference", required=True, help="the run alone of the same jobs")
    args = parser.parse_args()
    if args.command == "cap":
        print(cap_s(read_json_line(args.alone), args.times, args.floor, args.ceiling, args.default))
    elif args.command == "vram":
        print(vram_gib(args.specs, args.plus_gib, args.default_gib, args.ceiling_gib))
    elif args.command == "alone":
        print(json.dumps(alone_summary(args.dir, args.workload)))
    elif args.command == "pair":
        print(json.dumps(pair_summary(args.dir, args.workload, args.gpu_time, args.vram_bytes)))
    elif args.command == "cold":
        print(json.dumps(cold_summary(args.dir, args.workload, args.reference)))
    elif args.command == "burst":
        print(json.dumps(burst_summary(args.dir, args.workload)))
    else:
        print(json.dumps(notebooks_summary(args.dir, args.workload)))


if __name__ == "__main__":
    main()
