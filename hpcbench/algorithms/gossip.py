"""gossip: gossiping SGD (Jin, Yuan, Iandola, Keutzer 2016) with one uniformly random peer per step.

pull: read the peer's published model one-sidedly and average, θ_i ← ½(θ_i + θ_j).
push: push-sum; add half of (x, w) into the peer's mailbox window with an element-wise atomic
Accumulate, keep the other half, and absorb one's own mailbox. Mass is conserved exactly: what
leaves a worker lands in a mailbox, and the last mailbox contents are absorbed after every worker
has stopped pushing (a barrier), so nothing sent is ever lost.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hpcbench.algorithms import decentral
from hpcbench.algorithms.api import Algorithm, Context, Layout, Program, WindowSpec, register
from hpcbench.algorithms.frames import Frame
from hpcbench.algorithms.ops import Accumulate, Barrier, Drain, Read
from hpcbench.algorithms.topology import random_peer
from hpcbench.errors import one_of

VARIANTS = ("pull", "push")


@dataclass(frozen=True)
class GossipOptions:
    variant: str = "pull"  # pull: average with a peer's model; push: push-sum into a peer's mailbox
    init_spread: float = 0.0  # std of a per-worker perturbation of the start (to study consensus)


@register
class Gossip(Algorithm):
    name = "gossip"
    summary = "gossiping SGD: mix with one random peer per step (variant=pull or push-sum push)"
    family = "decentralized"
    Options = GossipOptions
    min_workers = 2

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.frame = decentral.model_frame(ctx.size)
        self.mailbox = Frame(w=(np.float64, 1), x=(np.float32, ctx.size))

    @classmethod
    def check(cls, cfg: Any, options: Any, workers: int) -> None:
        super().check(cfg, options, workers)
        if options.variant not in VARIANTS:
            raise one_of("gossip.variant", options.variant, VARIANTS)

    def layout(self) -> Layout:
        if self.opts.variant == "pull":
            return decentral.layout(self.ctx.params)
        mailbox = WindowSpec("workers", self.mailbox.nbytes, None, "accumulate")
        return decentral.layout(self.ctx.params, mailbox=mailbox)

    def server(self) -> Program:
        return decentral.coordinate(self.ctx)

    def worker(self, rank: int) -> Program:
        return self.pull(rank) if self.opts.variant == "pull" else self.push(rank)

    def pull(self, rank: int) -> Program:
        ctx = self.ctx
        rng = ctx.rng(rank)
        x = decentral.starting_point(ctx, rank, self.opts.init_spread)
        reporter = decentral.Reporter(ctx)
        buf = np.zeros_like(x) if ctx.momentum else None
        for step in range(ctx.steps):
            yield from decentral.local_step(ctx, reporter, x, buf, step)
            peer = random_peer(rank - 1, ctx.workers, rng) + 1
            [raw] = yield Read("model", (peer,))
            x += self.frame.view(raw, "x")
            x *= np.float32(0.5)
            yield decentral.publish(self.frame, ctx, step + 1, x)
            yield from reporter.report(step + 1)

    def push(self, rank: int) -> Program:
        ctx, box = self.ctx, self.mailbox
        rng = ctx.rng(rank)
        x, w = decentral.starting_point(ctx, rank, self.opts.init_spread), 1.0
        reporter = decentral.Reporter(ctx)
        buf = np.zeros_like(x) if ctx.momentum else None
        for step in range(ctx.steps):
            yield from decentral.local_step(ctx, reporter, x, buf, step, weight=w)
            x *= np.float32(0.5)
            w *= 0.5
            peer = random_peer(rank - 1, ctx.workers, rng) + 1
            yield Accumulate("mailbox", peer, ((box.offset("w"), np.array([w])), (box.offset("x"), x)))
            w = yield from self.absorb(x, w)
            yield decentral.publish(self.frame, ctx, step + 1, x, w)
            if step + 1 < ctx.steps:  # the last report waits for the final absorb below
                yield from reporter.report(step + 1)
        yield Barrier()  # every push has landed: the last absorb loses nothing
        w = yield from self.absorb(x, w)
        yield decentral.publish(self.frame, ctx, ctx.steps, x, w)
        yield from reporter.report(ctx.steps)

    def absorb(self, x: np.ndarray, w: float) -> Program:
        raw = yield Drain("mailbox")
        x += self.mailbox.view(raw, "x")
        return w + self.mailbox.scalar(raw, "w")
