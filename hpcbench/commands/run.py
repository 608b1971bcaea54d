"""hpcbench run: one run under MPI (``--dry-run``: its resolved configuration, without MPI)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from hpcbench.commands.shared import refuse_sim_options, warned
from hpcbench.errors import UsageError
from hpcbench.launch.arguments import add_run_options, configs_from_args
from hpcbench.launch.local import env_rank, env_size

if TYPE_CHECKING:
    from hpcbench.runtime.plan import Plan


def add(sub: Any) -> None:
    p = sub.add_parser("run", help="one run under MPI: mpiexec -n N python -m mpi4py -m hpcbench run --algo A")
    add_run_options(p)
    p.add_argument("--dry-run", action="store_true", help="print the resolved configuration and schedule, and "
                   "exit without running (rank 0 only; MPI is not started)")
    p.add_argument("--workers", type=int, help="with --dry-run outside mpiexec: resolve for this many workers")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.runtime import plan

    cfg, sim = configs_from_args(args)
    refuse_sim_options(cfg, sim)
    if args.dry_run:
        return dry_run(warned(plan.validate(cfg)), args.workers)
    if args.workers is not None:
        raise UsageError("--workers goes with --dry-run; a run's workers are its world size minus 1")
    validated = warned(plan.validate(cfg))  # bad input first: it is wrong however the run is started
    if env_size() is None:  # started as one plain process, by no MPI launcher
        raise UsageError("hpcbench run trains as MPI ranks (rank 0 and the workers) started by a launcher: "
                         f"mpiexec -n 3 hpcbench run --algo {cfg.algo} ... (hpcbench simulate needs no MPI)")
    from hpcbench.runtime.mpi.session import run_mpi

    return run_mpi(validated)


def dry_run(validated: Plan, workers: int | None) -> int:
    """Print the resolved configuration on rank 0 and exit, without starting MPI."""
    from hpcbench.runtime.output import dry_run_text

    size = env_size()
    if workers is None:
        if size is None:
            raise UsageError("--dry-run outside mpiexec needs --workers N (the world size is N + 1)")
        workers = size - 1
    from hpcbench.runtime.plan import check_world
    from hpcbench.runtime.threads import cpu_count

    check_world(validated.cfg, workers + 1, cpu_count())
    if env_rank() == 0:
        print(dry_run_text(validated, workers))
    return 0

