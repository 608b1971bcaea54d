"""Shared helpers for the benchmark scripts: run hpcbench under mpiexec or the simulator, read results."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hpcbench.launch.local import launch_env, mpi_command
from hpcbench.results.schema import RunRecord
from hpcbench.results.store import read_run


def real(world: int, args: list[str], out: Path, timeout: float = 1800) -> RunRecord:
    """``hpcbench run ARGS`` on ``world`` local ranks."""
    proc = subprocess.run(mpi_command(world, ["run", *args, "--out", str(out)]), env=launch_env(world),
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"run failed: {' '.join(args)}\n{proc.stderr[-2000:]}")
    return read_run(out)


def simulated(workers: int, args: list[str], out: Path, timeout: float = 3600) -> RunRecord:
    """``hpcbench simulate ARGS`` with ``workers`` virtual workers."""
    proc = subprocess.run([sys.executable, "-m", "hpcbench", "simulate", "--workers", str(workers), *args,
                           "--out", str(out)], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"simulate failed: {' '.join(args)}\n{proc.stderr[-2000:]}")
    return read_run(out)


def in_turn(rounds: int, runs: Callable[[int], dict[str, Callable[[], Any]]]) -> dict[str, list[Any]]:
    """Each run's results over ``rounds`` rounds (``runs(r)``: round r's runs by name), the runs in the
    given order on even rounds and reversed on odd ones: on a shared machine the second of two
    back-to-back runs can be slower than the first by more than the difference being measured."""
    results: dict[str, list[Any]] = {}
    for r in range(rounds):
        this = runs(r)
        for name in list(this) if r % 2 == 0 else reversed(this):
            results.setdefault(name, []).append(this[name]())
    return results


def fmt(value: float, digits: int = 3) -> str:
    return "-" if value != value else f"{value:.{digits}f}"


def residual_wait(times: np.ndarray, before: float) -> float:
    """The mean wait from a moment drawn at random to the next of the events ``times``, as their gaps before
    ``before`` give it: sum(g^2) / (2 sum(g)) (a long gap is more likely to hold the moment); NaN where
    fewer than two events came before."""
    t = np.sort(np.asarray(times, dtype=np.float64))
    gaps = np.diff(t[t < before])
    return float((gaps ** 2).sum() / (2 * gaps.sum())) if gaps.size and gaps.sum() > 0 else float("nan")


def cadence_wait(rec: RunRecord) -> float:
    """What the survivors' own cadence makes anyone wait for their next update, at a run's first failure:
    the residual wait of the events its recovery counts to (the gradients a parameter server applied,
    else the finished steps), the survivors' alone, before the first death."""
    failures = rec.tables["failures"]
    died = float(np.nanmin(failures["t_death"]))
    survivors = np.setdiff1d(np.arange(1, rec.workers + 1), failures["worker"])
    if "updates" in rec.tables:
        updates = rec.tables["updates"]
        events = updates["t"][np.isin(updates["worker"], survivors)]
    else:
        tl = rec.timeline
        events = tl["t_end"][np.isin(tl["rank"], survivors) & (tl["phase"] == rec.phases.index("compute"))]
    return residual_wait(events, died)
