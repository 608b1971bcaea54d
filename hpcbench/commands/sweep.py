"""hpcbench sweep: a scaling study: Slurm job scripts per point, or run here (``--local``)."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from hpcbench.commands.shared import print_report, refuse_own_options
from hpcbench.commands.values import at_least, seconds, slurm_time
from hpcbench.config import RunConfig
from hpcbench.errors import UsageError
from hpcbench.launch.arguments import add_run_flags, configs_from_args


def add(sub: Any) -> None:
    p = sub.add_parser("sweep", help="a scaling study: Slurm jobs per scale point and algorithm, or --local")
    p.add_argument("--algos", help="algorithms, comma-separated")
    p.add_argument("--nodes", default="", help="node counts, comma-separated, e.g. 8,16,32,64,128")
    p.add_argument("--repeats", type=at_least(1), default=1, help="runs per point (repeat k uses seed k-1)")
    p.add_argument("--config", help="TOML file of run options for every job")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="run option for every job")
    p.add_argument("--out-dir", help="where job scripts, logs, result files and the report go")
    add_run_flags(p, prefix="every job: ")
    p.add_argument("--resume", action="store_true", help="add to an --out-dir that holds results: run only the "
                   "points without an ok result (those are never rewritten)")
    p.add_argument("--tasks-per-node", type=at_least(1), default=1, help="MPI ranks per node (default 1)")
    p.add_argument("--cpus-per-task", type=at_least(1), default=1, help="cores per rank; sets torch threads (default "
                                                                        "1)")
    p.add_argument("--gpus-per-task", type=at_least(0), default=0, help="GPUs per worker, e.g. 1 (default none)")
    p.add_argument("--rank0", choices=("extra", "slot"), help="extra: rank 0 is one task more on the first node "
                   "and every slot trains (default with --gpus-per-task); slot: rank 0 takes a slot (default "
                   "without GPUs)")
    p.add_argument("--time", type=slurm_time, default="01:00:00", help="time limit per run job (default 01:00:00)")
    p.add_argument("--partition", help="Slurm partition")
    p.add_argument("--account", help="Slurm account")
    p.add_argument("--mpi", choices=("pmi2", "pmix"), help="srun --mpi= plugin (default: from the MPI library)")
    p.add_argument("--setup", action="append", help="shell line run first in every job (default: activate "
                   "this virtual environment)")
    p.add_argument("--shared", action="store_true", help="do not ask for whole nodes (by default run jobs are "
                   "--exclusive: another job on the node would distort every timing)")
    p.add_argument("--mem", help="sbatch --mem for every run job, e.g. 64G")
    p.add_argument("--constraint", help="sbatch --constraint for every run job (node features)")
    p.add_argument("--sbatch-arg", action="append", metavar="OPTION", help="any other sbatch option for every job, "
                   "repeatable: --sbatch-arg=--qos=high")
    p.add_argument("--submit", action="store_true", help="submit the jobs with sbatch and print their ids")
    p.add_argument("--resubmit-failed", metavar="STUDY_DIR", help="submit again, as first written, the points of "
                   "a study without an ok result (and a new report job)")
    p.add_argument("--local", action="store_true", help="run the study here with mpiexec (--jobs runs at a time)")
    p.add_argument("--ranks", default="3,5", help="with --local: world sizes, comma-separated (default 3,5)")
    p.add_argument("--emulated", action="store_true",
                   help="with --local: run across the emulated nodes (jobs/local/emulated-cluster.sh up)")
    p.add_argument("--timeout", type=seconds, default=600.0, help="with --local: seconds allowed per run")
    p.add_argument("--jobs", type=int, default=0, help="with --local: runs at a time (default: as many as fit "
                   "in the cores here with the largest world size, at least 1)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.launch.local import emulated_nodes
    from hpcbench.launch.local_study import parse_ranks, run_local
    from hpcbench.results.paths import check_study_dir
    from hpcbench.runtime.plan import prepare
    from hpcbench.slurm import sweep

    if args.resubmit_failed:
        return resubmit_failed(Path(args.resubmit_failed).resolve())
    if not args.algos or not args.out_dir:
        raise UsageError("sweep needs --algos and --out-dir (or --resubmit-failed STUDY_DIR)")
    algos = sweep.parse_algos(args.algos)
    cfg, sim = configs_from_args(args)
    # out and overwrite are the sweep's own: given for every run, a Slurm study's points would all write the one
    # file, and a local one would ignore them.
    refuse_own_options(cfg, "a sweep's", "each point writes its own file under --out-dir (and --resume keeps the "
                       "ok ones)")
    # Each algorithm's run options, its own table and no other's, checked before anything is written or
    # submitted (the job script names the algorithm).
    plans = [prepare(cfg.for_algo(a), sim=sim) for a in algos]
    for line in dict.fromkeys([*dropped_tables(cfg, algos), *(w for p in plans for w in p.warnings)]):
        print(f"hpcbench: warning: {line}", file=sys.stderr, flush=True)
    base_args = {p.cfg.algo: dataclasses.replace(p.cfg, algo="").to_argv() for p in plans}
    if args.emulated and not args.local:
        raise UsageError("--emulated runs a local sweep across the emulated nodes: give --local too")
    if args.submit and args.local:
        raise UsageError("--submit hands a study's job scripts to Slurm; --local runs them here: give one of them")
    if args.repeats > 1 and cfg.seed:
        raise UsageError(f"--repeats {args.repeats} runs seeds 0..{args.repeats - 1}, one per repeat, so seed = "
                         f"{cfg.seed} would be dropped: remove it (or run --repeats 1 with each seed)")
    if args.jobs and not args.local:
        raise UsageError("--jobs is how many runs of a local sweep run at a time: give --local too")
    if args.emulated:
        emulated_nodes()  # refuse before the study directory is made
    out_dir = Path(args.out_dir).resolve()
    try:
        check_study_dir(out_dir, args.resume)
    except OSError as exc:  # a name longer than the filesystem takes, a directory that cannot be read
        raise UsageError(f"--out-dir {str(out_dir)!r}: {exc.strerror or exc}") from None
    if args.local:
        ranks = parse_ranks(args.ranks)
        files, failures = run_local(algos, ranks, cfg, str(out_dir), args.timeout, args.repeats,
                                    emulated=args.emulated, jobs=local_jobs(args.jobs, ranks, args.emulated))
        print_report(files)
        return 1 if failures else 0
    nodes = sweep.parse_counts(args.nodes, "--nodes", 1)
    res = sweep.resources(args.tasks_per_node, args.cpus_per_task, args.gpus_per_task, args.time, args.partition,
                          args.account, args.mpi, args.setup, args.shared, args.mem, args.constraint, args.sbatch_arg,
                          args.rank0)
    sweep.check_worlds(algos, nodes, res)
    points = sweep.plan_points(algos, nodes, args.repeats)
    scripts, report = sweep.write_study(out_dir, points, res, base_args)
    print(f"wrote {len(scripts)} run jobs, {report} and {out_dir / 'submit.sh'}")
    if args.submit:
        ids, report_id = sweep.submit(scripts, report)
        print(f"submitted runs: {' '.join(ids)}")
        print(f"report job: {report_id} (after all runs end; writes {out_dir / 'report.md'})")
    return 0


def dropped_tables(cfg: RunConfig, algos: list[str]) -> list[str]:
    """One line naming the option tables of algorithms this sweep does not run (no job gets them), if any."""
    from hpcbench.options import option_tables

    tables = option_tables()
    dropped = [t for t in cfg.options if t in tables and tables[t].algorithm and t not in algos]
    if not dropped:
        return []
    return [f"{', '.join(f'{t}.*' for t in dropped)} options go with algorithms this sweep does not run (--algos "
            f"{','.join(algos)}), so they are dropped"]


def local_jobs(jobs: int, ranks: list[int], emulated: bool) -> int:
    """``sweep --local --jobs``: runs at a time (0: as many as fit in the cores here); a warning when
    the runs would share cores, whose timings would then include each other's load."""
    from hpcbench.launch.local_study import default_jobs
    from hpcbench.runtime.threads import cpu_count

    if jobs < 0:
        raise UsageError(f"--jobs must be >= 1 (0: as many runs as fit in the cores here), got {jobs}")
    cores = cpu_count()
    jobs = jobs or (1 if emulated else default_jobs(ranks, cores))
    if jobs > 1 and jobs * max(ranks) > cores:
        print(f"hpcbench: warning: {jobs} runs of up to {max(ranks)} ranks at a time share {cores} cores: each "
              "run's timings include the others' load", file=sys.stderr, flush=True)
    return jobs


def resubmit_failed(out_dir: Path) -> int:
    """Submit again the points of a study without an ok result, as the study first ran them."""
    from hpcbench.slurm import sweep

    points, res, base_args = sweep.study_again(out_dir)
    if res.setup:
        print(f"every job first runs these lines from {out_dir / 'study.json'}: {' ; '.join(res.setup)}")
    scripts, report = sweep.write_study(out_dir, points, res, base_args)
    if not scripts:
        print(f"every point of {out_dir} has an ok result: nothing to submit")
        return 0
    ids, report_id = sweep.submit(scripts, report)
    print(f"resubmitted {len(ids)} point(s): {' '.join(s.stem for s in scripts)}")
    print(f"submitted runs: {' '.join(ids)}")
    print(f"report job: {report_id} (after all runs end; writes {out_dir / 'report.md'})")
    return 0

