"""local-sgd: periodic model averaging (Stich 2019; Lin et al. 2020, "Don't use large mini-batches").

Each worker takes ``period`` SGD steps on its own model with its own momentum buffer, then the
workers all-reduce their models and all continue from the average. The last step always averages,
so the run ends with identical replicas. With period 1 the update is allreduce's: averaging the
models x − lr·g_i is averaging the gradients (the momentum buffers, being linear in the
gradients, average the same way), up to float32 rounding. Synchronous: equal steps per worker,
and the rate follows ``lr_scaling`` like allreduce's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hpcbench.algorithms import decentral
from hpcbench.algorithms.api import SYNCHRONOUS, Algorithm, Context, Layout, Program, Settings, register
from hpcbench.algorithms.ops import Allreduce
from hpcbench.errors import UsageError


@dataclass(frozen=True)
class LocalSgdOptions:
    period: int = 4  # local steps between model averages (1: every step, as allreduce)


@register
class LocalSgd(Algorithm):
    name = "local-sgd"
    summary = "periodic model averaging: period local SGD steps, then all-reduce the models"
    family = SYNCHRONOUS
    asynchronous = False
    Options: ClassVar[type] = LocalSgdOptions

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.frame = decentral.model_frame(ctx.size)

    @classmethod
    def check(cls, cfg: Settings, options: LocalSgdOptions, workers: int) -> None:
        super().check(cfg, options, workers)
        if options.period < 1:
            raise UsageError(f"local-sgd.period must be >= 1 local steps, got {options.period}")

    def layout(self) -> Layout:
        return decentral.layout(self.ctx, until_budget=False)

    def server(self) -> Program:
        return decentral.coordinate(self.ctx, not self.asynchronous)

    def worker(self, rank: int) -> Program:
        ctx, period = self.ctx, self.opts.period
        x = ctx.params.copy()
        reporter = decentral.Reporter(ctx, not self.asynchronous)
        buf = np.zeros_like(x) if ctx.momentum else None
        scale = np.float32(1.0 / ctx.workers)
        for step in range(ctx.steps):
            yield from decentral.local_step(ctx, reporter, x, buf, step)
            if (step + 1) % period == 0 or step + 1 == ctx.steps:
                x[...] = (yield Allreduce(x)) * scale
            done = step + 1 == ctx.steps
            if done:  # the final model, for rank 0 to read (snapshots are kept as rank 0 asks)
                yield decentral.publish(self.frame, ctx, step + 1, x)
            yield from reporter.report(step + 1, lambda: decentral.packed(self.frame, ctx, step + 1, x), done)
