"""hpcbench diff: per-cell changes between two studies."""
from __future__ import annotations

import argparse
from typing import Any

from hpcbench.commands.shared import readable, strictly
from hpcbench.commands.values import percent, table_options


def add(sub: Any) -> None:
    p = sub.add_parser("diff", help="per-cell changes between two studies and the configuration that differs")
    p.add_argument("old", metavar="OLD", help="result file or directory")
    p.add_argument("new", metavar="NEW", help="result file or directory")
    table_options(p)
    p.add_argument("--fail-above", type=percent, metavar="PCT", help="exit 1 when a point in both studies got worse "
                   "by more than PCT percent in --metric and, where both have repeats, by more than their spread")
    p.add_argument("--metric", default="samples_per_s", help="what --fail-above watches: samples_per_s (default), "
                   "speedup, efficiency, final_accuracy, time_to_target_s, staleness_mean")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.errors import UsageError, one_of
    from hpcbench.report.diff import BETTER, diff_text, matched, regressions

    if args.metric not in BETTER:  # the options before anything is read
        raise one_of("--metric", args.metric, list(BETTER))
    if args.metric != "samples_per_s" and args.fail_above is None:
        raise UsageError(f"--metric {args.metric} is what --fail-above watches; give --fail-above PCT too")
    skipped: list[tuple[str, str]] = []
    old, new = readable([args.old], skipped), readable([args.new], skipped)
    gate: list[str] = []
    within: list[str] = []
    if args.fail_above is not None:  # what the gate finds, said after the table
        _, before, after = matched(old, new, args.target)
        gate, within = regressions(before, after, args.metric, args.fail_above)
    print(diff_text(old, new, args.format, args.target))
    if args.fail_above is not None:
        print("\n".join(within + gate) if within + gate else f"no {args.metric} worse by more than "
                                                             f"{args.fail_above:g}%")
    return strictly(args, skipped, 1 if gate else 0)

