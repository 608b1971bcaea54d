"""Elastic averaging SGD (Zhang, Choromanska, LeCun 2015): easgd (asynchronous) and easgd-sync.

Workers train locally (momentum gives EAMSGD) and every τ local steps move toward the centre x̃ by
e = α(x_i − x̃) while the centre moves toward them by the same e. In easgd the centre lives in
rank 0's window: a worker reads it one-sidedly and pushes +e with an element-wise atomic
Accumulate, so rank 0 does no work per exchange. In easgd-sync all workers exchange together over
their communicator: x_i −= α(x_i − x̃) and x̃ += α Σ_i (x_i − x̃), with x̃ replicated on every worker.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hpcbench.algorithms import decentral
from hpcbench.algorithms.api import (
    DECENTRALIZED,
    SYNCHRONOUS,
    Algorithm,
    Context,
    Layout,
    Program,
    Role,
    Settings,
    WindowSpec,
    register,
)
from hpcbench.algorithms.frames import Frame
from hpcbench.algorithms.ops import SERVER, Accumulate, Allreduce, Publish, Read
from hpcbench.errors import UsageError
from hpcbench.ranges import bounded


@dataclass(frozen=True)
class EasgdOptions:
    alpha: float = bounded(0.0, above=0, below=1, resolves="0.9 / workers")  # elastic moving rate β/n with β = 0.9
    tau: int = bounded(4, low=1, unit="local steps")  # local steps between exchanges with the centre


def elastic_rate(options: EasgdOptions, workers: int) -> float:
    """α: the option, or Zhang et al.'s β/n with β = 0.9."""
    return options.alpha or 0.9 / workers


class ElasticAveraging(Algorithm):
    family = DECENTRALIZED
    asynchronous = True
    Options: ClassVar[type] = EasgdOptions
    centre_owner: ClassVar[Role] = "server"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.frame = decentral.model_frame(ctx.size)
        self.centre = Frame(x=(np.float32, ctx.size))
        self.alpha = elastic_rate(self.opts, ctx.workers)

    def resolved_options(self) -> dict[str, Any]:
        return {"alpha": self.alpha}

    def layout(self) -> Layout:
        owner = self.centre_owner
        centre = WindowSpec(owner, self.centre.nbytes, self.centre.pack(x=self.ctx.params),
                            "accumulate" if owner == "server" else "publish")
        return decentral.layout(self.ctx, self.asynchronous, self.kept_extra, centre=centre)

    def server(self) -> Program:
        holder = SERVER if self.centre_owner == "server" else 1
        return decentral.coordinate(self.ctx, not self.asynchronous, centre=(self.centre, holder))

    @property
    def kept_extra(self) -> int:
        """Bytes a worker's snapshot holds beyond its model: the centre, where the workers hold it."""
        return self.centre.nbytes if self.centre_owner == "workers" else 0

    def worker(self, rank: int) -> Program:
        ctx, tau = self.ctx, self.opts.tau
        x = ctx.params.copy()
        replica = ctx.params.copy()  # easgd-sync's copy of the centre; per worker, so kept here
        team = None if self.asynchronous else decentral.Team(ctx)
        budget = decentral.Budget(ctx, self.asynchronous, team)
        reporter = decentral.Reporter(ctx, team, self.kept_extra)

        def keep() -> np.ndarray:
            model = decentral.packed(self.frame, ctx, step, x)
            return np.concatenate([model, self.centre.pack(x=replica)]) if self.kept_extra else model

        buf = np.zeros_like(x) if ctx.momentum else None
        step = 0
        while True:
            if (yield from budget.next_step()):
                if team is None:
                    yield from decentral.local_step(ctx, reporter, x, buf, decentral.estimated(ctx, step))
                else:
                    before = team.samples
                    team.stepped()
                    yield from decentral.local_step(ctx, reporter, x, buf, before, team.factor)
                step += 1
                if step % tau == 0:
                    yield from self.exchange(x, replica, team, step)
                yield decentral.publish(self.frame, ctx, step, x)
                yield from reporter.report(step, keep)
                continue
            if step % tau == 0:  # the last step exchanged
                break
            # a last exchange, so the centre holds all of this worker's work (a team that lost
            # members in it trains on)
            yield from self.exchange(x, replica, team, step)
            if team is None or team.done:
                break
        yield decentral.publish(self.frame, ctx, step, x)
        yield from reporter.report(step, keep, done=True)

    def exchange(self, x: np.ndarray, replica: np.ndarray, team: decentral.Team | None, steps: int) -> Program:
        raise NotImplementedError


@register
class Easgd(ElasticAveraging):
    name = "easgd"
    summary = "asynchronous elastic averaging: one-sided read of the centre, Accumulate of α(x_i − x̃)"

    def exchange(self, x: np.ndarray, replica: np.ndarray, team: decentral.Team | None, steps: int) -> Program:
        [raw] = yield Read("centre", (SERVER,))
        elastic = np.float32(self.alpha) * (x - self.centre.view(raw, "x"))
        x -= elastic
        yield Accumulate("centre", SERVER, ((self.centre.offset("x"), elastic),))


@register
class EasgdSync(ElasticAveraging):
    name = "easgd-sync"
    summary = "synchronous elastic averaging over the workers' communicator, centre replicated"
    family = SYNCHRONOUS
    asynchronous = False
    centre_owner = "workers"

    @classmethod
    def check(cls, cfg: Settings, options: EasgdOptions, workers: int) -> None:
        super().check(cfg, options, workers)
        alpha = elastic_rate(options, workers)
        if workers * alpha >= 1.0:
            raise UsageError(f"easgd-sync is unstable unless workers × alpha < 1 (got {workers} × {alpha:g})")

    def exchange(self, x: np.ndarray, replica: np.ndarray, team: decentral.Team | None, steps: int) -> Program:
        assert team is not None
        total = yield Allreduce(x)
        yield from team.synchronised(steps)  # the sum spans the members left
        alpha = np.float32(self.alpha)
        pull = alpha * (x - replica)
        replica += alpha * (total - np.float32(len(team.members)) * replica)
        x -= pull
        yield Publish("centre", self.centre.pack(x=replica))
