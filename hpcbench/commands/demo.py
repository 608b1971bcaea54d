"""hpcbench demo: every algorithm at two world sizes on this machine, then the report."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from hpcbench.commands.shared import print_report
from hpcbench.commands.values import at_least, seconds


def add(sub: Any) -> None:
    p = sub.add_parser("demo", help="every algorithm at two world sizes on this machine, then the report")
    p.add_argument("--ranks", default="3,5", help="world sizes, comma-separated (default 3,5)")
    p.add_argument("--steps", type=at_least(0), default=0, help="steps per worker (default: one sample budget)")
    p.add_argument("--out-dir", default="results/demo", help="where the result files go")
    p.add_argument("--timeout", type=seconds, default=120.0, help="seconds allowed per run")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.launch.local_study import demo

    files, failures = demo(args.out_dir, args.ranks, args.steps, args.timeout)
    print_report(files)
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0

