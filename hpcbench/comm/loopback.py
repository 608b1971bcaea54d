"""An in-process transport: every rank a thread, windows and channels in shared memory.

It gives the MPI driver's logic (handlers, timing rows, timeouts) a test bed without MPI: one
``Loopback`` holds the shared state, ``endpoint(rank)`` is what that rank's driver talks to (open
every rank's windows and channels before any rank runs). The
semantics follow ``comm/mpi.py``: publishes and drains are atomic per window, accumulates and
fetch-adds are atomic, messages on a channel arrive in order per sender, waits have deadlines.
"""
from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np

from hpcbench.errors import WaitTimeout, undeclared_add, undeclared_size


class Loopback:
    """The shared state of ``size`` ranks (rank 0 plus ``size - 1`` workers)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.lock = threading.Condition()
        self.windows: dict[tuple[str, int], np.ndarray] = {}
        self.window_sizes: dict[str, int] = {}
        self.accumulated: set[str] = set()
        self.message_sizes: dict[str, int] = {}
        self.queues: dict[tuple[str, int], deque[tuple[int, np.ndarray]]] = {}
        self.reduce_barrier = threading.Barrier(size - 1) if size > 1 else None
        self.reduce_parts: dict[int, np.ndarray] = {}
        self.reduce_sum: np.ndarray | None = None
        self.start = time.monotonic()

    def endpoint(self, rank: int) -> LoopbackEndpoint:
        return LoopbackEndpoint(self, rank)


class LoopbackEndpoint:
    """One rank's view of a ``Loopback``; implements ``hpcbench.comm.transport.Transport``."""

    def __init__(self, hub: Loopback, rank: int) -> None:
        self.hub, self.rank, self.size = hub, rank, hub.size

    def wtime(self) -> float:
        return time.monotonic() - self.hub.start

    def open_window(self, name: str, nbytes: int, owned: bool, accumulated: bool = False) -> None:
        """As ``MpiComm.open_window``: every rank calls it; owners get ``nbytes`` of zeros."""
        with self.hub.lock:
            self.hub.window_sizes[name] = nbytes
            if accumulated:
                self.hub.accumulated.add(name)
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
        with self.hub.lock:
            self.hub.windows[(window, self.rank)][offset:offset + data.nbytes] = data.view(np.uint8).ravel()

    def read(self, window: str, ranks: tuple[int, ...], nbytes: int, offset: int = 0) -> list[np.ndarray]:
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
        self._addable(window)
        with self.hub.lock:
            counter = self.hub.windows[(window, rank)][:8].view(np.int64)
            before = int(counter[0])
            counter[0] += value
            return before

    def _addable(self, window: str) -> None:
        if window not in self.hub.accumulated:
            raise undeclared_add(window)

    def drain(self, window: str) -> np.ndarray:
        with self.hub.lock:
            own = self.hub.windows[(window, self.rank)]
            out = own.copy()
            own[:] = 0
            return out

    def send(self, channel: str, dest: int, data: np.ndarray) -> None:
        if data.nbytes != self.hub.message_sizes[channel]:
            raise undeclared_size(channel, data.nbytes, self.hub.message_sizes[channel])
        with self.hub.lock:
            self.hub.queues[(channel, dest)].append((self.rank, np.ascontiguousarray(data).view(np.uint8).copy()))
            self.hub.lock.notify_all()

    def recv(self, channel: str, src: int, timeout: float) -> tuple[int, np.ndarray] | None:
        queue = self.hub.queues[(channel, self.rank)]

        def take() -> tuple[int, np.ndarray] | None:
            for i, (sender, data) in enumerate(queue):
                if src < 0 or sender == src:
                    del queue[i]
                    return sender, data
            return None

        deadline = time.monotonic() + timeout
        with self.hub.lock:
            got = take()
            while got is None and time.monotonic() < deadline:
                self.hub.lock.wait(min(deadline - time.monotonic(), 1.0))  # a WATCHED wait has no deadline
                got = take()
            return got

    def allreduce(self, data: np.ndarray, timeout: float) -> np.ndarray:
        hub = self.hub
        assert hub.reduce_barrier is not None and self.rank > 0, "all-reduce is among the workers"
        with hub.lock:
            hub.reduce_parts[self.rank] = data.copy()
        self._wait(hub.reduce_barrier, timeout, "the workers' all-reduce")
        if self.rank == 1:  # one worker sums, in rank order, as a deterministic reduction would
            hub.reduce_sum = np.sum([hub.reduce_parts[r] for r in sorted(hub.reduce_parts)], axis=0,
                                    dtype=data.dtype)
        self._wait(hub.reduce_barrier, timeout, "the workers' all-reduce")
        assert hub.reduce_sum is not None
        out = hub.reduce_sum.copy()
        self._wait(hub.reduce_barrier, timeout, "the workers' all-reduce")
        return out

    def start_allreduce(self, data: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return data, out  # carried out, in order, when finished

    def progress(self, started: list[tuple[np.ndarray, np.ndarray]]) -> None:
        pass

    def finish_allreduces(self, started: list[tuple[np.ndarray, np.ndarray]], timeout: float) -> None:
        for data, out in started:
            out[:] = self.allreduce(data, timeout)

    def worker_barrier(self, timeout: float) -> None:
        assert self.hub.reduce_barrier is not None and self.rank > 0, "the barrier is among the workers"
        self._wait(self.hub.reduce_barrier, timeout, "a barrier")

    @staticmethod
    def _wait(barrier: threading.Barrier, timeout: float, what: str) -> None:
        try:
            barrier.wait(timeout)
        except threading.BrokenBarrierError:
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what}") from None
