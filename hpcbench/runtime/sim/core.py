"""The simulator's core: what an engine is made of (``Parts``), the event queue and its loop, the
programs resumed with each operation's result, and the state every part of the engine shares (the
ranks' timelines, who has failed and who knows it).

The engine's parts build on ``Core`` (``transfers``, then ``windows``, ``messages`` and
``collectives``; ``engine.Engine`` puts them together): each sets up its own state in its
``__init__``, and an operation's handler is found by name on the engine's class (``ops.handler_name``).
"""
from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpcbench.algorithms.api import Algorithm, Layout
from hpcbench.algorithms.ops import ALL_OPS, COLLECTIVES, Gradient, handler_name
from hpcbench.errors import RuntimeFailure, TimeLimitPassed
from hpcbench.options.sim import SimConfig
from hpcbench.runtime.logs import RunLogs
from hpcbench.runtime.sim.costs import Draws
from hpcbench.telemetry.progress_line import ProgressLine
from hpcbench.telemetry.timeline import OP_CODE, PHASE_CODE, Timeline
from hpcbench.workload.compute import ComputeModel

BLOCKED = object()  # a handler's answer when the program must wait for an event
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


@dataclass(frozen=True)
class Parts:
    """What an engine runs, and the models and draws it costs the run with."""

    algo: Algorithm  # the programs: rank 0's and each worker's
    layout: Layout  # their windows and channels
    cfg: SimConfig  # the virtual cluster
    compute: ComputeModel  # each worker's compute times
    gradient: GradientFn  # (rank, params) → its gradient, now or pending
    logs: RunLogs  # the snapshots and tables rank 0 keeps
    real_size: int  # the real model's parameters: a stand-in vector counts at its size
    progress: ProgressLine | None = None  # the progress line the programs' Progress updates
    jitter: Draws | None = None  # seconds added to each transfer's α
    noise: Draws | None = None  # each transfer's bytes counted this factor (of mean 1)
    deaths: Mapping[int, float] | None = None  # workers that fail, and when (virtual seconds)
    shares: Draws | None = None  # each transfer's weight in its link's share


def scheduler(heap: list) -> Callable[..., None]:
    """``at(t, action, *args)``: run ``action(*args)`` at virtual time ``t``; events at equal times in
    the order they were scheduled."""
    counter = itertools.count()
    push = heapq.heappush

    def at(t: float, action: Callable[..., None], *args: Any) -> None:
        push(heap, (t, next(counter), action, args))

    return at


class Core:
    """The event loop, the programs and the state the engine's parts share."""

    def __init__(self, parts: Parts) -> None:
        algo, cfg = parts.algo, parts.cfg
        self.cfg = cfg
        n = cfg.workers
        self.ranks = range(n + 1)
        self.programs = [algo.server()] + [algo.worker(r) for r in range(1, n + 1)]
        self.timelines = [Timeline(r) for r in self.ranks]
        self.rows = [t.values for t in self.timelines]
        self.steps = [0] * (n + 1)
        self.end = [0.0] * (n + 1)
        self.finished = [False] * (n + 1)
        self.heap: list[tuple[float, int, Callable[..., None], tuple]] = []
        self.at = scheduler(self.heap)
        self.now = 0.0
        self.events = 0
        self.outside_mpi_until = [0.0] * (n + 1)  # computing or applying (holding no lock): with polling
        # progress, no RMA
        self.waiting: dict[int, tuple[str, int, int, float]] = {}  # rank → (channel, src, token, since)
        # Failures: who died and when, who the others know to have failed and since when.
        self.dead = [False] * (n + 1)
        self.died: dict[int, float] = {}
        self.known: dict[int, float] = {}
        self.dying: set[int] = set()  # killed while inside an operation: they fail when it ends
        # Functions, not bound methods, and a scheduler that knows only the heap: nothing the engine
        # holds refers back to it, so it is freed (with its rows) as soon as its run is done with.
        self.handlers: dict[type, Callable[[Any, int, Any], Any]] = {
            op: getattr(type(self), "collective" if op in COLLECTIVES else handler_name(op)) for op in ALL_OPS}

    def die(self, rank: int) -> None:
        raise NotImplementedError  # the engine's (a rank killed inside an operation fails as it resumes)

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

    def updated(self, rank: int, t: float) -> float:
        """The worker's own math after ``t``: → when it is done."""
        resume = t + self.cfg.update_s
        self.outside_mpi_until[rank] = resume
        if resume > t:
            self.row(rank, "update", t, resume)
        return resume
