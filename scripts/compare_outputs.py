"""Compares two trees written by reference-outputs.sh: JSON and CSV files of the old
tree must be reproduced in the new one, which may add fields and columns."""
import csv
import json
import sys
from pathlib import Path


def json_diff(old, new, path="$"):
    """Yields where `new` does not contain `old` (extra object keys are additions)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key, value in old.items():
            if key not in new:
                yield f"{path}.{key}: missing"
            else:
                yield from json_diff(value, new[key], f"{path}.{key}")
    elif isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            yield f"{path}: {len(old)} items became {len(new)}"
        for i, (a, b) in enumerate(zip(old, new)):
            yield from json_diff(a, b, f"{path}[{i}]")
    elif old != new:
        yield f"{path}: {old!r} became {new!r}"


def csv_diff(old_file, new_file):
    with open(old_file, newline="") as f:
        old = list(csv.DictReader(f))
    with open(new_file, newline="") as f:
        new = list(csv.DictReader(f))
    if len(old) != len(new):
        yield f"{len(old)} rows became {len(new)}"
    for i, (a, b) in enumerate(zip(old, new)):
        for key, value in a.items():
            if b.get(key) != value:
                yield f"row {i} {key}: {value!r} became {b.get(key)!r}"


def main(old_root, new_root):
    old_root, new_root = Path(old_root), Path(new_root)
    differences = 0
    files = sorted(p for p in old_root.rglob("*") if p.suffix in (".json", ".csv"))
    for old_file in files:
        rel = old_file.relative_to(old_root)
        new_file = new_root / rel
        if not new_file.exists():
            print(f"{rel}: missing")
            differences += 1
            continue
        if old_file.suffix == ".json":
            text_old, text_new = old_file.read_text(), new_file.read_text()
            if not text_old.strip() or not text_new.strip():
                found = [] if text_old == text_new else ["output differs"]
            else:
                found = list(json_diff(json.loads(text_old), json.loads(text_new)))
        else:
            found = list(csv_diff(old_file, new_file))
        for line in found[:10]:
            print(f"{rel}: {line}")
        if len(found) > 10:
            print(f"{rel}: ... {len(found) - 10} more")
        differences += bool(found)
    print(f"{len(files)} files compared, {differences} differ")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
