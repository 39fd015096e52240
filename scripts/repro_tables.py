#!/usr/bin/env python3
"""Markdown tables for docs/reproduction.md from two runs of the reproduction suite.

    scripts/repro_tables.py OLD NEW

OLD and NEW are folders holding one sweep output folder per scenario of
scenarios/repro/ (named after the scenario file, as `scripts/run-repro.sh` writes
them). OLD may be a run from before a change of the scenarios: a memory sweep that
varied `device.vram_limit` (VRAM for tenants) is matched to one that varies
`device.memory_limit` (the driver's 20 MiB included) at equal VRAM for tenants.
Prints the tables to standard output; missing folders are skipped with a note.
"""

import csv
import math
import sys
from pathlib import Path

APPS = ["backprop", "bfs", "heartwall", "hotspot", "lud", "nn", "srad_v1", "srad_v2"]
DRIVER_MIB = 20
RANDOM = "chunk_policy=random mode=gpuswap"
PRIO = "chunk_policy=priority-buffer mode=gpuswap"
GDEV = "mode=gdev"


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def mib(text):
    assert text.endswith("MiB"), text
    return int(text[:-3])


def s(ns):
    """Seconds with three significant digits."""
    x = float(ns) / 1e9
    return f"{x:.3g}" if x < 1000 else f"{x:.0f}"


def ms(ns):
    x = float(ns) / 1e6
    return f"{x:.3g}"


def memory_points(folder):
    """{(tenant VRAM MiB, manager): summary row} of a memory sweep."""
    rows = read(folder / "summary.csv")
    out = {}
    for r in rows:
        if "device.memory_limit" in r:
            tenant = mib(r["device.memory_limit"]) - DRIVER_MIB
        else:
            tenant = mib(r["device.vram_limit"])
        out[(tenant, r["manager"])] = r
    return out


def runtime(r, with_spread):
    mean = r["slowest_phase_ns.mean"]
    if not with_spread:
        return s(mean)
    return f"{s(mean)} ± {s(r['slowest_phase_ns.std'])} / {s(r['slowest_phase_ns.min'])}"


def gdev_floor(points):
    """The smallest tenant VRAM at which Gdev ran every tenant, with its runtime."""
    ok = [
        (v, r)
        for (v, m), r in points.items()
        if m == GDEV and r["tenant_failed"] == "0" and r["failed"] == "0"
    ]
    if not ok:
        return "never"
    v, r = min(ok, key=lambda x: x[0])
    return f"{v} MiB ({s(r['slowest_phase_ns.mean'])} s)"


def memory_tables(old, new):
    print("### Runtime against memory (slowest instance's measured phase, s)\n")
    print(
        "VRAM for tenants = the papers' limit less the driver's 20 MiB. Random: mean ± std "
        "/ best of 10. Each cell: old → new.\n"
    )
    print("| app | VRAM | random | priority | Gdev |")
    print("|---|---|---|---|---|")
    for app in APPS:
        o_dir, n_dir = old / f"{app}-memory", new / f"{app}-memory"
        if not ((o_dir / "summary.csv").exists() and (n_dir / "summary.csv").exists()):
            print(f"| {app} | (missing) | | | |")
            continue
        o, n = memory_points(o_dir), memory_points(n_dir)
        for v in [500, 200, 100, 20]:
            cells = []
            for manager, spread in [(RANDOM, True), (PRIO, False), (GDEV, False)]:
                a, b = o.get((v, manager)), n.get((v, manager))

                def cell(r):
                    if r is None:
                        return "-"
                    if r["tenant_failed"] != "0":
                        return "fails"
                    return runtime(r, spread)

                cells.append(f"{cell(a)} → {cell(b)}")
            print(f"| {app} | {v} MiB | " + " | ".join(cells) + " |")
        print(f"| {app} | Gdev works down to | | | {gdev_floor(o)} → {gdev_floor(n)} |")
    print()


def per_app(folder, app_key):
    out = {}
    for r in read(folder / "summary.csv"):
        out[(r[app_key], r["manager.chunk_policy"])] = r
    return out


def tenant_evictions(folder, app_key):
    """Per (app, policy): the mean of the instances' median eviction latencies over runs
    and the largest maximum; the allocating dummy of the no-contention case is left out."""
    p50s, maxima = {}, {}
    for r in read(folder / "results.csv"):
        key = (r[app_key], r["manager.chunk_policy"])
        for col, val in r.items():
            if not val or col.startswith("dummy."):
                continue
            if col.endswith(".eviction_p50_ns"):
                p50s.setdefault(key, []).append(float(val))
            elif col.endswith(".eviction_max_ns"):
                maxima[key] = max(maxima.get(key, 0.0), float(val))
    return {k: (sum(v) / len(v), maxima[k]) for k, v in p50s.items()}


def latency_tables(old, new):
    print("### Eviction latency of the instances (mean of their median latencies, ms; largest maximum in brackets)\n")
    specs = [
        ("eviction-latency", "tenant[1].app", "alone"),
        ("eviction-latency-contention", "tenant.app", "contention"),
    ]
    have = [(name, key, what) for name, key, what in specs if (new / name).exists()]
    print("| app | " + " | ".join(f"{w}, {p}" for _, _, w in have for p in ["random", "priority"]) + " |")
    print("|---|" + "---|" * (2 * len(have)))
    tables = [tenant_evictions(new / n, k) for n, k, _ in have]
    for app in APPS:
        cells = []
        for rows in tables:
            for policy in ["random", "priority-buffer"]:
                v = rows.get((app, policy))
                cells.append(f"{ms(v[0])} ({ms(v[1])})" if v else "-")
        print(f"| {app} | " + " | ".join(cells) + " |")
    print()
    # The old "no contention" scenario ran two instances: the new contention case.
    o = old / "eviction-latency"
    # Only a run from before the swap has two instances ("tenant.app") in that folder.
    swapped = o.exists() and "tenant.app" not in read(o / "results.csv")[0]
    if o.exists() and not swapped and (new / "eviction-latency-contention").exists():
        print("Two instances, old scenario (`eviction-latency.toml` before the swap) → new "
              "(`eviction-latency-contention.toml`), mean of the medians (largest maximum), ms:\n")
        print("| app | random | priority |")
        print("|---|---|---|")
        orows = tenant_evictions(o, "tenant.app")
        nrows = tenant_evictions(new / "eviction-latency-contention", "tenant.app")
        for app in APPS:
            cells = []
            for policy in ["random", "priority-buffer"]:
                a, b = orows.get((app, policy)), nrows.get((app, policy))
                fa = f"{ms(a[0])} ({ms(a[1])})" if a else "-"
                fb = f"{ms(b[0])} ({ms(b[1])})" if b else "-"
                cells.append(f"{fa} → {fb}")
            print(f"| {app} | " + " | ".join(cells) + " |")
        print()


CHUNK_HEADER = [
    "| app | runtime 128 KiB | 4 MiB | 32 MiB | 128 MiB | latency 128 KiB | minimum (at) | 128 MiB |",
    "|---|---|---|---|---|---|---|---|",
]
CHUNK_SIZES = ["128KiB", "256KiB", "512KiB", "1MiB", "2MiB", "4MiB", "8MiB", "16MiB", "32MiB", "64MiB", "128MiB"]


def chunk_cells(folder):
    """{app: the chunk-size table's cells}: runtime (s) at four sizes, then the mean
    eviction latency (ms) at 128 KiB, its minimum with the size, and at 128 MiB."""
    rows = {(r["tenant.app"], r["manager.chunk_size"]): r for r in read(folder / "summary.csv")}

    def lat(app, size):
        r = rows.get((app, size))
        return float(r["eviction_mean_ns.mean"]) if r and r["eviction_mean_ns.mean"] else math.nan

    out = {}
    for app in APPS:
        best = min(CHUNK_SIZES, key=lambda z: (math.isnan(lat(app, z)), lat(app, z)))
        cells = [s(rows[(app, size)]["slowest_phase_ns.mean"]) for size in ["128KiB", "4MiB", "32MiB", "128MiB"]]
        cells += [ms(lat(app, "128KiB")), f"{ms(lat(app, best))} ({best})", ms(lat(app, "128MiB"))]
        out[app] = cells
    return out


def chunk_tables(old, new):
    o_dir, n_dir = old / "chunk-size", new / "chunk-size"
    if not (o_dir.exists() and n_dir.exists()):
        print("(chunk-size missing)\n")
        return
    print("### Chunk size (runtime s; eviction latency ms), old → new\n")
    print("\n".join(CHUNK_HEADER))
    o, n = chunk_cells(o_dir), chunk_cells(n_dir)
    for app in APPS:
        print(f"| {app} | " + " | ".join(f"{a} → {b}" for a, b in zip(o[app], n[app])) + " |")
    print()


def five_instance_rows(folder):
    """The five-instances table's lines: per app and limit, the slowest measured phase,
    Jain's index over the five slowdowns and the MiB relocated per instance."""
    limits = ["1400MiB", "1000MiB", "700MiB", "400MiB", "200MiB"]
    lines = ["| app | " + " | ".join(limits) + " |", "|---|" + "---|" * len(limits)]
    summary = {(r["tenant.app"], r["device.memory_limit"]): r for r in read(folder / "summary.csv")}
    evicted = {}
    for r in read(folder / "results.csv"):
        key = (r["tenant.app"], r["device.memory_limit"])
        cols = [c for c in r if c.endswith(".bytes_evicted")]
        vals = [float(r[c]) for c in cols if r[c]]
        evicted.setdefault(key, []).extend(vals)
    for app in APPS:
        cells = []
        for l in limits:
            r = summary.get((app, l))
            if r is None:
                cells.append("-")
                continue
            e = evicted.get((app, l), [0.0])
            mean_mib = sum(e) / len(e) / 2**20
            cells.append(f"{s(r['slowest_phase_ns.mean'])} s, {float(r['jain_slowdown.mean']):.3f}, {mean_mib:.0f}")
        lines.append(f"| {app} | " + " | ".join(cells) + " |")
    return lines


def five_tables(new):
    folder = new / "five-instances"
    if not folder.exists():
        print("(five-instances missing)\n")
        return
    print("### Five instances (new)\n")
    print("Slowest measured phase (s), Jain's index over the five slowdowns, and relocated "
          "MiB per instance (mean over instances and runs).\n")
    print("\n".join(five_instance_rows(folder)))
    print()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    old, new = Path(sys.argv[1]), Path(sys.argv[2])
    memory_tables(old, new)
    latency_tables(old, new)
    chunk_tables(old, new)
    five_tables(new)


if __name__ == "__main__":
    main()
