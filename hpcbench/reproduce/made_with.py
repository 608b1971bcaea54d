"""What a study's files were made with, and whether the code they depend on has changed since.

A study records, beside its verdicts, the commits its result files name (their provenance) and a
digest of every source file of the parts that make a result file: the simulator, the transport (MPI
and the runtime that drives it), the algorithms, the workloads and the measurement (telemetry, the
writer, the options). Of the algorithms, only the files the study's algorithms are made of count
(their modules and what those import from the package, transitively): a change to gossip does not
age a study of parameter servers; of the transport, in a simulated study, only what the simulator
imports: a change to the MPI channels does not age it. A digest of each part is its version; the
files' digests say which changed. ``stale`` compares a record with the code here: any difference
means the study should be run again before its numbers are quoted as today's.
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


def imported(modules: Iterable[str], root: Path | None = None, within: str = "") -> set[str]:
    """The files (in the package, under ``within``) ``modules`` are made of: each one's file and those of
    the modules it imports from the package, transitively (a package's listing, its ``__init__``, is not
    followed: importing one name from it is not importing all it lists)."""
    base, found = package(root), set()
    todo = list(modules)
    while todo:
        rel = todo.pop().removeprefix("hpcbench.").replace(".", "/") + ".py"
        if rel in found or not rel.startswith(within) or not (base / rel).is_file():
            continue  # seen, outside ``within``, or a name imported from a module
        found.add(rel)
        for node in ast.walk(ast.parse((base / rel).read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                todo += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                todo += [a.name for a in node.names]
    return found


def algorithm_files(algos: Iterable[str], root: Path | None = None) -> set[str]:
    """The files ``algos`` (registry names) are made of: each one's module and the modules of the
    algorithms package it imports, transitively."""
    from hpcbench.algorithms import ALGORITHMS

    return imported([ALGORITHMS.get(a).__module__ for a in algos], root, "algorithms/")


# What a simulated run executes: the simulator and what it imports. The MPI transport (comm/'s channels,
# windows, the MPI runtime) is not among it: a change there does not age a study run in the simulator.
SIMULATOR = ("hpcbench.runtime.sim.session", "hpcbench.runtime.sim.engine")


def scope(algos: Iterable[str] | None, simulated: bool, root: Path | None = None) -> dict[str, set[str]]:
    """The files a study's runs are made of, for the parts that are not taken whole: of the algorithms,
    those of its own (``algos``; None: every one); of the transport, in the simulator, what it imports."""
    out = {}
    if algos is not None:
        out["algorithms"] = algorithm_files(algos, root)
    if simulated:
        out["transport"] = {rel for rel in imported(SIMULATOR, root) if part_of(rel) == "transport"}
    return out


def in_scope(rel: str, scoped: Mapping[str, set[str]]) -> bool:
    """Whether ``rel`` is a file of a part (every file, for a part ``scoped`` does not name)."""
    part = part_of(rel)
    return part is not None and (part not in scoped or rel in scoped[part])


def digests(root: Path | None = None, scoped: Mapping[str, set[str]] | None = None) -> dict[str, str]:
    """path (in the package) -> the first 12 hex digits of its SHA-256, for every source file of PARTS
    (of a part in ``scoped``, only its files there: ``scope``)."""
    base, scoped = package(root), scoped or {}
    out = {}
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(base).as_posix()
        if in_scope(rel, scoped):
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return out


def versions(files: Mapping[str, str]) -> dict[str, str]:
    """Each part's version: a digest of its files' digests."""
    by: dict[str, list[str]] = {}
    for rel, digest in sorted(files.items()):
        by.setdefault(part_of(rel) or "other", []).append(f"{rel}:{digest}")
    return {name: hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12] for name, lines in by.items()}


def record(commits: Iterable[tuple[str, bool]], algos: Iterable[str] | None = None,
           root: Path | None = None, before: Mapping[str, Any] | None = None,
           simulated: bool = False) -> dict[str, Any]:
    """What verdict.json keeps: the result files' (commit, dirty) pairs, each part's version, each file's
    digest (of the algorithms, those ``algos`` are made of; ``simulated``: of the transport, what the
    simulator imports). ``before``: the record of an earlier invocation whose runs this one kept: its
    digests stand where they differ (those runs were made with that code), so a study resumed or only
    reported after the code changed still says so."""
    files = digests(root, scope(algos, simulated, root))
    then = before.get("files") if isinstance(before, Mapping) else None
    if isinstance(then, Mapping):
        files.update({rel: str(d) for rel, d in then.items() if rel in files})
    pairs = set(commits)
    return {"commits": sorted({c for c, _ in pairs}), "dirty": any(d for _, d in pairs), "versions": versions(files),
            "files": files, "machine": machine()}


def machine() -> str:
    """What a simulated run's numbers depend on besides the code: the CPU and the vector units torch uses on
    it (another rounds otherwise), and the numerical libraries' versions."""
    import platform

    import numpy as np
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu} ({torch.backends.cpu.get_cpu_capability()}); torch {torch.__version__}, numpy {np.__version__}"


NO_RECORD = "no record of the code its files were made with"


def stale(recorded: Mapping[str, Any], algos: Iterable[str] | None = None, root: Path | None = None,
          simulated: bool = False) -> list[str]:
    """The source files (``part: path``) that changed, appeared or went since ``recorded`` was made
    (scoped as ``record`` scopes them, now or then); ["no record of the code"] where there is none."""
    then = recorded.get("files") if isinstance(recorded, Mapping) else None
    if not isinstance(then, Mapping):
        return [NO_RECORD]
    scoped = scope(algos, simulated, root)
    now = digests(root, scoped)
    # a record made before records were scoped holds every file of a part
    then = {rel: d for rel, d in then.items() if in_scope(rel, scoped)}
    changed = sorted(rel for rel in set(then) | set(now) if then.get(rel) != now.get(rel))
    return [f"{part_of(rel)}: {rel}" + ("" if rel in now else " (removed)") + ("" if rel in then else " (new)")
            for rel in changed]
