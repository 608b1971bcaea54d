"""``hpcbench diff OLD NEW``: per-cell changes between two studies, and the configuration that differs."""
from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from hpcbench.report.metrics import ScalePoint, run_row, scaling
from hpcbench.report.tables import FORMATS, Column, render
from hpcbench.results.schema import RunRecord

IGNORED_KEYS = ("out",)  # differs between any two studies and means nothing


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


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


def change(old: float | None, new: float | None, digits: int) -> str:
    def f(v: float | None) -> str:
        return "-" if v is None or math.isnan(v) else f"{v:.{digits}f}"

    cell = f"{f(old)} -> {f(new)}"
    if old is not None and new is not None and not math.isnan(old) and not math.isnan(new) and old:
        cell += f" ({100 * (new - old) / abs(old):+.0f}%)"
    return cell


METRICS = (("samples/s", "samples_per_s", 0), ("time to target s", "time_to_target_s", 1),
           ("final acc", "final_accuracy", 3), ("staleness mean", "staleness_mean", 1))


def diff_text(old: Sequence[RunRecord], new: Sequence[RunRecord], fmt: str = "text", target: float = 0.9) -> str:
    before = {(p.algorithm, p.mode, p.workers): p for p in scaling([run_row(r, target) for r in old])}
    after = {(p.algorithm, p.mode, p.workers): p for p in scaling([run_row(r, target) for r in new])}
    rows = []
    for key in sorted(set(before) | set(after)):
        o: ScalePoint | None = before.get(key)
        n: ScalePoint | None = after.get(key)
        status = "changed" if o and n else ("removed" if o else "added")
        rows.append([*map(str, key), status] + [change(getattr(o, attr, None), getattr(n, attr, None), digits)
                                                for _, attr, digits in METRICS])
    columns: list[Column] = [(h, (lambda i: lambda r: r[i])(i), str) for i, h in
               enumerate(["algorithm", "mode", "workers", "point"] + [m[0] for m in METRICS])]
    parts = [render(columns, rows, fmt if fmt in FORMATS else "text")]
    changes = config_changes(old, new)
    if changes:
        config_cols: list[Column] = [(h, (lambda i: lambda r: r[i])(i), str) for i, h in enumerate(["config key", "old", "new"])]
        parts.append(render(config_cols, changes, fmt))
    else:
        parts.append("configuration: identical")
    return "\n\n".join(parts)
