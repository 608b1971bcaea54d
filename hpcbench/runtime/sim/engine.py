"""Discrete-event execution of every rank's program in virtual time, on one process.

The same algorithm programs as under MPI; each operation costs virtual time from the models:
compute from the compute model, transfers α + bytes/bandwidth through per-rank full-duplex links
(a send and a receive direction, each shared fairly by the transfers in it: links.py), locks on the
windows others add into granted in the order asked, versioned windows read without one, the
all-reduce's cost for collectives, and fixed per-message and per-step costs for rank 0's and the
workers' own math.
Events at equal times run in the order they were scheduled, so a run is deterministic.

Workers fail as scheduled (``deaths``) the way they do under an MPI that lets the others go on: a
failed worker's program stops (at once while the worker computes or waits for a message or a
collective, else when the operation it is in ends, so never inside a lock or a reader's slot), messages to it go
nowhere, and ``detect_s`` later the others
learn of it: a receive waiting for it (or, from any rank, for news of a failure) gets ``Lost``, reads
of and adds into its windows get ``Lost``, and a workers' collective it did not join is agreed on and
begun again by the survivors (three barriers' time), who from then on are the workers' collectives'
members.
"""
from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from hpcbench.algorithms.api import Algorithm, Layout, role_of
from hpcbench.algorithms.buckets import FLOAT_BYTES, overlapped_end, ready_fractions
from hpcbench.algorithms.ops import (
    ALL_OPS,
    ANY,
    WATCHED,
    Accumulate,
    Allreduce,
    Barrier,
    Compute,
    Drain,
    Evaluate,
    Failures,
    FetchAdd,
    Gradient,
    Lost,
    Poll,
    Progress,
    Publish,
    Read,
    Record,
    Recv,
    Send,
    Timestamp,
    Workers,
    handler_name,
)
from hpcbench.bfloat16 import summed
from hpcbench.comm.transport import message_bytes
from hpcbench.errors import RuntimeFailure, TimeLimitPassed, undeclared_add, undeclared_size
from hpcbench.options.sim import SimConfig
from hpcbench.runtime.logs import RunLogs
from hpcbench.runtime.sim.costs import Draws, allreduce_s, barrier_s
from hpcbench.runtime.sim.links import Links, Versions, WindowLock
from hpcbench.telemetry.progress_line import ProgressLine
from hpcbench.telemetry.timeline import OP_CODE, PHASE_CODE, Timeline
from hpcbench.workload.compute import ComputeModel

BLOCKED = object()  # a handler's answer when the program must wait for an event
EAGER_BYTES = 64 * 1024  # smaller messages go out eagerly: they cost time but hold no link
# Events at one instant of virtual time beyond this many (plus this many per rank) are a simulation that
# no longer moves forward: every operation takes time, so a real run has a few per rank at one instant.
STALLED_EVENTS = 1_000_000
DEADLINE_CHECK = 1 << 14  # events between looks at the wall clock


class Pending:
    """A gradient whose computation is deferred until some worker needs its result: by then every
    gradient started before it can be computed in the same batched pass. Programs are suspended
    while their compute is pending, so the parameters they handed over do not change; ``out``: the
    program's buffer for the gradient (``Compute.out``)."""

    __slots__ = ("flush", "value", "out")

    def __init__(self, flush: Callable[[], None]) -> None:
        self.flush = flush
        self.value: Gradient | None = None
        self.out: np.ndarray | None = None

    def result(self) -> Gradient:
        if self.value is None:
            self.flush()
        assert self.value is not None
        if self.out is not None:  # written into the program's buffer once
            self.value, self.out = self.value.into(self.out), None
        return self.value


# (rank, params) → the gradient now, or one that will be computed when needed
GradientFn = Callable[[int, np.ndarray], "Gradient | Pending"]


def scheduler(heap: list) -> Callable[..., None]:
    """``at(t, action, *args)``: run ``action(*args)`` at virtual time ``t``; events at equal times in
    the order they were scheduled."""
    counter = itertools.count()
    push = heapq.heappush

    def at(t: float, action: Callable[..., None], *args: Any) -> None:
        push(heap, (t, next(counter), action, args))

    return at


class Engine:
    def __init__(self, algo: Algorithm, layout: Layout, cfg: SimConfig, compute: ComputeModel,
                 gradient: GradientFn, logs: RunLogs, real_size: int, progress: ProgressLine | None = None,
                 jitter: Draws | None = None, noise: Draws | None = None,
                 deaths: dict[int, float] | None = None, shares: Draws | None = None) -> None:
        """``deaths``: workers that fail, and when (virtual seconds)."""
        self.cfg, self.compute_model, self.gradient, self.logs = cfg, compute, gradient, logs
        self.progress_line, self.jitter, self.noise = progress, jitter, noise
        n = cfg.workers
        self.ranks = range(n + 1)
        self.vector, self.float_bytes = algo.ctx.size, 4 * algo.ctx.size
        self.extra_bytes = 4 * (real_size - algo.ctx.size)  # a stand-in vector counts as the real one
        self.programs = [algo.server()] + [algo.worker(r) for r in range(1, n + 1)]
        self.timelines = [Timeline(r) for r in self.ranks]
        self.rows = [t.values for t in self.timelines]
        self.steps = [0] * (n + 1)
        self.end = [0.0] * (n + 1)
        self.finished = [False] * (n + 1)
        # Full-duplex links, each direction shared by the transfers in it (by their drawn weights);
        # passive-target locks.
        self.heap: list[tuple[float, int, Callable[..., None], tuple]] = []
        self.at = scheduler(self.heap)
        self.links = Links(n + 1, cfg.bandwidth, self.at, None if shares is None else shares.sample)
        self.wire_free: dict[tuple[int, int], float] = {}  # when each pair's latest transfer reached the wire
        self.eager_arrives: dict[tuple[int, int], float] = {}  # when each pair's latest eager message arrives
        self.locks: dict[tuple[str, int], WindowLock] = {}
        self.outside_mpi_until = [0.0] * (n + 1)  # computing or applying (holding no lock): with polling
        # progress, no RMA
        self.polling = cfg.progress == "polling"
        self.windows: dict[tuple[str, int], np.ndarray] = {}
        for name, spec in layout.windows.items():
            owners = (0,) if spec.owner == "server" else tuple(range(1, n + 1))
            for r in owners:
                self.windows[(name, r)] = (spec.initial.copy() if spec.initial is not None
                                           else np.zeros(spec.nbytes, np.uint8))
        self.modes = {name: spec.mode for name, spec in layout.windows.items()}
        # A window others add into is read under an exclusive lock (a Get racing an Accumulate is
        # undefined in MPI): such a read waits for the adds under way, and adds wait for it to end.
        self.accumulated = {name for name, mode in self.modes.items() if mode == "accumulate"}
        self.counters = {name for name, mode in self.modes.items() if mode == "count"}  # fetch-and-adds only
        # The others are versioned: read without a lock, published into the slot no reader holds.
        self.versions = {key: Versions() for key in self.windows if self.modes[key[0]] == "publish"}
        self.channels = layout.channels
        self.inbox: dict[tuple[str, int], deque[tuple[int, np.ndarray]]] = {}
        self.waiting: dict[int, tuple[str, int, int, float]] = {}  # rank → (channel, src, token, since)
        self.collective: list[tuple[int, float, np.ndarray | None]] = []
        self.reducing: list[tuple[int, float, float, Gradient | Pending]] = []  # (rank, start, compute done, result)
        self.reducing_op: Compute | None = None  # the bucketed compute the workers are in
        self.flights: list[Flight] = []  # collectives under way
        self.failing: list[Flight] = []  # collectives a member died in, until the survivors know
        self.collective_bf16 = False  # the all-reduce the workers are in sums bfloat16 bit patterns
        self.tokens = itertools.count()
        self.now = 0.0
        self.events = 0
        # Failures: who died and when, who the others know to have failed and since when, what a
        # receive from any rank has named to each program, whom the workers' collectives span.
        self.dead = [False] * (n + 1)
        self.died: dict[int, float] = {}
        self.known: dict[int, float] = {}
        self.told: list[set[int]] = [set() for _ in self.ranks]
        self.members = tuple(range(1, n + 1))
        self.dying: set[int] = set()  # killed while inside an operation: they fail when it ends
        for rank, t in sorted((deaths or {}).items()):
            self.at(t, self.kill, rank)
        # Functions, not bound methods, and a scheduler that knows only the heap: nothing the engine
        # holds refers back to it, so it is freed (with its rows) as soon as its run is done with.
        self.handlers: dict[type, Callable[[Engine, int, Any], Any]] = {
            op: getattr(Engine, handler_name(op)) for op in ALL_OPS}

    # --- the event loop -----------------------------------------------------------------------
    def run(self) -> None:
        for r in self.ranks:
            self.at(0.0, self.resume, r, None)
        heap, pop = self.heap, heapq.heappop
        events = 0
        stalled = STALLED_EVENTS * (1 + len(self.ranks))
        instant, at_instant = -1.0, 0
        deadline = time.monotonic() + self.cfg.deadline_s
        while heap:
            now, _, action, args = pop(heap)
            if now != instant:
                instant, at_instant = now, 0
            at_instant += 1
            if at_instant > stalled:
                raise RuntimeFailure(f"the simulation stopped moving forward: {at_instant} events at t={now!r} s "
                                     f"without virtual time passing (the last: {getattr(action, '__name__', action)})")
            self.now = now
            events += 1
            if not events % DEADLINE_CHECK and time.monotonic() > deadline:
                self.events = events
                raise TimeLimitPassed(f"the simulation passed sim.deadline_s={self.cfg.deadline_s:g} s of wall-clock "
                                      f"time at t={now:.6g} s of virtual time; raise it with --set "
                                      "sim.deadline_s=SECONDS")
            action(*args)
        self.events = events
        stuck = [r for r in self.ranks if not self.finished[r] and not self.dead[r]]
        if stuck:
            what = ", ".join(f"rank {r} on {self.waiting[r][0]!r}" if r in self.waiting else f"rank {r}"
                             for r in stuck)
            raise RuntimeFailure(f"simulated run deadlocked at t={self.now:.6f} s: {what} still waiting")

    def resume(self, rank: int, value: Any) -> None:
        if self.dead[rank]:  # what it was doing ends with it
            return
        if rank in self.dying:
            self.die(rank)
            return
        step, handlers = self.programs[rank].send, self.handlers
        while True:
            if type(value) is Pending:
                value = value.result()
            try:
                op = step(value)
            except StopIteration:
                self.finished[rank] = True
                self.end[rank] = self.now
                return
            value = handlers[type(op)](self, rank, op)
            if value is BLOCKED:
                return

    def later(self, rank: int, t: float, value: Any) -> object:
        self.at(t, self.resume, rank, value)
        return BLOCKED

    def row(self, rank: int, phase: str, t0: float, t1: float, nbytes: int = 0, op: str = "none") -> None:
        self.rows[rank].extend((self.steps[rank], PHASE_CODE[phase], OP_CODE[op], t0, t1, nbytes))

    # --- failures -----------------------------------------------------------------------------
    def kill(self, rank: int) -> None:
        """``rank`` fails now if it waits for a message or a collective, else when its operation ends."""
        if self.dead[rank] or self.finished[rank]:
            return
        joined = self.collective + self.reducing + [a for f in self.flights for a in f.arrivals]
        if rank in self.waiting or self.now < self.outside_mpi_until[rank] or any(a[0] == rank for a in joined):
            self.die(rank)
        else:
            self.dying.add(rank)

    def die(self, rank: int) -> None:
        self.dying.discard(rank)
        self.dead[rank] = True
        self.died[rank] = self.end[rank] = self.now
        self.programs[rank].close()
        self.waiting.pop(rank, None)
        self.collective = [c for c in self.collective if c[0] != rank]
        self.reducing = [c for c in self.reducing if c[0] != rank]
        self.at(self.now + self.cfg.detect_s, self.notify, rank)

    def notify(self, rank: int) -> None:
        """The others learn that ``rank`` failed: receives waiting for it (or for news) get ``Lost``, and a
        collective it was to join goes on among the survivors."""
        self.known[rank] = self.now
        for r, (_, src, _, since) in list(self.waiting.items()):
            lost = self.lost_for(r, src)
            if lost is not None and self.waiting.get(r, (None, None, None, None))[3] == since:
                del self.waiting[r]
                self.row(r, "wait", since, self.now, 0, "Recv")
                self.resume(r, lost)
        if self.collective:
            self.finish_gather()
        if self.reducing:
            self.finish_reducing()
        if self.failing:
            self.retry()

    def lost_for(self, rank: int, src: int) -> Lost | None:
        """What a receive from ``src`` gets now instead of a message: ``Lost`` if ``src`` is known to
        have failed, or (from any rank) if workers are that this program was not told of."""
        if src != ANY:
            return Lost((src,)) if src in self.known else None
        new = sorted(set(self.known) - self.told[rank])
        if not new:
            return None
        self.told[rank].update(new)
        return Lost(tuple(new))

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
        return self.now + 3 * barrier_s(len(live), self.cfg.alpha_s)

    # --- costs --------------------------------------------------------------------------------
    def modeled(self, nbytes: int) -> int:
        """Bytes on the wire: each parameter-sized vector in a payload counts at the real model's size."""
        return nbytes + (nbytes // self.float_bytes) * self.extra_bytes

    def wire(self, data: np.ndarray) -> int:
        """An all-reduced vector's bytes on the wire, in its own type: one of the model's size (a
        float16 or bfloat16 copy too) counts at the real model's size."""
        return data.nbytes + (data.size // self.vector) * (self.extra_bytes // 4) * data.itemsize

    def transfer(self, src: int, dst: int, nbytes: int, t: float, done: Callable[[], None], target: int = -1,
                 atomic: bool = False) -> None:
        """``done()`` when ``nbytes`` sent from src at ``t`` have reached dst, after every transfer from
        src to dst asked for before it (one connection carries them in order, whatever their delays).
        ``atomic``: an 8-byte atomic, which the network answers on its own, outside that order and
        without the jitter (fitted on transfers of data)."""
        if src == dst:
            self.at(t, done)
            return
        if atomic:
            self.at(self.begins(t, target, jitter=False), self.carry, src, dst, nbytes, done, False)
            return
        pair = (src, dst)
        begin = max(self.begins(t, target), self.wire_free.get(pair, 0.0))
        self.wire_free[pair] = begin
        self.at(begin, self.carry, src, dst, nbytes, done)

    def begins(self, t: float, target: int = -1, jitter: bool = True) -> float:
        """When a transfer asked for at ``t`` reaches the wire: after α, any jitter and, for a one-sided
        ``target`` under polling progress, once the target is inside MPI."""
        if self.polling and target >= 0:
            t = max(t, self.outside_mpi_until[target])
        if jitter and self.jitter is not None:
            t += self.jitter.sample()
        return t + self.cfg.alpha_s

    def carry(self, src: int, dst: int, nbytes: int, done: Callable[[], None], ordered: bool = True) -> None:
        """Move ``nbytes`` from src to dst from now: small messages eagerly, larger ones over the links;
        with link noise, each transfer's bytes count a random factor of mean 1."""
        if src == dst:
            self.at(self.now, done)
            return
        size = self.modeled(nbytes)
        wire = size * self.noise.sample() if self.noise is not None else size
        pair = (src, dst)
        if size < EAGER_BYTES and not ordered:
            self.at(self.now + wire / self.cfg.bandwidth, done)
        elif size < EAGER_BYTES and pair not in self.links.pairs:
            # not behind a larger one still on the links, nor ahead of an earlier small one
            arrives = max(self.now + wire / self.cfg.bandwidth, self.eager_arrives.get(pair, 0.0))
            self.eager_arrives[pair] = arrives
            self.at(arrives, done)
        else:
            self.links.start(src, dst, wire, partial(self.behind_eager, pair, done), self.now)

    def behind_eager(self, pair: tuple[int, int], done: Callable[[], None]) -> None:
        """A transfer off the links arrives no earlier than an eager message sent before it."""
        arrives = self.eager_arrives.get(pair, -1.0)
        if arrives >= self.now:  # at the same instant too: after it (events at one time run in order)
            self.at(arrives, done)
        else:
            done()

    def lock(self, key: tuple[str, int], exclusive: bool, granted: Callable[[], None]) -> bool:
        """Ask for a window's lock: True when held now, else ``granted()`` runs once it is."""
        lock = self.locks.get(key)
        if lock is None:
            lock = self.locks[key] = WindowLock()
        return lock.acquire(exclusive, granted)

    def unlock(self, key: tuple[str, int], exclusive: bool) -> None:
        for granted in self.locks[key].release(exclusive):
            self.at(self.now, granted)

    # --- operations ---------------------------------------------------------------------------
    def compute(self, rank: int, op: Compute) -> object:
        self.steps[rank] += 1
        t = self.now
        result = self.gradient(rank, op.params)
        if isinstance(result, Pending):
            result.out = op.out
        else:
            result = result.into(op.out)
        done = t + self.compute_model.sample(rank)
        if op.buckets:
            self.reducing.append((rank, t, done, result))
            self.reducing_op = op
            return self.finish_reducing()
        self.row(rank, "compute", t, done, 0, "Compute")
        return self.later(rank, self.updated(rank, done), result)

    def updated(self, rank: int, t: float) -> float:
        """The worker's own math after ``t``: → when it is done."""
        resume = t + self.cfg.update_s
        self.outside_mpi_until[rank] = resume
        if resume > t:
            self.row(rank, "update", t, resume)
        return resume

    def finish_reducing(self) -> object:
        """Every live worker has started a bucketed compute (and any that failed is known to have):
        bucket k's all-reduce starts once the last worker's backward pass has finished it and bucket
        k−1's has ended; each worker goes on when its compute and the last all-reduce are done (the
        exposed part is its "communicate" row). When workers failed before, the survivors regroup
        first and all-reduce the whole gradient once their computes are done."""
        before = len(self.members)
        begin = self.regrouped(len(self.reducing))
        if begin is None:
            return BLOCKED
        op = self.reducing_op
        assert op is not None
        arrivals, self.reducing = sorted(self.reducing, key=lambda a: a[0]), []
        last_done = max(done for _, _, done, _ in arrivals)
        if len(self.members) < before:
            start = max(begin, last_done)
            end = start + self.whole_allreduce_s(op)
            self.fly(Flight(arrivals, end, end, start, recovered=True))
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
            if flight.recovered:
                self.row(rank, "recover", done, flight.start, 0, "Allreduce")
            if flight.end > max(done, flight.start):
                self.row(rank, "communicate", max(done, flight.start), flight.end, self.modeled(result.grad.nbytes),
                         "Allreduce")
            self.later(rank, self.updated(rank, max(done, flight.end)), result._replace(grad=total.copy()))

    def gathered(self, flight: Flight) -> None:
        data = flight.arrivals[0][2]
        result = None if data is None else summed([part for _, _, part in flight.arrivals], flight.bf16)
        phase, name = ("wait", "Barrier") if data is None else ("communicate", "Allreduce")
        for r, t, part in flight.arrivals:
            if flight.recovered:
                self.row(r, "recover", t, flight.start, 0, name)
                t = flight.start
            self.row(r, phase, t, flight.end, 0 if part is None else self.wire(part), name)
            self.later(r, flight.end, None if result is None else result.copy())

    def retry(self) -> None:
        """Collectives that failed with members that died while they were under way: once the survivors
        know, they regroup and begin again among themselves."""
        for flight in list(self.failing):
            if any(self.dead[a[0]] and a[0] not in self.known for a in flight.arrivals):
                continue
            self.failing.remove(flight)
            survivors = [a for a in flight.arrivals if not self.dead[a[0]]]
            self.members = tuple(r for r in self.members if not self.dead[r])
            start = max(self.now, flight.landed) + 3 * barrier_s(len(self.members), self.cfg.alpha_s)
            if len(survivors[0]) == 4:
                op = self.reducing_op
                assert op is not None
                end = start + self.whole_allreduce_s(op)
            else:
                data = survivors[0][2]
                end = start + (barrier_s(len(self.members), self.cfg.alpha_s) if data is None else allreduce_s(
                    self.wire(data), len(self.members), self.cfg.alpha_s, self.cfg.bandwidth, self.cfg.allreduce))
            self.fly(Flight(survivors, end, end, start, flight.bf16, recovered=True))

    # Local operations and posting a send are instant in virtual time and leave no timeline row
    # (the bytes of a message are on its receiver's row).
    def publish(self, rank: int, op: Publish) -> object:
        self.not_counter(op.window, "a publish into")
        key, since = (op.window, rank), self.now
        data = op.data.view(np.uint8)
        if op.window not in self.accumulated:  # versioned: waits only for readers of the slot it writes
            whole = op.offset == 0 and data.nbytes == self.windows[key].nbytes
            if self.versions[key].publish(whole, lambda: self.written(rank, key, data.copy(), op.offset, since)):
                self.windows[key][op.offset:op.offset + data.nbytes] = data
                return None
            return BLOCKED
        if self.lock(key, True, lambda: self.write_window(rank, key, data.copy(), op.offset, since)):
            self.windows[key][op.offset:op.offset + data.nbytes] = data
            self.unlock(key, True)
            return None
        return BLOCKED

    def write_window(self, rank: int, key: tuple[str, int], data: np.ndarray, offset: int, since: float) -> None:
        """A publish that waited for its exclusive lock: write, let go, and let the owner go on."""
        self.written(rank, key, data, offset, since)
        self.unlock(key, True)

    def written(self, rank: int, key: tuple[str, int], data: np.ndarray, offset: int, since: float) -> None:
        """A publish that waited (for its lock, or for the readers of its slot): write, and let the owner go on."""
        self.row(rank, "wait", since, self.now, 0, "Publish")
        self.windows[key][offset:offset + data.nbytes] = data
        self.resume(rank, None)

    def drain(self, rank: int, op: Drain) -> object:
        self.addable(op.window, "a drain of")
        key, since = (op.window, rank), self.now
        if self.lock(key, True, lambda: self.drained(rank, key, since)):
            out = self.take(key)
            self.unlock(key, True)
            return out
        return BLOCKED

    def drained(self, rank: int, key: tuple[str, int], since: float) -> None:
        self.row(rank, "wait", since, self.now, 0, "Drain")
        out = self.take(key)
        self.unlock(key, True)
        self.resume(rank, out)

    def take(self, key: tuple[str, int]) -> np.ndarray:
        window = self.windows[key]
        out = window.copy()
        window[:] = 0
        return out

    def read(self, rank: int, op: Read) -> object:
        """Each target's window in turn, asked for once the request is there: a copy taken then, which
        reaches the reader when the transfer ends. A window others add into is read under its
        exclusive lock, held until then; a versioned one with the reader counted on the newest slot
        until then (the owner's publish into that slot waits for it)."""
        self.not_counter(op.window, "a read of")
        gone = tuple(r for r in op.ranks if r in self.known)
        if gone:
            return Lost(gone)
        sizes = [(self.windows[(op.window, target)].nbytes - op.offset if op.nbytes < 0 else op.nbytes)
                 for target in op.ranks]
        if op.observe:  # costs nothing
            bufs = [self.windows[(op.window, target)][op.offset:op.offset + n].copy()
                    for target, n in zip(op.ranks, sizes)]
            self.row(rank, "communicate", self.now, self.now, sum(self.modeled(b.nbytes) for b in bufs), "Read")
            return bufs
        _Reading(self, rank, op, sizes).next_target()
        return BLOCKED

    def addable(self, window: str, what: str = "an add into") -> None:
        """An add or drain only of a window its layout declares "accumulate" (as the MPI transport requires)."""
        if window not in self.accumulated:
            raise undeclared_add(window, what, self.modes[window])

    def not_counter(self, window: str, what: str) -> None:
        if window in self.counters:
            raise undeclared_add(window, what, "count")

    def accumulate(self, rank: int, op: Accumulate) -> object:
        self.addable(op.window)
        if op.rank in self.known:
            return Lost((op.rank,))
        parts = tuple((offset, array.copy()) for offset, array in op.parts)
        nbytes = sum(a.nbytes for _, a in parts)
        key, start = (op.window, op.rank), self.now
        window = self.windows[key]

        def landed() -> None:
            for offset, array in parts:
                window[offset:offset + array.nbytes].view(array.dtype)[:] += array
            self.unlock(key, False)
            self.row(rank, "communicate", start, self.now, self.modeled(nbytes), "Accumulate")
            self.resume(rank, None)

        def granted() -> None:
            self.carry(rank, op.rank, nbytes, landed)

        def asked() -> None:
            if self.lock(key, False, granted):  # shared with other adds; not while an exclusive read is under way
                granted()

        self.at(self.now if rank == op.rank else self.begins(self.now, op.rank), asked)
        return BLOCKED

    def fetch_add(self, rank: int, op: FetchAdd) -> object:
        """The add happens when the request reaches the target; the old value travels back."""
        if op.window not in self.counters:
            self.addable(op.window)
        counter = self.windows[(op.window, op.rank)][:8].view(np.int64)
        start = self.now

        def add() -> None:
            before = int(counter[0])
            counter[0] += op.value

            def back() -> None:
                self.row(rank, "communicate", start, self.now, 16, "FetchAdd")
                self.resume(rank, before)

            self.transfer(op.rank, rank, 8, self.now, back, atomic=True)

        # The jitter is fitted on transfers of data (calibrate's blocking reads, adds and messages), not
        # on an 8-byte atomic, which the network answers in microseconds.
        self.transfer(rank, op.rank, 8, self.now, add, op.rank, atomic=True)
        return BLOCKED

    def send(self, rank: int, op: Send) -> None:
        data = message_bytes(op.data, op.given)
        spec = self.channels[op.channel]
        if data.nbytes != spec.nbytes:
            raise undeclared_size(op.channel, data.nbytes, spec.nbytes)
        if (role_of(rank), role_of(op.dest)) != (spec.sender, spec.to):
            raise RuntimeFailure(f"a {op.channel!r} message from rank {rank} to rank {op.dest}, where its layout "
                                 f"declares it from the {spec.sender} to the {spec.to}")
        self.transfer(rank, op.dest, data.nbytes, self.now, partial(self.deliver, op.channel, op.dest, rank, data))

    def deliver(self, channel: str, dest: int, src: int, data: np.ndarray) -> None:
        if self.dead[dest]:
            return  # a message to a failed rank goes nowhere
        waiting = self.waiting.get(dest)
        if waiting is not None and waiting[0] == channel and waiting[1] in (ANY, src):
            del self.waiting[dest]
            self.row(dest, "wait", waiting[3], self.now, self.modeled(data.nbytes), "Recv")
            self.received(dest, src, data, inline=False)
        else:
            self.inbox.setdefault((channel, dest), deque()).append((src, data))

    def received(self, rank: int, src: int, data: np.ndarray, inline: bool) -> Any:
        """Hand a message to its program; rank 0 then spends apply_s on it (its queue is FIFO)."""
        value = (src, data)
        if rank == 0 and self.cfg.apply_s > 0:
            self.outside_mpi_until[0] = self.now + self.cfg.apply_s
            self.row(0, "apply", self.now, self.now + self.cfg.apply_s)
            return self.later(0, self.now + self.cfg.apply_s, value)
        if inline:
            return value
        self.resume(rank, value)
        return None

    def recv(self, rank: int, op: Recv) -> object:
        queue = self.inbox.get((op.channel, rank))
        if queue:
            if op.src == ANY:
                src, data = queue.popleft()  # the server's queue is long and FIFO: O(1) here
            else:
                found = next((i for i, (s, _) in enumerate(queue) if s == op.src), None)
                if found is not None:
                    src, data = queue[found]
                    del queue[found]
            if op.src == ANY or found is not None:
                return self.received(rank, src, data, inline=True)
        lost = self.lost_for(rank, op.src)
        if lost is not None:
            return lost
        if op.timeout == 0:
            return None
        token = next(self.tokens)
        self.waiting[rank] = (op.channel, op.src, token, self.now)
        if op.timeout is not None and op.timeout != WATCHED:
            self.at(self.now + op.timeout, self.expire, rank, token)
        return BLOCKED

    def expire(self, rank: int, token: int) -> None:
        waiting = self.waiting.get(rank)
        if waiting is not None and waiting[2] == token:
            del self.waiting[rank]
            self.row(rank, "wait", waiting[3], self.now, 0, "Recv")
            self.resume(rank, None)

    def allreduce(self, rank: int, op: Allreduce) -> object:
        return self.gather(rank, op.data, op.bf16)

    def barrier(self, rank: int, op: Barrier) -> object:
        return self.gather(rank, None)

    def gather(self, rank: int, data: np.ndarray | None, bf16: bool = False) -> object:
        """Workers' collectives: all arrive, then all leave together after the collective's cost."""
        self.collective.append((rank, self.now, data))
        self.collective_bf16 = bf16
        return self.finish_gather()

    def finish_gather(self) -> object:
        """Every live worker has joined the collective (and any that failed is known to have): all leave
        together after its cost, among the survivors, after they have regrouped, when workers failed
        (each one's "recover" row)."""
        before = len(self.members)
        begin = self.regrouped(len(self.collective))
        if begin is None:
            return BLOCKED
        arrivals, self.collective = sorted(self.collective, key=lambda c: c[0]), []
        p, data = len(self.members), arrivals[0][2]
        cost = barrier_s(p, self.cfg.alpha_s) if data is None else allreduce_s(
            self.wire(data), p, self.cfg.alpha_s, self.cfg.bandwidth, self.cfg.allreduce)
        start = max([begin] + [t for _, t, _ in arrivals])
        self.fly(Flight(arrivals, start + cost, start + cost, start, self.collective_bf16, recovered=p < before))
        return BLOCKED

    def evaluate(self, rank: int, op: Evaluate) -> None:
        self.steps[rank] += 1
        self.logs.snapshot(self.now if op.at != op.at else op.at, op)
        self.row(rank, "eval", self.now, self.now, op.params.nbytes, "Evaluate")

    def timestamp(self, rank: int, op: Timestamp) -> float:
        return self.now

    def poll(self, rank: int, op: Poll) -> list[tuple[int, np.ndarray]]:
        queue = self.inbox.get((op.channel, rank))
        if not queue:
            return []
        found = [(s, d) for s, d in queue if op.src in (ANY, s)]
        self.inbox[(op.channel, rank)] = deque((s, d) for s, d in queue if op.src not in (ANY, s))
        return found

    def progress(self, rank: int, op: Progress) -> None:
        if self.progress_line is not None:
            self.progress_line.update(*op)

    def failures(self, rank: int, op: Failures) -> frozenset[int]:
        return frozenset(self.known)

    def workers(self, rank: int, op: Workers) -> tuple[int, ...]:
        return self.members

    def record(self, rank: int, op: Record) -> None:
        self.steps[rank] += 1
        self.logs.record(self.now, op)


class _Reading:
    """One Read under way: each target's window in turn (an object rather than nested closures, which
    would refer to themselves and leave a reference cycle per read for the collector)."""

    __slots__ = ("engine", "rank", "op", "sizes", "start", "bufs", "locked")

    def __init__(self, engine: Engine, rank: int, op: Read, sizes: list[int]) -> None:
        self.engine, self.rank, self.op, self.sizes = engine, rank, op, sizes
        self.start = engine.now
        self.bufs: list[np.ndarray] = []
        self.locked = op.window in engine.accumulated  # a window others add into: after the adds under way

    def next_target(self) -> None:
        engine, op, bufs = self.engine, self.op, self.bufs
        if len(bufs) == len(op.ranks):
            engine.row(self.rank, "communicate", self.start, engine.now, sum(engine.modeled(b.nbytes) for b in bufs),
                       "Read")
            engine.resume(self.rank, bufs)
            return
        target = op.ranks[len(bufs)]
        engine.at(engine.now if target == self.rank else engine.begins(engine.now, target), self.asked)

    def key(self) -> tuple[str, int]:
        return (self.op.window, self.op.ranks[len(self.bufs)])

    def asked(self) -> None:
        if not self.locked or self.engine.lock(self.key(), True, self.granted):
            self.granted()

    def granted(self) -> None:
        engine, op, key = self.engine, self.op, self.key()
        slot = -1 if self.locked else engine.versions[key].hold()
        nbytes = self.sizes[len(self.bufs)]
        copy = engine.windows[key][op.offset:op.offset + nbytes].copy()
        engine.carry(key[1], self.rank, nbytes, partial(self.arrived, copy, slot))

    def arrived(self, copy: np.ndarray, slot: int) -> None:
        key = self.key()
        self.bufs.append(copy)
        if self.locked:
            self.engine.unlock(key, True)
        else:
            publish = self.engine.versions[key].release(slot)
            if publish is not None:
                publish()
        self.next_target()


class Flight:
    """A workers' collective under way: who joined it (``arrivals``: (rank, joined, data) for an
    all-reduce or barrier, (rank, joined, compute done, gradient) for a bucketed compute), when it lands
    (its computes and its all-reduce all done), when its all-reduce began and ended, and whether the
    survivors regrouped before it (their "recover" rows)."""

    __slots__ = ("arrivals", "landed", "end", "start", "bf16", "recovered")

    def __init__(self, arrivals: list, landed: float, end: float, start: float, bf16: bool = False,
                 recovered: bool = False) -> None:
        self.arrivals, self.landed, self.end, self.start = arrivals, landed, end, start
        self.bf16, self.recovered = bf16, recovered
