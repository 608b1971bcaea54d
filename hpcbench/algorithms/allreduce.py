"""allreduce: synchronous data-parallel SGD; the gradient all-reduced over the workers every step.

By default in buckets of ``allreduce.bucket_mb`` overlapped with the backward pass, as PyTorch DDP
does; ``allreduce.overlap=false`` all-reduces the flat gradient once the backward pass is done, and
so does a compressed all-reduce (``allreduce.compress``: one of ``algorithms/compressors/``).
The step on the mean gradient is SGD with the run's momentum, or AdamW (``allreduce.optimizer``, at the
schedule's rate and the run's ``weight_decay``: the synchronous baseline of DiLoCo's paper).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcbench.algorithms import decentral
from hpcbench.algorithms.adamw import AdamW
from hpcbench.algorithms.api import SYNCHRONOUS, Context, Program, register
from hpcbench.algorithms.averaging import Averaging
from hpcbench.algorithms.buckets import plan_buckets
from hpcbench.algorithms.compressors import CompressOptions
from hpcbench.algorithms.ops import Compute
from hpcbench.ranges import bounded, choice

OPTIMIZERS = ("sgd", "adamw")


@dataclass(frozen=True)
class AllreduceOptions(CompressOptions):
    bucket_mb: float = bounded(25.0, above=0, unit="MiB")  # MiB of gradient per bucket (DDP's bucket_cap_mb)
    overlap: bool = True  # all-reduce each bucket as the backward pass finishes it (uncompressed only)
    optimizer: str = choice("sgd", OPTIMIZERS)  # sgd (with the run's momentum) | adamw (DiLoCo's baseline)


@register
class AllReduceSgd(Averaging):
    name = "allreduce"
    summary = "synchronous SGD: all-reduce the gradient over the workers in buckets during backward, identical replicas"
    family = SYNCHRONOUS
    Options = AllreduceOptions

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.frame = decentral.model_frame(ctx.size)
        opts = self.opts
        overlapped = opts.overlap and opts.compress == "none"  # a compressed all-reduce runs after backward
        self.buckets = plan_buckets(ctx.model_bounds, opts.bucket_mb * 2**20) if overlapped else ()

    def worker(self, rank: int) -> Program:
        ctx = self.ctx
        theta = ctx.params.copy()
        team = decentral.Team(ctx)
        reporter = decentral.Reporter(ctx, team)
        adam = AdamW(theta) if self.opts.optimizer == "adamw" else None
        buf = np.zeros_like(theta) if ctx.momentum and adam is None else None
        compressor = self.compressor(rank)
        step = 0
        while not team.done:
            before = team.samples
            team.stepped()
            if self.buckets:
                result = yield Compute(theta, self.buckets)  # summed over the workers during backward
                yield from team.synchronised(step + 1)
                mean = result.grad * np.float32(1.0 / len(team.members))
            else:
                result = yield Compute(theta)
                mean = yield from compressor.mean(result.grad)  # compress=none: the all-reduced sum / workers
                yield from team.synchronised(step + 1)
            step += 1
            if adam is None:
                reporter.trained(result, decentral.local_sgd(ctx, theta, mean, theta, buf, before, team.factor))
            else:
                lr = ctx.schedule.at(before) * team.factor
                adam.step(theta, mean, lr, ctx.weight_decay)
                reporter.trained(result, lr)
            if team.done:  # the final model, for rank 0 to read (snapshots are kept as rank 0 asks)
                yield decentral.publish(self.frame, ctx, step, theta)
            yield from reporter.report(step, lambda: decentral.packed(self.frame, ctx, step, theta), team.done)
