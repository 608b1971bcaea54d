"""allreduce: synchronous data-parallel SGD; one flat gradient all-reduced over the workers per step."""
from __future__ import annotations

import numpy as np

from hpcbench.algorithms import decentral
from hpcbench.algorithms.api import Algorithm, Context, Layout, Program, register
from hpcbench.algorithms.ops import Allreduce, Compute


@register
class AllReduceSgd(Algorithm):
    name = "allreduce"
    summary = "synchronous SGD: all-reduce the flat gradient over the workers, identical replicas"
    family = "decentralized"
    asynchronous = False

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.frame = decentral.model_frame(ctx.size)

    def layout(self) -> Layout:
        return decentral.layout(self.ctx.params, until_budget=False)

    def server(self) -> Program:
        return decentral.coordinate(self.ctx)

    def worker(self, rank: int) -> Program:
        ctx = self.ctx
        theta = ctx.params.copy()
        reporter = decentral.Reporter(ctx)
        buf = np.zeros_like(theta) if ctx.momentum else None
        scale = np.float32(1.0 / ctx.workers)
        for step in range(ctx.steps):
            result = yield Compute(theta)
            mean = (yield Allreduce(result.grad)) * scale
            reporter.trained(result, decentral.local_sgd(ctx, theta, mean, theta, buf, step))
            yield decentral.publish(self.frame, ctx, step + 1, theta)
            yield from reporter.report(step + 1, done=step + 1 == ctx.steps)
