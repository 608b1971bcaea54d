"""The run options on a command line (``run``, ``simulate`` and the studies that pass them on), parsed
into a ``RunConfig`` and a ``SimConfig``: the one parser the CLI and the studies' runs share."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from hpcbench.config import RunConfig
from hpcbench.errors import UsageError
from hpcbench.launch.local import env_rank, leave_launch_together

if TYPE_CHECKING:
    from hpcbench.options.sim import SimConfig


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one line (printed by rank 0 only)."""

    def error(self, message: str) -> NoReturn:
        if env_rank() == 0:
            print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr, flush=True)
        leave_launch_together()
        raise SystemExit(2)


def add_run_flags(p: argparse.ArgumentParser, prefix: str = "", grid: bool = False) -> None:
    """The run flags ``run``, ``sweep`` and ``tune`` share (``prefix`` starts each help text). ``grid``:
    without --lr and --momentum (``tune`` takes lists there)."""
    from hpcbench.workload.datasets import DATASETS
    from hpcbench.workload.models import MODELS

    budget = p.add_mutually_exclusive_group()
    p.add_argument("--model", help=f"{prefix}{' | '.join(MODELS.names())} (default {RunConfig.model})")
    p.add_argument("--dataset", help=f"{prefix}{' | '.join(DATASETS.names())} (default {RunConfig.dataset})")
    p.add_argument("--data-dir", help=f"{prefix}directory of the cifar10 python pickle batches")
    budget.add_argument("--steps", type=int, help=f"{prefix}steps per worker (default 100)")
    budget.add_argument("--epochs", type=float, help=f"{prefix}passes over the training set, over all workers")
    p.add_argument("--batch-size", type=int, help=f"{prefix}samples per worker step (default 32)")
    if not grid:
        p.add_argument("--lr", type=float, help=f"{prefix}learning rate of the single-worker recipe (default 0.05)")
        p.add_argument("--momentum", type=float, help=f"{prefix}momentum (default 0)")
    p.add_argument("--stragglers", help=f"{prefix}FRACTION:FACTOR, e.g. 0.25:3 slows a quarter of the workers 3x")
    p.add_argument("--compute", help=f"{prefix}gamma:shape=K,mean=SECONDS per batch: the simulator's compute "
                   "model, and --model payload's (default gamma:shape=100,mean=0.05)")


def add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--algo", help="algorithm (see `hpcbench list`)")
    add_run_flags(p)
    p.add_argument("--seed", type=int, help="seed for model init, shards and algorithm randomness (default 0)")
    p.add_argument("--config", help="TOML file of options; [ALGO] tables hold algorithm options")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any option, e.g. --set weight_decay=1e-4 --set ga-asgd.beta=0.99")
    p.add_argument("--out", help="result file (default results/<algo>-<dataset>-...-<time>-<id>.h5)")
    p.add_argument("--overwrite", action="store_true", default=None,
                   help="replace the result file at --out if there is one (regular files only)")


FLAG_KEYS = ("algo", "model", "dataset", "data_dir", "steps", "epochs", "batch_size", "lr", "momentum", "seed",
             "stragglers", "out", "overwrite")
SIM_FLAG_KEYS = ("workers", "numerics", "compute", "network", "pauses", "heterogeneity")


def add_sim_flags(p: argparse.ArgumentParser) -> None:
    """``simulate``'s own flags: the virtual cluster."""
    p.add_argument("--workers", type=int, help="virtual workers (default 8)")
    p.add_argument("--numerics", choices=("on", "off"), help="real model math (on, default) or timing only")
    p.add_argument("--network", help="alpha=SECONDS,bandwidth=BYTES_PER_S[,jitter=S][,noise=CV] (default "
                   "alpha=5e-6,bandwidth=1.25e9), or FILE.h5: the fit of a network sweep (hpcbench comm)")
    p.add_argument("--heterogeneity", type=float, help="coefficient of variation of per-worker speeds (default 0)")
    p.add_argument("--pauses", help="PROB:SECONDS transient pauses per step (default none)")


def configs_from_args(args: argparse.Namespace) -> tuple[RunConfig, SimConfig]:
    """(RunConfig, SimConfig) from the command line."""
    from hpcbench.config import environment_sets, from_sources
    from hpcbench.options import table
    from hpcbench.options.sim import flag_values
    from hpcbench.workload.models import MODELS

    if getattr(args, "out", None) == "":
        raise UsageError("--out '': give the path of a result file (NAME.h5), or leave --out out for the default name")
    sim_flags = flag_values(**{k: getattr(args, k, None) for k in SIM_FLAG_KEYS})
    sets = environment_sets(os.environ) + list(args.set)  # --set beats the environment
    cfg, sim = from_sources(args.config, {k: getattr(args, k, None) for k in FLAG_KEYS}, sets, sim_flags)
    if args.compute and args.command != "simulate" and MODELS.get(cfg.model).trains:
        raise UsageError(f"--compute models the compute of --model payload (model {cfg.model!r} computes for "
                         "real); use it with --model payload, or with simulate")
    sim_config: SimConfig = table("sim").build(sim)
    return cfg, sim_config


def parse_run(argv: Sequence[str], simulate: bool = False) -> tuple[RunConfig, SimConfig]:
    """``run`` (or, with ``simulate``, ``simulate``) options as a command line would give them, with
    ``HPCBENCH_MAX_STEPS`` from the environment: → (RunConfig, SimConfig)."""
    p = Parser(prog="hpcbench simulate" if simulate else "hpcbench run")
    add_run_options(p)
    if simulate:
        add_sim_flags(p)
    args = p.parse_args(list(argv))
    args.command = "simulate" if simulate else "run"
    return configs_from_args(args)
