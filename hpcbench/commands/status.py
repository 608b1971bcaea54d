"""hpcbench status: a study's points: result, latest Slurm job and its state."""
from __future__ import annotations

import argparse
from typing import Any


def add(sub: Any) -> None:
    p = sub.add_parser("status", help="a study's points: result, latest Slurm job and its state")
    p.add_argument("study_dir", metavar="STUDY_DIR")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.slurm.status import status_text

    print(status_text(args.study_dir))
    return 0

