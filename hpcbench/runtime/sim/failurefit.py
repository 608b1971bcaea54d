"""The simulator's failure costs fitted from real runs that lost workers (Open MPI's ULFM).

detection (``sim.detect_s``): a failure's death to rank 0 learning of it, the median over the failures
whose time of death is known (an injected kill; a kill from outside has none);
regrouping (``sim.regroup_s`` + ``sim.regroup_log_s`` · log2 p): the survivors' agreement on a failed
collective and their shrink to p workers, each time it happened the shortest of the survivors' "Shrink"
rows (the others include waiting for the last survivor to come to it), least squares over log2 p.
ULFM's agreement runs over a tree of the survivors, so its rounds of messages grow as log2 p; a
shrink is one more agreement and a new communicator. With one size of team the slope cannot be told
from the constant: it keeps ``default_log_s`` and the constant takes the rest.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from hpcbench.results.schema import RunRecord


class FailureFit(NamedTuple):
    """What the runs measured (seconds) and the simulator's settings fitted to them."""

    detections: tuple[float, ...]
    regroups: tuple[tuple[int, float], ...]  # (survivors, seconds)
    detect_s: float
    regroup_s: float
    regroup_log_s: float

    def settings(self) -> dict[str, float]:
        return {"detect_s": self.detect_s, "regroup_s": self.regroup_s, "regroup_log_s": self.regroup_log_s}


def detections(rec: RunRecord) -> list[float]:
    """Seconds from each injected death to rank 0 learning of it."""
    table = rec.tables.get("failures", {})
    if "t_death" not in table:
        return []
    gap = np.asarray(table["t_detected"], dtype=np.float64) - np.asarray(table["t_death"], dtype=np.float64)
    return [float(x) for x in gap[np.isfinite(gap) & (gap >= 0)]]


def regroups(rec: RunRecord) -> list[tuple[int, float]]:
    """(survivors, seconds) of each time the survivors agreed on a failed collective and shrank: its
    "Shrink" rows, told apart by the deaths before them, the shortest of each time."""
    if "Shrink" not in rec.ops:
        return []
    tl = rec.timeline
    rows = (tl["phase"] == rec.phases.index("recover")) & (tl["op"] == rec.ops.index("Shrink"))
    if not rows.any():
        return []
    table = rec.tables.get("failures", {})
    death = np.asarray(table.get("t_death", []), dtype=np.float64)
    found = np.asarray(table.get("t_detected", []), dtype=np.float64)
    since = np.sort(np.where(np.isfinite(death), death, found))
    starts, ends, ranks = tl["t_start"][rows], tl["t_end"][rows], tl["rank"][rows]
    event = np.searchsorted(since, starts, side="right")  # the rows after the k-th death belong to it
    out = []
    for k in np.unique(event):
        mine = event == k
        out.append((int(np.unique(ranks[mine]).size), float((ends[mine] - starts[mine]).min())))
    return out


def fit_failures(records: Sequence[RunRecord], default_log_s: float) -> FailureFit | None:
    """The failure costs the ``records`` measured; None where none of them lost a worker."""
    seen = [d for rec in records for d in detections(rec)]
    shrinks = [r for rec in records for r in regroups(rec)]
    if not seen and not shrinks:
        return None
    detect_s = float(np.median(seen)) if seen else math.nan
    regroup_s, regroup_log_s = math.nan, math.nan
    if shrinks:
        p = np.array([s for s, _ in shrinks], dtype=np.float64)
        cost = np.array([c for _, c in shrinks])
        sizes = np.unique(p)
        medians = np.array([np.median(cost[p == s]) for s in sizes])
        x = np.log2(sizes)
        if sizes.size >= 2:
            slope, intercept = np.polyfit(x, medians, 1)
            if slope < 0:  # no growth measured: a constant
                slope, intercept = 0.0, float(medians.mean())
            elif intercept < 0:  # through the origin
                slope, intercept = float(x @ medians / (x @ x)), 0.0
        else:
            slope = default_log_s
            intercept = max(float(medians[0]) - slope * float(x[0]), 0.0)
        regroup_s, regroup_log_s = float(intercept), float(slope)
    return FailureFit(tuple(seen), tuple(shrinks), detect_s, regroup_s, regroup_log_s)
