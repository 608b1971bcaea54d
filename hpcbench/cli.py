"""Command line: parsing and dispatch only. Heavy imports happen inside the commands that need them."""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpcbench import __version__
from hpcbench.config import RunConfig
from hpcbench.errors import Escaping, HungUp, RuntimeFailure, UsageError, one_line
from hpcbench.launch.arguments import Parser, add_run_flags, add_run_options, add_sim_flags, configs_from_args
from hpcbench.launch.local import env_rank, env_size, leave_launch_together

if TYPE_CHECKING:
    from hpcbench.options.sim import SimConfig
    from hpcbench.results.schema import RunRecord
    from hpcbench.runtime.plan import Plan


def cmd_run(args: argparse.Namespace) -> int:
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


def warned(validated: Plan) -> Plan:
    """``validated``, once rank 0 has said which of its settings do nothing here."""
    from hpcbench.runtime.plan import idle_settings

    if env_rank() == 0:
        for line in idle_settings(validated):
            print(f"hpcbench: warning: {line}", file=sys.stderr, flush=True)
    return validated


def refuse_sim_options(cfg: RunConfig, sim: SimConfig) -> None:
    """Real runs take no ``sim.*`` options: they run on the machines, not on a virtual cluster. Fields a
    table of the run shares with the simulator are its own (``--model payload``'s compute model), and
    run's ``--workers`` is ``--dry-run``'s world, not the simulator's."""
    from hpcbench.options import TABLES
    from hpcbench.options.sim import SimConfig

    own = {"workers", *(k for _, table in TABLES.items() if table.applies(cfg) for k in table.shares)}
    given = [f.name for f in dataclasses.fields(sim)
             if f.name not in own and getattr(sim, f.name) != getattr(SimConfig(), f.name)]
    if given:
        raise UsageError(f"{', '.join(f'sim.{k}' for k in given)}: simulate's options (its virtual cluster); "
                         "a real run takes none: remove them, or use simulate")


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


def cmd_simulate(args: argparse.Namespace) -> int:
    from hpcbench.runtime import plan
    from hpcbench.runtime.sim.session import simulate

    cfg, sim = configs_from_args(args)
    return simulate(warned(plan.validate(cfg)), sim)


def readable(paths: Sequence[str], skipped: list[tuple[str, str]]) -> list[RunRecord]:
    """The runs under ``paths`` that can be read; each file skipped is said on stderr with the reason
    and added to ``skipped``. None readable: one error line."""
    from hpcbench.report.tables import load_readable

    records, missed = load_readable(paths)
    skipped.extend(missed)
    if not records and len(missed) == 1:
        raise UsageError(missed[0][1])
    for _, reason in missed:
        print(f"hpcbench: skipped: {one_line(reason)}", file=sys.stderr)
    if not records:
        raise UsageError(f"none of the {len(missed)} result files could be read (reasons above)")
    return records


def strictly(args: argparse.Namespace, skipped: list[tuple[str, str]], code: int) -> int:
    """``code``, or 1 when ``--strict`` and a file was skipped."""
    if skipped and args.strict:
        print(f"hpcbench: {len(skipped)} file(s) skipped (--strict)", file=sys.stderr)
        return code or 1
    return code


def cmd_report(args: argparse.Namespace) -> int:
    from hpcbench.report.document import build, report_text
    from hpcbench.results.study import not_ok

    failed = [(p.stem, p.result, p.jobs[-1] if p.jobs else "-")
              for d in args.paths if Path(d).is_dir() for p in not_ok(d)]
    skipped: list[tuple[str, str]] = []
    try:
        records = readable(args.paths, skipped)
    except UsageError:
        if not failed:  # a study whose every point failed still gets its list of failed points
            raise
        records = []
    group_by = None if args.group_by is None else [k for k in args.group_by.split(",") if k]
    if args.format == "html":
        print(html_report(records, args.target, group_by, args.table, failed, args.wide), end="")
        return strictly(args, skipped, 0)
    built = build(records, args.target, group_by)
    print(report_text(records, args.format, args.target, group_by, args.table, failed, args.wide, built=built))
    if args.plot:
        from hpcbench.report.plots import write_figures

        try:
            plots = write_figures(built.figures, args.plot)
        except OSError as exc:
            raise UsageError(f"cannot write plots to --plot {args.plot!r}: {exc.strerror or exc}") from None
        for name, labels in plots.items():
            print(f"plot: {args.plot}/{name} ({len(labels)} curves: {', '.join(labels)})")
    return strictly(args, skipped, 0)


def html_report(records: list, target: float, group_by: list[str] | None, table: str | None,
                failed: list, wide: bool) -> str:
    """The html page; without matplotlib it says so, on the page and in one line on stderr."""
    from hpcbench.report.document import build, report_text
    from hpcbench.report.html import figures_html, page
    from hpcbench.report.plots import NO_MATPLOTLIB, have_matplotlib, images

    built = build(records, target, group_by)
    figures = built.figures if table is None else []
    plots = ""
    if figures and have_matplotlib():
        plots = figures_html(images(figures))
    elif figures:
        print(f"report: {NO_MATPLOTLIB} (the page has no plots)", file=sys.stderr)
        plots = figures_html({}, f"No plots: {NO_MATPLOTLIB}")
    return page([report_text(records, "html", target, group_by, table, failed, wide, plots, built)], len(records))


def cmd_diff(args: argparse.Namespace) -> int:
    from hpcbench.report.diff import diff_text, matched, regressions

    skipped: list[tuple[str, str]] = []
    old, new = readable([args.old], skipped), readable([args.new], skipped)
    gate: list[str] = []
    within: list[str] = []
    if args.fail_above is not None:  # checked before printing: a bad --metric is one line, not a table
        _, before, after = matched(old, new, args.target)
        gate, within = regressions(before, after, args.metric, args.fail_above)
    print(diff_text(old, new, args.format, args.target))
    if args.fail_above is not None:
        print("\n".join(within + gate) if within + gate else f"no {args.metric} worse by more than {args.fail_above:g}%")
    return strictly(args, skipped, 1 if gate else 0)


def cmd_check(args: argparse.Namespace) -> int:
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


def cmd_trace(args: argparse.Namespace) -> int:
    from hpcbench.report.trace import write_trace
    from hpcbench.results.store import read_run

    rec = read_run(args.path)
    try:
        count = write_trace(rec, args.output)
    except OSError as exc:
        raise UsageError(f"cannot write the trace to {args.output!r}: {exc.strerror or exc}") from None
    print(f"{count} trace events -> {args.output} (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from hpcbench.listing import listing

    print(listing())
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from hpcbench.listing import environment

    print(environment())
    return 0


def print_report(files: Sequence[str | Path]) -> None:
    from hpcbench.report.document import report_text
    from hpcbench.report.tables import load

    if files:
        print(report_text(load([str(f) for f in files])))


def cmd_demo(args: argparse.Namespace) -> int:
    from hpcbench.launch.study import demo

    files, failures = demo(args.out_dir, args.ranks, args.steps, args.timeout)
    print_report(files)
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0



def local_jobs(jobs: int, ranks: list[int], emulated: bool) -> int:
    """``sweep --local --jobs``: runs at a time (0: as many as fit in the cores here); a warning when
    the runs would share cores, whose timings would then include each other's load."""
    from hpcbench.launch.study import default_jobs
    from hpcbench.runtime.threads import cpu_count

    if jobs < 0:
        raise UsageError(f"--jobs must be >= 1 (0: as many runs as fit in the cores here), got {jobs}")
    cores = cpu_count()
    jobs = jobs or (1 if emulated else default_jobs(ranks, cores))
    if jobs > 1 and jobs * max(ranks) > cores:
        print(f"hpcbench: warning: {jobs} runs of up to {max(ranks)} ranks at a time share {cores} cores: each "
              "run's timings include the others' load", file=sys.stderr, flush=True)
    return jobs


def cmd_sweep(args: argparse.Namespace) -> int:
    from hpcbench.launch.local import emulated_nodes
    from hpcbench.launch.study import parse_ranks, run_local
    from hpcbench.results.paths import check_study_dir
    from hpcbench.runtime import plan
    from hpcbench.slurm import sweep

    if args.resubmit_failed:
        return resubmit_failed(Path(args.resubmit_failed).resolve())
    if not args.algos or not args.out_dir:
        raise UsageError("sweep needs --algos and --out-dir (or --resubmit-failed STUDY_DIR)")
    algos = sweep.parse_algos(args.algos)
    cfg, sim = configs_from_args(args)
    refuse_sim_options(cfg, sim)
    # Each algorithm's run options, its own table and no other's (the job script names the algorithm).
    base_args = {a: dataclasses.replace(cfg.for_algo(a), algo="").to_argv() for a in algos}
    for a in algos:  # refuse a bad study before writing or submitting anything
        plan.validate(cfg.for_algo(a))
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
    check_study_dir(out_dir, args.resume)
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


def cmd_status(args: argparse.Namespace) -> int:
    from hpcbench.slurm.status import status_text

    print(status_text(args.study_dir))
    return 0


def cmd_comm(args: argparse.Namespace) -> int:
    from hpcbench.comm.linkfit import parse_bytes, parse_ops, sweep_sizes

    ops = parse_ops(args.ops)
    sizes = sweep_sizes(parse_bytes(args.minbytes, "-b"), parse_bytes(args.maxbytes, "-e"), args.stepfactor)
    from hpcbench.results.paths import utc_stamp
    from hpcbench.runtime.mpi.commsweep import comm_sweep

    out = args.out or f"results/comm-{utc_stamp()}.h5"
    return comm_sweep(ops, sizes, args.iters, args.warmup, out, args.overwrite)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from hpcbench.results.commfile import measured_link
    from hpcbench.results.store import read_run
    from hpcbench.runtime.sim.calibrate import describe

    print(describe(read_run(args.path), args.noise, measured_link(args.network) if args.network else None))
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from hpcbench.reproduce.runner import reproduce
    from hpcbench.tuning.execute import jobs_or_cores

    preset = "quick" if args.quick else args.preset
    # A toy run is shorter than a process start-up: one at a time, in this process (4x faster here).
    jobs = 1 if preset == "toy" and not args.jobs else jobs_or_cores(args.jobs)
    return reproduce(args.study, args.out_dir, preset, args.mode, args.max_ranks, args.timeout, jobs, args.emulated)


def cmd_tune(args: argparse.Namespace) -> int:
    import dataclasses

    from hpcbench.config import RUN_KEYS, table_argv
    from hpcbench.options.sim import SimConfig
    from hpcbench.runtime import plan
    from hpcbench.slurm.sweep import parse_algos
    from hpcbench.tuning.execute import jobs_or_cores
    from hpcbench.tuning.grid import expand, parse_decays, parse_floats, parse_ints
    from hpcbench.tuning.tune import Grid, tune

    algos = parse_algos(args.algo or "")
    workers = parse_ints(args.workers, "--workers", 1)
    seeds = parse_ints(args.seeds, "--seeds", 0)
    jobs = jobs_or_cores(args.jobs)
    settings = expand(parse_floats(args.lr, "--lr"),
                      parse_floats(args.momentum, "--momentum") if args.momentum else (),
                      parse_floats(args.warmup_epochs, "--warmup-epochs") if args.warmup_epochs else (),
                      parse_decays(args.lr_decay_epochs) if args.lr_decay_epochs else (),
                      [x for x in args.lr_scaling.split(",") if x] if args.lr_scaling else ())
    # The shared options as ``simulate`` or ``run`` would read them (the grid's own flags left out).
    shared = argparse.Namespace(**{**vars(args), "lr": None, "momentum": None, "seed": None, "algo": None,
                                   "out": None, "overwrite": None, "workers": None,
                                   "command": "simulate" if args.mode == "sim" else "run"})
    cfg, sim = configs_from_args(shared)
    held_out = cfg.val_fraction == 0  # tune chooses on the validation split: hold one out unless given
    if held_out:
        cfg = cfg.with_updates(val_fraction=0.1)
    for a in algos:  # refuse a bad grid before running anything
        for st in settings:
            plan.validate(cfg.for_algo(a).with_updates(**{k: tuple(v) if isinstance(v, list) else v
                                                      for k, v in st.values().items()}))
            if args.mode == "sim":
                for n in workers:
                    dataclasses.replace(sim, workers=n).validate()
    defaults = RunConfig().to_dict()
    base = {k: v for k, v in cfg.to_dict().items()
            if k in RUN_KEYS and k not in ("algo", "seed", "out", "overwrite") and v != defaults[k]}
    sim_values = {k: v for k, v in dataclasses.asdict(sim).items()
                  if k != "workers" and v != getattr(SimConfig(), k)}
    if held_out:
        print("tune: holding out 10% of the training set as the validation split (val_fraction=0.1)")
    grid = Grid(tuple(algos), tuple(workers), tuple(settings), tuple(seeds))
    run_args = cfg.to_argv() + table_argv("sim", sim, SimConfig(workers=sim.workers))
    return tune(grid, run_args, base, cfg.options, sim_values, args.out_dir, args.mode, jobs, args.timeout)


def seconds(text: str) -> float:
    """A flag's number of seconds: finite and > 0."""
    value = number(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


def accuracy(text: str) -> float:
    value = number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an accuracy in (0, 1]")
    return value


def percent(text: str) -> float:
    value = number(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage >= 0")
    return value


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def at_least(least: int) -> Callable[[str], int]:
    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= {least}")
        return value
    whole.__name__ = f"whole number >= {least}"
    return whole


SLURM_TIME = re.compile(r"(\d+-\d{1,2}(:\d{1,2}){0,2}|\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE)", re.IGNORECASE)


def slurm_time(text: str) -> str:
    """sbatch --time: MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS[:MINUTES[:SECONDS]]."""
    if not SLURM_TIME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Slurm time (MINUTES, HH:MM:SS or DAYS-HH:MM:SS)")
    return text


def strict_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strict", action="store_true", help="exit 1 when a result file could not be read (by "
                   "default such files are listed on stderr and skipped)")


def table_options(p: argparse.ArgumentParser) -> None:
    """The options of commands that print report tables."""
    strict_option(p)
    p.add_argument("--format", default="text", help="text | md | latex | csv | json | html (the last three: report only) (default text)")
    p.add_argument("--target", type=accuracy, default=0.9, help="accuracy for time-to-target (default 0.9)")


def build_parser() -> Parser:
    parser = Parser(prog="hpcbench", description="Benchmark distributed SGD algorithms under MPI.")
    parser.add_argument("--version", action="version", version=f"hpcbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p = sub.add_parser("run", help="one run under MPI: mpiexec -n N python -m mpi4py -m hpcbench run --algo A")
    add_run_options(p)
    p.add_argument("--dry-run", action="store_true", help="print the resolved configuration and schedule, and "
                   "exit without running (rank 0 only; MPI is not started)")
    p.add_argument("--workers", type=int, help="with --dry-run outside mpiexec: resolve for this many workers")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("simulate", help="the same algorithms on a virtual cluster of 1 to 4096 workers")
    add_run_options(p)
    add_sim_flags(p)
    p.set_defaults(func=cmd_simulate)

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
    p.add_argument("--cpus-per-task", type=at_least(1), default=1, help="cores per rank; sets torch threads (default 1)")
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
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("status", help="a study's points: result, latest Slurm job and its state")
    p.add_argument("study_dir", metavar="STUDY_DIR")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("comm", help="the network's own sweep under MPI: latency and bandwidth of every operation "
                       "the algorithms use over message sizes, and an α–β fit per link class for simulate")
    p.add_argument("-b", "--minbytes", default="8", help="smallest message, bytes (K, M, G: powers of 1024; default 8)")
    p.add_argument("-e", "--maxbytes", default="16M", help="largest message (default 16M)")
    p.add_argument("-f", "--stepfactor", type=at_least(2), default=2, help="factor between sizes (default 2)")
    p.add_argument("--ops", default="allreduce,sendrecv,get,put,accumulate,fetch_add",
                   help="operations, comma-separated (default: all of allreduce, sendrecv, get, put, accumulate, "
                        "fetch_add)")
    p.add_argument("--iters", type=at_least(1), default=20, help="timed iterations per size (default 20)")
    p.add_argument("--warmup", type=at_least(0), default=5, help="untimed iterations first (default 5)")
    p.add_argument("--out", help="the HDF5 file (default results/comm-TIME.h5)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.set_defaults(func=cmd_comm)

    p = sub.add_parser("calibrate", help="fit the simulator's compute and network models to a real run")
    p.add_argument("path", metavar="REAL.h5")
    p.add_argument("--noise", type=float, default=0.0, metavar="CV",
                   help="the links' noise to simulate with (coefficient of variation of a transfer's time, "
                        "as benchmarks/bare_exchange.py measures it; not fitted); default 0")
    p.add_argument("--network", metavar="COMM.h5", help="take the network from a sweep of it (hpcbench comm "
                   "--out COMM.h5) instead of fitting it from the run")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("report", help="tables from result files or directories")
    p.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    table_options(p)
    p.add_argument("--group-by", metavar="KEY,...", help="settings that keep runs apart (default: every "
                   "setting that differs between runs, seed excepted); '' pools all but algorithm and mode")
    p.add_argument("--table", choices=("runs", "scaling"), help="only this table (csv holds exactly one)")
    p.add_argument("--plot", metavar="DIR", help="also write PNG plots there (needs matplotlib)")
    p.add_argument("--wide", action="store_true", help="every column in the tables (by default they fit in 120 "
                   "columns: the settings folded into the group's name, the rest one click away in html)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("diff", help="per-cell changes between two studies and the configuration that differs")
    p.add_argument("old", metavar="OLD", help="result file or directory")
    p.add_argument("new", metavar="NEW", help="result file or directory")
    table_options(p)
    p.add_argument("--fail-above", type=percent, metavar="PCT", help="exit 1 when a point in both studies got worse "
                   "by more than PCT percent in --metric and, where both have repeats, by more than their spread")
    p.add_argument("--metric", default="samples_per_s", help="what --fail-above watches: samples_per_s (default), "
                   "speedup, efficiency, final_accuracy, time_to_target_s, staleness_mean")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("check", help="runs against expected bounds per algorithm and worker count (exit 1 on a miss)")
    p.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    p.add_argument("--reference", metavar="REF.toml", help="[ALGO.WORKERS] tables of METRIC = "
                   "{ref = VALUE, lower = -FRACTION, upper = FRACTION}, [LOW, HIGH] or {min = LOW, max = HIGH}")
    p.add_argument("--write-reference", metavar="REF.toml", help="write a reference from these runs instead: "
                   "each point's median with a tolerance from its repeats' spread (sweep --repeats 3)")
    p.add_argument("--target", type=accuracy, default=0.9, help="accuracy for time-to-target (default 0.9)")
    strict_option(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("trace", help="export a run's timeline as Chrome-trace JSON for Perfetto")
    p.add_argument("path", metavar="FILE.h5")
    p.add_argument("-o", "--output", required=True, help="trace file to write, e.g. trace.json")
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("reproduce", help="test a published finding: gap-aware | jin | sgp | diloco | resilience "
                                              "(runs, report, verdict)")
    p.add_argument("study", metavar="STUDY", help="gap-aware | jin | sgp | diloco | resilience")
    p.add_argument("--out-dir", required=True, help="where the result files, report.md, the plot and verdict.json go")
    p.add_argument("--quick", action="store_true", help="fewer sizes, grid points and seeds, a shorter budget "
                   "(minutes on 2 cores)")
    p.add_argument("--preset", default="full", choices=("full", "quick", "toy"), help="study size (default full; "
                   "toy: seconds, for tests)")
    p.add_argument("--mode", default="sim", choices=("sim", "mpi"), help="simulator (default) or real MPI runs here")
    p.add_argument("--max-ranks", type=at_least(2), default=9, help="with --mode mpi: the largest world size run (default 9)")
    p.add_argument("--emulated", action="store_true", help="sgp with --mode mpi: also all-reduce, sgp and osgp "
                   "across emulated nodes at 1 Gbit/s and 100 Mbit/s, beside the simulator (root)")
    p.add_argument("--timeout", type=seconds, default=1800.0, help="seconds allowed per run")
    p.add_argument("--jobs", type=int, default=0, help="simulated runs at a time (default: the cores here, "
                   "one for --preset toy; real runs go one at a time)")
    p.set_defaults(func=cmd_reproduce)

    p = sub.add_parser("tune", help="a grid of learning-rate recipes, chosen on the validation split "
                       "(table, plot, TOML for --config)")
    p.add_argument("--algo", required=True, help="algorithm(s), comma-separated")
    p.add_argument("--workers", required=True, help="worker counts, comma-separated, e.g. 1,8,32")
    p.add_argument("--lr", required=True, help="rates to try, comma-separated, e.g. 0.01,0.02,0.05,0.1")
    p.add_argument("--momentum", help="momenta to try, comma-separated (default: the run options' momentum)")
    p.add_argument("--warmup-epochs", help="warm-ups to try, comma-separated (default: the run options')")
    p.add_argument("--lr-decay-epochs", help="decay schedules to try, ';'-separated, each epochs or none, "
                   "e.g. 'none;10,15'")
    p.add_argument("--lr-scaling", help="synchronous rate scalings to try: none,sqrt,linear")
    p.add_argument("--seeds", default="0,1,2", help="seeds per setting, comma-separated (default 0,1,2)")
    p.add_argument("--mode", default="sim", choices=("sim", "mpi"), help="simulator (default) or real MPI runs here")
    p.add_argument("--jobs", type=int, default=0, help="simulated runs at a time (default: the cores here)")
    p.add_argument("--timeout", type=seconds, default=1800.0, help="seconds allowed per run")
    p.add_argument("--out-dir", required=True, help="where runs/, tune.md, tune.png, tune.json and best/*.toml go")
    p.add_argument("--config", help="TOML file of run options for every run")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="run option for every run "
                   "(val_fraction defaults to 0.1 here)")
    add_run_flags(p, prefix="every run: ", grid=True)
    p.add_argument("--network", help="with --mode sim: alpha=SECONDS,bandwidth=BYTES_PER_S")
    p.add_argument("--heterogeneity", type=float, help="with --mode sim: per-worker speed variation")
    p.add_argument("--pauses", help="with --mode sim: PROB:SECONDS transient pauses per step")
    p.set_defaults(func=cmd_tune, numerics=None)

    p = sub.add_parser("list", help="algorithms, models, datasets and options with defaults")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("info", help="environment: MPI library, mpi4py, torch, CUDA, Slurm, host")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("demo", help="every algorithm at two world sizes on this machine, then the report")
    p.add_argument("--ranks", default="3,5", help="world sizes, comma-separated (default 3,5)")
    p.add_argument("--steps", type=at_least(0), default=0, help="steps per worker (default: one sample budget)")
    p.add_argument("--out-dir", default="results/demo", help="where the result files go")
    p.add_argument("--timeout", type=seconds, default=120.0, help="seconds allowed per run")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; everything it prints is escaped (``errors.Escaping``) while it runs."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Escaping(sys.stdout), Escaping(sys.stderr)  # type: ignore[assignment]
    try:
        return dispatch(build_parser().parse_args(argv))
    finally:
        sys.stdout, sys.stderr = streams


def dispatch(args: argparse.Namespace) -> int:
    handler: Callable[[argparse.Namespace], int] = args.func
    try:
        return handler(args)
    except UsageError as exc:
        if env_rank() == 0:
            print(f"hpcbench: error: {one_line(str(exc))}", file=sys.stderr, flush=True)
        leave_launch_together()
        return 2
    except RuntimeFailure as exc:  # what a run that failed did not say itself (a simulation's)
        if env_rank() == 0:
            print(f"hpcbench: error: {one_line(str(exc))}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt as stop:  # Ctrl-C or a hangup in a study: the run under way kept its record ("aborted")
        hangup = isinstance(stop, HungUp)
        if env_rank() == 0:
            again = {"sweep": "sweep --local ... --resume runs what is left", "demo": "the demo starts over when run "
                     "again", "tune": "tune run again keeps the finished runs", "reproduce": "reproduce run again "
                     "keeps the finished runs"}.get(args.command, "the run under way kept its record (aborted)")
            print(f"hpcbench: stopped by {'SIGHUP' if hangup else 'Ctrl-C'} during {args.command}; {again}",
                  file=sys.stderr)
        return 128 + (signal.SIGHUP if hangup else signal.SIGINT)
    except BrokenPipeError:  # the reader has gone (``| head``): end quietly, as a tool killed by SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush has nowhere to fail
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    raise SystemExit(main())
