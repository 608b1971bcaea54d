"""What several commands do: a plan's warnings said, result files read with the unreadable ones said, the
report printed after a local study."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpcbench.errors import UsageError, one_line

if TYPE_CHECKING:
    from hpcbench.config import RunConfig
    from hpcbench.results.schema import RunRecord
    from hpcbench.runtime.plan import Plan


def warned(plan: Plan, rank: int) -> Plan:
    """``plan``, once rank 0 (``rank``: this process's) has said which of its settings do nothing here."""
    if rank == 0:
        for line in plan.warnings:
            print(f"hpcbench: warning: {line}", file=sys.stderr, flush=True)
    return plan


def refuse_own_options(cfg: RunConfig, whose: str, why: str) -> None:
    """``out`` and ``overwrite`` given for every run of a study that names each run's file itself (a sweep,
    a tune): one line, since ``why``; the runs would all write one file, or the values be dropped unsaid."""
    from hpcbench.config import RunConfig

    defaults = RunConfig()
    given = [f"{k} = {getattr(cfg, k)!r}" for k in ("out", "overwrite") if getattr(cfg, k) != getattr(defaults, k)]
    if given:
        raise UsageError(f"{given[0]}: {whose} runs take no out or overwrite, since {why}: remove it")


def readable(paths: Sequence[str], skipped: list[tuple[str, str]]) -> list[RunRecord]:
    """The runs under ``paths`` that can be read; each file skipped is said on stderr with the reason
    and added to ``skipped``. None readable: one error line."""
    from hpcbench.report.tables import load_readable

    records, missed = load_readable(paths)
    skipped.extend(missed)
    if not records and len(missed) == 1:
        raise UsageError(missed[0][1])
    for _, reason in missed:
        print(f"hpcbench: skipped: {one_line(reason)}", file=sys.stderr)
    if not records:
        raise UsageError(f"none of the {len(missed)} result files could be read (reasons above)")
    return records


def strictly(args: argparse.Namespace, skipped: list[tuple[str, str]], code: int) -> int:
    """``code``, or 1 when ``--strict`` and a file was skipped."""
    if skipped and args.strict:
        print(f"hpcbench: {len(skipped)} file(s) skipped (--strict)", file=sys.stderr)
        return code or 1
    return code


def print_report(files: Sequence[str | Path]) -> None:
    from hpcbench.report.document import report_text
    from hpcbench.report.tables import load

    if files:
        print(report_text(load([str(f) for f in files])))

