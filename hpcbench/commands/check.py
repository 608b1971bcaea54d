"""hpcbench check: runs against expected bounds, or a reference written from runs."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hpcbench.commands.shared import readable, strictly
from hpcbench.commands.values import accuracy, strict_option
from hpcbench.errors import UsageError


def add(sub: Any) -> None:
    p = sub.add_parser("check", help="runs against expected bounds per algorithm and worker count (exit 1 on a miss)")
    p.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    p.add_argument("--reference", metavar="REF.toml", help="[ALGO.WORKERS] tables of METRIC = "
                   "{ref = VALUE, lower = -FRACTION, upper = FRACTION}, [LOW, HIGH] or {min = LOW, max = HIGH}")
    p.add_argument("--write-reference", metavar="REF.toml", help="write a reference from these runs instead: "
                   "each point's median with a tolerance from its repeats' spread (sweep --repeats 3)")
    p.add_argument("--target", type=accuracy, default=0.9, help="accuracy for time-to-target (default 0.9)")
    strict_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.config import load_toml
    from hpcbench.report.check import misses, parse_reference
    from hpcbench.report.metrics import run_row, scaling, varying

    if (args.reference is None) == (args.write_reference is None):
        raise UsageError("check needs --reference REF.toml (check runs against it) or --write-reference REF.toml "
                         "(write one from these runs' repeats)")
    skipped: list[tuple[str, str]] = []
    if args.write_reference is not None:
        return strictly(args, skipped, reference_from(args, readable(args.paths, skipped)))
    bounds = parse_reference(load_toml(args.reference))
    rows = [run_row(r, args.target) for r in readable(args.paths, skipped)]
    missed = misses(scaling(rows, varying(rows)), bounds)
    print("\n".join(missed) if missed else f"all {len(bounds)} bounds of {args.reference} hold")
    return strictly(args, skipped, 1 if missed else 0)


def reference_from(args: argparse.Namespace, records: list) -> int:
    """``check --write-reference``: a reference whose tolerances come from the runs' repeats."""
    from hpcbench.report.check import reference
    from hpcbench.report.metrics import run_row

    text, points, warnings = reference([run_row(rec, args.target) for rec in records])
    try:
        Path(args.write_reference).write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write --write-reference {args.write_reference!r}: {exc.strerror or exc}") from None
    for warning in warnings:
        print(f"hpcbench: warning: {warning}", file=sys.stderr)
    print(f"reference for {points} points written to {args.write_reference}")
    return 0

