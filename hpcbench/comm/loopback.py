"""An in-process transport: every rank a thread, windows and channels in shared memory.

It gives the MPI session and driver (set-up agreement, handlers, timing rows, timeouts, heartbeats,
failure notices, the final gather) a test bed without MPI: one ``Loopback`` holds the shared state,
``endpoint(rank)`` is what that rank's session and driver talk to; every rank runs in its own thread.
The semantics follow ``comm/mpi.py``: publishes and drains are atomic per window, accumulates and
fetch-adds are atomic, messages on a channel arrive in order per sender, waits have deadlines and
tick (heartbeats, notices, ``on_wait``) while they wait, rank 0 names a rank missing from a
collective, and ``abort`` ends every rank's waits. One host ("loopback"), one clock.
"""
from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from hpcbench.comm.collectives import COMBINE, spoken
from hpcbench.comm.transport import Cluster, message_bytes
from hpcbench.errors import PeerFailure, WaitTimeout, stopped_answering, undeclared_add, undeclared_size

T = TypeVar("T")
HOST = "loopback"
NAP_S = 0.01  # the longest a waiting rank sleeps between looks (and ticks)
MISSING = object()  # a rank's place in a collective it has not reached yet


class Loopback:
    """The shared state of ``size`` ranks (rank 0 plus ``size - 1`` workers)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.lock = threading.Condition()
        self.windows: dict[tuple[str, int], np.ndarray] = {}
        self.window_sizes: dict[str, int] = {}
        self.modes: dict[str, str] = {}  # each window's declared mode
        self.message_sizes: dict[str, int] = {}
        self.queues: dict[tuple[str, int], deque[tuple[int, np.ndarray]]] = {}
        self.reduce_barrier = threading.Barrier(size - 1) if size > 1 else None
        self.reduce_parts: dict[int, np.ndarray] = {}
        self.reduce_sum: np.ndarray | None = None
        self.start = time.monotonic()
        self.collectives: dict[int, list[Any]] = {}  # the k-th exchange's values, by rank
        self.heard: dict[int, float] = {}  # when each rank last ticked: its heartbeat
        self.stalls: list[tuple[int, float, float]] = []  # (worker, its clock when it fell silent, seconds)
        self.notices: deque[tuple[int, str, str]] = deque()  # (worker, status, error line) for rank 0
        self.ended_by: int | None = None  # the rank that ended every rank (``abort``)

    def endpoint(self, rank: int) -> LoopbackEndpoint:
        return LoopbackEndpoint(self, rank)


class LoopbackEndpoint:
    """One rank's view of a ``Loopback``; implements ``hpcbench.comm.transport.Transport``."""

    def __init__(self, hub: Loopback, rank: int) -> None:
        self.hub, self.rank, self.size = hub, rank, hub.size
        self.members = tuple(range(1, hub.size)) if rank else ()  # no rank fails here
        self.survives_failures = False
        self.host, self.hosts = HOST, [HOST] * hub.size
        self.local_rank, self.local_size = rank, hub.size
        self.on_wait: Callable[[], None] | None = None
        self.collectives = 0  # how many exchanges this rank has entered
        self.watched: dict[int, float] = {}  # peers whose heartbeats this rank listens for → since when
        self.beat_deadline = 0.0
        self.stall_s = math.inf

    def wtime(self) -> float:
        return time.monotonic() - self.hub.start

    # --- placement ----------------------------------------------------------------------------
    def node_local(self) -> tuple[int, int]:
        return self.local_rank, self.local_size

    def oversubscribed(self, ranks_per_core: float) -> None:
        pass  # threads: the waits below sleep anyway

    def name(self, rank: int) -> str:
        return f"rank {rank} on {self.hosts[rank]}"

    # --- health -------------------------------------------------------------------------------
    def tick(self) -> None:
        """A heartbeat; an ended run ends here; rank 0 raises a worker's failure notice; ``on_wait``."""
        hub = self.hub
        now = time.monotonic()
        last = hub.heard.get(self.rank)
        if self.rank and self.watched and last is not None and now - last > self.stall_s:
            with hub.lock:  # a worker silent past the threshold, heard again (as a heartbeat's stamp tells it)
                hub.stalls.append((self.rank, last - hub.start, now - last))
        hub.heard[self.rank] = now
        if hub.ended_by is not None and hub.ended_by != self.rank:
            raise PeerFailure(f"rank {hub.ended_by} ended every rank", "aborted")
        if self.rank == 0 and hub.notices:
            worker, status, error = hub.notices.popleft()
            raise PeerFailure(f"{self.name(worker)}: {error}", status)
        quiet = self.silent(self.beat_deadline) if self.watched else []
        if quiet:
            raise stopped_answering(quiet, self.name)
        if self.on_wait is not None:
            self.on_wait()

    def start_heartbeats(self, every: float, deadline: float, stall: float = math.inf) -> None:
        now = time.monotonic()
        self.watched = {peer: now for peer in (range(1, self.size) if self.rank == 0 else (0,))}
        self.beat_deadline, self.stall_s = deadline, stall

    def stall_log(self) -> list[tuple[int, float, float]]:
        return list(self.hub.stalls)

    def silent(self, longer_than: float) -> list[tuple[int, float]]:
        now = time.monotonic()
        quiet = [(r, now - max(since, self.hub.heard.get(r, since))) for r, since in self.watched.items()]
        return sorted([(r, s) for r, s in quiet if s > longer_than], key=lambda q: -q[1])

    def tell_failure(self, status: str, error: str, grace: float) -> None:
        with self.hub.lock:
            self.hub.notices.append((self.rank, status, error))
            self.hub.lock.notify_all()
        deadline = time.monotonic() + grace
        while self.hub.ended_by is None and time.monotonic() < deadline:
            time.sleep(NAP_S)

    def abort(self, code: int) -> None:
        with self.hub.lock:
            if self.hub.ended_by is None:
                self.hub.ended_by = self.rank
            self.hub.lock.notify_all()
        if self.hub.reduce_barrier is not None:
            self.hub.reduce_barrier.abort()

    def _wait(self, test: Callable[[], T | None], timeout: float, what: str, peer: int | None = None) -> T:
        """Look with ``test`` (under the hub's lock) until it gives a value, ticking between looks
        (outside the lock); WaitTimeout after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            with self.hub.lock:
                got = test()
                if got is None and time.monotonic() < deadline:
                    self.hub.lock.wait(min(NAP_S, max(0.0, deadline - time.monotonic())))
                    got = test()
            if got is not None:
                return got
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what}", peer)
            self.tick()

    # --- collectives of the session -----------------------------------------------------------
    def exchange(self, obj: object, timeout: float, what: str) -> list[Any]:
        """Every rank's ``obj`` in rank order; a rank missing after ``timeout`` is named."""
        hub, k = self.hub, self.collectives
        self.collectives += 1
        with hub.lock:
            values = hub.collectives.setdefault(k, [MISSING] * self.size)
            values[self.rank] = obj
            hub.lock.notify_all()

        def everyone() -> list[Any] | None:
            return None if any(v is MISSING for v in values) else list(values)

        try:
            return self._wait(everyone, timeout, what)
        except WaitTimeout:
            missing = next(r for r, v in enumerate(values) if v is MISSING)
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {self.name(missing)} to take part in "
                              f"{what}", missing) from None

    def collect(self, obj: object, timeout: float, what: str) -> list[Any] | None:
        gathered = self.exchange(obj, timeout, what)
        return gathered if self.rank == 0 else None

    def world_barrier(self, timeout: float, what: str = "a barrier") -> None:
        self.exchange(None, timeout, what)

    def clock_offsets(self, timeout: float) -> np.ndarray | None:
        self.exchange(None, timeout, "the clock synchronisation")
        return np.zeros(self.size) if self.rank == 0 else None  # one clock

    def close(self, timeout: float) -> None:
        self.world_barrier(math.inf if self.watched else timeout, "the end of the run")
        self.watched = {}

    def finalize(self, code: int = 0) -> None:
        self.watched = {}

    def open_window(self, name: str, nbytes: int, owned: bool, mode: str = "publish") -> None:
        """As ``MpiComm.open_window``: every rank calls it; owners get ``nbytes`` of zeros."""
        with self.hub.lock:
            self.hub.window_sizes[name] = nbytes
            self.hub.modes[name] = mode
            if owned:
                self.hub.windows[(name, self.rank)] = np.zeros(nbytes, np.uint8)

    def open_channel(self, name: str, nbytes: int, sources: tuple[int, ...]) -> None:
        """As ``MpiComm.open_channel``: this rank's queue for ``name`` (any sender; messages of ``nbytes``)."""
        with self.hub.lock:
            self.hub.queues[(name, self.rank)] = deque()
            self.hub.message_sizes[name] = nbytes

    def window_size(self, window: str) -> int:
        return self.hub.window_sizes[window]

    def publish(self, window: str, data: np.ndarray, offset: int = 0) -> None:
        self._not_counter(window, "a publish into")
        with self.hub.lock:
            self.hub.windows[(window, self.rank)][offset:offset + data.nbytes] = data.view(np.uint8).ravel()

    def read(self, window: str, ranks: tuple[int, ...], nbytes: int, offset: int = 0) -> list[np.ndarray]:
        self._not_counter(window, "a read of")
        with self.hub.lock:
            return [self.hub.windows[(window, r)][offset:offset + nbytes].copy() for r in ranks]

    def accumulate(self, window: str, rank: int, parts: tuple[tuple[int, np.ndarray], ...]) -> None:
        self._addable(window)
        with self.hub.lock:
            target = self.hub.windows[(window, rank)]
            for offset, array in parts:
                view = target[offset:offset + array.nbytes].view(array.dtype)
                view += array

    def fetch_add(self, window: str, rank: int, value: int) -> int:
        if self.hub.modes[window] != "count":
            self._addable(window)
        with self.hub.lock:
            counter = self.hub.windows[(window, rank)][:8].view(np.int64)
            before = int(counter[0])
            counter[0] += value
            return before

    def _addable(self, window: str, what: str = "an add into") -> None:
        if self.hub.modes[window] != "accumulate":
            raise undeclared_add(window, what, self.hub.modes[window])

    def _not_counter(self, window: str, what: str) -> None:
        if self.hub.modes[window] == "count":
            raise undeclared_add(window, what, "count")

    def drain(self, window: str) -> np.ndarray:
        self._addable(window, "a drain of")
        with self.hub.lock:
            own = self.hub.windows[(window, self.rank)]
            out = own.copy()
            own[:] = 0
            return out

    def send(self, channel: str, dest: int, data: np.ndarray, given: bool = False) -> None:
        if data.nbytes != self.hub.message_sizes[channel]:
            raise undeclared_size(channel, data.nbytes, self.hub.message_sizes[channel])
        sent = message_bytes(data, given)
        with self.hub.lock:
            self.hub.queues[(channel, dest)].append((self.rank, sent))
            self.hub.lock.notify_all()

    def failed(self) -> frozenset[int]:
        return frozenset()

    def failure_log(self) -> dict[int, tuple[float, str]]:
        return {}

    def recv(self, channel: str, src: int, timeout: float, told: frozenset[int] = frozenset(),
             calm: float = 0.0) -> tuple[int, np.ndarray] | None:
        queue = self.hub.queues[(channel, self.rank)]

        def take() -> tuple[int, np.ndarray] | None:
            for i, (sender, data) in enumerate(queue):
                if src < 0 or sender == src:
                    del queue[i]
                    return sender, data
            return None

        try:
            return self._wait(take, timeout, f"a {channel!r} message")
        except WaitTimeout:
            return None

    def collective(self, name: str, data: np.ndarray, timeout: float, bf16: bool = False) -> np.ndarray:
        hub, what = self.hub, f"the workers' {spoken(name)}"
        assert hub.reduce_barrier is not None and self.rank > 0, f"{name} is among the workers"
        with hub.lock:
            hub.reduce_parts[self.rank] = data.copy()
        self._barrier(hub.reduce_barrier, timeout, what)
        if self.rank == 1:  # one worker combines, in rank order, as a deterministic reduction would
            hub.reduce_sum = COMBINE[name]([hub.reduce_parts[r] for r in sorted(hub.reduce_parts)], bf16)
        self._barrier(hub.reduce_barrier, timeout, what)
        assert hub.reduce_sum is not None
        out = hub.reduce_sum.copy()
        self._barrier(hub.reduce_barrier, timeout, what)
        return out

    def start_allreduce(self, data: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return data, out  # carried out, in order, when finished

    def advance(self, started: list[tuple[np.ndarray, np.ndarray]]) -> None:
        pass

    def finish_allreduces(self, started: list[tuple[np.ndarray, np.ndarray]], timeout: float) -> None:
        for data, out in started:
            out[:] = self.collective("Allreduce", data, timeout)

    def worker_barrier(self, timeout: float) -> None:
        assert self.hub.reduce_barrier is not None and self.rank > 0, "the barrier is among the workers"
        self._barrier(self.hub.reduce_barrier, timeout, "a barrier")

    @staticmethod
    def _barrier(barrier: threading.Barrier, timeout: float, what: str) -> None:
        try:
            barrier.wait(timeout)
        except threading.BrokenBarrierError:
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what}") from None


def _a_cluster(end: LoopbackEndpoint) -> Cluster:
    return end  # mypy checks here that an endpoint is everything a session needs
