"""From a validated config to what an algorithm sees: budget, schedule, options, context."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from hpcbench.algorithms import ALGORITHMS, Algorithm, Context
from hpcbench.algorithms.schedule import Schedule, lr_scale
from hpcbench.config import RunConfig, build_options, parse_straggler_spec, validate_numbers
from hpcbench.errors import UsageError
from hpcbench.results.paths import check_target
from hpcbench.workload.datasets import DATASETS
from hpcbench.workload.models import MODELS

DEFAULT_STEPS = 100


def validate(cfg: RunConfig) -> type[Algorithm]:
    """Every check that needs no MPI and no data: names, option tables, numbers."""
    if not cfg.algo:
        raise UsageError(f"choose an algorithm with --algo; valid: {', '.join(ALGORITHMS.names())}")
    algo = ALGORITHMS.get(cfg.algo)
    MODELS.get(cfg.model)
    DATASETS.get(cfg.dataset)
    for table, values in cfg.options.items():
        build_options(ALGORITHMS.get(table).Options, values, f"{table}.")
    validate_numbers(cfg)
    if cfg.out:
        check_target(cfg.out, cfg.overwrite)
    return algo


def options_for(cfg: RunConfig, algo: type[Algorithm]) -> Any:
    return build_options(algo.Options, cfg.options.get(algo.name, {}), f"{algo.name}.")


def steps_per_worker(cfg: RunConfig, workers: int, train_size: int) -> int:
    """Each worker's equal share of the sample budget, in batches."""
    if cfg.steps is not None:
        return cfg.steps
    if cfg.epochs is not None:
        return max(1, math.ceil(cfg.epochs * train_size / (workers * cfg.batch_size)))
    return DEFAULT_STEPS


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


def make_context(cfg: RunConfig, algo: type[Algorithm], workers: int, params: np.ndarray,
                 train_size: int) -> Context:
    steps = steps_per_worker(cfg, workers, train_size)
    budget = steps * workers * cfg.batch_size
    return Context(
        workers=workers, params=params, batch_size=cfg.batch_size, steps=steps, train_size=train_size,
        schedule=schedule_for(cfg, algo, workers, train_size), momentum=cfg.momentum, nesterov=cfg.nesterov,
        weight_decay=cfg.weight_decay, eval_every=max(1, budget // cfg.evals), seed=cfg.seed,
        options=options_for(cfg, algo),
    )


def straggler_ranks(cfg: RunConfig, workers: int) -> set[int]:
    """The worker ranks slowed by ``--stragglers``: a seeded choice of round(fraction·n) of them."""
    if not cfg.stragglers:
        return set()
    fraction, _ = parse_straggler_spec(cfg.stragglers)
    count = round(fraction * workers)
    chosen = np.random.default_rng([cfg.seed, 0x57A6]).permutation(workers)[:count]
    return {int(i) + 1 for i in chosen}


def straggler_factor(cfg: RunConfig) -> float:
    return parse_straggler_spec(cfg.stragglers)[1] if cfg.stragglers else 1.0
