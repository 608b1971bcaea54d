"""From a config to a validated plan, and from a plan to what an algorithm sees: budget, schedule, context."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpcbench.algorithms import ALGORITHMS, Algorithm, Context
from hpcbench.algorithms.schedule import Schedule, lr_scale
from hpcbench.config import RunConfig, Stragglers, validate_numbers
from hpcbench.errors import UsageError
from hpcbench.options import resolve
from hpcbench.results.paths import check_target
from hpcbench.workload.datasets import DATASETS
from hpcbench.workload.models import MODELS

DEFAULT_STEPS = 100
MAX_SAMPLES = 2**53  # sample counts beyond this are no longer exact in the float64 columns of a result file
DEFAULT_TIME_LIMIT_S = 7 * 24 * 3600.0  # the longest a run may take outside Slurm, unless time_limit_s says


@dataclass(frozen=True)
class Plan:
    """A validated configuration: the algorithm chosen, and every option table the run gives or uses
    (its algorithm's, its model's, its dataset's), built once."""

    cfg: RunConfig
    algo: type[Algorithm]
    tables: Mapping[str, Any]

    @property
    def options(self) -> Any:
        """The algorithm's options."""
        return self.tables[self.algo.name]


def validate(cfg: RunConfig) -> Plan:
    """Every check that needs no MPI and no data: names, option tables, numbers, the output path."""
    if not cfg.algo:
        raise UsageError(f"choose an algorithm with --algo; valid: {', '.join(ALGORITHMS.names())}")
    algo = ALGORITHMS.get(cfg.algo)
    MODELS.get(cfg.model)
    DATASETS.get(cfg.dataset)
    tables = resolve(cfg)
    validate_numbers(cfg)
    if cfg.out:
        check_target(cfg.out, cfg.overwrite)
    return Plan(cfg, algo, tables)


# An algorithm's options that only act when another of its options is not at this value.
ACTS_ONLY_WITHOUT = {("compress", "none"): ("powersgd_rank", "powersgd_start", "error_feedback"),
                     ("outer", "none"): ("outer_lr", "outer_momentum")}


def idle_settings(plan: Plan) -> list[str]:
    """Settings given that do nothing for this algorithm and its other settings, one line each (a run
    goes on with a warning: a sweep passes the same settings to several algorithms)."""
    cfg, algo = plan.cfg, plan.algo
    said = []
    if cfg.lr_scaling != "none" and algo.asynchronous:
        said.append(f"lr_scaling = {cfg.lr_scaling} does nothing for {algo.name}: an asynchronous method applies "
                    "each gradient at the single-worker rate")
    if cfg.nesterov and not cfg.momentum:
        said.append("nesterov = true does nothing with momentum 0: give --momentum too")
    given = cfg.options.get(algo.name, {})
    options = plan.options
    for (key, idle), needs in ACTS_ONLY_WITHOUT.items():
        unused = [k for k in needs if k in given]
        if unused and getattr(options, key, None) == idle:
            said.append(f"{algo.name}.{unused[0]} does nothing with {algo.name}.{key} = {idle}")
    return said


def check_world(cfg: RunConfig, world_size: int, cores: int) -> None:
    """What the run checks once it knows its world and this machine (``run`` and its ``--dry-run`` both):
    every fault names a rank of the world, and the torch threads asked for fit in the cores."""
    beyond = [f for f in cfg.fault.items if f.rank >= world_size]
    if beyond:
        raise UsageError(f"fault {beyond[0]}: there is no rank {beyond[0].rank} (ranks 0..{world_size - 1})")
    if cfg.threads > cores:
        raise UsageError(f"threads = {cfg.threads} is more than the {cores} cores a rank here may use")


def steps_per_worker(cfg: RunConfig, workers: int, train_size: int) -> int:
    """Each worker's equal share of the sample budget, in batches (at most ``max_steps``, when set)."""
    if cfg.steps is not None:
        steps = cfg.steps
    elif cfg.epochs is not None:
        exact = cfg.epochs * train_size / (workers * cfg.batch_size)
        if not math.isfinite(exact):  # (a large finite budget is refused, with its numbers, by the budget check)
            raise UsageError(f"--epochs {cfg.epochs:g} over {train_size} samples is {exact:g} steps per worker, more "
                             "than can be counted exactly (2^53) or run; lower --epochs")
        steps = max(1, math.ceil(exact))
    else:
        steps = DEFAULT_STEPS
    return min(steps, cfg.max_steps) if cfg.max_steps else steps


def schedule_for(cfg: RunConfig, algo: type[Algorithm], workers: int, train_size: int) -> Schedule:
    """The same recipe for every algorithm: a warm-up from 1/n of the rate over ``warmup_epochs``.

    Synchronous methods step once per n gradients (a global batch of n·B), so ``lr_scaling`` may
    scale their rate with n (Goyal et al.: linear, warmed up from the single-worker rate).
    Asynchronous methods apply every gradient on its own, at the single-worker rate.
    """
    scaling = "none" if algo.asynchronous else cfg.lr_scaling
    lr = cfg.lr * lr_scale(scaling, workers)
    return Schedule(lr, lr / workers, train_size, cfg.warmup_epochs, tuple(cfg.lr_decay_epochs),
                    cfg.lr_decay_factor, scaling)


def make_context(validated: Plan, workers: int, params: np.ndarray, train_size: int,
                 bounds: tuple[int, ...] = (), shapes: tuple[tuple[int, ...], ...] = ()) -> Context:
    """What the plan's algorithm sees for ``workers`` workers: ``bounds``: the model's parameter
    boundaries in its flat vector; ``shapes``: each parameter's shape."""
    cfg, algo = validated.cfg, validated.algo
    steps = steps_per_worker(cfg, workers, train_size)
    budget = steps * workers * cfg.batch_size
    if budget > MAX_SAMPLES:
        raise UsageError(f"a budget of {budget:.3g} samples ({steps:.3g} steps per worker x {workers} workers x "
                         f"batch {cfg.batch_size}) cannot be counted exactly (at most 2^53) nor run; lower "
                         "--steps or --epochs")
    return Context(
        workers=workers, params=params, batch_size=cfg.batch_size, steps=steps, train_size=train_size,
        schedule=schedule_for(cfg, algo, workers, train_size), momentum=cfg.momentum, nesterov=cfg.nesterov,
        weight_decay=cfg.weight_decay, eval_every=max(1, budget // cfg.evals), seed=cfg.seed,
        options=validated.options, bounds=bounds, shapes=shapes,
    )


def straggler_ranks(stragglers: Stragglers, workers: int, seed: int) -> tuple[int, ...]:
    """The worker ranks slowed by ``--stragglers``: a seeded choice of round(fraction·n) of them, sorted."""
    if stragglers.fraction == 0:
        return ()
    count = round(stragglers.fraction * workers)
    chosen = np.random.default_rng([seed, 0x57A6]).permutation(workers)[:count]
    return tuple(sorted(int(i) + 1 for i in chosen))


def time_limit(cfg: RunConfig, environ: Mapping[str, str], now: float) -> tuple[float, str]:
    """The longest this run may take, in seconds, and where that limit comes from."""
    if cfg.time_limit_s:
        return cfg.time_limit_s, "time_limit_s"
    end = environ.get("SLURM_JOB_END_TIME", "")
    if end.isdigit():
        return max(0.0, int(end) - now), f"the Slurm job's end (job {environ.get('SLURM_JOB_ID', '?')})"
    return DEFAULT_TIME_LIMIT_S, "the default time_limit_s of 7 days"


def check_duration(steps: int, step_s: float, limit: tuple[float, str]) -> None:
    """Refuse a budget that cannot end in time: ``steps`` per worker at ``step_s`` seconds each (the
    warm-up's gradient time, a lower bound of a step)."""
    seconds, source = limit
    estimate = steps * step_s
    if estimate > seconds:
        raise UsageError(f"{steps} steps per worker would take about {estimate / 3600:.3g} h at the "
                         f"{step_s * 1e3:.3g} ms per gradient the warm-up measured, more than {seconds / 3600:.3g} h "
                         f"allowed by {source}; lower --steps or --epochs, or raise --set time_limit_s=SECONDS")
