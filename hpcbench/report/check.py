"""``hpcbench check RUNS --reference ref.toml``: runs against expected bounds, for CI.

The reference names, per algorithm and worker count, bounds on the scale point's metrics (medians
over repeats), as ReFrame's performance references do: a reference value with relative tolerances,
or absolute bounds::

    [asgd.4]
    samples_per_s = {ref = 15860, lower = -0.25}   # at most 25% below 15860, any amount above
    final_accuracy = {min = 0.9}                   # one bound only
    efficiency = [0.5, 1.1]                        # [lower, upper]

``check BASELINE --write-reference ref.toml`` writes one from a study run with repeats: each
tolerance is what the repeats' own spread says a rerun may differ by (see ``tolerance``).

An entry with no runs is a miss too: a gate must not pass because a point went missing.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from hpcbench.algorithms import ALGORITHMS
from hpcbench.errors import UsageError, one_of
from hpcbench.report.diff import BETTER
from hpcbench.report.metrics import RunRow, ScalePoint, varying

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
    """``[low, high]``, ``{min = …, max = …}`` or ``{ref = …, lower = …, upper = …}`` (fractions of ref,
    lower <= 0 <= upper; any one may be left out but ref) → (low, high)."""
    numbers = isinstance(value, dict) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                              and math.isfinite(v) for v in value.values())
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        low, high = float(value[0]), float(value[1])
    elif numbers and value and set(value) <= {"min", "max"}:
        low, high = float(value.get("min", -math.inf)), float(value.get("max", math.inf))
    elif numbers and "ref" in value and set(value) <= {"ref", "lower", "upper"}:
        ref, lower, upper = float(value["ref"]), float(value.get("lower", -math.inf)), float(value.get("upper",
                                                                                                       math.inf))
        if lower > 0 or upper < 0:
            raise UsageError(f"reference {where}: lower must be <= 0 and upper >= 0 (fractions of ref), got "
                             f"lower = {lower:g}, upper = {upper:g}")
        low, high = ref + abs(ref) * lower, ref + abs(ref) * upper
    else:
        raise UsageError(f"reference {where}: expected [LOW, HIGH], {{min = LOW, max = HIGH}} or "
                         f"{{ref = VALUE, lower = -FRACTION, upper = FRACTION}}, got {value!r}")
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


# A written reference's tolerance: twice the repeats' whole range (a rerun's median may land anywhere in
# it, and so may the baseline's), never tighter than FLOOR (three repeats see little of a machine's
# moods). Past CATCHES a 2x slowdown (-50%) would pass: the reference says so.
FLOOR, CATCHES = 0.2, 0.5
WRITTEN = ("samples_per_s", "final_accuracy")  # higher is better for both: a lower tolerance only


def tolerance(values: Sequence[float]) -> float:
    """The lower tolerance (a fraction, <= 0) for a metric whose repeats gave ``values``."""
    finite = [v for v in values if math.isfinite(v)]
    middle = median(finite)
    spread = (max(finite) - min(finite)) / abs(middle) if middle else math.inf
    return -max(FLOOR, 2 * spread)


def write_reference(values: Mapping[tuple[str, int], Mapping[str, Sequence[float]]]) -> tuple[str, list[str]]:
    """The reference for each (algorithm, workers): per metric its runs' values → (TOML text, warnings).
    A point with fewer than 2 finished runs gets no tolerance of its own: refused, naming it."""
    thin = [f"{a} at {n} workers" for (a, n), m in values.items() if len(m["samples_per_s"]) < 2]
    if thin:
        raise UsageError(f"--write-reference needs 2 or more finished runs per point (sweep --repeats 3) to "
                         f"take tolerances from: {', '.join(thin)} have fewer")
    lines = ["# hpcbench check --reference: written by check --write-reference from the runs' repeats;",
             "# each lower tolerance is twice their range (at least 20%), so a rerun on the same machine passes"]
    warnings = []
    for (algo, workers), metrics in sorted(values.items()):
        lines += ["", f"[{algo}.{workers}]"]
        for metric in WRITTEN:
            runs = [v for v in metrics.get(metric, ()) if math.isfinite(v)]
            if len(runs) < 2:
                continue
            ref, lower = median(runs), tolerance(runs)
            lines.append(f"{metric} = {{ref = {ref:.6g}, lower = {lower:.3f}}}  # {len(runs)} runs, "
                         f"{min(runs):.6g} to {max(runs):.6g}")
            if -lower >= CATCHES:
                warnings.append(f"{algo} at {workers} workers: its runs' {metric} spread so widely that the "
                                f"reference allows {-100 * lower:.0f}% less, so a 2x slowdown would pass; give "
                                "each rank a core or run longer")
    return "\n".join(lines) + "\n", warnings


def reference(rows: Sequence[RunRow]) -> tuple[str, int, list[str]]:
    """``check --write-reference``: the reference for the finished runs ``rows`` (one group per algorithm)
    → (TOML text, points, warnings)."""
    done = [r for r in rows if r.result == "ok"]
    differ = varying(done)
    if differ:
        raise UsageError(f"these runs hold several groups per algorithm (settings differ: {', '.join(differ)}); a "
                         "reference is for one: write it from one study's directory")
    values: dict[tuple[str, int], dict[str, list[float]]] = {}
    for r in done:
        for metric in WRITTEN:
            values.setdefault((r.algorithm, r.workers), {}).setdefault(metric, []).append(getattr(r, metric))
    text, warnings = write_reference(values)
    return text, len(values), warnings
