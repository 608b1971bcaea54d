"""What a study's files were made with, and whether the code they depend on has changed since.

A study records, beside its verdicts, the commits its result files name (their provenance) and a
digest of every source file of the parts that make a result file: the simulator, the transport (MPI
and the runtime that drives it), the algorithms, the workloads and the measurement (telemetry, the
writer, the options). Of the algorithms, only the files the study's algorithms are made of count
(their modules and what those import from the package, transitively): a change to gossip does not
age a study of parameter servers. A digest of each part is its version; the files' digests say which
changed. ``stale`` compares a record with the code here: any difference means the study should be
run again before its numbers are quoted as today's.
"""
from __future__ import annotations

import ast
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


def package(root: Path | None = None) -> Path:
    return root or Path(hpcbench.__file__).resolve().parent


def algorithm_files(algos: Iterable[str], root: Path | None = None) -> set[str]:
    """The files (in the package) ``algos`` (registry names) are made of: each one's module and the
    modules of the algorithms package it imports, transitively (the package's listing, its
    ``__init__``, is not one of them)."""
    from hpcbench.algorithms import ALGORITHMS

    base, found = package(root), set()
    todo = [ALGORITHMS.get(a).__module__ for a in algos]
    while todo:
        rel = todo.pop().removeprefix("hpcbench.").replace(".", "/") + ".py"
        if rel in found or not rel.startswith("algorithms/") or not (base / rel).is_file():
            continue  # seen, outside the package's algorithms, or a name imported from a module
        found.add(rel)
        for node in ast.walk(ast.parse((base / rel).read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                todo += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                todo += [a.name for a in node.names]
    return found


def digests(root: Path | None = None, mine: set[str] | None = None) -> dict[str, str]:
    """path (in the package) -> the first 12 hex digits of its SHA-256, for every source file of PARTS
    (of the algorithms, with ``mine``, only those files: ``algorithm_files``)."""
    base = package(root)
    out = {}
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(base).as_posix()
        part = part_of(rel)
        if part is not None and (part != "algorithms" or mine is None or rel in mine):
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return out


def versions(files: Mapping[str, str]) -> dict[str, str]:
    """Each part's version: a digest of its files' digests."""
    by: dict[str, list[str]] = {}
    for rel, digest in sorted(files.items()):
        by.setdefault(part_of(rel) or "other", []).append(f"{rel}:{digest}")
    return {name: hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12] for name, lines in by.items()}


def record(commits: Iterable[tuple[str, bool]], algos: Iterable[str] | None = None,
           root: Path | None = None, before: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What verdict.json keeps: the result files' (commit, dirty) pairs, each part's version, each file's
    digest (of the algorithms, those ``algos`` are made of). ``before``: the record of an earlier
    invocation whose runs this one kept: its digests stand where they differ (those runs were made
    with that code), so a study resumed or only reported after the code changed still says so."""
    files = digests(root, None if algos is None else algorithm_files(algos, root))
    then = before.get("files") if isinstance(before, Mapping) else None
    if isinstance(then, Mapping):
        files.update({rel: str(d) for rel, d in then.items() if rel in files})
    pairs = set(commits)
    return {"commits": sorted({c for c, _ in pairs}), "dirty": any(d for _, d in pairs), "versions": versions(files),
            "files": files}


NO_RECORD = "no record of the code its files were made with"


def stale(recorded: Mapping[str, Any], algos: Iterable[str] | None = None, root: Path | None = None) -> list[str]:
    """The source files (``part: path``) that changed, appeared or went since ``recorded`` was made
    (of the algorithms, with ``algos``, those they are made of, now or then);
    ["no record of the code"] where there is none."""
    then = recorded.get("files") if isinstance(recorded, Mapping) else None
    if not isinstance(then, Mapping):
        return [NO_RECORD]
    mine = None if algos is None else algorithm_files(algos, root)
    now = digests(root, mine)
    if mine is not None:  # a record made before records were scoped holds every algorithm's files
        then = {rel: d for rel, d in then.items() if part_of(rel) != "algorithms" or rel in mine}
    changed = sorted(rel for rel in set(then) | set(now) if then.get(rel) != now.get(rel))
    return [f"{part_of(rel)}: {rel}" + ("" if rel in now else " (removed)") + ("" if rel in then else " (new)")
            for rel in changed]
