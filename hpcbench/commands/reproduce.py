"""hpcbench reproduce: a published finding tested: runs, report, verdict."""
from __future__ import annotations

import argparse
from typing import Any

from hpcbench.commands.values import at_least, seconds, seed_list


def add(sub: Any) -> None:
    from hpcbench.reproduce.studies import PRESETS

    p = sub.add_parser("reproduce", help="test a published finding: gap-aware | jin | sgp | diloco | resilience "
                                              "(runs, report, verdict)")
    p.add_argument("study", metavar="STUDY", help="gap-aware | jin | sgp | diloco | resilience")
    p.add_argument("--out-dir", required=True, help="where the result files, report.md, the plot and verdict.json go")
    p.add_argument("--quick", action="store_true", help="fewer sizes and grid points, a shorter budget (about 20 "
                   "minutes on 2 cores); --preset quick")
    p.add_argument("--preset", default="full", choices=PRESETS, help="study size and task (default full: "
                   "Fashion-MNIST with cnn-tiny, up to 3 hours on 2 cores; teacher: the synthetic teacher task with "
                   "the mlp, a check of the machinery; toy: seconds, for tests)")
    p.add_argument("--mode", default="sim", choices=("sim", "mpi"), help="simulator (default) or real MPI runs here")
    p.add_argument("--max-ranks", type=at_least(2), default=9, help="with --mode mpi: the largest world size run "
                                                                    "(default 9)")
    p.add_argument("--emulated", action="store_true", help="sgp with --mode mpi: also all-reduce, sgp and osgp "
                   "across emulated nodes at 1 Gbit/s and 100 Mbit/s, beside the simulator (root)")
    p.add_argument("--seeds", type=seed_list, default=(), help="seeds instead of the preset's, comma-separated "
                   "(a verdict needs at least 3; e.g. 0,1,2,3,4)")
    p.add_argument("--extend", type=at_least(0), help="log steps a rate grid may grow past an edge when a choice "
                   "sits on one (default: the preset's, 3; toy 0)")
    p.add_argument("--rejudge", action="store_true", help="run nothing: judge the study in --out-dir again from "
                   "its verdict.json under the current rules, and write its report.md and verdict.json again")
    p.add_argument("--recheck", action="store_true", help="make one run per algorithm of the study in --out-dir "
                   "again with the code here and compare it with its verdict to the last digit (recheck.json; exit 1 "
                   "where one differs): whether a change to the code left the study's numbers as they were")
    p.add_argument("--timeout", type=seconds, default=1800.0, help="seconds allowed per run")
    p.add_argument("--jobs", type=int, default=0, help="simulated runs at a time (default: the cores here, "
                   "one for --preset toy; real runs go one at a time)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hpcbench.reproduce.runner import reproduce
    from hpcbench.reproduce.studies import study

    if args.rejudge and args.recheck:
        from hpcbench.errors import UsageError

        raise UsageError("--rejudge and --recheck are two things: judge again from verdict.json, or make runs again "
                         "to compare with it; give one")
    if args.rejudge:
        from hpcbench.reproduce.rejudge import rejudge

        return rejudge(args.out_dir, study(args.study).name)
    from hpcbench.tuning.execute import jobs_or_cores

    if args.recheck:
        from hpcbench.reproduce.recheck import recheck

        return recheck(study(args.study).name, args.out_dir, jobs_or_cores(args.jobs), args.timeout)

    if args.quick and args.preset not in ("full", "quick"):
        from hpcbench.errors import UsageError

        raise UsageError(f"--quick is --preset quick; give one of them, not --quick with --preset {args.preset} "
                         "(the teacher task's quick size is --preset teacher-quick)")
    preset = "quick" if args.quick else args.preset
    # A toy run is shorter than a process start-up: one at a time, in this process (4x faster here).
    jobs = 1 if preset == "toy" and not args.jobs else jobs_or_cores(args.jobs)
    if study(args.study).name == "resilience":
        from hpcbench.errors import UsageError
        from hpcbench.reproduce.resilience_run import reproduce_resilience
        from hpcbench.reproduce.runner import sized

        if args.emulated:
            raise UsageError("--emulated goes with reproduce sgp --mode mpi")
        return reproduce_resilience(sized("resilience", preset, args.mode, args.seeds, args.extend), args.out_dir,
                                    preset, args.mode, args.max_ranks, args.timeout, jobs, args.seeds)
    return reproduce(args.study, args.out_dir, preset, args.mode, args.max_ranks, args.timeout, jobs, args.emulated,
                     args.seeds, args.extend)

