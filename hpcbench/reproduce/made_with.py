"""What a study's files were made with, and whether the code they depend on has changed since.

A study records, beside its verdicts, the commits its result files name (their provenance) and a
digest of every source file of the parts that make a result file: the simulator, the transport (MPI
and the runtime that drives it), the algorithms, the workloads and the measurement (telemetry, the
writer, the options). A digest of each part is its version; the files' digests say which changed.
``stale`` compares a record with the code here: any difference means the study should be run again
before its numbers are quoted as today's.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import hpcbench

# Each part a result file depends on, by the package paths it holds (the first that matches a file wins).
PARTS = (("simulator", ("runtime/sim/",)),
         ("transport", ("comm/", "runtime/", "launch/")),
         ("algorithms", ("algorithms/",)),
         ("workload", ("workload/",)),
         ("measurement", ("telemetry/", "results/", "options/", "config.py", "ranges.py", "bfloat16.py")))


def part_of(relpath: str) -> str | None:
    return next((name for name, prefixes in PARTS for p in prefixes if relpath.startswith(p)), None)


def digests(root: Path | None = None) -> dict[str, str]:
    """path (in the package) -> the first 12 hex digits of its SHA-256, for every source file of PARTS."""
    base = root or Path(hpcbench.__file__).resolve().parent
    out = {}
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(base).as_posix()
        if part_of(rel) is not None:
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return out


def versions(files: Mapping[str, str]) -> dict[str, str]:
    """Each part's version: a digest of its files' digests."""
    by: dict[str, list[str]] = {}
    for rel, digest in sorted(files.items()):
        by.setdefault(part_of(rel) or "other", []).append(f"{rel}:{digest}")
    return {name: hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12] for name, lines in by.items()}


def record(commits: Iterable[tuple[str, bool]], root: Path | None = None) -> dict[str, Any]:
    """What verdict.json keeps: the result files' (commit, dirty) pairs, each part's version, each file's digest."""
    files = digests(root)
    pairs = set(commits)
    return {"commits": sorted({c for c, _ in pairs}), "dirty": any(d for _, d in pairs), "versions": versions(files),
            "files": files}


NO_RECORD = "no record of the code its files were made with"


def stale(recorded: Mapping[str, Any], root: Path | None = None) -> list[str]:
    """The source files (``part: path``) that changed, appeared or went since ``recorded`` was made;
    ["no record of the code"] where there is none."""
    then = recorded.get("files") if isinstance(recorded, Mapping) else None
    if not isinstance(then, Mapping):
        return [NO_RECORD]
    now = digests(root)
    changed = sorted(rel for rel in set(then) | set(now) if then.get(rel) != now.get(rel))
    return [f"{part_of(rel)}: {rel}" + ("" if rel in now else " (removed)") + ("" if rel in then else " (new)")
            for rel in changed]
