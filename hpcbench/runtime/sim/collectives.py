"""The workers' collectives in virtual time: all-reduce, all-gather and barrier (all arrive, then all
leave together after the collective's cost), and a bucketed compute's all-reduce overlapping the
backward pass. A member that dies while one is under way makes it fail for every member; once the
survivors know, they agree on it and shrink to themselves (``regroup_s``), and begin again among
themselves (each one's two "recover" rows: the collective cut short, and the agreement and shrink),
and from then on they are the collectives' members.
"""
from __future__ import annotations

import math

import numpy as np

from hpcbench.algorithms.buckets import FLOAT_BYTES, overlapped_end, ready_fractions
from hpcbench.algorithms.ops import Allgather, Allreduce, Barrier, Compute, Gradient
from hpcbench.bfloat16 import summed
from hpcbench.comm.collectives import COMBINE
from hpcbench.runtime.sim.core import BLOCKED, Parts, Pending
from hpcbench.runtime.sim.costs import COLLECTIVE_COSTS, allreduce_s, barrier_s
from hpcbench.runtime.sim.transfers import Transfers


class Collectives(Transfers):
    """The collectives' part of the engine: who has joined the one under way, the flights (collectives
    in progress), and whom the workers' collectives span."""

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self.joined: list[tuple[int, float, np.ndarray | None]] = []
        self.collective_op: Allreduce | Allgather | Barrier | None = None  # the collective the workers are in
        self.reducing: list[tuple[int, float, float, Gradient | Pending]] = []  # (rank, start, compute done, result)
        self.reducing_op: Compute | None = None  # the bucketed compute the workers are in
        self.flights: list[Flight] = []  # collectives under way
        self.failing: list[Flight] = []  # collectives a member died in, until the survivors know
        self.members = tuple(range(1, parts.cfg.workers + 1))  # whom the workers' collectives span

    def collective(self, rank: int, op: Allreduce | Allgather) -> object:
        """Any of the workers' collectives with data (``ops.COLLECTIVES``), by its name."""
        return self.gather(rank, op, op.data)

    def barrier(self, rank: int, op: Barrier) -> object:
        return self.gather(rank, op, None)

    def gather(self, rank: int, op: Allreduce | Allgather | Barrier, data: np.ndarray | None) -> object:
        """Workers' collectives: all arrive, then all leave together after the collective's cost."""
        self.joined.append((rank, self.now, data))
        self.collective_op = op
        return self.finish_gather()

    def wire_of(self, op: Allreduce | Allgather) -> int:
        """Each worker's bytes in a collective: as it declares them, or its array's (``wire``)."""
        return op.wire if op.wire >= 0 else self.wire(op.data)

    def collective_s(self, op: Allreduce | Allgather | Barrier | None, p: int) -> float:
        """Seconds a workers' collective takes among ``p`` of them."""
        cfg = self.cfg
        if op is None or isinstance(op, Barrier):
            return barrier_s(p, cfg.alpha_s)
        return COLLECTIVE_COSTS[type(op).__name__](self.wire_of(op), p, cfg.alpha_s, cfg.bandwidth, cfg.allreduce)

    def finish_gather(self) -> object:
        """Every live worker has joined the collective (and any that failed is known to have): all leave
        together after its cost, among the survivors, after they have regrouped, when workers failed
        (each one's "recover" row)."""
        before = len(self.members)
        begin = self.regrouped(len(self.joined))
        if begin is None:
            return BLOCKED
        arrivals, self.joined = sorted(self.joined, key=lambda c: c[0]), []
        p = len(self.members)
        cost = self.collective_s(self.collective_op, p)
        start = max([begin] + [t for _, t, _ in arrivals])
        self.fly(Flight(arrivals, start + cost, start + cost, start, self.collective_op,
                        regrouping=self.now if p < before else None))
        return BLOCKED

    def finish_reducing(self) -> object:
        """Every live worker has started a bucketed compute (and any that failed is known to have):
        bucket k's all-reduce starts once the last worker's backward pass has finished it and bucket
        k−1's has ended; each worker goes on when its compute and the last all-reduce are done (the
        exposed part is its "communicate" row). When workers failed before, the survivors regroup
        once their computes are done, then all-reduce the whole gradient."""
        before = len(self.members)
        begin = self.regrouped(len(self.reducing))
        if begin is None:
            return BLOCKED
        op = self.reducing_op
        assert op is not None
        arrivals, self.reducing = sorted(self.reducing, key=lambda a: a[0]), []
        last_done = max(done for _, _, done, _ in arrivals)
        if len(self.members) < before:  # each survivor comes to the agreement when its compute is done
            regrouping = max(self.now, last_done)
            start = regrouping + begin - self.now
            end = start + self.whole_allreduce_s(op)
            self.fly(Flight(arrivals, end, end, start, regrouping=regrouping))
            return BLOCKED
        p, cfg = len(self.members), self.cfg
        # The buckets partition the model's parameters; count them at the modeled message size.
        scale = self.modeled(self.float_bytes) / (FLOAT_BYTES * sum(stop - start for start, stop in op.buckets))
        ready = [max(t + (done - t) * share for _, t, done, _ in arrivals) for share in ready_fractions(op.buckets)]
        costs = [allreduce_s(FLOAT_BYTES * (stop - first) * scale, p, cfg.alpha_s, cfg.bandwidth, cfg.allreduce)
                 for first, stop in op.buckets]
        end = overlapped_end(ready, costs)
        self.fly(Flight(arrivals, max(end, last_done), end, self.now))
        return BLOCKED

    def whole_allreduce_s(self, op: Compute) -> float:
        """A bucketed compute's all-reduce of the whole gradient at once (the survivors', regrouped)."""
        return allreduce_s(self.modeled(self.float_bytes), len(self.members), self.cfg.alpha_s, self.cfg.bandwidth,
                           self.cfg.allreduce)

    def fly(self, flight: Flight) -> None:
        """A workers' collective under way until it lands: a member that dies before then makes it fail
        for every member (``land`` finds it)."""
        self.flights.append(flight)
        self.at(flight.landed, self.land, flight)

    def land(self, flight: Flight) -> None:
        self.flights.remove(flight)
        if any(self.dead[a[0]] for a in flight.arrivals):
            self.failing.append(flight)
            self.retry()
        elif len(flight.arrivals[0]) == 4:
            self.reduced(flight)
        else:
            self.gathered(flight)

    def reduced(self, flight: Flight) -> None:
        results = [value.result() if isinstance(value, Pending) else value for *_, value in flight.arrivals]
        total = summed([result.grad for result in results])
        for (rank, t, done, _), result in zip(flight.arrivals, results):
            self.row(rank, "compute", t, done, 0, "Compute")
            if flight.regrouping is not None:
                self.recovered(rank, done, flight, "Allreduce")
            if flight.end > max(done, flight.start):
                self.row(rank, "communicate", max(done, flight.start), flight.end, self.modeled(result.grad.nbytes),
                         "Allreduce")
            self.later(rank, self.updated(rank, max(done, flight.end)), result._replace(grad=total.copy()))

    def gathered(self, flight: Flight) -> None:
        op, parts = flight.op, [part for _, _, part in flight.arrivals]
        result, nbytes = None, 0
        if op is not None and not isinstance(op, Barrier):
            result = COMBINE[type(op).__name__](parts, getattr(op, "bf16", False))
            nbytes = self.wire_of(op)
        phase, name = ("wait", "Barrier") if result is None else ("communicate", type(op).__name__)
        for r, t, _ in flight.arrivals:
            if flight.regrouping is not None:
                self.recovered(r, t, flight, name)
                t = flight.start
            self.row(r, phase, t, flight.end, nbytes, name)
            self.later(r, flight.end, None if result is None else result.copy())

    def recovered(self, rank: int, t: float, flight: Flight, op: str) -> None:
        """A member's two "recover" rows from ``t`` on, as a real run's: its collective cut short (``op``)
        until the survivors began to regroup, then their agreement and shrink ("Shrink")."""
        assert flight.regrouping is not None
        regrouping = max(t, flight.regrouping)
        self.row(rank, "recover", t, regrouping, 0, op)
        self.row(rank, "recover", regrouping, max(regrouping, flight.start), 0, "Shrink")

    def regroup_s(self, survivors: int) -> float:
        """Seconds the survivors of a failed collective take to agree on it and shrink to themselves."""
        return self.cfg.regroup_s + self.cfg.regroup_log_s * math.log2(max(survivors, 1))

    def retry(self) -> None:
        """Collectives that failed with members that died while they were under way: once the survivors
        know, they regroup and begin again among themselves."""
        for flight in list(self.failing):
            if any(self.dead[a[0]] and a[0] not in self.known for a in flight.arrivals):
                continue
            self.failing.remove(flight)
            survivors = [a for a in flight.arrivals if not self.dead[a[0]]]
            self.members = tuple(r for r in self.members if not self.dead[r])
            if not survivors:  # every member died: no one is left to begin it again
                continue
            regrouping = max(self.now, flight.landed)
            start = regrouping + self.regroup_s(len(self.members))
            if len(survivors[0]) == 4:
                op = self.reducing_op
                assert op is not None
                end = start + self.whole_allreduce_s(op)
            else:
                end = start + self.collective_s(flight.op, len(self.members))
            self.fly(Flight(survivors, end, end, start, flight.op, regrouping=regrouping))

    def regrouped(self, arrived: int) -> float | None:
        """A workers' collective that ``arrived`` live members have joined: None while a live member has
        not, or while a member that failed is not known to have; else when it may begin: now, or, when
        members failed, once the survivors have agreed on it and regrouped (the members shrink to them)."""
        live = tuple(r for r in self.members if not self.dead[r])
        if arrived < len(live):
            return None
        if len(live) == len(self.members):
            return self.now
        if any(r not in self.known for r in self.members if self.dead[r]):
            return None
        self.members = live
        return self.now + self.regroup_s(len(live))


class Flight:
    """A workers' collective under way: who joined it (``arrivals``: (rank, joined, data) for an
    all-reduce or barrier, (rank, joined, compute done, gradient) for a bucketed compute), when it lands
    (its computes and its all-reduce all done), when its all-reduce began and ended, and when the
    survivors began to regroup before it (None where they did not: no "recover" rows)."""

    __slots__ = ("arrivals", "landed", "end", "start", "op", "regrouping")

    def __init__(self, arrivals: list, landed: float, end: float, start: float,
                 op: Allreduce | Allgather | Barrier | None = None, regrouping: float | None = None) -> None:
        self.arrivals, self.landed, self.end, self.start = arrivals, landed, end, start
        self.op, self.regrouping = op, regrouping  # the collective (None: a bucketed compute's all-reduce)
