"""hpcbench report: the report of result files: text, md, latex, csv, json or html, and plots."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from hpcbench.commands.shared import readable, strictly
from hpcbench.commands.values import table_options
from hpcbench.errors import NO_MATPLOTLIB, UsageError, escaped, one_of


def add(sub: Any) -> None:
    p = sub.add_parser("report", help="tables from result files or directories")
    p.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    table_options(p)
    p.add_argument("--group-by", metavar="KEY,...", help="settings that keep runs apart (default: every "
                   "setting that differs between runs, seed excepted); '' pools all but algorithm and mode")
    p.add_argument("--table", choices=("runs", "scaling"), help="only this table (csv holds exactly one)")
    p.add_argument("--plot", metavar="DIR", help="also write PNG plots there (needs matplotlib: the plot extra)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of printing it")
    p.add_argument("--wide", action="store_true", help="every column in the tables (by default they fit in 120 "
                   "columns: the settings folded into the group's name, the rest one click away in html)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.report import plots
    from hpcbench.report.document import build, report_text
    from hpcbench.report.tables import FORMATS
    from hpcbench.results.study_dir import not_ok

    # The options themselves, before anything is read or printed
    if args.format not in FORMATS:
        raise one_of("format", args.format, list(FORMATS))
    if args.plot:
        if not plots.have_matplotlib():
            raise UsageError(NO_MATPLOTLIB)
        try:
            Path(args.plot).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot write plots to --plot {args.plot!r}: {exc.strerror or exc}") from None
        if not os.access(args.plot, os.W_OK):
            raise UsageError(f"cannot write plots to --plot {args.plot!r}: not writable")
    failed = [(p.stem, p.result, p.jobs[-1] if p.jobs else "-")
              for d in args.paths if Path(d).is_dir() for p in not_ok(d)]
    skipped: list[tuple[str, str]] = []
    try:
        records = readable(args.paths, skipped)
    except UsageError:
        if not failed:  # a study whose every point failed still gets its list of failed points
            raise
        records = []
    group_by = None if args.group_by is None else [k for k in args.group_by.split(",") if k]
    if args.format == "html":
        show(html_report(records, args.target, group_by, args.table, failed, args.wide), args.output, len(records))
        return strictly(args, skipped, 0)
    built = build(records, args.target, group_by)
    text = report_text(records, args.format, args.target, group_by, args.table, failed, args.wide, built=built)
    show(text + "\n", args.output, len(records))
    if args.plot:
        try:
            written = plots.write_figures(built.figures, args.plot)
        except OSError as exc:
            raise UsageError(f"cannot write plots to --plot {args.plot!r}: {exc.strerror or exc}") from None
        for name, labels in written.items():
            said = f"plot: {args.plot}/{name} ({len(labels)} curve{'s' * (len(labels) != 1)}"
            print(f"{said}: {', '.join(labels)})" if len(said) + 4 + len(", ".join(labels)) <= 120 else said + ")")
    return strictly(args, skipped, 0)


def show(text: str, output: str | None, runs: int) -> None:
    """The report on stdout, or (``-o FILE``) in FILE as stdout would have had it, and one line saying so."""
    if output is None:
        print(text, end="")
        return
    try:
        Path(output).write_text(escaped(text), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write the report to {output!r}: {exc.strerror or exc}") from None
    print(f"report of {runs} run{'' if runs == 1 else 's'} -> {output}")


def html_report(records: list, target: float, group_by: list[str] | None, table: str | None,
                failed: list, wide: bool) -> str:
    """The html page; without matplotlib it says so, on the page and in one line on stderr."""
    from hpcbench.report.document import build, report_text
    from hpcbench.report.html import figures_html, page
    from hpcbench.report.plots import have_matplotlib, images

    built = build(records, target, group_by)
    figures = built.figures if table is None else []
    plots = ""
    if figures and have_matplotlib():
        plots = figures_html(images(figures))
    elif figures:
        print(f"report: {NO_MATPLOTLIB} (the page has no plots)", file=sys.stderr)
        plots = figures_html({}, f"No plots: {NO_MATPLOTLIB}")
    return page([report_text(records, "html", target, group_by, table, failed, wide, plots, built)], len(records))

