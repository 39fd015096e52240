#!/usr/bin/env python3
"""Loads a sweep's CSV files with pandas.read_csv, as a user would, and fails on
surprises: a column pandas renamed (two of one name), a numeric column of
docs/results-schema.md that did not come out numeric.
    python3 scripts/check-pandas.py results/pilot
Without an argument it makes a small unified-memory sweep first."""
import pathlib
import subprocess
import sys
import tempfile

import pandas as pd

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCENARIO = """seed = 1
[device]
preset = "gtx1080ti"
sharing = "mps"
subscription = 1.5
[manager]
mode = "uvm"
[[tenant]]
app = "bfs"
size = "rodinia"
[[tenant]]
app = "pagedos"
size = "8"
[sweep]
runs = 2
[sweep.vary]
tenant = [[{ app = "bfs", size = "rodinia" }, { app = "pagedos", size = "8" }],
          [{ app = "nn", size = "rodinia" }, { app = "pagedos", size = "8" }]]
scheduler = [{ policy = "none" }, { policy = "amfit" }]
[sweep.normalize]
axis = "scheduler"
names = ["mps", "amfit"]
baseline = "mps"
metric = "slowest_phase_ns"
counts = ["far_faults"]
"""


def numeric_suffixes():
    """Column names (or their last dotted part) the schema types integer or number."""
    names = set()
    for line in (ROOT / "docs/results-schema.md").read_text().splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[1] in ("integer", "number"):
                names.add(cells[0].strip("`").split(".")[-1])
    return names


def check(folder):
    numeric = numeric_suffixes()
    failures = []
    for path in sorted(pathlib.Path(folder).glob("*.csv")):
        frame = pd.read_csv(path)
        with open(path, encoding="utf-8") as f:
            header = f.readline().rstrip("\n")
        if len(set(frame.columns)) != len(frame.columns) or any(
            c not in header for c in frame.columns
        ):
            failures.append(f"{path.name}: pandas renamed columns: {list(frame.columns)}")
        for column in frame.columns:
            last = column.split(".")[-1]
            if last in numeric and frame[column].notna().any():
                if not pd.api.types.is_numeric_dtype(frame[column]):
                    failures.append(f"{path.name}: {column} is {frame[column].dtype}, expected numeric")
        print(f"check-pandas: {path.name}: {len(frame)} rows, {len(frame.columns)} columns")
    return failures


def main():
    if len(sys.argv) > 1:
        failures = check(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as work:
            scenario = pathlib.Path(work) / "s.toml"
            scenario.write_text(SCENARIO)
            out = pathlib.Path(work) / "out"
            subprocess.run(
                ["cargo", "run", "--quiet", "--release", "--", "sweep", str(scenario),
                 "--quiet", "--out", str(out)],
                cwd=ROOT, check=True)
            failures = check(out)
    for f in failures:
        print("check-pandas:", f, file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
