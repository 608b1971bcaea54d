"""One-sided operations on the ranks' windows in virtual time: publish, read, accumulate, fetch-and-add
and drain. A window others add into is read, drained and published into under an exclusive lock
(a Get racing an Accumulate is undefined in MPI), adds share the lock among themselves; the others
are versioned: read without a lock, published into the slot no reader holds. Locks are granted in
the order asked.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from hpcbench.algorithms.ops import Accumulate, Drain, FetchAdd, Lost, Publish, Read
from hpcbench.errors import undeclared_add
from hpcbench.runtime.sim.core import BLOCKED, Parts
from hpcbench.runtime.sim.links import Versions, WindowLock
from hpcbench.runtime.sim.transfers import Transfers


class Windows(Transfers):
    """The windows' part of the engine: each rank's windows, their locks and versions, and the
    operations on them."""

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        layout, n = parts.layout, parts.cfg.workers
        self.locks: dict[tuple[str, int], WindowLock] = {}  # passive-target locks
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

    def lock(self, key: tuple[str, int], exclusive: bool, granted: Callable[[], None]) -> bool:
        """Ask for a window's lock: True when held now, else ``granted()`` runs once it is."""
        lock = self.locks.get(key)
        if lock is None:
            lock = self.locks[key] = WindowLock()
        return lock.acquire(exclusive, granted)

    def unlock(self, key: tuple[str, int], exclusive: bool) -> None:
        for granted in self.locks[key].release(exclusive):
            self.at(self.now, granted)

    # Operations on a rank's own window are instant in virtual time and leave no timeline row (but
    # for the time they wait).
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


class _Reading:
    """One Read under way: each target's window in turn (an object rather than nested closures, which
    would refer to themselves and leave a reference cycle per read for the collector)."""

    __slots__ = ("engine", "rank", "op", "sizes", "start", "bufs", "locked")

    def __init__(self, engine: Windows, rank: int, op: Read, sizes: list[int]) -> None:
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
