"""local-sgd: periodic model averaging (Stich 2019; Lin et al. 2020, "Don't use large mini-batches").

Each worker takes ``period`` SGD steps on its own model with its own momentum buffer, then the
workers all-reduce their models and all continue from the average. The last step always averages,
so the run ends with identical replicas. With period 1 the update is allreduce's: averaging the
models x − lr·g_i is averaging the gradients (the momentum buffers, being linear in the
gradients, average the same way), up to float32 rounding. Synchronous: equal steps per worker,
and the rate follows ``lr_scaling`` like allreduce's.

With an outer optimizer (``local-sgd.outer``) the average becomes a step of its own: every worker
keeps the global model θ of the last round; after ``period`` inner steps the workers all-reduce the
pseudo-gradient Δ = mean_i(θ − x_i) and each applies θ ← θ − outer_lr·(Δ + μ·m) with momentum
m ← μ·m + Δ (``nesterov``: DiLoCo, Douillard et al. 2023, e.g. outer_lr 0.7, μ 0.9) or
θ ← θ − outer_lr·m (``sgd``: heavy-ball, SlowMo, Wang et al. 2020), then starts the next round from
θ; each worker's inner momentum buffer carries across rounds. Rate and momentum default to the
method's: 0.7 and 0.9 for nesterov, 1 and 0.5 for sgd (fairscale's SlowMo). ``outer = sgd`` with outer_lr 1 and no
momentum is plain averaging. A compressed all-reduce (``local-sgd.compress``) averages Δ too.

The inner optimizer (``local-sgd.inner``) is SGD with the run's momentum, or AdamW (DiLoCo's: Loshchilov
and Hutter's decoupled weight decay at the run's ``weight_decay``, β 0.9 and 0.999, ε 1e-8, as
torch.optim.AdamW), at the schedule's rate; a worker's AdamW moments and step count carry across
rounds, as DiLoCo keeps its inner optimizer's state.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hpcbench.algorithms import decentral
from hpcbench.algorithms.adamw import AdamW
from hpcbench.algorithms.api import SYNCHRONOUS, Context, Program, register
from hpcbench.algorithms.averaging import Averaging
from hpcbench.algorithms.compressors import CompressOptions
from hpcbench.algorithms.ops import Allreduce, Compute
from hpcbench.ranges import bounded, choice

OUTER = ("none", "sgd", "nesterov")
INNER = ("sgd", "adamw")
# Each outer optimizer's rate and momentum where not given: SlowMo's (fairscale's SlowMoDDP) and
# DiLoCo's (OpenDiLoCo); plain averaging is an outer step at rate 1 without momentum.
OUTER_DEFAULTS = {"none": (1.0, 0.0), "sgd": (1.0, 0.5), "nesterov": (0.7, 0.9)}


@dataclass(frozen=True)
class LocalSgdOptions(CompressOptions):
    # local steps between model averages (1: every step, as allreduce)
    period: int = bounded(4, low=1, unit="local steps")
    outer: str = choice("none", OUTER)  # none (average the models) | sgd (heavy-ball, SlowMo) | nesterov (DiLoCo)
    # The outer step's rate on the pseudo-gradient, and its momentum μ.
    outer_lr: float = bounded(0.0, above=0, resolves="0.7 for nesterov (DiLoCo), else 1")
    outer_momentum: float = bounded(-1.0, low=0, below=1, resolves="0.9 for nesterov, 0.5 for sgd (SlowMo)")
    inner: str = choice("sgd", INNER)  # sgd (with the run's momentum) | adamw (DiLoCo's inner optimizer)


def outer_setting(options: LocalSgdOptions) -> tuple[float, float]:
    """(rate, momentum) of the outer step: the options, or the outer optimizer's defaults."""
    lr, momentum = OUTER_DEFAULTS[options.outer]
    return (options.outer_lr or lr, momentum if options.outer_momentum < 0 else options.outer_momentum)


def adamw_step(ctx: Context, reporter: decentral.Reporter, x: np.ndarray, adam: AdamW, samples: int,
               factor: float) -> Program:
    """Compute a gradient at x and take AdamW's step at the schedule's rate after ``samples`` (× ``factor``)."""
    result = yield Compute(x)
    lr = ctx.schedule.at(samples) * factor
    adam.step(x, result.grad, lr, ctx.weight_decay)
    reporter.trained(result, lr)


def outer_step(theta: np.ndarray, delta: np.ndarray, m: np.ndarray | None, kind: str, lr: float,
               momentum: float) -> None:
    """θ ← the outer optimizer's step on the pseudo-gradient Δ, in place (``m``: its momentum buffer,
    updated in place; None without momentum): torch.optim.SGD's rule with Δ as the gradient."""
    step = delta
    if m is not None:
        m *= np.float32(momentum)
        m += delta
        step = delta + np.float32(momentum) * m if kind == "nesterov" else m
    theta -= np.float32(lr) * step


@register
class LocalSgd(Averaging):
    name = "local-sgd"
    summary = "periodic model averaging: period local SGD steps, then all-reduce the models (outer: DiLoCo, SlowMo)"
    family = SYNCHRONOUS
    Options: ClassVar[type] = LocalSgdOptions

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.frame = decentral.model_frame(ctx.size)

    def resolved_options(self) -> dict[str, Any]:
        lr, momentum = outer_setting(self.opts)
        return {"outer_lr": lr, "outer_momentum": momentum}

    def worker(self, rank: int) -> Program:
        ctx, opts = self.ctx, self.opts
        x = ctx.params.copy()
        team = decentral.Team(ctx)
        reporter = decentral.Reporter(ctx, team)
        adam = AdamW(x) if opts.inner == "adamw" else None
        buf = np.zeros_like(x) if ctx.momentum and adam is None else None
        plain = opts.outer == "none" and opts.compress == "none"
        theta = None if plain else x.copy()  # the global model of the last round
        outer_lr, outer_momentum = outer_setting(opts)
        m = np.zeros_like(x) if opts.outer != "none" and outer_momentum else None
        compressor = self.compressor(rank)
        step = 0
        while not team.done:
            before = team.samples
            team.stepped()
            if adam is None:
                yield from decentral.local_step(ctx, reporter, x, buf, before, team.factor)
            else:
                yield from adamw_step(ctx, reporter, x, adam, before, team.factor)
            step += 1
            if step % opts.period == 0 or team.done:  # the team's last step always averages
                if theta is None:
                    total = yield Allreduce(x)
                    yield from team.synchronised(step)
                    x[...] = total * np.float32(1.0 / len(team.members))
                else:
                    delta = yield from compressor.mean(theta - x)
                    yield from team.synchronised(step)
                    outer_step(theta, delta, m, opts.outer, outer_lr, outer_momentum)
                    x[...] = theta
            if team.done:  # the final model, for rank 0 to read (snapshots are kept as rank 0 asks)
                yield decentral.publish(self.frame, ctx, step, x)
            yield from reporter.report(step, lambda: decentral.packed(self.frame, ctx, step, x), team.done)
