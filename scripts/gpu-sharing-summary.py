"""The arithmetic of scripts/gpu-check.sh's sharing step (issue 38): reads what the step
left in its folder and prints one JSON line.

    gpu-sharing-summary.py cap --alone FILE --times 6 --floor 30 --ceiling 60 --default 60
    gpu-sharing-summary.py alone --dir OUT --workload mm
    gpu-sharing-summary.py pair --dir OUT --workload mm --gpu-time turns --vram-bytes N
    gpu-sharing-summary.py --selftest

A run RUN (`mm-alone`, `mm-turns`, ...) left, for each tenant WHO (p, q): RUN-WHO.json
(the tenant's JSON line), RUN-WHO.rc (its exit status), RUN-WHO.cap (its cap in seconds),
RUN-WHO.killed (present if the step ended it at its cap); top-RUN-N.json (`gpuswap top
--json` during the run, the last after it), daemon-RUN.log, and RUN.nodaemon if the
daemon did not start. The alone runs ran one after the other: back-to-back.
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
# What must match the tenant's run alone, where the tenant reports it.
RESULT_KEYS = ("checksum", "loss", "loss_hash")


def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def read_json_line(path):
    """The last line of PATH that parses as a JSON object, else None."""
    for line in reversed((read_text(path) or "").splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


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
        line[who] = rows[who]
    return line


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
    for key in ("handovers", "batch_moved_bytes"):
        values = [s[key] for s in snaps if key in s]
        if values:
            out[key] = max(values)
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
    if measured_x is None:
        return None
    if measured_x > limit:
        return False
    return None if lower_bound else True


def pair_summary(folder, workload, gpu_time, vram_bytes):
    run = f"{workload}-{gpu_time}"
    line = {"step": "sharing-pair", "workload": workload, "gpu_time": gpu_time, "daemon": daemon_state(folder, run)}
    alone = {who: tenant(folder, f"{workload}-alone", who) for who in WHO}
    pair = {who: tenant(folder, run, who) for who in WHO}
    alone_s = {w: alone[w]["time_s"] for w in WHO}
    alone_exact = all(alone_s[w] and not alone[w]["lower_bound"] for w in WHO)
    times = {w: pair[w]["time_s"] for w in WHO}
    bound = any(pair[w]["lower_bound"] for w in WHO)
    line["back_to_back_s"] = round(sum(alone_s.values()), 3) if alone_exact else None
    line["makespan_s"] = round(max(times.values()), 3) if all(times.values()) else None
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
    line["tenants"] = pair
    line.update(moves(snapshots(folder, run)))
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


def selftest():
    """Made-up runs in a temporary folder: the arithmetic and the verdicts."""
    import tempfile

    def write(folder, name, text):
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)

    def job(folder, run, who, result, rc=0, cap=30, killed=False):
        write(folder, f"{run}-{who}.json", "" if result is None else "noise\n" + json.dumps(result) + "\n")
        write(folder, f"{run}-{who}.rc", f"{rc}\n")
        write(folder, f"{run}-{who}.cap", f"{cap}\n")
        if killed:
            write(folder, f"{run}-{who}.killed", "")

    def gpt(wall, seed, **more):
        return dict({"ok": True, "wall_s": wall, "lower_bound": False, "loss": 1.5 + seed,
                     "loss_hash": f"h{seed}", "checksum": 10.0 * seed,
                     "peak_reserved_bytes": 24 << 30, "t_start": 100.0, "t_end": 100.0 + wall}, **more)

    with tempfile.TemporaryDirectory() as d:
        job(d, "gpt-alone", "p", gpt(10.0, 4))
        job(d, "gpt-alone", "q", gpt(12.0, 5))
        # Turns: 23 s for 22 s back-to-back, both results as alone, two good batches.
        job(d, "gpt-turns", "p", gpt(11.0, 4))
        job(d, "gpt-turns", "q", gpt(23.0, 5))
        write(d, "top-gpt-turns-0.json", json.dumps({"gpu_time": "turns", "handovers": 1, "batch_moved_bytes": 1 << 30, "batches": [
            {"tenant": 0, "to_host_chunks": 300, "to_vram_chunks": 0, "bytes": 300 << 21, "elapsed_ns": 1, "gb_per_s": 30.0}]}))
        write(d, "top-gpt-turns-1.json", json.dumps({"gpu_time": "turns", "handovers": 2, "batch_moved_bytes": 2 << 30, "batches": [
            {"tenant": 0, "to_host_chunks": 300, "to_vram_chunks": 0, "bytes": 300 << 21, "elapsed_ns": 1, "gb_per_s": 30.0},
            {"tenant": 1, "to_host_chunks": 0, "to_vram_chunks": 300, "bytes": 300 << 21, "elapsed_ns": 1, "gb_per_s": 26.0},
            {"tenant": 1, "to_host_chunks": 0, "to_vram_chunks": 10, "bytes": 10 << 21, "elapsed_ns": 1, "gb_per_s": 3.0}]}))
        write(d, "top-gpt-turns-2.json", "error: no daemon")
        write(d, "top-gpt-turns-3.json", json.dumps({"tenants": [{"turn": "holder"}, {"turn": "held"}]}))
        write(d, "daemon-gpt-turns.log", 'gpuswapd: tenant 0 connected: pid 7, "gpt-turns-p"\n'
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
        job(d, "gpt-concurrent", "p", gpt(20.0, 4, checksum=-1.0))
        job(d, "gpt-concurrent", "q", None, rc=143, killed=True)
        write(d, "top-gpt-concurrent-0.json", json.dumps({"batches": [
            {"tenant": 0, "to_host_chunks": 256, "to_vram_chunks": 0, "bytes": 1, "elapsed_ns": 1, "gb_per_s": 2.0}]}))
        c = pair_summary(d, "gpt", "concurrent", 36 << 30)
        assert c["lower_bound"] and c["makespan_s"] == 30.0 and c["slowdown"]["q"] == 2.5, c
        assert c["same_as_alone"] == {"p": False, "q": None} and c["g1"] is False, c
        assert c["g4_by_direction"] == {"to_host": False, "to_vram": None} and c["g4"] is False, c
        assert "handovers" not in c and "most_holders_seen" not in c, c
        # A lower bound within the goals says nothing; a finished pair without batches has no G4.
        job(d, "gpt-concurrent", "p", gpt(11.0, 4))
        job(d, "gpt-concurrent", "q", gpt(15.0, 5, lower_bound=True))
        os.remove(os.path.join(d, "top-gpt-concurrent-0.json"))
        c = pair_summary(d, "gpt", "concurrent", 36 << 30)
        assert c["g1"] is None and c["g4"] is None and c["same_as_alone"]["q"] is None, c
        # An older daemon that did not start.
        write(d, "mm-turns.nodaemon", "")
        write(d, "daemon-mm-turns.log", "error: --set \"gpu_time=turns\": unknown key\n")
        n = pair_summary(d, "mm", "turns", 16 << 30)
        assert n["daemon"]["started"] is False and n["makespan_s"] is None and n["g1"] is None, n
        a = alone_summary(d, "gpt")
        assert a["back_to_back_s"] == 22.0 and a["back_to_back_process_s"] == 12.0, a
        assert cap_s(gpt(3.0, 1), 6, 30, 60, 60) == 30 and cap_s(gpt(9.0, 1), 6, 30, 60, 60) == 54
        assert cap_s(gpt(20.0, 1), 6, 30, 60, 60) == 60 and cap_s(None, 6, 30, 60, 45) == 45
        json.dumps([t, c, n, a])
    print("selftest: 5 passed, 0 failed")


def main():
    if sys.argv[1:] == ["--selftest"]:
        return selftest()
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("cap")
    cap.add_argument("--alone", required=True)
    for name in ("times", "floor", "ceiling", "default"):
        cap.add_argument("--" + name, type=float, required=True)
    alone = sub.add_parser("alone")
    pair = sub.add_parser("pair")
    for p in (alone, pair):
        p.add_argument("--dir", required=True)
        p.add_argument("--workload", required=True)
    pair.add_argument("--gpu-time", required=True)
    pair.add_argument("--vram-bytes", type=int)
    args = parser.parse_args()
    if args.command == "cap":
        print(cap_s(read_json_line(args.alone), args.times, args.floor, args.ceiling, args.default))
    elif args.command == "alone":
        print(json.dumps(alone_summary(args.dir, args.workload)))
    else:
        print(json.dumps(pair_summary(args.dir, args.workload, args.gpu_time, args.vram_bytes)))


if __name__ == "__main__":
    main()
