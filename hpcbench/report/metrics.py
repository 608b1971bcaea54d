"""Report arithmetic (pure): rows per run, groups over repeats, speedup and efficiency."""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median
from typing import Iterable, Sequence

import numpy as np

from hpcbench.results.schema import SUMMARY_KEYS, RunRecord
from hpcbench.telemetry.summary import time_to_target


@dataclass(frozen=True)
class RunRow:
    """The numbers the report shows for one run."""

    algorithm: str
    mode: str
    workers: int
    nodes: int  # distinct hosts the run's ranks were on
    samples_per_s: float
    median_step_s: float
    compute_fraction: float
    communicate_fraction: float
    wait_fraction: float
    final_accuracy: float
    time_to_target_s: float
    staleness_mean: float
    staleness_p50: float
    staleness_p99: float
    penalty_mean: float
    path: str


def run_row(rec: RunRecord, target: float) -> RunRow:
    s = rec.summary

    def get(key: str) -> float:
        assert key in SUMMARY_KEYS, key
        value = s.get(key, float("nan"))
        return float(value) if value is not None else float("nan")

    return RunRow(
        algorithm=rec.algorithm, mode=rec.mode, workers=rec.workers, nodes=len(set(rec.per_rank["hostnames"])),
        samples_per_s=get("samples_per_s"),
        median_step_s=get("median_step_s"), compute_fraction=get("compute_fraction"),
        communicate_fraction=get("communicate_fraction"), wait_fraction=get("wait_fraction"),
        final_accuracy=get("final_accuracy"),
        time_to_target_s=time_to_target(np.asarray(rec.evals["t"]), np.asarray(rec.evals["accuracy"]), target),
        staleness_mean=get("staleness_mean"), staleness_p50=get("staleness_p50"),
        staleness_p99=get("staleness_p99"), penalty_mean=get("penalty_mean"), path=rec.path,
    )


def spread(values: Sequence[float]) -> tuple[float, float]:
    """(median, half the min–max range) of the finite values; NaNs when there are none."""
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return float("nan"), float("nan")
    return median(finite), (max(finite) - min(finite)) / 2


@dataclass(frozen=True)
class ScalePoint:
    algorithm: str
    mode: str
    workers: int
    nodes: int
    repeats: int
    samples_per_s: float
    samples_per_s_spread: float
    speedup: float
    efficiency: float
    time_to_target_s: float
    final_accuracy: float
    staleness_mean: float


def speedup_efficiency(base_workers: int, base_rate: float, workers: int, rate: float) -> tuple[float, float]:
    """Throughput speedup against the smallest worker count, and that speedup per added worker."""
    if base_rate <= 0 or math.isnan(base_rate):
        return float("nan"), float("nan")
    speedup = rate / base_rate
    return speedup, speedup / (workers / base_workers)


def scaling(rows: Iterable[RunRow]) -> list[ScalePoint]:
    """One point per (algorithm, mode, workers), medians over repeats, against each curve's smallest n."""
    groups: dict[tuple[str, str, int], list[RunRow]] = {}
    for r in rows:
        groups.setdefault((r.algorithm, r.mode, r.workers), []).append(r)
    points = []
    for algorithm, mode in sorted({(a, m) for a, m, _ in groups}):
        sizes = sorted(w for a, m, w in groups if (a, m) == (algorithm, mode))
        base_rate = spread([r.samples_per_s for r in groups[(algorithm, mode, sizes[0])]])[0]
        for w in sizes:
            g = groups[(algorithm, mode, w)]
            rate, rate_spread = spread([r.samples_per_s for r in g])
            speedup, efficiency = speedup_efficiency(sizes[0], base_rate, w, rate)
            points.append(ScalePoint(
                algorithm, mode, w, int(median(r.nodes for r in g)), len(g), rate, rate_spread, speedup, efficiency,
                spread([r.time_to_target_s for r in g])[0], spread([r.final_accuracy for r in g])[0],
                spread([r.staleness_mean for r in g])[0]))
    return points
