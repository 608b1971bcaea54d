"""The report's tables: loading result files, the columns of the runs and scaling tables (narrow and
wide), their units, and rendering them in each format. ``document.py`` composes the whole report."""
from __future__ import annotations

import csv
import dataclasses
import io
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import tabulate as tabulate_module
from tabulate import tabulate

from hpcbench.errors import UsageError, one_of
from hpcbench.report.metrics import RunRow, ScalePoint, missed_target, setting, varying
from hpcbench.report.strict_json import json_safe
from hpcbench.results.schema import RunRecord
from hpcbench.results.store import promote_partials, read_run

FORMATS = {"text": "simple", "md": "github", "latex": "latex_booktabs", "csv": "csv", "json": "json", "html": "html"}
TABLES = ("runs", "scaling")
# Machine-readable outputs (csv, json) carry raw numbers under these names; what each is measured in:
UNITS = {
    "workers": "ranks training", "nodes": "distinct hosts", "repeats": "runs (seeds) in the median",
    "samples_per_s": "samples per second (the timed window, after the untimed warm-up steps)",
    "samples_per_s_spread": "samples per second, half the "
    "min-max range over repeats", "median_step_s": "seconds", "step_p90_s": "seconds", "step_p99_s": "seconds",
    "step_worker_min_s": "seconds (the fastest worker's median step)",
    "step_worker_max_s": "seconds (the slowest worker's median step)",
    "compute_fraction": "fraction of the workers' time",
    "communicate_fraction": "fraction of the workers' time", "wait_fraction": "fraction of the workers' time",
    "final_accuracy": "fraction of held-out samples", "time_to_target_s": "seconds from the start (null: never)",
    "staleness_mean": "updates", "staleness_p50": "updates", "staleness_p99": "updates",
    "penalty_mean": "divisor of the step", "speedup": "ratio to the curve's fewest workers",
    "efficiency": "speedup per added worker, as a fraction",
    "ttt_speedup": "time to target of the curve's fewest workers / this point's",
    "ttt_efficiency": "ttt_speedup per added worker, as a fraction",
    "time_to_target_spread": "seconds, half the min-max range over repeats",
    "final_accuracy_spread": "fraction of held-out samples, half the min-max range over repeats",
    "too_stale": "gradients (servers only)",
    "peak_lr": "learning rate after warm-up", "evals": "evaluations over the sample budget",
    "result": "how the run(s) ended: ok, or failed/timeout/aborted/incomplete (then no numbers)",
    "reached": "a run that did not finish: samples done of the budget, and seconds, as its file last said",
    "error": "the error line of a run that did not finish", "lr_recipe": "the learning-rate schedule, as text",
    "failed": "runs of the point that did not finish",
    "reached_target": "finished runs of the point that reached the target accuracy (time_to_target_s: their median)",
    "missed_target": "finished runs of the point that evaluated their model and never reached the target",
    "workers_lost": "workers that failed during the run, which went on without them",
    "recovery_s": "seconds from a worker's failure until the next update that did not need it (mean over the "
                  "run's failures; null: none)",
    # "failures": one entry per worker a run lost
    "steps": "steps the lost worker had completed, as rank 0 had counted them",
    "t_death": "seconds since the run began (null: not known)", "t_detected": "seconds since the run began",
    "detected_by": "how rank 0 learned of the failure", "samples_lost": "samples of the lost worker's work no "
    "survivor or server kept",
    "wait_after_budget_s": "seconds of the run after its last sample was counted, waiting on a worker with "
                           "nothing left to train (samples_per_s includes them)",
    # "stalls": one entry per time a worker fell silent past stall_s and was heard again
    "t": "seconds since the run began: the worker's last heartbeat before the silence",
    "duration_s": "seconds the worker was silent, until its next heartbeat",
}


def collect(paths: Sequence[str]) -> list[Path]:
    """Result files named directly or found under directories (``*.h5``, recursively)."""
    found: list[Path] = []
    for p in map(Path, paths):
        finals = {q.with_name(q.name.split(".h5.")[0] + ".h5") for q in p.rglob("*.h5.*.partial")} if p.is_dir() \
            else {p}
        for line in (said for final in sorted(finals) for said in promote_partials(final)):
            print(f"hpcbench: {line}", file=sys.stderr)
        if p.is_dir():
            found.extend(sorted(p.rglob("*.h5")))
        elif p.exists():  # a fifo or a device too: the reader refuses it in one line, without opening it
            found.append(p)
        else:
            raise UsageError(f"no such result file or directory: {str(p)!r}")
    if not found:
        raise UsageError(f"no result files (*.h5) in {', '.join(map(str, paths))}")
    return found


def load(paths: Sequence[str]) -> list[RunRecord]:
    return [read_run(p) for p in collect(paths)]


def load_readable(paths: Sequence[str]) -> tuple[list[RunRecord], list[tuple[str, str]]]:
    """Every readable run under ``paths``, and (file, reason) for each file that is not."""
    records, skipped = [], []
    for path in collect(paths):
        try:
            records.append(read_run(path))
        except UsageError as exc:
            skipped.append((str(path), str(exc)))
    return records, skipped


def fmt_num(digits: int, scale: float = 1.0, unit: str = "") -> Callable[[float], str]:
    def f(v: float) -> str:
        return "-" if v is None or math.isnan(v) else f"{v * scale:.{digits}f}{unit}"

    return f


def fmt_sig(v: float) -> str:
    """Three significant digits (times to target run from milliseconds to hours)."""
    return "-" if v is None or math.isnan(v) else f"{v:.3g}"


def fmt_pct(v: float) -> str:
    return "-" if math.isnan(v) else f"{100 * v:.0f}%"


def span(low: float, high: float, fmt: Callable[[float], str]) -> str:
    """"low-high", or "-" when neither is known."""
    return "-" if math.isnan(low) and math.isnan(high) else f"{fmt(low)}-{fmt(high)}"


Column = tuple[str, Callable[[Any], float | str | int], Callable[[Any], str]]
TEXT: Callable[[Any], str] = str


def run_to_target(r: RunRow) -> str:
    """A run's time to target: "never" where it evaluated its model and never reached the target."""
    return "never" if missed_target(r) else fmt_sig(r.time_to_target_s)


def point_to_target(p: ScalePoint) -> str:
    """A point's time to target: "never" where no finished repeat reached it, and how many did where not
    every one did (``12.5 (2 of 3)``: the median of those 2)."""
    if p.missed_target and not p.reached_target:
        return "never"
    time = fmt_sig(p.time_to_target_s)
    return f"{time} ({p.reached_target} of {p.reached_target + p.missed_target})" if p.missed_target else time

RUN_COLUMNS: list[Column] = [
    ("algorithm", lambda r: r.algorithm, TEXT),
    ("mode", lambda r: r.mode, TEXT),
    ("nodes", lambda r: r.nodes, TEXT),
    ("workers", lambda r: r.workers, TEXT),
    ("samples/s", lambda r: r, lambda r: fmt_num(0)(r.samples_per_s) if r.result == "ok" else r.result.upper()),
    ("step ms p50/p90/p99", lambda r: "/".join(fmt_num(1, 1000)(v) for v in (r.median_step_s, r.step_p90_s,
                                                                               r.step_p99_s)), TEXT),
    ("workers' step ms", lambda r: span(r.step_worker_min_s, r.step_worker_max_s, fmt_num(1, 1000)), TEXT),
    ("compute", lambda r: r.compute_fraction, fmt_pct),
    ("communicate", lambda r: r.communicate_fraction, fmt_pct),
    ("wait", lambda r: r.wait_fraction, fmt_pct),
    ("final acc", lambda r: r.final_accuracy, fmt_num(3)),
    ("time to target s", lambda r: r, run_to_target),
    ("staleness mean", lambda r: r.staleness_mean, fmt_num(1)),
    ("staleness p50/p99", lambda r: f"{fmt_num(0)(r.staleness_p50)}/{fmt_num(0)(r.staleness_p99)}", TEXT),
    ("penalty mean", lambda r: r.penalty_mean, fmt_num(2)),
    ("too stale", lambda r: r.too_stale, fmt_num(0)),
    ("lr", lambda r: r.peak_lr, fmt_num(4)),
]
# Shown where some run lost workers and went on without them (csv and json always hold them).
FAILURE_COLUMNS: list[Column] = [
    ("workers lost", lambda r: r.workers_lost, fmt_num(0)),
    ("recovery s", lambda r: r.recovery_s, fmt_num(3)),
]

SCALE_COLUMNS: list[Column] = [
    ("algorithm", lambda p: p.algorithm, TEXT),
    ("mode", lambda p: p.mode, TEXT),
    ("nodes", lambda p: p.nodes, TEXT),
    ("workers", lambda p: p.workers, TEXT),
    ("runs", lambda p: p, lambda p: f"{p.repeats} ({p.failed} failed)" if p.failed else str(p.repeats)),
    ("samples/s", lambda p: p, lambda p: fmt_num(0)(p.samples_per_s) if p.result == "ok" else p.result.upper()),
    ("± spread", lambda p: p.samples_per_s_spread, fmt_num(0)),
    ("speedup", lambda p: p.speedup, fmt_num(2)),
    ("efficiency", lambda p: p.efficiency, fmt_pct),
    ("time to target s", lambda p: p, point_to_target),
    ("ttt speedup", lambda p: p.ttt_speedup, fmt_num(2)),
    ("ttt efficiency", lambda p: p.ttt_efficiency, fmt_pct),
    ("final acc", lambda p: p.final_accuracy, fmt_num(3)),
    ("staleness mean", lambda p: p.staleness_mean, fmt_num(1)),
]


def with_spread(p: ScalePoint) -> str:
    if p.result != "ok":
        return p.result.upper()
    return fmt_num(0)(p.samples_per_s) + (f" ± {fmt_num(0)(p.samples_per_s_spread)}" if p.repeats > 1 else "")


def phase_shares(r: RunRow) -> str:
    shares = (r.compute_fraction, r.communicate_fraction, r.wait_fraction)
    return "-" if all(math.isnan(v) for v in shares) else "/".join(fmt_pct(v).rstrip("%") for v in shares)


# The narrow tables (the default: the group's name first, the settings folded into it); --wide, and html
# on a click, show every column. Each begins with its key columns (``*_KEY``: the answer, kept in view on
# a screen 800 px wide), then nodes where runs span several, then the rest (``*_REST``).
SCALE_KEY: list[Column] = [
    ("workers", lambda p: p.workers, TEXT),
    ("samples/s", lambda p: p, with_spread),
    ("final acc", lambda p: p.final_accuracy, fmt_num(3)),
    ("to target s", lambda p: p, point_to_target),
]
SCALE_REST: list[Column] = [
    ("speedup", lambda p: p.speedup, fmt_num(2)),
    ("efficiency", lambda p: p.efficiency, fmt_pct),
    ("runs", lambda p: p, lambda p: f"{p.repeats} ({p.failed} failed)" if p.failed else str(p.repeats)),
]
RUN_KEY: list[Column] = [
    ("workers", lambda r: r.workers, TEXT),
    ("samples/s", lambda r: r, lambda r: fmt_num(0)(r.samples_per_s) if r.result == "ok" else r.result.upper()),
    ("final acc", lambda r: r.final_accuracy, fmt_num(3)),
    ("to target s", lambda r: r, run_to_target),
]
RUN_REST: list[Column] = [
    ("step ms", lambda r: r.median_step_s, fmt_num(1, 1000)),
    ("compute/comm/wait %", lambda r: r, phase_shares),
]


def tight(rows: list[list[str]], headers: list[str], tablefmt: str) -> str:
    """tabulate with each column as wide as its widest cell (tabulate pads headers by 2 more, a setting of
    its module: changed for this call alone, so other tables keep their look)."""
    saved = tabulate_module.MIN_PADDING
    tabulate_module.MIN_PADDING = 0
    try:
        return tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=True)
    finally:
        tabulate_module.MIN_PADDING = saved


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
    text = tight(rows, headers, FORMATS[fmt])
    return f'<div class="scroll">{text}</div>' if fmt == "html" else text  # wider than the page: scrolls alone


def grouping(rows: Sequence[RunRow], group_by: Sequence[str] | None) -> tuple[list[str], str]:
    """The settings that keep runs apart (those that differ, or ``group_by``), and a line saying so."""
    differ = varying(rows)
    if group_by is None:
        if not differ:
            return [], "Repeats: runs equal in everything but the seed (no other setting differs between runs)"
        return differ, ("Repeats: runs equal in everything but the seed. Settings that differ between runs keep "
                        f"them apart (in the group names, and as columns with --wide): {', '.join(differ)}")
    known = sorted({k for r in rows for k, _ in r.settings})
    for key in group_by:
        if key not in known:
            raise one_of("--group-by setting", key, known)
    pooled = [k for k in differ if k not in group_by]
    line = f"Grouped by --group-by {','.join(group_by)}" if group_by else "Grouped by algorithm and mode only"
    return list(group_by), line + (f"; pooled although they differ: {', '.join(pooled)}" if pooled else "")


def setting_columns(keys: Sequence[str]) -> tuple[list[Column], list[Column]]:
    """Columns for the grouping settings: in the runs table and in the scaling table."""
    runs: list[Column] = [(k, (lambda k: lambda r: setting(r, k))(k), TEXT) for k in keys]
    points: list[Column] = [(k, (lambda i: lambda p: p.group[i][1])(i), TEXT) for i, k in enumerate(keys)]
    return runs, points


def machine_rows(items: Sequence[RunRow] | Sequence[ScalePoint], keys: Sequence[str]) -> list[dict[str, Any]]:
    """Raw values by field name (units in the names, fractions as fractions), settings as columns."""
    out = []
    for item in items:
        values = {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
        values.pop("lost", None)  # tables of their own (json: "failures", "stalls")
        values.pop("stalled", None)
        settings = dict(values.pop("settings", ()) or values.pop("group", ()))
        values.pop("group", None)
        out.append({"algorithm": values.pop("algorithm"), "mode": values.pop("mode"),
                    **{k: settings.get(k, "-") for k in keys}, **values})
    return out


def csv_table(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(list(rows[0]) if rows else [])
    for row in rows:
        writer.writerow(["" if json_safe(v) is None else v for v in row.values()])
    return out.getvalue().rstrip("\n")


def recipes(rows: Sequence[RunRow]) -> str:
    """The learning-rate recipes the runs used, each with the worker counts it applied to."""
    used: dict[str, set[int]] = {}
    for r in rows:
        used.setdefault(r.lr_recipe or "not recorded", set()).add(r.workers)
    return "Learning-rate recipes: " + "; ".join(f"{text} ({', '.join(map(str, sorted(workers)))} workers)"
                                                 for text, workers in sorted(used.items()))


def resolution(rows: Sequence[RunRow], target: float) -> str:
    """What time to target means and how finely it is measured."""
    evals = sorted({r.evals for r in rows})
    every = f"1/{evals[0]}" if len(evals) == 1 else f"1/evals (evals {', '.join(map(str, evals))})"
    return (f"time to target = first evaluation at accuracy >= {target:g}; evaluations every {every} of a run's "
            "samples, so it resolves to that share of the run's time")


# One row per worker a run lost: (the run's row, the loss).
LOSS_COLUMNS: list[Column] = [
    ("algorithm", lambda x: x[0].algorithm, TEXT), ("workers", lambda x: x[0].workers, TEXT),
    ("run", lambda x: Path(x[0].path).name, TEXT), ("rank", lambda x: x[1].worker, TEXT),
    ("host", lambda x: x[1].host, TEXT), ("steps done", lambda x: x[1].steps, TEXT),
    ("died s", lambda x: x[1].t_death, fmt_num(3)), ("detected s", lambda x: x[1].t_detected, fmt_num(3)),
    ("detected by", lambda x: x[1].detected_by, TEXT), ("recovery s", lambda x: x[1].recovery_s, fmt_num(3)),
    ("samples lost", lambda x: x[1].samples_lost, TEXT),
]


STALL_COLUMNS: list[Column] = [
    ("algorithm", lambda x: x[0].algorithm, TEXT), ("workers", lambda x: x[0].workers, TEXT),
    ("run", lambda x: Path(x[0].path).name, TEXT), ("rank", lambda x: x[1].worker, TEXT),
    ("host", lambda x: x[1].host, TEXT), ("silent from s", lambda x: x[1].t, fmt_num(3)),
    ("for s", lambda x: x[1].duration_s, fmt_num(3)),
    ("run's wait after its budget s", lambda x: x[0].wait_after_budget_s, fmt_num(3)),
]


def failure_rows(rows: Sequence[RunRow]) -> list[dict[str, Any]]:
    return [{"path": r.path, **dataclasses.asdict(loss)} for r in rows for loss in r.lost]


def stall_rows(rows: Sequence[RunRow]) -> list[dict[str, Any]]:
    return [{"path": r.path, **dataclasses.asdict(stall), "wait_after_budget_s": r.wait_after_budget_s}
            for r in rows for stall in r.stalled]


UNFINISHED_COLUMNS: list[Column] = [("algorithm", lambda r: r.algorithm, TEXT), ("workers", lambda r: r.workers, TEXT),
                                    ("result", lambda r: r.result, TEXT), ("got to", lambda r: r.reached, TEXT),
                                    ("error", lambda r: r.error, TEXT),
                                    ("file", lambda r: r.path, TEXT)]
FAILED_COLUMNS: list[Column] = [(h, (lambda i: lambda r: r[i])(i), TEXT)
                                for i, h in enumerate(["point", "result", "latest job"])]
