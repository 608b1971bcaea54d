"""``hpcbench check RUNS --reference ref.toml``: runs against expected bounds, for CI.

The reference names, per algorithm and worker count, bounds on the scale point's metrics (medians
over repeats), as ReFrame's performance references do::

    [asgd.4]
    samples_per_s = [4000, 6500]     # [lower, upper]
    final_accuracy = {min = 0.9}     # one bound only

An entry with no runs is a miss too: a gate must not pass because a point went missing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from hpcbench.algorithms import ALGORITHMS
from hpcbench.errors import UsageError, one_of
from hpcbench.report.diff import BETTER
from hpcbench.report.metrics import ScalePoint

METRICS = tuple(BETTER)


@dataclass(frozen=True)
class Bound:
    algorithm: str
    workers: int
    metric: str
    low: float
    high: float

    def where(self) -> str:
        return f"{self.algorithm} at {self.workers} workers"


def bounds_of(value: Any, where: str) -> tuple[float, float]:
    """``[low, high]`` or ``{min = …, max = …}`` (either may be left out) → (low, high)."""
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        low, high = float(value[0]), float(value[1])
    elif isinstance(value, dict) and value and set(value) <= {"min", "max"} \
            and all(isinstance(v, (int, float)) for v in value.values()):
        low, high = float(value.get("min", -math.inf)), float(value.get("max", math.inf))
    else:
        raise UsageError(f"reference {where}: expected [LOW, HIGH] or {{min = LOW, max = HIGH}}, got {value!r}")
    if low > high:
        raise UsageError(f"reference {where}: lower bound {low:g} is above upper bound {high:g}")
    return low, high


def parse_reference(table: Mapping[str, Any]) -> list[Bound]:
    """The TOML document of a reference file → its bounds (one clear error line on a malformed one)."""
    out = []
    for algorithm, by_workers in table.items():
        if algorithm not in ALGORITHMS.names():
            raise one_of("algorithm in the reference", algorithm, ALGORITHMS.names())
        if not isinstance(by_workers, dict):
            raise UsageError(f"reference: [{algorithm}] must hold tables named by worker count, like [{algorithm}.4]")
        for workers, metrics in by_workers.items():
            if not workers.isdigit() or not isinstance(metrics, dict):
                raise UsageError(f"reference: [{algorithm}.{workers}] is not a worker count with metric bounds")
            for metric, value in metrics.items():
                if metric not in METRICS:
                    raise one_of(f"metric in [{algorithm}.{workers}]", metric, list(METRICS))
                low, high = bounds_of(value, f"{algorithm}.{workers}.{metric}")
                out.append(Bound(algorithm, int(workers), metric, low, high))
    if not out:
        raise UsageError("reference: no bounds (expected tables like [asgd.4] with samples_per_s = [LOW, HIGH])")
    return out


def misses(points: Sequence[ScalePoint], bounds: Sequence[Bound]) -> list[str]:
    """A line for every bound that a matching scale point misses, or that no point matches."""
    out = []
    for b in bounds:
        found = [p for p in points if p.algorithm == b.algorithm and p.workers == b.workers]
        if not found:
            out.append(f"miss: {b.where()}: no runs")
        for p in found:
            value = getattr(p, b.metric)
            if math.isnan(value) or not b.low <= value <= b.high:
                label = ", ".join([p.mode, *(f"{k}={v}" for k, v in p.group)])
                out.append(f"miss: {b.where()} ({label}): {b.metric} = {value:.4g}, "
                           f"expected within [{b.low:g}, {b.high:g}]")
    return out
