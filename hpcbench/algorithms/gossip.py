"""gossip: gossiping SGD (Jin, Yuan, Iandola, Keutzer 2016) with one uniformly random peer per step.

pull: read the peer's published model one-sidedly and average, θ_i ← ½(θ_i + θ_j).
push: push-sum; add (w/2, w/2·z) into the peer's mailbox window with an element-wise atomic
Accumulate, keep (w/2, z), and absorb one's own mailbox as a weighted average. State and mailbox
are float64, so a straggler that gives weight away for thousands of steps stays finite and Σ w,
Σ w·z are conserved to float64 rounding: what leaves a worker lands in a mailbox, and the last
mailbox contents are absorbed after every worker has stopped pushing (a barrier).
Both claim each batch from the shared sample budget, so fast workers are not held to a straggler's share.
A worker mixes only with workers it does not know to have failed; a read of, or push into, one that
failed meanwhile is skipped (a push keeps its mass). What a failed worker held, and what was pushed to it
before its failure was known, is lost with it: the workers' total weight says how much.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcbench.algorithms import decentral
from hpcbench.algorithms.api import (
    DECENTRALIZED,
    Algorithm,
    Context,
    Layout,
    Program,
    Sub,
    WindowSpec,
    register,
)
from hpcbench.algorithms.frames import Frame
from hpcbench.algorithms.ops import Accumulate, Barrier, Drain, Failures, Lost, Read
from hpcbench.algorithms.topology import random_live_peer
from hpcbench.ranges import bounded, choice

VARIANTS = ("pull", "push")


@dataclass(frozen=True)
class GossipOptions:
    variant: str = choice("pull", VARIANTS)  # pull: average with a peer's model; push: push-sum into a peer's mailbox
    init_spread: float = bounded(0.0, low=0)  # std of a per-worker perturbation of the start (to study consensus)


@register
class Gossip(Algorithm):
    name = "gossip"
    summary = "gossiping SGD: mix with one random peer per step (variant=pull or push-sum push)"
    family = DECENTRALIZED
    asynchronous = True
    Options = GossipOptions
    min_workers = 2

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.frame = decentral.model_frame(ctx.size)
        self.mailbox = Frame(w=(np.float64, 1), x=(np.float64, ctx.size))  # Σ w_j and Σ w_j·z_j

    def layout(self) -> Layout:
        if self.opts.variant == "pull":
            return decentral.layout(self.ctx, until_budget=True)
        mailbox = WindowSpec("workers", self.mailbox.nbytes, None, "accumulate")
        return decentral.layout(self.ctx, until_budget=True, mailbox=mailbox)

    def server(self) -> Program:
        return decentral.coordinate(self.ctx, not self.asynchronous)

    def worker(self, rank: int) -> Program:
        return self.pull(rank) if self.opts.variant == "pull" else self.push(rank)

    def peer(self, rank: int, rng: np.random.Generator) -> Sub[int | None]:
        """A random other worker not known to have failed (a rank), or None when none is left."""
        failed = yield Failures()
        peer = random_live_peer(rank - 1, self.ctx.workers, frozenset(r - 1 for r in failed), rng)
        return None if peer is None else peer + 1

    def pull(self, rank: int) -> Program:
        ctx = self.ctx
        rng = ctx.rng(rank)
        x = decentral.starting_point(ctx, rank, self.opts.init_spread)
        budget = decentral.Budget(ctx, shared=True)
        reporter = decentral.Reporter(ctx, None)
        buf = np.zeros_like(x) if ctx.momentum else None
        step = 0
        while (yield from budget.next_step()):
            yield from decentral.local_step(ctx, reporter, x, buf, decentral.estimated(ctx, step))
            step += 1
            peer = yield from self.peer(rank, rng)
            got = None if peer is None else (yield Read("model", (peer,)))
            if isinstance(got, list):  # (Lost: it failed meanwhile; no mixing this step)
                x += self.frame.view(got[0], "z")
                x *= np.float32(0.5)
            yield decentral.publish(self.frame, ctx, step, x)
            yield from reporter.report(step, lambda: decentral.packed(self.frame, ctx, step, x))
        yield from reporter.report(step, lambda: decentral.packed(self.frame, ctx, step, x), done=True)

    def push(self, rank: int) -> Program:
        ctx, box = self.ctx, self.mailbox
        rng = ctx.rng(rank)
        z, w = decentral.starting_point(ctx, rank, self.opts.init_spread, np.float64), 1.0
        budget = decentral.Budget(ctx, shared=True)
        reporter = decentral.Reporter(ctx, None)
        buf = np.zeros(z.size, np.float32) if ctx.momentum else None
        step = 0
        while (yield from budget.next_step()):
            yield from decentral.local_step(ctx, reporter, z, buf, decentral.estimated(ctx, step))
            step += 1
            peer = yield from self.peer(rank, rng)
            if peer is not None:
                w *= 0.5
                pushed = yield Accumulate("mailbox", peer, ((box.offset("w"), np.array([w])),
                                                            (box.offset("x"), w * z)))
                if type(pushed) is Lost:  # it failed: the half stays here
                    w *= 2.0
            w = yield from self.absorb(z, w)
            yield decentral.publish(self.frame, ctx, step, z, w)
            yield from reporter.report(step, lambda: decentral.packed(self.frame, ctx, step, z, w))
        yield Barrier()  # every push has landed: the last absorb loses nothing
        w = yield from self.absorb(z, w)
        yield decentral.publish(self.frame, ctx, step, z, w)
        yield from reporter.report(step, lambda: decentral.packed(self.frame, ctx, step, z, w), done=True)

    def absorb(self, z: np.ndarray, w: float) -> Sub[float]:
        raw = yield Drain("mailbox")
        weight = self.mailbox.real(raw, "w")
        if weight <= 0:
            return w
        return decentral.mix(z, w, self.mailbox.view(raw, "x") / weight, weight)
