"""sgp and osgp: Stochastic Gradient Push (Assran, Loizou, Ballas, Rabbat 2019).

Each worker keeps a numerator x_i and a float64 weight w_i and computes gradients on the
de-biased model z_i = x_i / w_i. Iteration k: a momentum step on x_i, then push-sum over the
directed exponential graph: send (x_i/2, w_i/2) to the out-peer, keep the other half, and add what
the in-peer sent. sgp receives iteration k's message before iteration k+1's forward pass; osgp may
run up to τ iterations ahead of a missing message (τ = 0 is sgp). Every worker runs the same
number of iterations and receives every message sent to it, so no one waits forever.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpcbench.algorithms import decentral
from hpcbench.algorithms.api import Algorithm, ChannelSpec, Context, Layout, Program, register
from hpcbench.algorithms.frames import Frame
from hpcbench.algorithms.ops import Recv, Send
from hpcbench.algorithms.topology import exponential_in_peer, exponential_out_peer
from hpcbench.errors import UsageError


@dataclass(frozen=True)
class SgpOptions:
    init_spread: float = 0.0  # std of a per-worker perturbation of the start (to study consensus)


@dataclass(frozen=True)
class OsgpOptions:
    tau: int = 1  # iterations a worker may run ahead of a message it has not received
    init_spread: float = 0.0


class PushSum(Algorithm):
    family = "decentralized"
    min_workers = 2
    delay = 0
    Options = SgpOptions

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.frame = decentral.model_frame(ctx.size)
        self.message = Frame(w=(np.float64, 1), x=(np.float32, ctx.size))

    def layout(self) -> Layout:
        base = decentral.layout(self.ctx.params)
        push = ChannelSpec("workers", "workers", self.message.nbytes)
        return dataclasses.replace(base, channels={**base.channels, "push": push})

    def server(self) -> Program:
        return decentral.coordinate(self.ctx)

    def worker(self, rank: int) -> Program:
        ctx, msg, n, i = self.ctx, self.message, self.ctx.workers, rank - 1
        delay = self.opts.tau if self.delay else 0
        x, w = decentral.starting_point(ctx, rank, self.opts.init_spread), 1.0
        buf = np.zeros_like(x) if ctx.momentum else None
        pending: list[int] = []  # in-peers whose messages are still due, oldest first
        reporter = decentral.Reporter(ctx)
        for k in range(ctx.steps):
            yield from decentral.local_step(ctx, reporter, x, buf, k, weight=w)
            x *= np.float32(0.5)
            w *= 0.5
            yield Send("push", exponential_out_peer(i, k, n) + 1, msg.pack(w=w, x=x))
            pending.append(exponential_in_peer(i, k, n) + 1)
            due = len(pending) - delay  # messages of iterations <= k - τ must be in now
            still: list[int] = []
            for position, src in enumerate(pending):
                got = yield Recv("push", src, timeout=None if position < due else 0)
                if got is None:
                    still.append(src)
                else:
                    x += msg.view(got[1], "x")
                    w += msg.scalar(got[1], "w")
            pending = still
            yield decentral.publish(self.frame, ctx, k + 1, x, w)
            if k + 1 < ctx.steps:  # the last report waits for the messages still due below
                yield from reporter.report(k + 1)
        for src in pending:
            _, raw = yield Recv("push", src)
            x += msg.view(raw, "x")
            w += msg.scalar(raw, "w")
        yield decentral.publish(self.frame, ctx, ctx.steps, x, w)
        yield from reporter.report(ctx.steps)


@register
class Sgp(PushSum):
    name = "sgp"
    summary = "stochastic gradient push over the directed exponential graph, one peer per step"
    asynchronous = False


@register
class Osgp(PushSum):
    name = "osgp"
    summary = "overlap sgp: run up to tau steps ahead of a missing message (tau=0 is sgp)"
    Options = OsgpOptions
    delay = 1

    @classmethod
    def check(cls, cfg: Any, options: Any, workers: int) -> None:
        super().check(cfg, options, workers)
        if options.tau < 0:
            raise UsageError(f"osgp.tau must be >= 0 iterations, got {options.tau}")
