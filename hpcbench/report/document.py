"""``hpcbench report``: the whole report, composed from the runs: the headline first (who leads at each
worker count, by how much, how sure), then the plots (html), the tables, and the runs that did not
finish; in text, markdown, LaTeX, csv, json or html."""
from __future__ import annotations

import dataclasses
import html
import textwrap
from collections.abc import Sequence
from typing import Any

from hpcbench.config import cut_by_cap
from hpcbench.errors import UsageError, one_of
from hpcbench.report.figures import Figure, as_json, figures
from hpcbench.report.headline import SINGLE, Lead, leads
from hpcbench.report.html import note_html, title_html
from hpcbench.report.metrics import Curve, RunRow, ScalePoint, curve_labels, curve_of, run_row, scaling, setting
from hpcbench.report.strict_json import dumps
from hpcbench.report.tables import (
    FAILED_COLUMNS,
    FAILURE_COLUMNS,
    FORMATS,
    LOSS_COLUMNS,
    RUN_COLUMNS,
    RUN_KEY,
    RUN_REST,
    SCALE_COLUMNS,
    SCALE_KEY,
    SCALE_REST,
    STALL_COLUMNS,
    TABLES,
    TEXT,
    UNFINISHED_COLUMNS,
    UNITS,
    Column,
    csv_table,
    failure_rows,
    grouping,
    machine_rows,
    recipes,
    render,
    resolution,
    setting_columns,
    stall_rows,
)
from hpcbench.results.schema import RunRecord


@dataclasses.dataclass(frozen=True)
class Report:
    """Everything a report shows, computed once from the runs."""

    keys: list[str]  # the settings that keep runs apart
    grouping: str  # a line saying so
    rows: list[RunRow]
    points: list[ScalePoint]
    labels: dict[Curve, str]  # one per group, the same in every table and plot
    leads: list[Lead]
    figures: list[Figure]
    capped: list[RunRow]  # runs stopped early by max_steps (HPCBENCH_MAX_STEPS): not full measurements


def build(records: Sequence[RunRecord], target: float = 0.9, group_by: Sequence[str] | None = None) -> Report:
    unsorted = [run_row(r, target) for r in records]
    keys, line = grouping(unsorted, group_by)
    rows = sorted(unsorted, key=lambda r: (r.algorithm, r.mode, [setting(r, k) for k in keys], r.workers, r.path))
    points = scaling(rows, keys)
    labels = curve_labels(curve_of(r, keys) for r in rows)
    capped = [r for r, rec in zip(unsorted, records) if cut_by_cap(rec.attrs["config"], rec.workers)]
    return Report(keys, line, rows, points, labels, leads(points, labels, target),
                  figures(rows, points, records, keys, labels, target), capped)


def capped_line(capped: Sequence[RunRow], total: int) -> str:
    return (f"CAPPED: {len(capped)} of {total} runs stopped early at max_steps (HPCBENCH_MAX_STEPS), so their "
            "numbers are a trial, not a measurement" if capped else "")


def headline(report: Report, fmt: str, target: float) -> list[str]:
    """The first answer: per worker count, who leads on each measure, by how much, and how sure."""
    if not report.leads:
        return []
    caveat = capped_line(report.capped, len(report.rows))
    single = all(lead.judged in (SINGLE, "a tie") or not lead.runner_up for lead in report.leads)
    how_sure = ("no lead here has repeats on both sides to judge it by: sweep --repeats 3" if single else
                "a lead is clear when the repeats' ranges do not overlap")
    title = (f"Headline: at each worker count, who is first to accuracy {target:g}, most accurate at the end and "
             f"fastest (medians over repeats; {how_sure})")
    if fmt == "html":
        items = "".join(f"<li><b>{w} workers</b><ul>" + "".join(
            f"<li>{html.escape(lead.line(not single))}</li>" for lead in report.leads if lead.workers == w)
            + "</ul></li>" for w in sorted({lead.workers for lead in report.leads}))
        warn = f'<p class="capped">{html.escape(caveat)}</p>' if caveat else ""
        heading = note_html(title.partition(": ")[2].capitalize())
        return [f'<section id="headline"><h2>Headline</h2>{heading}{warn}<ul>{items}</ul></section>']
    bullet = "- " if fmt == "md" else "  "
    lines = [f"{bullet}{lead.workers} workers, {lead.line(not single)}" for lead in report.leads]
    if fmt == "text":
        lines = [textwrap.fill(line, WIDTH, subsequent_indent="      ") for line in lines]
    head = [f"**{caveat}**"] if caveat and fmt == "md" else [caveat] if caveat else []
    if fmt == "text":
        head, title = [textwrap.fill(line, WIDTH) for line in head], textwrap.fill(title, WIDTH)
    return [*head, title if fmt != "md" else f"**{title}**", "\n".join(lines)]


WIDTH = 120  # the text report's width, but for --wide


def json_document(report: Report, target: float, table: str | None,
                  failed: Sequence[tuple[str, str, str]]) -> dict[str, Any]:
    """``report --format json``: the headline, each plot's curves, the tables and their units."""
    tables = {"runs": machine_rows(report.rows, report.keys), "scaling": machine_rows(report.points, report.keys),
              "failures": failure_rows(report.rows), "stalls": stall_rows(report.rows)}
    present = {column for table_rows in tables.values() for row in table_rows for column in row}
    document = {"target_accuracy": target, "grouped_by": report.keys, "grouping": report.grouping,
                "capped_runs": [r.path for r in report.capped],
                "headline": [dataclasses.asdict(lead) for lead in report.leads],
                "plots": [as_json(f) for f in report.figures],
                "units": {k: v for k, v in UNITS.items() if k in present}, **tables,
                "failed_points": [dict(zip(("point", "result", "latest_job"), f)) for f in failed]}
    if table is not None:
        document = {k: v for k, v in document.items() if k not in TABLES or k == table}
    return document


def report_text(records: Sequence[RunRecord], fmt: str = "text", target: float = 0.9,
                group_by: Sequence[str] | None = None, table: str | None = None,
                failed: Sequence[tuple[str, str, str]] = (), wide: bool = False, plots: str = "",
                built: Report | None = None) -> str:
    """``group_by``: the settings that keep runs apart (default: every setting that differs);
    ``table``: only the runs or the scaling table (csv holds exactly one); ``failed``: a study's
    points without an ok result, as (point, result, latest job), listed after the tables; ``wide``:
    every column in the tables (by default the text report fits in 120 columns, and html shows the
    rest on a click); ``plots``: html's plots section, placed after the headline; ``built``: the report
    ``build`` already made of these records (for a caller that also draws its figures)."""
    if fmt not in FORMATS:
        raise one_of("format", fmt, list(FORMATS))
    if table is not None and table not in TABLES:
        raise one_of("table", table, TABLES)
    if fmt == "csv" and table is None:
        raise UsageError("csv holds one table: add --table runs or --table scaling")
    report = built or build(records, target, group_by)
    keys, rows, points = report.keys, report.rows, report.points
    failed_title = (f"Points without an ok result ({len(failed)}): missing = no file, partial = a run killed before "
                    "it wrote one, else the status its file holds")
    if fmt == "csv":
        return csv_table(machine_rows(rows if table == "runs" else points, keys))
    if fmt == "json":
        return dumps(json_document(report, target, table, failed), indent=1)
    title, note = (title_html, note_html) if fmt == "html" else (str, str)
    if fmt == "text":
        note = lambda text: textwrap.fill(text, WIDTH)  # noqa: E731
    group = ("group", lambda x: report.labels[x.curve if isinstance(x, ScalePoint) else curve_of(x, keys)], TEXT)
    lost = FAILURE_COLUMNS if any(r.workers_lost > 0 for r in rows) else []
    nodes = [c for c in RUN_COLUMNS if c[0] == "nodes"] if any(r.nodes > 1 for r in rows) else []
    run_settings, point_settings = setting_columns(keys)
    wide_runs = RUN_COLUMNS[:2] + run_settings + RUN_COLUMNS[2:] + lost
    wide_points = SCALE_COLUMNS[:2] + point_settings + SCALE_COLUMNS[2:] + lost
    narrow_runs = [group, *RUN_KEY, *nodes, *RUN_REST, *lost]
    narrow_points = [group, *SCALE_KEY, *nodes, *SCALE_REST, *lost]

    def shown(narrow: list[Column], every: list[Column], items: Sequence[Any]) -> list[str]:
        if wide or fmt == "latex":
            return [render(every, items, fmt)]
        if fmt != "html":
            return [render(narrow, items, fmt)]
        return [render(narrow, items, fmt),
                f"<details><summary>Every column</summary>{render(every, items, fmt)}</details>"]

    parts = headline(report, fmt, target) if table is None else []
    if plots:
        parts.append(plots)
    if rows:
        modes = {r.mode for r in rows}
        simulated = (". Simulated runs (mode sim, named so where modes are mixed) run in virtual time: their "
                     "seconds are the virtual cluster's")
        parts.append(note(report.grouping + ("" if modes == {"mpi"} else simulated)))
    if rows and table in (None, "scaling"):
        parts += [title("Scaling (medians over repeats; speedup and efficiency against each curve's fewest workers)"),
                  *shown(narrow_points, wide_points, points)]
    if rows and table in (None, "runs"):
        parts += [title(f"Runs ({len(rows)})"), *shown(narrow_runs, wide_runs, rows)]
    gone = [(r, loss) for r in rows for loss in r.lost]
    if gone and table is None:
        parts += [title(f"Workers lost ({len(gone)}; times in seconds since each run began, died: where the run "
                        "knows, detected: when rank 0's MPI said so)"), render(LOSS_COLUMNS, gone, fmt)]
    stalled = [(r, stall) for r in rows for stall in r.stalled]
    if stalled and table is None:
        parts += [title(f"Workers that stalled ({len(stalled)}: silent past stall_s, then heard again; samples/s "
                        "includes the run's wait after its budget was done)"), render(STALL_COLUMNS, stalled, fmt)]
    unfinished = [r for r in rows if r.result != "ok"]
    if unfinished:
        parts += [title(f"Runs that did not finish ({len(unfinished)}; shown above without numbers)")]
        if fmt == "text" and not wide:  # the long cells (the error line, the file) each on a line of its own
            parts += [render(UNFINISHED_COLUMNS[:4], unfinished, fmt),
                      "\n".join(f"{r.path}: {r.error or 'no error recorded'}" for r in unfinished)]
        else:
            parts.append(render(UNFINISHED_COLUMNS, unfinished, fmt))
    if failed:
        parts += [title(failed_title), render(FAILED_COLUMNS, failed, fmt)]
    if rows:
        parts += [note(recipes(rows)), note(resolution(rows, target).capitalize())]
    return "\n\n".join(parts)
