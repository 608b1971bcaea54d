"""RMA windows: one others add into under locks, an atomic counter, and a lock-free versioned window
its owner publishes and others read."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from hpcbench.comm.mpilib import MPI, dtlib
from hpcbench.comm.polling import spin
from hpcbench.signals import stops_deferred


class Window:
    """An RMA window others add into (an atomic counter, a mailbox): ``nbytes`` on this rank (0 on
    ranks that only access others'), every access under a passive-target lock."""

    def __init__(self, comm: MPI.Intracomm, nbytes: int) -> None:
        self.win = MPI.Win.Allocate(nbytes, 1, comm=comm)
        self.rank = comm.rank
        self.local = (np.frombuffer(self.win.tomemory(), dtype=np.uint8)  # type: ignore[call-overload]
                      if nbytes else np.empty(0, np.uint8))
        # MPI leaves allocated memory as it found it (zero only where it maps fresh shared pages): a
        # counter or mailbox must start at zero, so every window does.
        self.local[:] = 0

    @contextmanager
    def locked(self, rank: int, kind: int) -> Iterator[None]:
        """Within: ``rank``'s window locked. A stop signal landing inside (even as Lock returns, before
        a try could catch it) is raised after the unlock: a lock left behind would block the owner, or
        every reader, inside MPI for good."""
        with stops_deferred():
            self.win.Lock(rank, kind)
            try:  # any other failure (rank 0: a worker's notice seen while waiting) lets go too
                yield
            finally:
                self.win.Unlock(rank)

    def publish(self, data: np.ndarray, offset: int = 0) -> None:
        with self.locked(self.rank, MPI.LOCK_EXCLUSIVE):
            self.local[offset:offset + data.nbytes] = data.view(np.uint8)

    def drain(self) -> np.ndarray:
        with self.locked(self.rank, MPI.LOCK_EXCLUSIVE):
            out = self.local.copy()
            self.local[:] = 0
        return out

    def read(self, ranks: tuple[int, ...], nbytes: int,
             wait: Callable[[Callable[[], Any]], Any] | None = None, offset: int = 0) -> list[np.ndarray]:
        # A Get racing an Accumulate is undefined in MPI: a read locks the window exclusively, one
        # target at a time. A request-based get, waited for by ``wait``: a reader naps while the owner
        # is busy instead of spinning inside MPI.
        bufs = [np.empty(nbytes, dtype=np.uint8) for _ in ranks]
        for rank, buf in zip(ranks, bufs):
            with self.locked(rank, MPI.LOCK_EXCLUSIVE):
                req = self.win.Rget([buf, MPI.BYTE], rank, target=(offset, nbytes, MPI.BYTE))
                if wait is None:
                    req.Wait()
                else:
                    wait(lambda: True if req.Test() else None)
        return bufs

    def accumulate(self, rank: int, parts: tuple[tuple[int, np.ndarray], ...]) -> None:
        with self.locked(rank, MPI.LOCK_SHARED):
            for offset, array in parts:
                dtype = dtlib.from_numpy_dtype(array.dtype)
                self.win.Accumulate([array, dtype], rank, target=(offset, array.size, dtype), op=MPI.SUM)

    def fetch_add(self, rank: int, value: int) -> int:
        add, before = np.array([value], dtype=np.int64), np.zeros(1, dtype=np.int64)
        with self.locked(rank, MPI.LOCK_SHARED):
            self.win.Fetch_and_op([add, MPI.INT64_T], [before, MPI.INT64_T], rank, 0, op=MPI.SUM)
        return int(before[0])

    def free(self) -> None:
        self.win.Free()


class CounterWindow:
    """An int64 counter others only fetch-and-add into (the shared sample budget), without locks:
    every rank holds a shared lock on every rank for the window's life (``MPI_MODE_NOCHECK``: no lock
    messages) and each add is one atomic fetch-and-op, flushed. Where the window is in shared memory
    an add needs nothing from its owner, which may then wait for messages without serving it."""

    def __init__(self, comm: MPI.Intracomm, owned: bool) -> None:
        self.win = MPI.Win.Allocate(8 if owned else 0, 1, comm=comm)
        self.local = (np.frombuffer(self.win.tomemory(), dtype=np.uint8)  # type: ignore[call-overload]
                      if owned else np.empty(0, np.uint8))
        self.local[:] = 0
        self.win.Lock_all(MPI.MODE_NOCHECK)

    def fetch_add(self, rank: int, value: int) -> int:
        add, before = np.array([value], dtype=np.int64), np.zeros(1, dtype=np.int64)
        self.win.Fetch_and_op([add, MPI.INT64_T], [before, MPI.INT64_T], rank, 0, op=MPI.SUM)
        self.win.Flush(rank)
        return int(before[0])

    def free(self) -> None:
        self.win.Unlock_all()
        self.win.Free()


WORD = np.dtype(np.int64)
COUNT_BITS = 24  # a slot's word: its sequence number above, the readers copying it below
COUNT_MASK = (1 << COUNT_BITS) - 1


class VersionedWindow:
    """A window its owner publishes and others only read, without locks: a reader never waits for a
    busy owner, and an owner waits only for readers still copying the version before the newest.

    The owner's bytes are held twice, in two slots; at the window's start, one int64 word per slot
    holds its sequence number (odd while the slot is written, even when it holds a version; each
    write raises it above every number before) and the count of readers copying it, changed only by
    MPI atomics. A reader reads both words, picks the newest slot (or, while that one is written,
    the other, which then holds the version just before), and adds one to its count with a
    fetch-and-add, which also tells it the number as it was: moved (the owner took the slot
    meanwhile), it takes the one back and starts again; else it copies the bytes and takes the one
    back. The owner publishing the whole window takes the slot readers are not pointed at with a
    compare-and-swap that succeeds only while no reader counts on it (otherwise it waits, ticking,
    for the count to fall), writes it, then raises its number. A publish of part of the window (a
    kept snapshot) writes the newest slot in place the same way; readers wait for it. Every rank
    holds a shared lock on every rank for the window's life (``MPI_MODE_NOCHECK``: no lock
    messages), so where the window is in shared memory a read is a direct copy that needs nothing
    from the owner.
    """

    HEADER = 2 * WORD.itemsize

    def __init__(self, comm: MPI.Intracomm, nbytes: int, owned: bool) -> None:
        """``nbytes``: the window's size on the ranks that own one (a reader finds the slots by it)."""
        self.nbytes = nbytes
        self.rank = comm.rank
        self.stride = -(-nbytes // WORD.itemsize) * WORD.itemsize  # each slot 8-aligned
        size = self.HEADER + 2 * self.stride if owned and nbytes else 0
        self.win = MPI.Win.Allocate(size, 1, comm=comm)
        self.local = (np.frombuffer(self.win.tomemory(), dtype=np.uint8)  # type: ignore[call-overload]
                      if size else np.empty(0, np.uint8))
        self.local[:] = 0
        self.seqs = [0, 0]  # each slot's sequence number (owner)
        self.top = 0  # the highest of them
        self.newest = 0  # the slot that holds it
        self.retries = 0  # reads that began again (their slot taken by the owner as they came)
        # The atomics' and the words' buffers, made once: a read is on every worker's path each step.
        self._words = np.empty(2, WORD)
        self._old = np.zeros(1, WORD)
        self._values: dict[int, np.ndarray] = {}
        self.win.Lock_all(MPI.MODE_NOCHECK)

    def publish(self, data: np.ndarray, offset: int = 0,
                wait: Callable[[Callable[[], Any]], Any] | None = None,
                stale: Callable[[int], bool] | None = None) -> None:
        """``wait``: how to wait for the readers still copying the slot (a test until it is free);
        ``stale``: whether a count of readers that stays is one of readers that failed while they
        copied (the slot is then taken all the same; a reader still copying sees it taken and reads
        again)."""
        slot = 1 - self.newest if offset == 0 and data.nbytes == self.nbytes else self.newest
        mark = self.top + 1  # odd: being written
        dead = 0  # reader counts taken to be of failed readers

        def free() -> bool | None:
            nonlocal dead
            held = self._word(slot) & COUNT_MASK
            if held and (stale is None or not stale(held)):
                return None
            dead = held
            return True

        while True:
            with stops_deferred():  # a number left odd would keep every reader waiting
                if self._swap(slot, self.seqs[slot] << COUNT_BITS | dead, mark << COUNT_BITS):
                    start = self.HEADER + slot * self.stride + offset
                    self.local[start:start + data.nbytes] = data.view(np.uint8)
                    self.win.Sync()
                    # An add, not a store: the counts of readers that came meanwhile (and go) are kept.
                    self._add(self.rank, slot, 1 << COUNT_BITS)
                    self.top = self.seqs[slot] = mark + 1
                    self.newest = slot
                    return
            dead = 0
            (wait or spin)(free)

    def _swap(self, slot: int, expected: int, new: int) -> bool:
        """Atomically replace the slot's word ``expected`` by ``new``; False if it was anything else."""
        old = np.zeros(1, WORD)
        self.win.Compare_and_swap([np.array([new], WORD), MPI.INT64_T], [np.array([expected], WORD), MPI.INT64_T],
                                  [old, MPI.INT64_T], self.rank, slot * WORD.itemsize)
        self.win.Flush(self.rank)
        return int(old[0]) == expected

    def _word(self, slot: int, rank: int | None = None) -> int:
        return self._add(self.rank if rank is None else rank, slot, 0)

    def _add(self, rank: int, slot: int, value: int) -> int:
        """Atomically add ``value`` to the slot's word on ``rank``; → the word as it was."""
        operand = self._values.get(value)
        if operand is None:
            operand = self._values[value] = np.array([value], WORD)
        self.win.Fetch_and_op([operand, MPI.INT64_T], [self._old, MPI.INT64_T], rank, slot * WORD.itemsize, op=MPI.SUM)
        self.win.Flush(rank)
        return int(self._old[0])

    def read(self, ranks: tuple[int, ...], nbytes: int,
             wait: Callable[[Callable[[], Any]], Any] | None = None, offset: int = 0) -> list[np.ndarray]:
        """A request-based get, waited for by ``wait`` (a long transfer leaves the reader its
        heartbeats and notices)."""
        out = []
        for rank in ranks:
            buf = np.empty(nbytes, dtype=np.uint8)
            while not self._copy(rank, buf, offset, wait):
                self.retries += 1
            out.append(buf)
        return out

    def _copy(self, rank: int, buf: np.ndarray, offset: int, wait: Callable[[Callable[[], Any]], Any] | None) -> bool:
        """Copy ``rank``'s newest version (from ``offset`` on) into ``buf``; False: it could not be
        held (a part of it being written in place, or the slot taken by the owner as we came)."""
        self.win.Get([self._words, MPI.INT64_T], rank, target=(0, 2, MPI.INT64_T))
        self.win.Flush(rank)
        seqs = self._words >> COUNT_BITS
        slot = readable(seqs)
        if slot is None:
            return False
        with stops_deferred():  # a count left raised would keep the owner from that slot for good
            held = self._add(rank, slot, 1) >> COUNT_BITS == seqs[slot]
            try:
                if held:
                    req = self.win.Rget([buf, MPI.BYTE], rank, target=(self.HEADER + slot * self.stride + offset,
                                                                        buf.nbytes, MPI.BYTE))
                    if not req.Test():  # in shared memory it is done already: no need to wait
                        (wait or spin)(lambda: True if req.Test() else None)
            finally:
                # the slot taken while it was copied (only from readers that failed): copy again
                moved = self._add(rank, slot, -1) >> COUNT_BITS != seqs[slot]
        return held and not moved

    def free(self) -> None:
        self.win.Unlock_all()
        self.win.Free()


def readable(seqs: np.ndarray) -> int | None:
    """The slot of a versioned window to read, given its two sequence numbers: the newest version,
    or while it is being written (odd) the other slot if that holds the version just before; None:
    wait (a part of the newest is being written in place)."""
    newest = int(np.argmax(seqs))
    if seqs[newest] % 2 == 0:
        return newest
    other = 1 - newest
    return other if seqs[other] == seqs[newest] - 1 else None
