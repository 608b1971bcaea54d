"""hpcbench run: one run under MPI (``--dry-run``: its resolved configuration, without MPI)."""
from __future__ import annotations

import argparse
from typing import Any

from hpcbench.commands.shared import warned
from hpcbench.launch.arguments import add_run_options, configs_from_args
from hpcbench.launch.local import env_rank, env_size


def add(sub: Any) -> None:
    p = sub.add_parser("run", help="one run under MPI: mpiexec -n N python -m mpi4py -m hpcbench run --algo A")
    add_run_options(p)
    p.add_argument("--dry-run", action="store_true", help="print the resolved configuration and schedule, and "
                   "exit without running (rank 0 only; MPI is not started)")
    p.add_argument("--workers", type=int, help="with --dry-run outside mpiexec: resolve for this many workers")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.runtime.plan import prepare
    from hpcbench.runtime.threads import cpu_count

    cfg, sim = configs_from_args(args)
    rank, size = env_rank(), env_size()
    # Bad input first: it is wrong however the run is started.
    plan = warned(prepare(cfg, "dry-run" if args.dry_run else "run", sim, args.workers, size, cpu_count()), rank)
    if args.dry_run:  # the resolved configuration, printed on rank 0, without starting MPI
        from hpcbench.runtime.output import dry_run_text

        assert plan.workers is not None
        if rank == 0:
            print(dry_run_text(plan, plan.workers))
        return 0
    from hpcbench.runtime.mpi.session import run_mpi

    return run_mpi(plan)
