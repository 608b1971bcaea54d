"""hpcbench trace: a run's timeline as Chrome-trace JSON."""
from __future__ import annotations

import argparse
from typing import Any

from hpcbench.errors import UsageError


def add(sub: Any) -> None:
    p = sub.add_parser("trace", help="export a run's timeline as Chrome-trace JSON for Perfetto")
    p.add_argument("path", metavar="FILE.h5")
    p.add_argument("-o", "--output", required=True, help="trace file to write, e.g. trace.json")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.report.trace import write_trace
    from hpcbench.results.store import read_run

    rec = read_run(args.path)
    try:
        count = write_trace(rec, args.output)
    except OSError as exc:
        raise UsageError(f"cannot write the trace to {args.output!r}: {exc.strerror or exc}") from None
    print(f"{count} trace events -> {args.output} (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0

