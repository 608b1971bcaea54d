"""What each plot of a report shows (pure): its curves, one per group the tables show, with the same
labels, and their points. ``plots.py`` draws them; ``report --format json`` lists them."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hpcbench.report.metrics import Curve, RunRow, ScalePoint, curve_of
from hpcbench.results.schema import RunRecord

PHASES = ("compute", "communicate", "wait", "other")
NAN = float("nan")
# With more groups than this in a panel, the accuracy plots colour the FEW most accurate and grey the rest.
MAX_COLOURED, FEW = 6, 5


@dataclass(frozen=True)
class Series:
    label: str  # as the tables name the group
    curve: Curve
    points: tuple[tuple[float, float, float], ...]  # (x, y, error: half the repeats' range, NaN: none)
    panel: int = 0  # the worker count of a panel, for plots drawn one panel per worker count
    never: tuple[float, ...] = ()  # time to target: the x where its finished runs never reached the target
    notes: tuple[tuple[float, float, str], ...] = ()  # (x, y, text) beside a point: "2 of 3" reached the target
    highlight: bool = True  # False: drawn in grey, one of many groups behind the most accurate few


@dataclass(frozen=True)
class Figure:
    name: str  # its file: NAME.png
    title: str
    x: str
    y: str
    series: tuple[Series, ...]
    kind: str = "line"  # or "bars": one bar per series, its points (phase index, share, NaN)
    log_x: bool = False
    line_at: float = NAN  # a reference line (the target accuracy, 100% efficiency)
    caption: str = ""  # what the plot shows, in a sentence or two (the html page's caption)

    def panels(self) -> list[int]:
        return sorted({s.panel for s in self.series})


def finite(points: list[tuple[float, float, float]]) -> tuple[tuple[float, float, float], ...]:
    return tuple(p for p in points if math.isfinite(p[0]) and math.isfinite(p[1]))


def scaling_figures(points: Sequence[ScalePoint], labels: dict[Curve, str], target: float) -> list[Figure]:
    curves = sorted(labels, key=labels.__getitem__)

    def series(y, err=lambda p: NAN) -> tuple[Series, ...]:
        return tuple(Series(labels[c], c, finite([(p.workers, y(p), err(p) if p.repeats > 1 else NAN)
                                                  for p in points if p.curve == c])) for c in curves)

    def to_target(s: Series) -> Series:
        """The time-to-target curve with the worker counts where no finished run reached the target, and
        a note where only some did."""
        mine = [p for p in points if p.curve == s.curve and p.missed_target]
        return dataclasses.replace(
            s, never=tuple(p.workers for p in mine if not p.reached_target),
            notes=tuple((p.workers, p.time_to_target_s, f"{p.reached_target} of {p.reached_target + p.missed_target}")
                        for p in mine if p.reached_target))

    return [
        Figure("throughput", "Throughput against workers (median over repeats, bars: their range)", "workers",
               "samples / s", series(lambda p: p.samples_per_s, lambda p: p.samples_per_s_spread), log_x=True,
               caption="Samples per second against the number of workers, a line per group: the median over "
                       "repeats, with bars spanning their range. Higher is better."),
        Figure("efficiency", "Scaling efficiency against each curve's fewest workers", "workers",
               "parallel efficiency (%)", series(lambda p: 100 * p.efficiency), log_x=True, line_at=100.0,
               caption="Parallel efficiency against the number of workers: each group's speedup over its fewest "
                       "workers per worker added. The dashed line is perfect scaling (100%)."),
        Figure("time-to-target", f"Time to accuracy {target:g} against workers (median, bars: range)", "workers",
               "seconds", tuple(map(to_target, series(lambda p: p.time_to_target_s,
                                                      lambda p: p.time_to_target_spread))), log_x=True,
               caption=f"Seconds until held-out accuracy first reaches {target:g}, against the number of workers: "
                       "the median over repeats, with bars spanning their range. Lower is better; a group that "
                       "never reached it sits on the line marked never, and \"2 of 3\" beside a point says how "
                       "many repeats reached it."),
    ]


def representative(runs: Sequence[RunRow]) -> RunRow:
    """The repeat with the median final accuracy (the lower of the two middle ones)."""
    ranked = sorted(runs, key=lambda r: (r.final_accuracy if math.isfinite(r.final_accuracy) else math.inf, r.path))
    return ranked[(len(ranked) - 1) // 2]


def accuracy_figures(rows: Sequence[RunRow], records: Sequence[RunRecord], keys: Sequence[str],
                     labels: dict[Curve, str], target: float) -> list[Figure]:
    """Accuracy against time and against samples: a panel per worker count, a curve per group (the run
    with the median final accuracy of its repeats); with many groups in a panel, the most accurate few in
    colour and the rest in grey."""
    evals = {r.path: r.evals for r in records}
    chosen = {}
    for workers in sorted({r.workers for r in rows}):
        for curve in sorted(labels, key=labels.__getitem__):
            runs = [r for r in rows if r.workers == workers and curve_of(r, keys) == curve and r.result == "ok"]
            chosen[(workers, curve)] = representative(runs) if runs else None
    final = {key: run.final_accuracy if math.isfinite(run.final_accuracy) else -math.inf
             for key, run in chosen.items() if run}
    coloured = set(final)
    for workers in sorted({w for w, _ in chosen}):
        here = [(w, c) for w, c in final if w == workers]
        if len(here) > MAX_COLOURED:  # the most accurate few keep their colours
            coloured -= set(sorted(here, key=lambda k: (-final[k], labels[k[1]]))[FEW:])

    def series(x: str) -> tuple[Series, ...]:
        out = []
        for (workers, curve), run in chosen.items():
            e = evals.get(run.path, {}) if run else {}
            xs, ys = np.asarray(e.get(x, ()), dtype=float), np.asarray(e.get("accuracy", ()), dtype=float)
            out.append(Series(labels[curve], curve, finite([(a, b, NAN) for a, b in zip(xs, ys)]), workers,
                              highlight=(workers, curve) in coloured))
        return tuple(out)

    note = "a panel per worker count; each group's run with the median final accuracy"
    many = (f" Where a panel holds more than {MAX_COLOURED} groups, the {FEW} that end most accurate are in colour "
            "and the rest in grey." if len(coloured) < sum(run is not None for run in chosen.values()) else "")
    what = ("a panel per worker count, a line per group: its run with the median final accuracy of its repeats. "
            f"The dashed line is the target, {target:g}.{many}")
    return [Figure("accuracy-time", f"Held-out accuracy against time ({note})", "seconds since the start",
                   "accuracy", series("t"), line_at=target,
                   caption=f"Held-out accuracy against seconds since the start, {what}"),
            Figure("accuracy-samples", f"Held-out accuracy against samples ({note})", "samples trained",
                   "accuracy", series("samples"), line_at=target,
                   caption=f"Held-out accuracy against samples trained, {what}")]


def phases_figure(rows: Sequence[RunRow], keys: Sequence[str], labels: dict[Curve, str]) -> Figure:
    """Where the workers' time goes: a bar per group and worker count (medians over repeats)."""
    bars = []
    for curve in sorted(labels, key=labels.__getitem__):
        for workers in sorted({r.workers for r in rows if curve_of(r, keys) == curve}):
            runs = [r for r in rows if r.workers == workers and curve_of(r, keys) == curve and r.result == "ok"]
            shares = [float(np.median([getattr(r, f"{phase}_fraction") for r in runs])) if runs else NAN
                      for phase in PHASES[:3]]
            shares.append(max(0.0, 1 - sum(shares)) if runs else NAN)
            bars.append(Series(f"{labels[curve]}, {workers} workers", curve,
                               finite([(i, 100 * v, NAN) for i, v in enumerate(shares)]), workers))
    return Figure("phases", "Where the workers' time goes (median over repeats; other: data loading, own math)",
                  "share of the workers' time (%)", "", tuple(bars), kind="bars",
                  caption="Where the workers' time goes, a bar per group and worker count: the shares spent "
                          "computing, communicating, waiting and on the rest (data loading, the algorithm's own "
                          "math), medians over repeats.")


def figures(rows: Sequence[RunRow], points: Sequence[ScalePoint], records: Sequence[RunRecord],
            keys: Sequence[str], labels: dict[Curve, str], target: float) -> list[Figure]:
    if not rows:
        return []
    return [*scaling_figures(points, labels, target), *accuracy_figures(rows, records, keys, labels, target),
            phases_figure(rows, keys, labels)]


def as_json(figure: Figure) -> dict:
    """A plot as ``report --format json`` lists it: each curve's label, group and points (time to target:
    and ``never``, the worker counts where its finished runs never reached the target)."""
    return {"plot": f"{figure.name}.png", "title": figure.title, "caption": figure.caption, "x": figure.x,
            "y": figure.y, "kind": figure.kind,
            "curves": [{"label": s.label, "group": {"algorithm": s.curve[0], "mode": s.curve[1], **dict(s.curve[2])},
                        **({"workers": s.panel} if figure.kind == "bars" or s.panel else {}),
                        "points": [[x, y] if math.isnan(e) else [x, y, e] for x, y, e in s.points],
                        **({"never": list(s.never)} if s.never else {})}
                       for s in figure.series]}
