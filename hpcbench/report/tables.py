"""``hpcbench report``: result files → a table of runs and a scaling table per algorithm."""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any, Callable, Sequence

from tabulate import tabulate

from hpcbench.errors import UsageError, one_of
from hpcbench.report.metrics import RunRow, ScalePoint, run_row, scaling
from hpcbench.results.schema import RunRecord
from hpcbench.results.store import read_run

FORMATS = {"text": "simple", "md": "github", "latex": "latex_booktabs", "csv": "csv"}


def collect(paths: Sequence[str]) -> list[Path]:
    """Result files named directly or found under directories (``*.h5``, recursively)."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found.extend(sorted(p.rglob("*.h5")))
        elif p.is_file():
            found.append(p)
        else:
            raise UsageError(f"no such result file or directory: {str(p)!r}")
    if not found:
        raise UsageError(f"no result files (*.h5) in {', '.join(map(str, paths))}")
    return found


def load(paths: Sequence[str]) -> list[RunRecord]:
    return [read_run(p) for p in collect(paths)]


def fmt_num(digits: int, scale: float = 1.0, unit: str = "") -> Callable[[float], str]:
    def f(v: float) -> str:
        return "-" if v is None or math.isnan(v) else f"{v * scale:.{digits}f}{unit}"

    return f


def fmt_pct(v: float) -> str:
    return "-" if math.isnan(v) else f"{100 * v:.0f}%"


Column = tuple[str, Callable[[Any], float | str | int], Callable[[Any], str]]
TEXT: Callable[[Any], str] = str

RUN_COLUMNS: list[Column] = [
    ("algorithm", lambda r: r.algorithm, TEXT),
    ("mode", lambda r: r.mode, TEXT),
    ("nodes", lambda r: r.nodes, TEXT),
    ("workers", lambda r: r.workers, TEXT),
    ("samples/s", lambda r: r.samples_per_s, fmt_num(0)),
    ("step ms (median)", lambda r: r.median_step_s, fmt_num(1, 1000)),
    ("compute", lambda r: r.compute_fraction, fmt_pct),
    ("communicate", lambda r: r.communicate_fraction, fmt_pct),
    ("wait", lambda r: r.wait_fraction, fmt_pct),
    ("final acc", lambda r: r.final_accuracy, fmt_num(3)),
    ("time to target s", lambda r: r.time_to_target_s, fmt_num(1)),
    ("staleness mean", lambda r: r.staleness_mean, fmt_num(1)),
    ("staleness p50/p99", lambda r: f"{fmt_num(0)(r.staleness_p50)}/{fmt_num(0)(r.staleness_p99)}", TEXT),
    ("penalty mean", lambda r: r.penalty_mean, fmt_num(2)),
]

SCALE_COLUMNS: list[Column] = [
    ("algorithm", lambda p: p.algorithm, TEXT),
    ("mode", lambda p: p.mode, TEXT),
    ("nodes", lambda p: p.nodes, TEXT),
    ("workers", lambda p: p.workers, TEXT),
    ("runs", lambda p: p.repeats, TEXT),
    ("samples/s", lambda p: p.samples_per_s, fmt_num(0)),
    ("± spread", lambda p: p.samples_per_s_spread, fmt_num(0)),
    ("speedup", lambda p: p.speedup, fmt_num(2)),
    ("efficiency", lambda p: p.efficiency, fmt_pct),
    ("time to target s", lambda p: p.time_to_target_s, fmt_num(1)),
    ("final acc", lambda p: p.final_accuracy, fmt_num(3)),
    ("staleness mean", lambda p: p.staleness_mean, fmt_num(1)),
]


def render(columns: list[Column], items: Sequence[Any], fmt: str) -> str:
    headers = [c[0] for c in columns]
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(headers)
        for item in items:
            values = [c[1](item) for c in columns]
            writer.writerow(["" if isinstance(v, float) and math.isnan(v) else v for v in values])
        return out.getvalue().rstrip("\n")
    rows = [[c[2](c[1](item)) for c in columns] for item in items]
    return tabulate(rows, headers=headers, tablefmt=FORMATS[fmt], disable_numparse=True)


def report_text(records: Sequence[RunRecord], fmt: str = "text", target: float = 0.9) -> str:
    if fmt not in FORMATS:
        raise one_of("format", fmt, list(FORMATS))
    rows: list[RunRow] = sorted((run_row(r, target) for r in records),
                                key=lambda r: (r.algorithm, r.mode, r.workers, r.path))
    points: list[ScalePoint] = scaling(rows)
    if fmt == "csv":
        return render(RUN_COLUMNS, rows, fmt) + "\n\n" + render(SCALE_COLUMNS, points, fmt)
    title = f"Runs ({len(rows)}; time to target = first evaluation at accuracy >= {target:g})"
    scale_title = "Scaling (medians over repeats; speedup and efficiency against each algorithm's fewest workers)"
    return "\n\n".join([title, render(RUN_COLUMNS, rows, fmt), scale_title, render(SCALE_COLUMNS, points, fmt)])
