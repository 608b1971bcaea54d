"""hpcbench info: the environment: MPI library, mpi4py, torch, CUDA, Slurm, host."""
from __future__ import annotations

import argparse
from typing import Any


def add(sub: Any) -> None:
    p = sub.add_parser("info", help="environment: MPI library, mpi4py, torch, CUDA, Slurm, host")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.listing import environment

    print(environment())
    return 0

