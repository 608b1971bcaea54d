"""``hpcbench diff OLD NEW``: per-cell changes between two studies, and the configuration that differs."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from hpcbench.errors import one_of
from hpcbench.report.metrics import ScalePoint, flatten, run_row, scaling, varying
from hpcbench.report.tables import Column, render
from hpcbench.results.schema import RunRecord

IGNORED_KEYS = ("out",)  # differs between any two studies and means nothing


def config_values(records: Iterable[RunRecord]) -> dict[str, set[str]]:
    values: dict[str, set[str]] = {}
    for r in records:
        for key, value in flatten(r.attrs["config"]).items():
            if key not in IGNORED_KEYS:
                values.setdefault(key, set()).add(repr(value))
    return values


def config_changes(old: Sequence[RunRecord], new: Sequence[RunRecord]) -> list[tuple[str, str, str]]:
    """(key, old values, new values) for every configuration key whose values differ."""
    a, b = config_values(old), config_values(new)
    return [(k, ", ".join(sorted(a.get(k, {"-"}))), ", ".join(sorted(b.get(k, {"-"}))))
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def relative(old: float | None, new: float | None) -> float | None:
    """(new − old)/|old|, or None when either is missing or old is 0."""
    if old is None or new is None or math.isnan(old) or math.isnan(new) or not old:
        return None
    return (new - old) / abs(old)


def change(old: float | None, new: float | None, digits: int) -> str:
    def f(v: float | None) -> str:
        return "-" if v is None or math.isnan(v) else f"{v:.{digits}f}"

    rel = relative(old, new)
    return f"{f(old)} -> {f(new)}" + ("" if rel is None else f" ({100 * rel:+.0f}%)")


METRICS = (("samples/s", "samples_per_s", 0), ("time to target s", "time_to_target_s", 1),
           ("final acc", "final_accuracy", 3), ("staleness mean", "staleness_mean", 1))
# What "worse" means for each metric a gate may watch: +1 higher is better, −1 lower is better.
BETTER = {"samples_per_s": 1, "speedup": 1, "efficiency": 1, "final_accuracy": 1, "time_to_target_s": -1,
          "staleness_mean": -1}

Key = tuple[str, str, tuple[tuple[str, str], ...], int]


def matched(old: Sequence[RunRecord], new: Sequence[RunRecord],
            target: float) -> tuple[list[str], dict[Key, ScalePoint], dict[Key, ScalePoint]]:
    """Scale points of both studies by (algorithm, mode, settings that differ within a study, workers)."""
    old_rows, new_rows = [run_row(r, target) for r in old], [run_row(r, target) for r in new]
    keys = sorted(set(varying(old_rows)) | set(varying(new_rows)))

    def by_key(points: list[ScalePoint]) -> dict[Key, ScalePoint]:
        return {(p.algorithm, p.mode, p.group, p.workers): p for p in points}

    return keys, by_key(scaling(old_rows, keys)), by_key(scaling(new_rows, keys))


# The spread each metric's repeats have (half their range), where the report measures one.
SPREADS = {"samples_per_s": "samples_per_s_spread", "final_accuracy": "final_accuracy_spread",
           "time_to_target_s": "time_to_target_spread"}


def beyond_spread(old: ScalePoint, new: ScalePoint, metric: str) -> bool | None:
    """Whether the two points' ranges over their repeats do not overlap; None where either has a single
    run (or the metric has no spread): then the threshold alone decides."""
    attr = SPREADS.get(metric)
    if attr is None or old.repeats < 2 or new.repeats < 2:
        return None
    return abs(getattr(new, metric) - getattr(old, metric)) > getattr(old, attr) + getattr(new, attr)


def regressions(before: dict[Key, ScalePoint], after: dict[Key, ScalePoint], metric: str,
                fail_above: float) -> tuple[list[str], list[str]]:
    """(a line for each point in both studies whose ``metric`` got worse by more than ``fail_above``
    percent and, where both have repeats, by more than their spread; a line for each point worse by more
    than ``fail_above`` but within the spread, which passes). A value that is no longer there, such as a
    target no longer reached, counts as worse. ``metric``: one of BETTER (the command checks it first)."""
    failing, passing = [], []
    for key in sorted(set(before) & set(after)):
        old, new = getattr(before[key], metric), getattr(after[key], metric)
        if math.isnan(old):
            continue
        rel = relative(old, new)
        if not (math.isnan(new) or (rel is not None and -BETTER[metric] * rel * 100 > fail_above)):
            continue
        algorithm, mode, group, workers = key
        where = ", ".join([algorithm, mode, *(f"{k}={v}" for k, v in group), f"{workers} workers"])
        apart = None if math.isnan(new) else beyond_spread(before[key], after[key], metric)
        runs = f"{before[key].repeats} and {after[key].repeats} runs"
        if apart is False:
            passing.append(f"within the spread: {where}: {metric} {change(old, new, 3)}, worse by more than "
                           f"{fail_above:g}% but inside the range of the repeats ({runs}): not flagged")
            continue
        why = f", beyond the spread of the repeats ({runs})" if apart else ""
        failing.append(f"regression: {where}: {metric} {change(old, new, 3)}, worse by more than {fail_above:g}%{why}")
    return failing, passing


FORMATS = ("text", "md", "latex", "csv")


def same(old: ScalePoint, new: ScalePoint) -> bool:
    """Every compared metric equal (both missing counts as equal)."""
    def value(p: ScalePoint, attr: str) -> Any:
        v = getattr(p, attr)
        return None if isinstance(v, float) and math.isnan(v) else v

    return all(value(old, attr) == value(new, attr) for _, attr, _ in METRICS)


def diff_text(old: Sequence[RunRecord], new: Sequence[RunRecord], fmt: str = "text", target: float = 0.9) -> str:
    if fmt not in FORMATS:
        raise one_of("format", fmt, FORMATS)
    keys, before, after = matched(old, new, target)
    rows = []
    for key in sorted(set(before) | set(after)):
        o: ScalePoint | None = before.get(key)
        n: ScalePoint | None = after.get(key)
        status = ("same" if same(o, n) else "changed") if o and n else ("removed" if o else "added")
        algorithm, mode, group, workers = key
        rows.append([algorithm, mode, *(v for _, v in group), str(workers), status]
                    + [change(getattr(o, attr, None), getattr(n, attr, None), digits) for _, attr, digits in METRICS])
    headers = ["algorithm", "mode", *keys, "workers", "point"] + [m[0] for m in METRICS]
    columns: list[Column] = [(h, (lambda i: lambda r: r[i])(i), str) for i, h in enumerate(headers)]
    parts = [render(columns, rows, fmt)]
    changes = config_changes(old, new)
    if changes:
        config_cols: list[Column] = [(h, (lambda i: lambda r: r[i])(i), str)
                                     for i, h in enumerate(["config key", "old", "new"])]
        parts.append(render(config_cols, changes, fmt))
    else:
        parts.append("configuration: identical")
    return "\n\n".join(parts)
