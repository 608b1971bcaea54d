"""One run set-up from a validated plan, shared by the MPI session and the simulator."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hpcbench.algorithms import Algorithm
from hpcbench.algorithms.api import Layout
from hpcbench.config import RunConfig
from hpcbench.errors import UsageError
from hpcbench.memory import check_memory
from hpcbench.runtime.logs import RunLogs
from hpcbench.runtime.plan import Plan, make_context, straggler_ranks
from hpcbench.telemetry.progress_line import ProgressLine
from hpcbench.workload.base import Workload
from hpcbench.workload.datasets import Dataset, load_dataset
from hpcbench.workload.models import MODELS, Needs
from hpcbench.workload.sharding import BatchStream, shard_indices


@dataclass(frozen=True)
class Run:
    """A run ready to start: the algorithm bound to its context, the model and data, the stragglers."""

    plan: Plan
    algo: Algorithm
    layout: Layout
    workload: Workload
    stragglers: tuple[int, ...]  # the worker ranks slowed by ``cfg.stragglers.factor``

    @property
    def cfg(self) -> RunConfig:
        return self.plan.cfg

    @property
    def workers(self) -> int:
        return self.algo.ctx.workers

    def slow_factor(self, rank: int) -> float:
        return self.cfg.stragglers.factor if rank in self.stragglers else 1.0

    def stream(self, rank: int) -> BatchStream:
        """Worker ``rank``'s batches: its own shard of the training set, in its own seeded order."""
        n_train = len(self.workload.data.y_train)
        shard = shard_indices(n_train, self.workers, rank - 1, self.cfg.seed)
        return BatchStream(shard, self.cfg.batch_size, self.cfg.seed, rank)

    def modeled(self, rank: int) -> Callable[[], float] | None:
        """Worker ``rank``'s modeled compute times (payload), or None when it computes for real."""
        compute = self.workload.compute
        return None if compute is None else lambda: compute.sample(rank)

    def logs(self) -> RunLogs:
        return RunLogs(self.layout.tables, self.layout.columns)

    def progress_line(self, doing: str = "", rate_unit: str = "samples/s", early: bool = False) -> ProgressLine:
        return ProgressLine(f"{doing}{self.algo.name}, {self.workers} workers", self.algo.ctx.budget,
                            every_s=self.cfg.progress_s, rate_unit=rate_unit, early=early)


# Copies of the model's parameters one rank holds at once, about: the parameters, a gradient, momentum,
# the messages it sends and receives, a window (the algorithm's own history is checked where it is made).
MODEL_COPIES = 6


def model_bytes(size: int, sharing: int = 1) -> float:
    """What ``sharing`` ranks of one machine hold of a model of ``size`` float32 parameters: ~MODEL_COPIES
    copies each."""
    return 4.0 * size * MODEL_COPIES * sharing


# The vector an algorithm is bound to where the run's sizes are checked without its values (``values=False``).
STAND_IN_FLOATS = 64


def assemble(plan: Plan, workers: int, device: str = "cpu", stand_in: int = 0, sharing: int = 1,
             values: bool = True, data: Dataset | None = None) -> Run:
    """Check the world, load the data and model, bind the algorithm; may raise UsageError.

    ``stand_in``: give the algorithm a zero vector of this many floats instead of the model's
    parameters (the simulator without numerics). ``sharing``: the ranks on this machine, each of which
    holds its copies of the model (refused, with the number, when they would not fit in its memory).
    ``values``: False for the real run's checks without its values (``run --dry-run``, and the commands
    that launch runs here, before they start any): the model's sizes from its shapes (no torch, no
    parameters), the memory of its copies and of the algorithm's state checked for the model's size,
    and the algorithm bound to a stand-in vector. ``data``: the dataset, when already loaded.
    """
    cfg = plan.cfg
    if workers != plan.workers:  # (the plan checked the workers it knew of)
        plan.algo.check(cfg, plan.options, workers)
    model = MODELS.get(cfg.model)
    if data is None:
        data = load_dataset(cfg.dataset, cfg.data_dir, plan.tables.get(cfg.dataset), cfg.val_fraction)  # its table
    if workers > len(data.y_train) and not stand_in:  # timing only (a stand-in) reads no sample
        raise UsageError(f"{workers} workers but only {len(data.y_train)} training samples in {cfg.dataset}")
    smallest = len(data.y_train) // workers
    if not stand_in and model.trains and cfg.batch_size > smallest:  # a payload reads no data: its samples only count
        raise UsageError(f"batch size {cfg.batch_size} is larger than a worker's shard ({smallest} of the "
                         f"{len(data.y_train)} training samples of {cfg.dataset} with {workers} workers); use "
                         f"--batch-size {smallest} "
                         "or less, or fewer workers")
    sizes_only = bool(stand_in) or not values  # sizes are all a stand-in, or a check, needs
    build = model.sized if sizes_only and model.sized is not None else model.build
    workload = build(Needs(cfg.model, data, cfg.seed, device, workers, plan.tables))
    size = stand_in or workload.size
    check_memory(model_bytes(size, sharing), f"{sharing} rank(s) here, each with ~{MODEL_COPIES} copies of "
                 f"{size} parameters", "a smaller model, or fewer ranks on this machine")
    stand_in = stand_in or (0 if values else STAND_IN_FLOATS)
    params = np.zeros(stand_in, np.float32) if stand_in else workload.initial
    ctx = make_context(plan, workers, params, len(data.y_train), workload.bounds, workload.shapes)
    algo = plan.algo(ctx)
    if not values:
        algo.check_state(size)  # (bound to the stand-in, it checked only the stand-in's)
    return Run(plan, algo, algo.layout(), workload, straggler_ranks(cfg.stragglers, workers, cfg.seed))
