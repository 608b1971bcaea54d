"""What several commands do: the run options' checks and warnings, result files read with the
unreadable ones said, the report printed after a local study."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpcbench.config import RunConfig
from hpcbench.errors import UsageError, one_line
from hpcbench.launch.local import env_rank

if TYPE_CHECKING:
    from hpcbench.options.sim import SimConfig
    from hpcbench.results.schema import RunRecord
    from hpcbench.runtime.plan import Plan


def warned(validated: Plan) -> Plan:
    """``validated``, once rank 0 has said which of its settings do nothing here."""
    from hpcbench.runtime.plan import idle_settings

    if env_rank() == 0:
        for line in idle_settings(validated):
            print(f"hpcbench: warning: {line}", file=sys.stderr, flush=True)
    return validated


def refuse_sim_options(cfg: RunConfig, sim: SimConfig) -> None:
    """Real runs take no ``sim.*`` options: they run on the machines, not on a virtual cluster. Fields a
    table of the run shares with the simulator are its own (``--model payload``'s compute model), and
    run's ``--workers`` is ``--dry-run``'s world, not the simulator's."""
    from hpcbench.options import TABLES
    from hpcbench.options.sim import SimConfig

    own = {"workers", *(k for _, table in TABLES.items() if table.applies(cfg) for k in table.shares)}
    given = [f.name for f in dataclasses.fields(sim)
             if f.name not in own and getattr(sim, f.name) != getattr(SimConfig(), f.name)]
    if given:
        raise UsageError(f"{', '.join(f'sim.{k}' for k in given)}: simulate's options (its virtual cluster); "
                         "a real run takes none: remove them, or use simulate")


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

