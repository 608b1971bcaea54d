"""sgp and osgp: Stochastic Gradient Push (Assran, Loizou, Ballas, Rabbat 2019).

Each worker keeps its de-biased model z_i (float64) and weight w_i (float64) and computes gradients
on z_i. Iteration k: a momentum step on z_i, then push-sum over the directed exponential graph:
halve w_i, send (k, w_i, z_i) to the out-peer, and absorb what in-peers sent as weighted averages
(equal to adding numerators x = w·z, without forming them).
Bounded delay: before computing at iteration k a worker has absorbed every message sent to it at
an iteration ≤ k − τ − 1 (sgp: τ = 0, so iteration k−1's message is in before k's forward pass);
newer ones are absorbed when they happen to be there. sgp takes equal steps; osgp workers claim each
batch from the shared sample budget, so fast ones take more of it. A worker that stops sends a
last "stopped at K" message to each of its out-peers and then takes everything still on its way to
it, up to each in-peer's own last message: every message sent is received, and a worker waiting for
a message that will never come learns so from that stop message instead of waiting forever.

A worker that fails (where the MPI lets the others go on, and in the simulator) leaves the graph: the
survivors keep every other edge of it, push nothing to the failed worker (the half they would have
sent stays with them) and expect nothing more from it once they know, taking what it sent before it
failed. Its weight, and whatever was pushed to it before its failure was known, is lost with it: the
workers' total weight at the end says how much. sgp's team trains on until it has trained the budget.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from hpcbench.algorithms import decentral
from hpcbench.algorithms.api import (
    DECENTRALIZED,
    SYNCHRONOUS,
    Algorithm,
    ChannelSpec,
    Context,
    Layout,
    Program,
    Sub,
    register,
)
from hpcbench.algorithms.frames import Frame
from hpcbench.algorithms.ops import Failures, Lost, Recv, Send
from hpcbench.algorithms.topology import exponential_hops, exponential_in_peer, exponential_out_peer
from hpcbench.errors import RuntimeFailure
from hpcbench.ranges import bounded


@dataclass(frozen=True)
class SgpOptions:
    init_spread: float = bounded(0.0, low=0)  # std of a per-worker perturbation of the start (to study consensus)


@dataclass(frozen=True)
class OsgpOptions:
    # iterations a worker may run ahead of a message it has not received
    tau: int = bounded(1, low=0, unit="iterations")
    init_spread: float = bounded(0.0, low=0)


class Inbox:
    """Messages due to one worker: (iteration, in-peer) in iteration order, and the in-peers that stopped
    (their "stopped" message has come, or they failed)."""

    def __init__(self) -> None:
        self.pending: list[tuple[int, int]] = []
        self.stopped: set[int] = set()


class PushSum(Algorithm):
    family = SYNCHRONOUS
    asynchronous = True
    min_workers = 2
    delay = 0
    Options: ClassVar[type] = SgpOptions

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.frame = decentral.model_frame(ctx.size)
        # last = 1: "I have stopped; nothing more comes from me" (its other fields are not read)
        self.message = Frame(iteration=(np.int64, 1), last=(np.int64, 1), w=(np.float64, 1),
                             z=(np.float32, ctx.size))

    def layout(self) -> Layout:
        base = decentral.layout(self.ctx, self.asynchronous)
        push = ChannelSpec("workers", "workers", self.message.nbytes)
        return Layout(base.windows, {**base.channels, "push": push}, base.tables)

    def server(self) -> Program:
        return decentral.coordinate(self.ctx, not self.asynchronous)

    def worker(self, rank: int) -> Program:
        ctx, msg, n, i = self.ctx, self.message, self.ctx.workers, rank - 1
        tau = self.opts.tau if self.delay else 0
        z, w = decentral.starting_point(ctx, rank, self.opts.init_spread, np.float64), 1.0
        buf = np.zeros(z.size, np.float32) if ctx.momentum else None
        inbox = Inbox()
        team = None if self.asynchronous else decentral.Team(ctx)
        budget = decentral.Budget(ctx, self.asynchronous, team)
        reporter = decentral.Reporter(ctx, team)
        k = 0
        while (yield from budget.next_step()):
            w = yield from self.receive(inbox, z, w, due=k - tau - 1)
            failed = yield Failures()
            if team is None:
                yield from decentral.local_step(ctx, reporter, z, buf, decentral.estimated(ctx, k))
            else:
                team.lose(failed)
                before = team.samples
                team.stepped()
                yield from decentral.local_step(ctx, reporter, z, buf, before, team.factor)
            out, into = exponential_out_peer(i, k, n) + 1, exponential_in_peer(i, k, n) + 1
            if out not in failed:  # a failed out-peer: the half that would have gone to it stays
                w *= 0.5
                yield Send("push", out, msg.pack(iteration=k, last=0, w=w, z=z), given=True)
            if into not in failed:
                inbox.pending.append((k, into))
            k += 1
            w = yield from self.receive(inbox, z, w, due=-1)  # whatever is here already
            yield decentral.publish(self.frame, ctx, k, z, w)
            yield from reporter.report(k, lambda: decentral.packed(self.frame, ctx, k, z, w))
        hops = range(exponential_hops(n))
        failed = yield Failures()
        for h in hops:
            if (i + 2**h) % n + 1 not in failed:
                yield Send("push", (i + 2**h) % n + 1, msg.pack(last=1))
        for h in hops:
            src = (i - 2**h) % n + 1
            while src not in inbox.stopped:
                got = yield from self.take(inbox, src, z, w, expected=None, wait=True)
                w = w if got is None else got
        yield decentral.publish(self.frame, ctx, k, z, w)
        yield from reporter.report(k, lambda: decentral.packed(self.frame, ctx, k, z, w), done=True)

    def receive(self, inbox: Inbox, z: np.ndarray, w: float, due: int) -> Sub[float]:
        """Absorb the pending messages that are here; wait for those sent at an iteration ≤ ``due``.

        An in-peer's messages arrive in the order it sent them, so once one of them is not here its
        later ones are not looked for in this pass: one that lands meanwhile must not be taken for them.
        """
        still = []
        behind: set[int] = set()  # in-peers with an earlier message still on its way
        for m, src in inbox.pending:
            if src in inbox.stopped:
                continue  # its stop message came after all it sent: it never sent this one
            if src in behind:  # (a later message than one not waited for: not waited for either)
                still.append((m, src))
                continue
            got = yield from self.take(inbox, src, z, w, expected=m, wait=m <= due)
            if got is None:
                still.append((m, src))
                behind.add(src)
            else:
                w = got
        inbox.pending = still
        return w

    def take(self, inbox: Inbox, src: int, z: np.ndarray, w: float, expected: int | None,
             wait: bool) -> Sub[float | None]:
        """The next message from ``src``, absorbed; → the new weight, or None if none was there."""
        got = yield Recv("push", src, timeout=None if wait else 0)
        if got is None:
            return None
        if type(got) is Lost:  # it failed (what it sent before came first): nothing more comes from it
            inbox.stopped.add(src)
            return w
        raw, msg = got[1], self.message
        if msg.integer(raw, "last"):
            inbox.stopped.add(src)
            return w
        iteration = msg.integer(raw, "iteration")
        if expected is not None and iteration != expected:
            raise RuntimeFailure(f"rank {src} sent iteration {iteration} where {expected} was due")
        return decentral.mix(z, w, msg.view(raw, "z"), msg.real(raw, "w"))


@register
class Sgp(PushSum):
    name = "sgp"
    summary = "stochastic gradient push over the directed exponential graph, one peer per step"
    asynchronous = False


@register
class Osgp(PushSum):
    name = "osgp"
    summary = "overlap sgp: run up to tau steps ahead of a missing message (tau=0 is sgp)"
    family = DECENTRALIZED
    Options = OsgpOptions
    delay = 1
