"""Carries out one rank's program over a transport (real MPI), timing every operation into its timeline."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from hpcbench.algorithms.api import Program
from hpcbench.algorithms.buckets import ready_fractions
from hpcbench.algorithms.ops import (
    ALL_OPS,
    COLLECTIVES,
    UNTIMED_OPS,
    Accumulate,
    Allgather,
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
from hpcbench.comm.transport import WORKER_MARGIN_S, Shrunk, Transport
from hpcbench.errors import WaitTimeout
from hpcbench.runtime.logs import RunLogs
from hpcbench.runtime.mpi.faults import Injector
from hpcbench.telemetry.progress_line import ProgressLine
from hpcbench.telemetry.timeline import Timeline
from hpcbench.workload.base import Workload
from hpcbench.workload.sharding import BatchStream

PROGRESS_NAP_S = 0.001  # a stretched or modeled compute with all-reduces under way tests them this often


def measures(op: Any) -> bool:
    """An operation that measures the run rather than trains it: an evaluation, an observing read."""
    return type(op) is Evaluate or (type(op) is Read and op.observe)


class MpiDriver:
    """Runs a program to its end over ``comm`` (``MpiComm`` in a run, a loopback in tests).

    Steps: a worker's step k starts with its k-th ``Compute``; rank 0's step counts its ``Record``
    and ``Evaluate`` operations. Time between operations is the program's own math: "apply" on
    rank 0, "update" on workers.
    """

    def __init__(self, comm: Transport, timeline: Timeline, timeout: float, workload: Workload | None = None,
                 stream: BatchStream | None = None, slow_factor: float = 1.0, logs: RunLogs | None = None,
                 progress: ProgressLine | None = None, tick: Callable[[], None] | None = None,
                 slowdown: Callable[[float], float] | None = None,
                 modeled: Callable[[], float] | None = None, fault: Injector | None = None) -> None:
        """``tick``: called before every operation (notices, heartbeats, faults, flushes); ``slowdown``:
        an injected fault's factor on the compute time at a given time; ``modeled``: each compute's
        length drawn from a model (the payload workload) instead of the time the gradient took;
        ``fault``: the rank's injected fault (a modeled compute's sleep wakes when it is due)."""
        self.comm = comm
        self.timeline = timeline
        self.timeout = timeout
        self.workload = workload
        self.modeled = modeled
        self.fault = fault
        self.stream = stream
        self.slow_factor = slow_factor
        self.logs = logs
        self.progress_line = progress
        self.tick = tick
        self.slowdown = slowdown
        self.step = 0
        self.told: set[int] = set()  # the failed ranks a Recv has named to the program
        self.clock = comm.wtime
        # When the rank's last training operation ended, and its processor time then: what follows
        # (rank 0 reading and averaging the workers' kept snapshots) measures, and is not its load.
        self.trained = (math.nan, math.nan)
        self.handlers: dict[type, Callable[[Any], Any]] = {
            op: self.collective if op in COLLECTIVES else getattr(self, handler_name(op)) for op in ALL_OPS}

    def run(self, program: Program) -> float:
        """Run to completion; returns the local time the program ended."""
        own_math = "apply" if self.comm.rank == 0 else "update"
        result = None
        resumed = self.clock()
        while True:
            if self.tick is not None:
                self.tick()
            try:
                op = program.send(result)
            except StopIteration:
                end = self.clock()
                self.timeline.add(self.step, own_math, resumed, end)
                return end
            now = self.clock()
            if type(op) not in UNTIMED_OPS:
                self.timeline.add(self.step, own_math, resumed, now)
                result = self.handlers[type(op)](op)
                resumed = self.clock()
                if not measures(op):
                    self.trained = (resumed, time.process_time())
            else:
                result = self.handlers[type(op)](op)

    def _timed(self, phase: str, nbytes: int, op: Any, fn: Callable[[], Any]) -> Any:
        t0 = self.clock()
        out = fn()
        self.timeline.add(self.step, phase, t0, self.clock(), nbytes, type(op).__name__)
        return out

    def compute(self, op: Compute) -> Gradient:
        """A gradient; with ``op.buckets``, summed over the workers: each bucket's all-reduce starts
        as the backward pass finishes it (from the workload's hooks when the gradient takes the time
        it takes; at the modeled points of a stretched or modeled compute), and the exposed rest of
        the all-reduce after the compute is a "communicate" row."""
        assert self.workload is not None and self.stream is not None
        self.step += 1
        t0 = self.clock()
        indices = self.stream.next()
        x, y = self.workload.batch(indices)
        t1 = self.clock()
        factor = self.slow_factor * (self.slowdown(t1) if self.slowdown is not None else 1.0)
        buckets, started = op.buckets, []
        reduced = np.empty_like(op.params) if buckets else None
        # One bucket is ready when the backward pass ends: nothing to overlap, and hooks cost ~5% of a
        # small model's gradient; several are started from the hooks, unless the compute is stretched.
        hooked = len(buckets) > 1 and self.modeled is None and factor == 1.0

        def start(k: int, vector: np.ndarray) -> None:
            begin, end = buckets[k]
            assert reduced is not None
            started.append(self.comm.start_allreduce(vector[begin:end], reduced[begin:end]))
            self.comm.advance(started)

        grad, loss, correct = (self.workload.gradient(op.params, x, y, buckets, start) if hooked
                               else self.workload.gradient(op.params, x, y, out=op.out))
        # A straggler (injected or modeled) computes factor times as long as it took (or as the model drew).
        length = (self.modeled() if self.modeled is not None else self.clock() - t1) * factor
        if buckets and not hooked:
            for k, share in enumerate(ready_fractions(buckets)):
                self._until(t1 + length * share, started)
                start(k, grad)
        self._until(t1 + length, started)
        t2 = self.clock()
        self.timeline.add(self.step, "data", t0, t1, op="Compute")
        self.timeline.add(self.step, "compute", t1, t2, op="Compute")
        if reduced is None:
            return Gradient(grad, loss, len(indices), correct)
        try:
            self.comm.finish_allreduces(started, self.timeout)
            self.timeline.add(self.step, "communicate", t2, self.clock(), grad.nbytes, "Allreduce")
        except Shrunk as shrunk:  # workers failed during the overlapped all-reduces: the survivors sum the whole again
            self._recovered(t2, shrunk, "Allreduce")
            reduced = self._collective(lambda: self.comm.collective("Allreduce", grad, self.timeout), grad.nbytes)
        return Gradient(reduced, loss, len(indices), correct)

    def _until(self, t: float, started: list[Any]) -> None:
        """Sleep until local time ``t``, letting ``started`` all-reduces advance meanwhile, and waking
        for an injected fault due before then."""
        while (left := t - (now := self.clock())) > 0:
            if started:
                self.comm.advance(started)
            due = self.fault.due() if self.fault is not None else math.inf
            nap = min(left, PROGRESS_NAP_S) if started else left
            time.sleep(min(nap, max(due - now, PROGRESS_NAP_S)))
            if self.fault is not None and self.clock() >= due:
                self.fault.check(self.clock(), self.step)

    def publish(self, op: Publish) -> None:
        self._timed("communicate", op.data.nbytes, op, lambda: self.comm.publish(op.window, op.data, op.offset))

    def read(self, op: Read) -> list | Lost:
        nbytes = op.nbytes if op.nbytes >= 0 else self.comm.window_size(op.window) - op.offset
        return self._timed("communicate", nbytes * len(op.ranks), op,
                           lambda: self.comm.read(op.window, op.ranks, nbytes, op.offset))

    def accumulate(self, op: Accumulate) -> Lost | None:
        nbytes = sum(a.nbytes for _, a in op.parts)
        return self._timed("communicate", nbytes, op, lambda: self.comm.accumulate(op.window, op.rank, op.parts))

    def fetch_add(self, op: FetchAdd) -> int:
        return self._timed("communicate", 8, op, lambda: self.comm.fetch_add(op.window, op.rank, op.value))

    def drain(self, op: Drain) -> np.ndarray:
        return self._timed("communicate", self.comm.window_size(op.window), op,
                           lambda: self.comm.drain(op.window))

    def send(self, op: Send) -> None:
        self._timed("communicate", op.data.nbytes, op, lambda: self.comm.send(op.channel, op.dest, op.data, op.given))

    def recv(self, op: Recv) -> tuple[int, np.ndarray] | Lost | None:
        timeout = self.timeout if op.timeout is None else op.timeout
        if op.timeout is None and op.src == 0 and self.comm.rank != 0:
            timeout += WORKER_MARGIN_S  # a worker stalls: rank 0 names it before the others blame rank 0
        t0 = self.clock()
        got = self.comm.recv(op.channel, op.src, timeout, frozenset(self.told), op.calm_s)
        if got is None and op.timeout is None:
            who = "any rank" if op.src < 0 else f"rank {op.src}"
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for a {op.channel!r} message from {who}")
        if type(got) is Lost:
            self.told.update(got.ranks)
        nbytes = got[1].nbytes if type(got) is tuple else 0
        self.timeline.add(self.step, "wait", t0, self.clock(), nbytes, "Recv")
        return got

    def collective(self, op: Allreduce | Allgather) -> np.ndarray:
        """Any of the workers' collectives with data (``ops.COLLECTIVES``), by its name."""
        name, bf16 = type(op).__name__, getattr(op, "bf16", False)
        return self._collective(lambda: self.comm.collective(name, op.data, self.timeout, bf16), op.data.nbytes,
                                op=name)

    def barrier(self, op: Barrier) -> None:
        self._collective(lambda: self.comm.worker_barrier(self.timeout), 0, "wait", "Barrier")

    def _collective(self, run: Callable[[], Any], nbytes: int, phase: str = "communicate",
                    op: str = "Allreduce") -> Any:
        """A workers' collective, begun again over the survivors for as long as workers fail during it
        (each failed try two "recover" rows: ``_recovered``)."""
        while True:
            t0 = self.clock()
            try:
                out = run()
            except Shrunk as shrunk:
                self._recovered(t0, shrunk, op)
                continue
            self.timeline.add(self.step, phase, t0, self.clock(), nbytes, op)
            return out

    def _recovered(self, t0: float, shrunk: Shrunk, op: str) -> None:
        """A collective begun at ``t0`` that failed with a worker: two "recover" rows, the collective cut
        short (as ``op``) and the survivors' agreement and shrink ("Shrink")."""
        self.timeline.add(self.step, "recover", t0, shrunk.regrouping, 0, op)
        self.timeline.add(self.step, "recover", shrunk.regrouping, self.clock(), 0, "Shrink")

    def evaluate(self, op: Evaluate) -> None:
        assert self.logs is not None
        self.step += 1
        t0 = self.clock()
        self.logs.snapshot(t0 if op.at != op.at else op.at, op)
        self.timeline.add(self.step, "eval", t0, self.clock(), op.params.nbytes, "Evaluate")

    def timestamp(self, op: Timestamp) -> float:
        return self.clock()

    def poll(self, op: Poll) -> list[tuple[int, np.ndarray]]:
        found = []
        while type(got := self.comm.recv(op.channel, op.src, 0.0, frozenset(self.comm.failed()))) is tuple:
            found.append(got)
        return found

    def failures(self, op: Failures) -> frozenset[int]:
        return self.comm.failed() - {0}

    def workers(self, op: Workers) -> tuple[int, ...]:
        return self.comm.members

    def progress(self, op: Progress) -> None:
        if self.progress_line is not None:
            self.progress_line.update(*op)

    def record(self, op: Record) -> None:
        assert self.logs is not None
        self.step += 1
        self.logs.record(self.clock(), op)
