"""allreduce: synchronous data-parallel SGD; the gradient all-reduced over the workers every step.

By default in buckets of ``allreduce.bucket_mb`` overlapped with the backward pass, as PyTorch DDP
does; ``allreduce.overlap=false`` all-reduces the flat gradient once the backward pass is done.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hpcbench.algorithms import decentral
from hpcbench.algorithms.api import SYNCHRONOUS, Algorithm, Context, Layout, Program, Settings, register
from hpcbench.algorithms.buckets import plan_buckets
from hpcbench.algorithms.ops import Allreduce, Compute
from hpcbench.errors import UsageError


@dataclass(frozen=True)
class AllreduceOptions:
    bucket_mb: float = 25.0  # MiB of gradient per bucket (DDP's bucket_cap_mb)
    overlap: bool = True  # all-reduce each bucket as the backward pass finishes it


@register
class AllReduceSgd(Algorithm):
    name = "allreduce"
    summary = "synchronous SGD: all-reduce the gradient over the workers in buckets during backward, identical replicas"
    family = SYNCHRONOUS
    asynchronous = False
    Options = AllreduceOptions

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.frame = decentral.model_frame(ctx.size)
        opts = self.opts
        self.buckets = plan_buckets(ctx.model_bounds, opts.bucket_mb * 2**20) if opts.overlap else ()

    @classmethod
    def check(cls, cfg: Settings, options: Any, workers: int) -> None:
        super().check(cfg, options, workers)
        if not options.bucket_mb > 0:
            raise UsageError(f"allreduce.bucket_mb must be > 0 MiB, got {options.bucket_mb:g}")

    def layout(self) -> Layout:
        return decentral.layout(self.ctx, until_budget=False)

    def server(self) -> Program:
        return decentral.coordinate(self.ctx, not self.asynchronous)

    def worker(self, rank: int) -> Program:
        ctx = self.ctx
        theta = ctx.params.copy()
        reporter = decentral.Reporter(ctx, not self.asynchronous)
        buf = np.zeros_like(theta) if ctx.momentum else None
        scale = np.float32(1.0 / ctx.workers)
        for step in range(ctx.steps):
            if self.buckets:
                result = yield Compute(theta, self.buckets)  # summed over the workers during backward
                total = result.grad
            else:
                result = yield Compute(theta)
                total = yield Allreduce(result.grad)
            reporter.trained(result, decentral.local_sgd(ctx, theta, total * scale, theta, buf, step))
            done = step + 1 == ctx.steps
            if done:  # the final model, for rank 0 to read (snapshots are kept as rank 0 asks)
                yield decentral.publish(self.frame, ctx, step + 1, theta)
            yield from reporter.report(step + 1, lambda: decentral.packed(self.frame, ctx, step + 1, theta), done)
