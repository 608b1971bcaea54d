"""Command line: parsing and dispatch only. Heavy imports happen inside the commands that need them."""
from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, NoReturn, Sequence

from hpcbench import __version__
from hpcbench.errors import UsageError
from hpcbench.runtime.launch import env_rank


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one line (printed by rank 0 only)."""

    def error(self, message: str) -> NoReturn:
        if env_rank() == 0:
            print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--algo", help="algorithm (see `hpcbench list`)")
    p.add_argument("--model", help="mlp | cnn | resnet20 (default mlp)")
    p.add_argument("--dataset", help="synthetic | digits | cifar10 (default digits)")
    p.add_argument("--data-dir", help="directory of the cifar10 python pickle batches")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--steps", type=int, help="steps per worker (default 100)")
    budget.add_argument("--epochs", type=float, help="passes over the training set, over all workers")
    p.add_argument("--batch-size", type=int, help="samples per worker step (default 32)")
    p.add_argument("--lr", type=float, help="learning rate of the single-worker recipe (default 0.05)")
    p.add_argument("--momentum", type=float, help="momentum (default 0)")
    p.add_argument("--seed", type=int, help="seed for model init, shards and algorithm randomness (default 0)")
    p.add_argument("--stragglers", help="FRACTION:FACTOR, e.g. 0.25:3 slows a quarter of the workers 3x")
    p.add_argument("--config", help="TOML file of options; [ALGO] tables hold algorithm options")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any option, e.g. --set weight_decay=1e-4 --set ga-asgd.beta=0.99")
    p.add_argument("--out", help="result file (default results/<algo>-<dataset>-...-<time>.h5)")


FLAG_KEYS = ("algo", "model", "dataset", "data_dir", "steps", "epochs", "batch_size", "lr", "momentum", "seed",
             "stragglers", "out")


def configs_from_args(args: argparse.Namespace) -> tuple[Any, Any]:
    """(RunConfig, SimConfig): defaults ← TOML ← flags ← --set, the [sim] table for the simulator."""
    from hpcbench.algorithms import ALGORITHMS
    from hpcbench.config import build_options, load_toml, make_config, merge_sources
    from hpcbench.runtime.sim.models import SimConfig, parse_compute, parse_network, parse_pauses

    toml = load_toml(args.config) if args.config else {}
    flags = {k: getattr(args, k) for k in FLAG_KEYS}
    run, options = merge_sources(toml, flags, args.set, ALGORITHMS.names() + ["sim"])
    sim_values = options.pop("sim", {})
    overridden = {item.partition("=")[0][4:] for item in args.set if item.startswith("sim.")}
    sim_flags: dict[str, Any] = {}
    if getattr(args, "workers", None) is not None:
        sim_flags["workers"] = args.workers
    if getattr(args, "numerics", None) is not None:
        sim_flags["numerics"] = args.numerics == "on"
    for flag, parse in (("compute", parse_compute), ("network", parse_network), ("pauses", parse_pauses)):
        if getattr(args, flag, None):
            sim_flags.update(parse(getattr(args, flag)))
    if getattr(args, "heterogeneity", None) is not None:
        sim_flags["heterogeneity"] = args.heterogeneity
    sim_values.update({k: v for k, v in sim_flags.items() if k not in overridden})
    return make_config(run, options), build_options(SimConfig, sim_values, "sim.")


def cmd_run(args: argparse.Namespace) -> int:
    from hpcbench.runtime import plan
    from hpcbench.runtime.session import run_mpi

    cfg, _ = configs_from_args(args)
    algo = plan.validate(cfg)
    return run_mpi(cfg, algo)


def cmd_simulate(args: argparse.Namespace) -> int:
    from hpcbench.runtime import plan
    from hpcbench.runtime.sim.session import simulate

    cfg, sim = configs_from_args(args)
    algo = plan.validate(cfg)
    return simulate(cfg, algo, sim)


def cmd_report(args: argparse.Namespace) -> int:
    from hpcbench.report.tables import load, report_text

    print(report_text(load(args.paths), args.format, args.target))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from hpcbench.listing import listing

    print(listing())
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from hpcbench.listing import environment

    print(environment())
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from hpcbench.runtime.study import demo

    return demo(args.out_dir, args.ranks, args.steps, args.timeout)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from hpcbench.results.store import read_run
    from hpcbench.runtime.sim.calibrate import describe

    print(describe(read_run(args.path)))
    return 0


def build_parser() -> Parser:
    parser = Parser(prog="hpcbench", description="Benchmark distributed SGD algorithms under MPI.")
    parser.add_argument("--version", action="version", version=f"hpcbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p = sub.add_parser("run", help="one run under MPI: mpiexec -n N python -m mpi4py -m hpcbench run --algo A")
    add_run_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("simulate", help="the same algorithms on a virtual cluster of 1 to 4096 workers")
    add_run_options(p)
    p.add_argument("--workers", type=int, help="virtual workers (default 8)")
    p.add_argument("--numerics", choices=("on", "off"), help="real model math (on, default) or timing only")
    p.add_argument("--compute", help="gamma:shape=K,mean=SECONDS per batch (default gamma:shape=100,mean=0.05)")
    p.add_argument("--network", help="alpha=SECONDS,bandwidth=BYTES_PER_S (default alpha=5e-6,bandwidth=1.25e9)")
    p.add_argument("--heterogeneity", type=float, help="coefficient of variation of per-worker speeds (default 0)")
    p.add_argument("--pauses", help="PROB:SECONDS transient pauses per step (default none)")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("calibrate", help="fit the simulator's compute and network models to a real run")
    p.add_argument("path", metavar="REAL.h5")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("report", help="tables from result files or directories")
    p.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    p.add_argument("--format", default="text", help="text | md | csv | latex (default text)")
    p.add_argument("--target", type=float, default=0.9, help="accuracy for time-to-target (default 0.9)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("list", help="algorithms, models, datasets and options with defaults")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("info", help="environment: MPI library, mpi4py, torch, CUDA, Slurm, host")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("demo", help="every algorithm at two world sizes on this machine, then the report")
    p.add_argument("--ranks", default="3,5", help="world sizes, comma-separated (default 3,5)")
    p.add_argument("--steps", type=int, default=0, help="steps per worker (default: one sample budget)")
    p.add_argument("--out-dir", default="results/demo", help="where the result files go")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds allowed per run")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.func
    try:
        return handler(args)
    except UsageError as exc:
        if env_rank() == 0:
            print(f"hpcbench: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
