"""Same seed, same file: simulate every algorithm at fixed seeds and compare against another checkout.

A refactoring must leave every result file as it was, but its provenance (the commit, the wall time
the simulator took). Run it at the commit before and after a change, then compare:

    python benchmarks/same_files.py write /tmp/before     # at the commit before
    python benchmarks/same_files.py write /tmp/after      # with the change
    python benchmarks/same_files.py compare /tmp/before /tmp/after

Each algorithm runs three ways: numerics on (mlp on digits, momentum and weight decay, so every
rule's state is exercised), numerics off, and the payload model; the parameter servers also one
worker slowed 3x, so gradients arrive stale. Algorithms only one side has are listed, not compared.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np

from hpcbench.algorithms import ALGORITHMS

WAYS = {
    "on": ["--steps", "30", "--momentum", "0.9", "--set", "weight_decay=1e-4"],
    "off": ["--steps", "40", "--numerics", "off"],
    "payload": ["--steps", "20", "--model", "payload", "--set", "payload.params=5000"],
    "stale": ["--steps", "30", "--stragglers", "0.25:3", "--momentum", "0.9"],
}
SKIPPED = ("provenance",)  # what a change of code may change


def write(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in ALGORITHMS.names():
        for way, args in WAYS.items():
            path = out / f"{name}-{way}.h5"
            cmd = [sys.executable, "-m", "hpcbench", "simulate", "--algo", name, "--workers", "4", "--seed", "3",
                   "--out", str(path), "--overwrite", *args]
            done = subprocess.run(cmd, capture_output=True, text=True)
            print(f"{path.name}: {'ok' if done.returncode == 0 else done.stderr.strip()[-200:]}")


def contents(path: Path) -> dict[str, object]:
    """Every dataset's values and every attribute, by path, outside SKIPPED."""
    found: dict[str, object] = {}

    def visit(name: str, obj: object) -> None:
        if name.split("/")[0] in SKIPPED:
            return
        if isinstance(obj, h5py.Dataset):
            found[name] = obj[()]
        for key, value in getattr(obj, "attrs", {}).items():
            found[f"{name}@{key}"] = value

    with h5py.File(path, "r") as f:
        for key, value in f.attrs.items():
            if key == "config":  # as a record (its keys in any order), but where the file was written
                value = json.dumps({k: v for k, v in json.loads(value).items() if k != "out"}, sort_keys=True)
            if key not in ("created_utc", "hpcbench_version"):
                found[f"@{key}"] = value
        f.visititems(visit)
    return found


def same(a: object, b: object) -> bool:
    """Equal in type, shape and value, NaN equal to NaN."""
    x, y = np.asarray(a), np.asarray(b)
    return x.shape == y.shape and x.dtype == y.dtype and bool(np.array_equal(x, y, equal_nan=x.dtype.kind == "f"))


def compare(before: Path, after: Path) -> int:
    differ = 0
    names = sorted({p.name for p in before.glob("*.h5")} | {p.name for p in after.glob("*.h5")})
    for name in names:
        if not (before / name).exists() or not (after / name).exists():
            print(f"{name}: only {'after' if (after / name).exists() else 'before'}")
            continue
        a, b = contents(before / name), contents(after / name)
        wrong = sorted(k for k in a.keys() | b.keys() if k not in a or k not in b or not same(a[k], b[k]))
        differ += bool(wrong)
        print(f"{name}: {'identical' if not wrong else 'differs in ' + ', '.join(wrong[:6])}")
    print(f"{len(names) - differ} of {len(names)} identical or one-sided")
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
