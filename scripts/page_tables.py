#!/usr/bin/env python3
"""Regenerates the tables of the reproduction pages from the binary, so a page cannot
drift from the figures it states.

    scripts/page_tables.py [--bin BIN] [--out DIR] [--check | --write] [TABLE ...]

Each regenerated table sits on its page between `<!-- table NAME -->` and
`<!-- /table -->`. For each TABLE named (all by default; `--list` names them), the
script runs the sweeps or comparisons the table comes from with BIN (default
target/release/gpuswap) into DIR (default a temporary folder), then prints the table,
or with --check compares it with the page's text (exit status 1 and a diff where they
differ), or with --write puts it in the page. Every run is deterministic, so a page
whose tables pass --check says what the binary gives.
"""

import argparse
import difflib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import repro_tables
from repro_tables import read

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MIXED_SETS = ["11/2/2", "2/2/11", "3/6/6", "6/3/6", "6/6/3"]
UVM_VARIANTS = ["tree-eviction", "lru-2mb", "zero-copy", "delayed-adaptive", "adaptive-coarse", "adaptive", "optimum"]
UVM_CLASSES = ["streaming", "regular", "mixed", "random", "all"]


def sweep(bin_path, scenario, out, *extra, name=None):
    """Runs `gpuswap sweep` of a scenario under scenarios/ into out/NAME (default: the
    scenario's name), unless an earlier table left it there."""
    folder = out / (name or Path(scenario).stem)
    if not (folder / "summary.csv").exists():
        subprocess.run(
            [str(bin_path), "sweep", str(ROOT / "scenarios" / scenario), "--out", str(folder), "--quiet", "--force", *extra],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return folder


def evictions(bin_path, out):
    """docs/reproduction.md, section 3: the instances' eviction latency at 100 MiB."""
    specs = [
        ("repro/eviction-latency.toml", "tenant[1].app"),
        ("repro/eviction-latency-contention.toml", "tenant.app"),
    ]
    tables = [repro_tables.tenant_evictions(sweep(bin_path, s, out), key) for s, key in specs]
    lines = [
        "| app | alone, random | alone, priority | contention, random | contention, priority |",
        "|---|---|---|---|---|",
    ]
    for app in repro_tables.APPS:
        cells = []
        for rows in tables:
            for policy in ["random", "priority-buffer"]:
                v = rows.get((app, policy))
                cells.append(f"{repro_tables.ms(v[0])} ({repro_tables.ms(v[1])})" if v else "-")
        lines.append(f"| {app} | " + " | ".join(cells) + " |")
    return lines


def chunk_size(bin_path, out):
    """docs/reproduction.md, section 4: runtime and eviction latency against the chunk size."""
    cells = repro_tables.chunk_cells(sweep(bin_path, "repro/chunk-size.toml", out))
    return repro_tables.CHUNK_HEADER + [f"| {app} | " + " | ".join(c) + " |" for app, c in cells.items()]


def five_instances(bin_path, out):
    """docs/reproduction.md, section 5: five instances against the limit."""
    return repro_tables.five_instance_rows(sweep(bin_path, "repro/five-instances.toml", out))


GPUSWAP = "chunk_policy=random mode=gpuswap"
GDEV_LIMITS = ["mode=gdev", "launch_limit=32 mode=gdev"]


def phases(folder, key):
    """{(manager, key's value): slowest measured phase in s} of a sweep."""
    return {(r["manager"], r[key]): float(r["slowest_phase_ns.mean"]) / 1e9 for r in read(folder / "summary.csv")}


def gdev_gap(bin_path, out):
    """docs/reproduction.md, issue 25's item 7: Gdev's gap at 1400 MiB, launch limits 1 and 32."""
    pair = phases(sweep(bin_path, "fidelity/gdev-gap.toml", out), "tenant.app")
    lines = [
        "| app | native = GPUswap | Gdev, limit 1 | Gdev, limit 32 | Gdev over GPUswap: limit 1 → 32 | alone: limit 1 → 32 |",
        "|---|---|---|---|---|---|",
    ]
    for app in repro_tables.APPS:
        assert pair[("mode=native", app)] == pair[(GPUSWAP, app)], app
        managers = f'manager={{ mode = "gpuswap", chunk_policy = "random" }},{{ mode = "gdev" }},{{ mode = "gdev", launch_limit = 32 }}'
        folder = sweep(
            bin_path, f"repro/{app}-memory.toml", out, "--runs", "1", "--vary", "device.memory_limit=1400MiB",
            "--vary", f'tenant=[{{ name = "a", app = "{app}", repeat = 100 }}]', "--vary", managers, name=f"{app}-alone",
        )
        alone = {m: v for (m, _), v in phases(folder, "device.memory_limit").items()}
        base = pair[(GPUSWAP, app)]
        gaps = " → ".join(f"{(pair[(m, app)] / base - 1) * 100:+.1f} %" for m in GDEV_LIMITS)
        alone_gaps = " → ".join(f"{(alone[m] / alone[GPUSWAP] - 1) * 100:+.1f} %" for m in GDEV_LIMITS)
        cells = [f"{base:.3f}"] + [f"{pair[(m, app)]:.3f}" for m in GDEV_LIMITS] + [gaps, alone_gaps]
        lines.append(f"| {app} | " + " | ".join(cells) + " |")
    return lines


def uvm_rows(bin_path, out):
    folder = sweep(bin_path, "uvm/adaptive.toml", out)
    return read(folder / "normalized.csv")


def level(text):
    return f"{float(text):g}"


def uvm_adaptive(bin_path, out):
    """docs/uvm-reproduction.md: kernel time over the default's, per workload."""
    head = "| level | app | class | " + " | ".join(UVM_VARIANTS) + " | faults default / adaptive |"
    lines = [head, "|---|---|---|" + "---|" * (len(UVM_VARIANTS) + 1)]
    for r in uvm_rows(bin_path, out):
        if r["tenant.app"] == "geomean":
            continue
        cells = [f"{float(r[v]):.2f}" for v in UVM_VARIANTS]
        faults = f"{r['default.far_faults']} / {r['adaptive.far_faults']}"
        lines.append(f"| {level(r['device.oversubscription'])} | {r['tenant.app']} | {r['class']} | " + " | ".join(cells) + f" | {faults} |")
    return lines


def uvm_geomeans(bin_path, out):
    """docs/uvm-reproduction.md: geometric means per pattern class."""
    rows = {(r["device.oversubscription"], r["class"]): r for r in uvm_rows(bin_path, out) if r["tenant.app"] == "geomean"}
    lines = ["| level | class | " + " | ".join(UVM_VARIANTS) + " |", "|---|---|" + "---|" * len(UVM_VARIANTS)]
    for lvl in sorted({k[0] for k in rows}, key=float):
        for cls in UVM_CLASSES:
            r = rows[(lvl, cls)]
            lines.append(f"| {level(lvl)} | {cls} | " + " | ".join(f"{float(r[v]):.2f}" for v in UVM_VARIANTS) + " |")
    return lines


def millions(x):
    return f"{float(x) / 1e6:.2f} M"


def vgpu_placement(bin_path, out):
    """docs/dymgpu-reproduction.md, section 2: placement against the number of VMs."""
    rows = read(sweep(bin_path, "vgpu/placement.toml", out) / "summary.csv")
    by = {(r["manager.placement"], int(r["vm[2].count"])): r for r in rows}
    lines = [
        "| VMs | slots asked | gScale copies | dymgpu-size | dymgpu-util | cycles/switch gScale | size | util | mean fps gScale | size | util |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    # The page shows every other point from 4 VMs up (3 fixed VMs and COUNT benchmarks).
    for count in [1, 3, 4, 5, 6, 8, 10, 12]:
        copies = [float(by[(p, count)]["slot_copies.mean"]) for p in ["gscale", "dymgpu-size", "dymgpu-util"]]
        cells = [str(count + 3), str(28 + 8 * count), f"{copies[0]:.0f}"]
        cells += [f"{c:.0f} ({(c / copies[0] - 1) * 100:+.0f} %)" for c in copies[1:]]
        cells += [millions(by[(p, count)]["cycles_per_switch.mean"]) for p in ["gscale", "dymgpu-size", "dymgpu-util"]]
        cells += [f"{float(by[(p, count)]['mean_fps.mean']):.1f}" for p in ["gscale", "dymgpu-size", "dymgpu-util"]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def grouped(n):
    """An integer with a thin space every three digits, as the page writes counts."""
    return f"{int(n):,}".replace(",", " ")


def vgpu_mixed(bin_path, out):
    """docs/dymgpu-reproduction.md, section 3: the five mixed-utilization sets."""
    text = subprocess.run(
        ["bash", str(ROOT / "scripts" / "vgpu-mixed-sets.sh")],
        env={**os.environ, "GPUSWAP_BIN": str(bin_path)},
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    sets = {}
    name = None
    for line in text.splitlines():
        if line.startswith("== "):
            name = line[3:]
            sets[name] = {}
        elif name and re.match(r"^(gscale|dymgpu-size|dymgpu-util) ", line):
            f = line.split()
            sets[name][f[0]] = {"fps": f[4], "switches": f[5], "copies": f[6], "cps": f[7]}
    lines = [
        "| set | gScale copies | dymgpu-size | dymgpu-util | switches gScale / DymGPU | cycles per switch gScale / DymGPU | mean fps gScale / DymGPU |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in MIXED_SETS:
        g, z, u = sets[s]["gscale"], sets[s]["dymgpu-size"], sets[s]["dymgpu-util"]
        lines.append(
            f"| {s} | {grouped(g['copies'])} | {grouped(z['copies'])} | {grouped(u['copies'])} | "
            f"{grouped(g['switches'])} / {grouped(z['switches'])} | {millions(g['cps'])} / {millions(z['cps'])} | "
            f"{g['fps']} / {z['fps']} |"
        )
    return lines


def pilot_instrumentation(bin_path, out):
    """docs/pilot-reproduction.md, issue 25's item 3: PILOT's checks alone, small and medium inputs."""
    rows = read(sweep(bin_path, "fidelity/pilot-instrumentation.toml", out) / "normalized.csv")
    ratio = {}
    for r in rows:
        app, size = re.search(r'app = "([^"]+)", size = "([^"]+)"', r["tenant"]).groups()
        ratio[(app, size)] = r["pilot"]
    lines = ["| benchmark | small | medium |", "|---|---|---|"]
    for app in dict.fromkeys(app for app, _ in ratio):
        lines.append(f"| {app} | {ratio[(app, 'small')]} | {ratio[(app, 'medium')]} |")
    return lines


def pilot_mps(bin_path, out):
    """docs/pilot-reproduction.md, issue 25's item 5: MPS against time slicing, three pairs at 75 %."""
    folder = sweep(bin_path, "fidelity/pilot-mps-vs-time-slicing.toml", out)
    ratios = {r["tenant"]: r["mps"] for r in read(folder / "normalized.csv")}
    slowdowns = {}
    for r in read(folder / "results.csv"):
        pair = f"{float(r['tenant[0].slowdown']):.2f}, {float(r['tenant[1].slowdown']):.2f}"
        slowdowns[(r["tenant"], r["device.sharing"])] = pair
    lines = ["| pair | MPS / time slicing | slowdowns, time slicing | slowdowns, MPS |", "|---|---|---|---|"]
    for tenants, ratio in ratios.items():
        lines.append(f"| {pair_name(tenants)} | {ratio} | {slowdowns[(tenants, 'time-slice')]} | {slowdowns[(tenants, 'mps')]} |")
    return lines


PILOT_SYSTEMS = ["pilot", "mfit", "amfit", "madvise"]


def pair_name(tenants):
    """corr + backprop, from a sweep's tenant list."""
    return " + ".join(re.findall(r'app = "([^"]+)"', tenants))


def pilot_rows(bin_path, out):
    """normalized.csv of the PILOT sweep (about 5 minutes of CPU), workloads only."""
    rows = read(sweep(bin_path, "pilot/pairs.toml", out) / "normalized.csv")
    return [r for r in rows if r["tenant"].startswith("[")]


def pilot_levels(bin_path, out):
    """docs/pilot-reproduction.md, "Results": geometric means over MPS per subscription."""
    rows = pilot_rows(bin_path, out)
    lines = [
        "| subscription | PILOT, no mitigation | MFit | AMFit | MAdvise | largest deviation from MPS |",
        "|---|---|---|---|---|---|",
    ]
    for lvl in dict.fromkeys(r["device.subscription"] for r in rows):
        at = [r for r in rows if r["device.subscription"] == lvl]
        means = [math.exp(sum(math.log(float(r[k])) for r in at) / len(at)) for k in PILOT_SYSTEMS]
        worst = max(abs(float(r[k]) - 1) for r in at for k in PILOT_SYSTEMS) * 100
        lines.append(f"| {lvl} | " + " | ".join(f"{m:.3f}" for m in means) + f" | {worst:.1f} % |")
    return lines


def pilot_150(bin_path, out):
    """docs/pilot-reproduction.md, "Results": per workload at 150 %, time and far faults."""
    lines = [
        "| tenants | PILOT, no mitigation | MFit | AMFit | MAdvise | far faults: MPS | MFit | AMFit | MAdvise |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in pilot_rows(bin_path, out):
        if r["device.subscription"] != "1.5":
            continue
        cells = [f"{float(r[k]):.2f}" for k in PILOT_SYSTEMS]
        cells += [r[f"{k}.far_faults"] for k in ["mps", "mfit", "amfit", "madvise"]]
        lines.append(f"| {pair_name(r['tenant'])} | " + " | ".join(cells) + " |")
    return lines


def nn_orders(bin_path, out):
    """docs/reproduction.md, nn's anomaly: random, the original priorities and the swapped ones."""
    phase = {}
    for scenario in ["repro/nn-memory.toml", "repro/nn-swapped-memory.toml"]:
        for r in read(sweep(bin_path, scenario, out) / "summary.csv"):
            if r["manager"] == repro_tables.GDEV:
                continue
            phase[(Path(scenario).stem, r["manager"], r["device.memory_limit"])] = float(r["slowest_phase_ns.mean"]) / 1e9
    lines = ["| limit | random | priority, original | priority, swapped |", "|---|---|---|---|"]
    for limit in ["520MiB", "400MiB", "280MiB", "200MiB", "120MiB", "80MiB", "40MiB"]:
        cells = [
            phase[("nn-memory", repro_tables.RANDOM, limit)],
            phase[("nn-memory", repro_tables.PRIO, limit)],
            phase[("nn-swapped-memory", repro_tables.PRIO, limit)],
        ]
        lines.append(f"| {limit[:-3]} MiB | " + " | ".join(f"{c:.2f} s" for c in cells) + " |")
    return lines


PILOT_LABELS = {
    "instrumented=false policy=none": "MPS",
    "instrumented=true policy=none": "PILOT",
    "policy=mfit": "mfit",
    "policy=amfit": "amfit",
    "policy=madvise": "madvise",
}


def pilot_tenants(bin_path, out):
    """docs/pilot-reproduction.md, "Results": per tenant at 150 %, slowdowns, preemptions, work lost and waits."""
    rows = [r for r in read(sweep(bin_path, "pilot/pairs.toml", out) / "results.csv") if r["device.subscription"] == "1.5"]
    lines = [
        "| tenants | system | slowdown (first) | slowdown (second) | preemptions | wasted | waited |",
        "|---|---|---|---|---|---|---|",
    ]
    for scheduler, label in PILOT_LABELS.items():
        for r in (r for r in rows if r["scheduler"] == scheduler):
            slow = [f"{float(r[f'tenant[{i}].slowdown']):.2f}" if r[f"tenant[{i}].slowdown"] else "-" for i in (0, 1)]

            def total(key):
                return sum(int(r[f"tenant[{i}].{key}"] or 0) for i in (0, 1))

            cells = slow + [str(total("preemptions")), f"{total('wasted_ns') / 1e6:.0f} ms", f"{total('wait_ns') / 1e6:.0f} ms"]
            lines.append(f"| {pair_name(r['tenant'])} | {label} | " + " | ".join(cells) + " |")
    return lines


def pilot_mps_levels(bin_path, out):
    """docs/pilot-reproduction.md, "Results": MPS's slowest phase at 100 % and 150 % over its own at 75 %."""
    rows = read(sweep(bin_path, "pilot/pairs.toml", out) / "summary.csv")
    phase = {
        (r["tenant"], r["device.subscription"]): float(r["slowest_phase_ns.mean"])
        for r in rows
        if r["scheduler"] == "instrumented=false policy=none"
    }
    lines = ["| tenants | 100 % | 150 % |", "|---|---|---|"]
    for tenants in dict.fromkeys(k[0] for k in phase):
        base = phase[(tenants, "0.75")]
        lines.append(f"| {pair_name(tenants)} | {phase[(tenants, '1.0')] / base:.2f} | {phase[(tenants, '1.5')] / base:.2f} |")
    return lines



REAL_RUNS = DOCS / "real-gpu"
# The H200's runs of the e2e pair and alone; the H100's at the daemon's defaults (the tenth
# run, 2026-11-26-h100-pool, had a pool of pinned host memory: left out).
H200_RUNS = sorted(REAL_RUNS.glob("2026-11-26-h200*"))
H100_RUNS = [REAL_RUNS / "2026-11-26-h100-moves", REAL_RUNS / "2026-11-26-h100-final"]
CHUNK_RUNS = [REAL_RUNS / "2026-11-26-h100-moves", REAL_RUNS / "2026-11-26-h100-chunks"]
GONE = re.compile(
    r"tenant (\d+) \(pid \d+\) gone: [^;]*; (\d+) bytes evicted, (\d+) returned, (\d+) chunk moves.*? (\d+) allocations waited ([\d.]+) ms"
)
CONNECTED = re.compile(r'tenant (\d+) connected: pid \d+, "(\w+)"')


def steps(run, step):
    """The lines of a run's summary.jsonl for `step`."""
    path = run / "summary.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [d for d in map(json.loads, lines) if d.get("step") == step]


def daemon_totals(text, names):
    """{tenant name: (bytes evicted, bytes returned, chunk moves, allocation waits in s)} from
    the daemon's lines for the tenants that left; `names` maps its tenant numbers to names
    (the clients connect in order: a a second before b)."""
    names = {**names, **{int(i): n for i, n in CONNECTED.findall(text)}}
    return {
        names[int(i)]: (int(ev), int(ret), int(moves), float(ms) / 1e3)
        for i, ev, ret, moves, _, ms in GONE.findall(text)
    }


def measured_pair(runs):
    """Each e2e pair's client times (s) and daemon totals, over `runs`."""
    times = {"a": [], "b": []}
    totals = []
    for run in runs:
        for line in steps(run, "e2e-daemon"):
            for who in times:
                times[who].append(line[who]["elapsed_ms"] / 1e3)
        log = run / "daemon-e2e.log"
        found = daemon_totals(log.read_text(), {}) if log.exists() else {}
        if found:
            totals.append(found)
    return times, totals


def simulated(bin_path, scenario):
    """{tenant name: its record} of `gpuswap run --json` of a scenario file."""
    text = subprocess.run([str(bin_path), "run", "--json", str(scenario)], check=True, capture_output=True, text=True).stdout
    return {t["name"]: t for t in json.loads(text)["tenants"]}


def sim_totals(tenant, chunk_bytes):
    """A simulated tenant's (bytes evicted, bytes returned, chunk moves, waits in s), as the
    daemon counts them: each chunk moved either way is a move."""
    ev, ret = tenant["bytes_evicted"], tenant["bytes_returned"]
    return ev, ret, round(ev / chunk_bytes) + round(ret / chunk_bytes), sum(tenant["eviction_split_ns"].values()) / 1e9


def figure(x):
    """Three significant digits, whole numbers from 100 on."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def ratio(sim, measured):
    return f"{sim / measured:.2f}" if measured else "-"


def versus(measured, sim):
    """`measured | simulated | simulated / measured` cells: a range of the runs' values
    where they differ in each run (times), else each value with its count of runs."""
    if not measured:
        return ["-", figure(sim), "-"]
    values = list(dict.fromkeys(figure(m) for m in measured))
    if len(values) > 2 and len(values) == len(measured):
        low, high = min(measured), max(measured)
        return [f"{figure(low)}-{figure(high)} ({len(measured)} runs)", figure(sim), f"{ratio(sim, high)}-{ratio(sim, low)}"]
    counted = {v: sum(figure(m) == v for m in measured) for v in values}
    firsts = {figure(m): m for m in reversed(measured)}
    shown = ", ".join(v + (f" ({n} runs)" if n > 1 else "") for v, n in counted.items())
    return [shown, figure(sim), ", ".join(ratio(sim, firsts[v]) for v in values)]


E2E_FIGURES = [
    ("bytes evicted (GB)", 0, 1e9),
    ("bytes returned (GB)", 1, 1e9),
    ("chunk moves", 2, 1),
    ("allocations waited (s)", 3, 1),
]


def real_e2e(bin_path, out):
    """docs/real-gpu.md, "The simulator against our runs": the e2e client alone and the pair."""
    lines = ["| run | figure | measured | simulated | simulated / measured |", "|---|---|---|---|---|"]
    alone = [line["result"]["elapsed_ms"] / 1e3 for run in H200_RUNS for line in steps(run, "e2e-alone")]
    sim = simulated(bin_path, ROOT / "scenarios/real/e2e-alone.toml")["alone"]
    lines.append("| H200, alone (e2e-alone.toml) | time (s) | " + " | ".join(versus(alone, sim["total_ns"] / 1e9)) + " |")
    for label, runs, scenario in [
        ("H200, pair (e2e-pair.toml)", H200_RUNS, "e2e-pair.toml"),
        ("H100, pair (e2e-pair-h100.toml)", H100_RUNS, "e2e-pair-h100.toml"),
    ]:
        times, totals = measured_pair(runs)
        sim = simulated(bin_path, ROOT / "scenarios/real" / scenario)
        for who in ["a", "b"]:
            cells = versus(times[who], sim[who]["total_ns"] / 1e9)
            lines.append(f"| {label} | {who}'s time (s) | " + " | ".join(cells) + " |")
        for who in ["a", "b"]:
            mine = sim_totals(sim[who], 2 << 20)
            for name, i, unit in E2E_FIGURES:
                cells = versus([t[who][i] / unit for t in totals], mine[i] / unit)
                lines.append(f"| {label} | {who}'s {name} | " + " | ".join(cells) + " |")
    return lines


def measured_chunks():
    """{chunk size: (a's moves, b's moves, bytes evicted and returned of both in GB, b's
    waits in s, a's time, b's time)}, each a list over the runs of the chunks step."""
    found = {}
    for run in CHUNK_RUNS:
        for line in steps(run, "chunks"):
            chunk = line["chunk"]
            totals = daemon_totals(line["daemon"], {0: "a", 1: "b"})
            row = found.setdefault(chunk, ([], [], [], [], [], [], []))
            row[0].append(totals["a"][2])
            row[1].append(totals["b"][2])
            for i in (0, 1):
                row[2 + i].append(sum(t[i] for t in totals.values()) / 1e9)
            row[4].append(totals["b"][3])
            for i, who in [(5, "a"), (6, "b")]:
                client = run / f"chunks-{chunk}-{who}.json"
                if client.exists():
                    row[i].append(json.loads(client.read_text())["elapsed_ms"] / 1e3)
    return found


def real_chunks(bin_path, out):
    """docs/real-gpu.md, "The simulator against our runs": the chunks step on the H100."""
    rows = read(sweep(bin_path, "real/chunks-h100.toml", out) / "results.csv")
    base = (ROOT / "scenarios/real/chunks-h100.toml").read_text()
    measured = measured_chunks()
    names = [
        "a's chunk moves",
        "b's chunk moves",
        "bytes evicted, both (GB)",
        "bytes returned, both (GB)",
        "b's allocations waited (s)",
        "a's time (s)",
        "b's time (s)",
    ]
    lines = ["| chunk | figure | measured | simulated | simulated / measured |", "|---|---|---|---|---|"]
    for r in rows:
        chunk = r["manager.chunk_size"]
        chunk_bytes = int(chunk[:-3]) << 20
        point = out / f"chunks-h100-{chunk}.toml"
        point.write_text(base.replace('chunk_size = "2MiB"', f'chunk_size = "{chunk}"'))
        waits = sim_totals(simulated(bin_path, point)["b"], chunk_bytes)[3]
        moves = [round(int(r[f"{w}.bytes_evicted"]) / chunk_bytes) + round(int(r[f"{w}.bytes_returned"]) / chunk_bytes) for w in "ab"]
        both = [sum(int(r[f"{w}.bytes_{way}"]) for w in "ab") / 1e9 for way in ["evicted", "returned"]]
        sims = moves + both + [waits, int(r["a.total_ns"]) / 1e9, int(r["b.total_ns"]) / 1e9]
        for name, m, sim in zip(names, measured.get(chunk, ([],) * len(names)), sims):
            lines.append(f"| {chunk[:-3]} MiB | {name} | " + " | ".join(versus(m, sim)) + " |")
    return lines


def real_torch(bin_path, out):
    """docs/real-gpu.md, "The simulator against our runs": the PyTorch pairs, shared as measured."""
    lines = ["| run | figure | measured | simulated | simulated / measured |", "|---|---|---|---|---|"]
    for label, runs, scenario in [
        ("H200 (torch-pair.toml)", H200_RUNS, "torch-pair.toml"),
        ("H100 (torch-pair-h100.toml)", H100_RUNS, "torch-pair-h100.toml"),
    ]:
        alone, pair, slowdowns = [], [], []
        for run in runs:
            for a, p in zip(steps(run, "torch-alone"), steps(run, "torch-pair")):
                each = [p[w]["compute_s"] for w in "pq"]
                alone.append(a["result"]["compute_s"])
                pair += each
                slowdowns += [t / a["result"]["compute_s"] for t in each]
        # The measured pairs shared the GPU: the daemon had no turns then.
        text = (ROOT / "scenarios/real" / scenario).read_text().replace('gpu_time = "auto"', 'gpu_time = "concurrent"')
        point = out / f"concurrent-{scenario}"
        point.write_text(text)
        sim = simulated(bin_path, point)
        phase = max(t["phase_ns"] for t in sim.values()) / 1e9
        slowdown = max(t["slowdown"] for t in sim.values())
        for name, measured, simulated_value in [
            ("one tenant alone, compute (s)", alone, phase / slowdown),
            ("the pair, each tenant's compute (s)", pair, phase),
            ("slowdown", slowdowns, slowdown),
        ]:
            lines.append(f"| {label} | {name} | " + " | ".join(versus(measured, simulated_value)) + " |")
    return lines

# name: (page, function)
TABLES = {
    "gdev-gap": ("reproduction.md", gdev_gap),
    "nn-orders": ("reproduction.md", nn_orders),
    "evictions": ("reproduction.md", evictions),
    "chunk-size": ("reproduction.md", chunk_size),
    "five-instances": ("reproduction.md", five_instances),
    "pilot-instrumentation": ("pilot-reproduction.md", pilot_instrumentation),
    "pilot-mps": ("pilot-reproduction.md", pilot_mps),
    "pilot-levels": ("pilot-reproduction.md", pilot_levels),
    "pilot-150": ("pilot-reproduction.md", pilot_150),
    "pilot-tenants": ("pilot-reproduction.md", pilot_tenants),
    "pilot-mps-levels": ("pilot-reproduction.md", pilot_mps_levels),
    "uvm-adaptive": ("uvm-reproduction.md", uvm_adaptive),
    "uvm-geomeans": ("uvm-reproduction.md", uvm_geomeans),
    "vgpu-placement": ("dymgpu-reproduction.md", vgpu_placement),
    "vgpu-mixed": ("dymgpu-reproduction.md", vgpu_mixed),
    "real-e2e": ("real-gpu.md", real_e2e),
    "real-chunks": ("real-gpu.md", real_chunks),
    "real-torch": ("real-gpu.md", real_torch),
}


def block(name):
    """A table's block; its markers' indent (a table inside a list item) is the table's."""
    return re.compile(rf"^( *)(<!-- table {re.escape(name)} -->\n)(.*?)^\1(<!-- /table -->)", re.S | re.M)


def committed(page_text, name):
    """The table's text on the page, and the indent of its lines."""
    m = block(name).search(page_text)
    if m is None:
        sys.exit(f"no `<!-- table {name} -->` block in the page")
    return m.group(3), m.group(1)


def indented(text, indent):
    return "".join(indent + line for line in text.splitlines(True))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tables", nargs="*", metavar="TABLE")
    parser.add_argument("--bin", default=str(ROOT / "target" / "release" / "gpuswap"))
    parser.add_argument("--out", help="where the sweeps write (reused when already there)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="compare with the pages; exit 1 on a difference")
    mode.add_argument("--write", action="store_true", help="put the tables in the pages")
    mode.add_argument("--list", action="store_true", help="name the tables and their pages")
    args = parser.parse_args()
    if args.list:
        for name, (page, fn) in TABLES.items():
            print(f"{name}\tdocs/{page}\t{fn.__doc__}")
        return
    names = args.tables or list(TABLES)
    unknown = [n for n in names if n not in TABLES]
    if unknown:
        sys.exit(f"unknown table(s) {', '.join(unknown)}; --list names them")
    bin_path = Path(args.bin).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out) if args.out else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        differ = False
        for name in names:
            page, fn = TABLES[name]
            text = "\n".join(fn(bin_path, out)) + "\n"
            path = DOCS / page
            if args.check:
                old, indent = committed(path.read_text(), name)
                text = indented(text, indent)
                if old != text:
                    differ = True
                    sys.stdout.writelines(
                        difflib.unified_diff(old.splitlines(True), text.splitlines(True), f"docs/{page} ({name})", "the binary")
                    )
                else:
                    print(f"{name}: docs/{page} agrees with the binary")
            elif args.write:
                page_text = path.read_text()
                indent = committed(page_text, name)[1]
                path.write_text(
                    block(name).sub(lambda m: m.group(1) + m.group(2) + indented(text, indent) + m.group(1) + m.group(4), page_text)
                )
                print(f"{name}: wrote docs/{page}")
            else:
                print(f"### {name} (docs/{page})\n\n{text}")
        sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
