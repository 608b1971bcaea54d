"""The only module that imports mpi4py: RMA windows, message channels, collectives and clocks.

Every blocking wait here is a polling loop with a deadline: it keeps calling into MPI (so
passive-target operations aimed at this rank progress), backs off to short sleeps when idle (so
oversubscribed ranks leave the cores to those computing) and fails with a clear message on timeout.
"""
from __future__ import annotations

import json
import math
import os
import socket
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar, cast

import numpy as np

from hpcbench.bfloat16 import add_bf16
from hpcbench.algorithms.ops import Lost
from hpcbench.comm import openmpi
from hpcbench.comm.process import keep_freed_memory, tighten_timer_slack
from hpcbench.comm.transport import Shrunk, message_bytes
from hpcbench.errors import LauncherGone, PeerFailure, WaitTimeout, stopped_answering, undeclared_add, undeclared_size
from hpcbench.signals import stops_deferred

openmpi.prepare(os.environ)  # Open MPI reads its settings once, when MPI starts: at the next import
from mpi4py import MPI  # noqa: E402
from mpi4py.util import dtlib, pkl5  # noqa: E402

from hpcbench.comm import ulfm  # noqa: E402  (imports mpi4py.MPI)

T = TypeVar("T")
GONE = object()  # a probe's answer when the rank probed for has failed
CLOCK_TAG = 32_000
NOTICE_TAG = 32_001  # a worker telling rank 0 how it failed, before it stops
GATHER_TAG = 32_002  # set-up and final exchanges through rank 0 (which names a rank that never arrives)
SCATTER_TAG = 32_003
HEARTBEAT_TAG = 32_004  # "still here", between rank 0 and each worker while training
# A worker waits for rank 0 this much longer than rank 0 waits for a worker: when a worker stalls,
# rank 0's deadline passes first and it names the rank; when rank 0 stalls, the workers name it.
WORKER_MARGIN_S = 5.0
BEAT = np.zeros(1, dtype=np.uint8)  # what a heartbeat carries (never changes, so a send may outlive its call)
NOTICE_BYTES = 4096
ABORT_PAUSE_S = 0.2  # for the launcher to forward what this rank printed before it ends every rank
SPIN_S = 0.002  # with a core to itself, test without sleeping this long (collectives advance only when tested)
# ... then test between yields of the core (to whatever else is runnable, as MPICH's own blocking
# waits do) this long: the answer to a request usually comes within it (measured: a parameter server
# of 100k floats went from 0.21x to 0.48x the updates/s of a bare mpi4py one, 3 ranks on 2 cores) ...
YIELD_S = 0.0003
YIELDING_RANKS_PER_CORE = 4  # up to this many ranks a core, a collective's wait yields and never sleeps
FIRST_SLEEP_S = 0.00005  # then sleep between tests, doubling while nothing happens ...
# A wait with no deadline of its own (a coordinator's next progress report) on a rank that holds no
# window others read or write: nothing needs it inside MPI, so it sleeps up to this between tests ...
IDLE_SLEEP_S = 0.01
# ... beginning with this: reports every few steps would otherwise wake the coordinator five or six
# times each as the naps grow again from FIRST_SLEEP_S (measured: rank 0's share 7.2% -> 5.6% of a
# core in 0.6 s allreduce runs with 2 workers)
IDLE_FIRST_SLEEP_S = 0.001
MAX_SLEEP_S = 0.0002  # ... up to this: an idle rank costs the computing ones little (workers on an
# oversubscribed node sleep up to this times the ranks per core: 64 idle workers per core polling
# every 0.2 ms would take the cores from rank 0 and from the workers that compute)
TICK_S = 0.001  # notices, heartbeats, faults and flushes are looked at this often, not at every operation
FAILURE_CHECK_S = 0.005  # under ULFM, how often a rank asks which ranks failed (10 us each time)
# Under ULFM, a count of readers on a versioned window that stays this long while readers have failed
# is taken to be theirs (a reader killed while it copied): the owner takes the slot all the same.
STALE_READERS_S = 2.0
PARENT_CHECK_S = 0.5  # how often a rank looks whether its launcher is still there
# A rank whose launcher has gone and that has not noticed within this long is blocked inside MPI (an
# operation on a rank that has ended): a watchdog thread ends it. One that noticed gets longer to keep
# the run's record (rank 0) or tell rank 0 (a worker), then the watchdog ends it whatever it is doing.
ORPHAN_WATCHDOG_S = 2.0
ORPHAN_GRACE_S = 60.0


def wait_for(test: Callable[[], T | None], timeout: float, what: str, fail: bool = True,
             spin: float = SPIN_S, peer: int | None = None, nap: float = MAX_SLEEP_S,
             patience: float = YIELD_S, first: float = FIRST_SLEEP_S) -> T | None:
    """Call ``test`` until it returns non-None; after ``timeout`` seconds fail or return None.

    Each test calls into MPI, so operations aimed at this rank progress while it waits. ``spin``:
    how long to test back to back before sleeping between tests; 0 when ranks outnumber cores,
    where a spinning rank takes CPU from the ranks that compute; ``patience``: how long after that
    to test between yields of the core (0 for a wait nothing is in a hurry for); ``first``, ``nap``:
    the first and the longest sleep after it.
    """
    result = test()
    if result is not None or timeout == 0:
        return result
    start = time.monotonic()
    pause = first
    while True:
        result = test()
        if result is not None:
            return result
        waited = time.monotonic() - start
        if waited > timeout:
            if fail:
                raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what}", peer)
            return None
        if waited > spin + patience:
            time.sleep(pause)
            pause = min(2 * pause, nap)
        elif waited > spin:
            os.sched_yield()


def leave_together(timeout_s: float) -> None:
    """Every rank of a launch that refused to run (a bad command line, checked before MPI started) meets
    the others here before it exits, so none exits while rank 0 has yet to say why: Open MPI's launcher
    ends every rank at the first non-zero exit. A rank still missing after ``timeout_s`` is not waited
    for (this rank ends at once, without MPI's finalize, which would wait for it). Ends MPI."""
    if MPI.Is_finalized():  # the run had begun and ended its MPI: the ranks have met
        return
    done = MPI.COMM_WORLD.Ibarrier()
    if wait_for(lambda: True if done.Test() else None, timeout_s, "the others", fail=False, spin=0.0) is None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(2)
    MPI.Finalize()  # so that mpi4py's runner exits with the code instead of aborting the job


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


def spin(test: Callable[[], Any]) -> None:
    while test() is None:
        pass


def readable(seqs: np.ndarray) -> int | None:
    """The slot of a versioned window to read, given its two sequence numbers: the newest version,
    or while it is being written (odd) the other slot if that holds the version just before; None:
    wait (a part of the newest is being written in place)."""
    newest = int(np.argmax(seqs))
    if seqs[newest] % 2 == 0:
        return newest
    other = 1 - newest
    return other if seqs[other] == seqs[newest] - 1 else None


class Channel:
    """Fixed-size messages under one tag, each received into a buffer of its own: a receive is posted
    for every source, and a message taken is handed over as it arrived (no copy) while a new receive,
    into a new buffer, takes its place. A source that failed is forgotten: its receive is dropped, and
    a message of its that had arrived is still handed over."""

    def __init__(self, comm: MPI.Intracomm, tag: int, nbytes: int, sources: tuple[int, ...]) -> None:
        self.comm, self.tag, self.nbytes = comm, tag, nbytes
        self.sources: list[int] = []
        self.bufs: list[np.ndarray] = []
        self.reqs: list[MPI.Request] = []
        self.arrived: list[tuple[int, np.ndarray]] = []  # from sources since forgotten
        for src in sources:
            self._open(src)

    def _receive(self, src: int) -> tuple[np.ndarray, MPI.Request]:
        buf = np.empty(self.nbytes, dtype=np.uint8)
        return buf, self.comm.Irecv([buf, MPI.BYTE], src, self.tag)

    def _open(self, src: int) -> int:
        buf, req = self._receive(src)
        self.sources.append(src)
        self.bufs.append(buf)
        self.reqs.append(req)
        return len(self.sources) - 1

    def _take(self, i: int) -> tuple[int, np.ndarray]:
        data = self.bufs[i]
        self.bufs[i], self.reqs[i] = self._receive(self.sources[i])
        return self.sources[i], data

    def poll_any(self) -> tuple[int, np.ndarray] | None:
        if self.arrived:
            return self.arrived.pop(0)
        i, done = MPI.Request.Testany(self.reqs)
        return self._take(i) if done and i != MPI.UNDEFINED else None

    def poll_from(self, src: int) -> tuple[int, np.ndarray] | None:
        for k, (source, data) in enumerate(self.arrived):
            if source == src:
                del self.arrived[k]
                return source, data
        i = self.sources.index(src) if src in self.sources else self._open(src)
        if self.reqs[i] == MPI.REQUEST_NULL:  # forgotten
            return None
        return self._take(i) if self.reqs[i].Test() else None

    def forget(self, src: int) -> None:
        """``src`` has failed: drop its receive, keeping a message that had come."""
        if src not in self.sources:
            return
        i = self.sources.index(src)
        try:
            done = self.reqs[i].Test()
        except MPI.Exception:
            done = False
        if done:
            self.arrived.append((src, self.bufs[i]))
        self.reqs[i] = MPI.REQUEST_NULL

    def close(self) -> None:
        for req in self.reqs:
            if req != MPI.REQUEST_NULL:
                req.Cancel()
                req.Wait()


class MpiComm:
    """COMM_WORLD (rank 0 = server/coordinator) and the workers-only communicator.

    Implements ``hpcbench.comm.transport.Cluster``.
    """

    def __init__(self) -> None:
        tighten_timer_slack()
        keep_freed_memory()
        self.world = MPI.COMM_WORLD
        self.rank = self.world.rank
        self.size = self.world.size
        self.workers = self.world.Split(0 if self.rank == 0 else 1, self.rank)
        # Under ULFM (Open MPI launched with --with-ft ulfm) the ranks outlive a failed one: the failed
        # ranks MPI reported, and whom the workers' collectives span (shrunk at a failed collective).
        self.failures = ulfm.Failures(self.world, MPI.Wtime) if openmpi.ulfm_requested(os.environ) else None
        self._cut_short: MPI.Exception | None = None  # a workers' collective's failure met by progress()
        self.members = ulfm.members(self.workers, self.world) if self.rank else ()
        self.survives_failures = self.failures is not None
        self._next_failure_check = 0.0
        self._forgotten: list[MPI.Request] = []  # receives from failed ranks, kept from the collector
        self.host = socket.gethostname()
        local = self.world.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        self.local_rank, self.local_size = local.rank, local.size
        local.Free()
        self.spin = SPIN_S  # receives: how long to test back to back before sleeping
        self.spin_collective = math.inf  # collectives advance only while tested: spin, given a core
        # ... and where ranks share cores, test between yields and never sleep, as MPICH's blocking
        # waits do: a partner of a collective comes soon, and one asleep holds up all the others
        # (measured: allreduce at 4 workers on 2 cores, 10.2 -> 6.3 ms a step; the bare loop's 4.7)
        self.patience_collective = math.inf
        self.nap = MAX_SLEEP_S  # the longest sleep between tests
        self._next_tick = 0.0
        # The launcher's proxy that started this rank: if it dies (killed, its node's daemon gone),
        # the rank is re-parented and nothing would ever end it.
        self.parent = os.getppid()
        self._next_parent_check = 0.0
        self.orphaned = False
        threading.Thread(target=self._watch_launcher, name="hpcbench-launcher-watchdog", daemon=True).start()
        self.windows: dict[str, Window | VersionedWindow | CounterWindow] = {}
        self.window_sizes: dict[str, int] = {}
        self.channels: dict[str, Channel] = {}
        self._sends: list[tuple[MPI.Request, np.ndarray]] = []  # (request, buffer it sends)
        # Rank 0 listens for failure notices from the first moment; every wait checks for one.
        self._notice = np.zeros(NOTICE_BYTES, dtype=np.uint8)
        self._notice_req: MPI.Request | None = None
        if self.rank == 0:
            self._notice_req = self.world.Irecv([self._notice, MPI.BYTE], MPI.ANY_SOURCE, NOTICE_TAG)
        self.objects = pkl5.Intracomm(self.world)  # pickled exchanges of any size
        self.hosts: list[str] = []  # every rank's host, once the set-up exchange told them
        self.on_wait: Callable[[], None] | None = None  # called on every test of every wait (faults, flushes)
        self._beats: list[MPI.Prequest] = []  # one pre-posted receive per watched peer
        self._beat_bufs: list[np.ndarray] = []
        self.last_heard: dict[int, float] = {}  # when each watched peer last said it was there
        self._beat_from: list[int] = []  # the peers watched: every worker on rank 0, rank 0 on a worker
        self._beat_every = 0.0
        self._beat_deadline = 0.0
        self._next_beat = 0.0

    # --- set-up -------------------------------------------------------------------------------
    def open_window(self, name: str, nbytes: int, owned: bool, mode: str = "publish") -> None:
        """Collective: a window of ``nbytes`` on the ranks that own it, empty on the others; ``mode``:
        as its layout declares it (``WindowSpec.mode``)."""
        self.windows[name] = (Window(self.world, nbytes if owned else 0) if mode == "accumulate"
                              else CounterWindow(self.world, owned) if mode == "count"
                              else VersionedWindow(self.world, nbytes, owned))
        self.window_sizes[name] = nbytes

    def open_channel(self, name: str, nbytes: int, sources: tuple[int, ...]) -> None:
        self.channels[name] = Channel(self.world, len(self.channels) + 1, nbytes, sources)

    def close(self, timeout: float) -> None:
        self._wait(lambda: True if not self._pending_sends() else None, timeout, "outstanding sends to complete",
                   spin=self.spin)
        for channel in self.channels.values():
            channel.close()
        # Heartbeats go on until every rank is here: a rank still at work (rank 0 reading the workers'
        # kept snapshots after a long run) is heard, so no one gives up on it, however long, while it
        # answers; one that stops answering is named as anywhere else.
        self.world_barrier(math.inf if self._beat_every else timeout, "the end of the run")
        self._beat_every = 0.0  # no more heartbeats from here; after the next barrier none is on its way
        self.world_barrier(timeout)
        self._stop_heartbeats()
        self._stop_listening()  # every rank is past its program: no notice can come now
        for window in self.windows.values():
            window.free()
        self.windows.clear()
        self.channels.clear()

    # --- one-sided (the Transport operations) ---------------------------------------------------
    def window_size(self, window: str) -> int:
        return self.window_sizes[window]

    def publish(self, window: str, data: np.ndarray, offset: int = 0) -> None:
        found = self._not_counter(window, "a publish into")
        if isinstance(found, Window):
            found.publish(data, offset)
        else:
            found.publish(data, offset, lambda test: self._wait(
                test, math.inf, f"the readers of window {window!r} to let go of it", spin=self.spin),
                self._stale_readers())

    def read(self, window: str, ranks: tuple[int, ...], nbytes: int, offset: int = 0) -> list[np.ndarray] | Lost:
        """``Lost`` when a rank read from has failed (on one node its window's memory outlives it, so
        the read itself would not say so)."""
        found = self._not_counter(window, "a read of")
        return self._unless_failed(ranks, "read", lambda: found.read(ranks, nbytes, lambda test: self._wait(
            test, math.inf, f"a read of window {window!r}", spin=self.spin), offset))

    def accumulate(self, window: str, rank: int, parts: tuple[tuple[int, np.ndarray], ...]) -> Lost | None:
        found = self._addable(window)
        return self._unless_failed((rank,), "accumulate", lambda: found.accumulate(rank, parts))

    def fetch_add(self, window: str, rank: int, value: int) -> int:
        found = self.windows[window]
        return (found if isinstance(found, CounterWindow) else self._addable(window)).fetch_add(rank, value)

    def _unless_failed(self, ranks: tuple[int, ...], how: str, operation: Callable[[], T]) -> T | Lost:
        """``operation()``, or ``Lost`` if one of ``ranks`` has failed (before or during it)."""
        if self.failures is None:
            return operation()
        gone = tuple(r for r in ranks if r in self.failed())
        if gone:
            return Lost(gone)
        try:
            return operation()
        except MPI.Exception as exc:
            if not self._survive(exc, how):
                raise
            gone = tuple(r for r in ranks if r in self.failures.known)
            if not gone:
                raise
            return Lost(gone)

    def _stale_readers(self) -> Callable[[int], bool] | None:
        """For a publish waiting for readers: whether a count of them is of readers that failed (it
        stays STALE_READERS_S while no more readers than have failed hold it)."""
        if self.failures is None:
            return None
        seen: dict[int, float] = {}

        def stale(count: int) -> bool:
            since = seen.setdefault(count, time.monotonic())
            return 0 < count <= len(self.failed()) and time.monotonic() - since >= STALE_READERS_S

        return stale

    def _addable(self, window: str, what: str = "an add into") -> Window:
        found = self.windows[window]
        if not isinstance(found, Window):
            raise undeclared_add(window, what, "count" if isinstance(found, CounterWindow) else "publish")
        return found

    def _not_counter(self, window: str, what: str) -> Window | VersionedWindow:
        found = self.windows[window]
        if isinstance(found, CounterWindow):
            raise undeclared_add(window, what, "count")
        return found

    def drain(self, window: str) -> np.ndarray:
        return self._addable(window, "a drain of").drain()

    # --- point to point -----------------------------------------------------------------------
    def send(self, channel: str, dest: int, data: np.ndarray, given: bool = False) -> None:
        buf = message_bytes(data, given)  # kept with its request until the send is done
        if buf.nbytes != self.channels[channel].nbytes:
            raise undeclared_size(channel, buf.nbytes, self.channels[channel].nbytes)
        # Sends done are let go of first: their buffers, freed now, are the ones the next allocations
        # take, still in cache (a model-sized message a step kept 16 deep made every buffer a cold one).
        self._pending_sends()
        if self.failures is not None and dest in self.failures.known:
            return  # a message to a failed rank goes nowhere
        try:
            self._sends.append((self.world.Isend([buf, MPI.BYTE], dest, self.channels[channel].tag), buf))
        except MPI.Exception as exc:
            if not self._survive(exc, "send"):
                raise

    def _pending_sends(self) -> list[tuple[MPI.Request, np.ndarray]]:
        """Let go of the sends that are done (or whose destination failed); → those still under way."""
        if self.failures is None:
            self._sends = [(r, b) for r, b in self._sends if not r.Test()]
            return self._sends
        still = []
        for req, buf in self._sends:
            try:
                if not req.Test():
                    still.append((req, buf))
            except MPI.Exception as exc:
                if not self._survive(exc, "send"):
                    raise
        self._sends = still
        return still

    def recv(self, channel: str, src: int, timeout: float,
             told: frozenset[int] = frozenset()) -> tuple[int, np.ndarray] | Lost | None:
        """``told``: the failed workers the caller knows of; a receive from any rank hands back
        ``Lost`` naming the others once nothing else is there, one from a failed rank always."""
        ch = self.channels[channel]

        def take() -> tuple[int, np.ndarray] | None:
            return ch.poll_any() if src < 0 else ch.poll_from(src)

        def poll() -> tuple[int, np.ndarray] | Lost | None:
            got: tuple[int, np.ndarray] | None
            try:
                got = take()
            except MPI.Exception as exc:
                if not self._survive(exc, "receive"):
                    raise
                got = take()  # what a failed sender had sent before comes before the news of it
            if got is not None or self.failures is None:
                return got
            failed = self.failures.known
            gone = ((src,) if src in failed else ()) if src >= 0 else tuple(sorted(set(failed) - told - {0}))
            return Lost(gone) if gone else None

        who = "any rank" if src < 0 else f"rank {src}"
        what = f"a {channel!r} message from {who}"
        if timeout == math.inf and not self.serving():  # nothing needs this rank inside MPI while it waits
            got = self._wait(poll, timeout, what, fail=False, spin=0.0, patience=0.0, first=IDLE_FIRST_SLEEP_S,
                             nap=max(self.nap, IDLE_SLEEP_S))
        else:
            got = self._wait(poll, timeout, what, fail=False, spin=self.spin)
        return cast("tuple[int, np.ndarray] | Lost | None", got)

    def serving(self) -> bool:
        """Whether others need this rank inside MPI to reach a window it holds: one they lock (the
        owner's progress grants the locks), or any that ranks on other hosts reach over the network
        (the owner's progress carries out their gets and atomics). On one host the lock-free windows
        are shared memory that readers and adders reach by themselves."""
        one_host = len(set(self.hosts)) == 1
        return any(w.local.size and (isinstance(w, Window) or not one_host) for w in self.windows.values())

    # --- collectives --------------------------------------------------------------------------
    def allreduce(self, data: np.ndarray, timeout: float, bf16: bool = False) -> np.ndarray:
        out = np.empty_like(data)
        self.finish_allreduces([self.start_allreduce(data, out, bf16)], timeout)
        return out

    def start_allreduce(self, data: np.ndarray, out: np.ndarray, bf16: bool = False) -> MPI.Request:
        return self.workers.Iallreduce(data, out, op=bf16_sum() if bf16 else MPI.SUM)

    def progress(self, started: list[MPI.Request]) -> None:
        if self.failures is None:
            MPI.Request.Testall(started)
            return
        if self._cut_short is not None:
            return
        try:  # one at a time, as in _collective; a failure is kept for it to handle
            for req in started:
                req.Test()
        except MPI.Exception as exc:
            self._cut_short = exc

    def finish_allreduces(self, started: list[MPI.Request], timeout: float) -> None:
        self._collective(started, timeout, "the workers' all-reduce")

    def _collective(self, started: list[MPI.Request], timeout: float, what: str) -> None:
        """Wait for the workers' collective ``started``. Under ULFM the survivors then agree that it
        ended well everywhere (a failure can end it on some ranks and not others); if not, the
        workers' communicator is shrunk to them and ``Shrunk`` raised: start it again."""
        def wait(test: Callable[[], T | None], doing: str = what) -> T | None:
            # Partners of a collective arrive soon and it advances only while tested: keep testing.
            return self._wait(test, timeout, doing, spin=self.spin_collective, patience=self.patience_collective)

        ok = True
        try:
            if self._cut_short is not None:  # met while the collectives progressed (progress)
                cut, self._cut_short = self._cut_short, None
                raise cut
            if self.failures is None:
                wait(lambda: True if MPI.Request.Testall(started) else None)
            else:  # one at a time: Testall says only that one of them failed (MPI_ERR_IN_STATUS)
                wait(lambda: True if all(req.Test() for req in started) else None)
        except MPI.Exception as exc:
            # After a failure Open MPI's nonblocking collectives may also end with a generic error
            # (MPI_ERR_OTHER from a schedule's next round, measured): a failure all the same where a
            # member is known to have failed, or the communicator was revoked.
            if self.failures is None:
                raise
            self._learn("collective")
            if not (ulfm.is_failure(exc) or self.workers.Is_revoked()
                    or any(m in self.failures.known for m in self.members)):
                raise
            ok = False
            ulfm.revoke(self.workers)  # the others may be waiting for a rank that now waits for nothing
            for req in started:
                wait(lambda: True if ulfm.ended(req) else None, "the failed collective to end")
        if self.failures is None:
            return
        if ulfm.agree(self.workers, ok, lambda test: wait(test, f"the survivors to agree on {what}")):
            return
        self.workers = ulfm.shrink(self.workers)
        self.members = ulfm.members(self.workers, self.world)
        raise Shrunk()

    def _wait(self, test: Callable[[], T | None], timeout: float, what: str, fail: bool = True,
              spin: float = SPIN_S, peer: int | None = None, nap: float | None = None,
              patience: float = YIELD_S, first: float = FIRST_SLEEP_S) -> T | None:
        """``wait_for``; on rank 0 a failure notice from a worker ends the wait (``PeerFailure``); on
        every rank the ``on_wait`` hook and heartbeats run while it waits."""

        def watched() -> T | None:
            self.tick()
            return test()

        return wait_for(watched, timeout, what, fail, spin, peer, self.nap if nap is None else nap, patience, first)

    def tick(self) -> None:
        """Between operations and while waiting: notices and heartbeats, then the ``on_wait`` hook; at
        most every TICK_S (a server applying thousands of updates a second would spend a third of its
        time here otherwise)."""
        now = time.monotonic()
        if now < self._next_tick:
            return
        self._next_tick = now + TICK_S
        if now >= self._next_parent_check:
            self._next_parent_check = now + PARENT_CHECK_S
            self.check_launcher()
        if self.failures is not None and now >= self._next_failure_check:
            self._next_failure_check = now + FAILURE_CHECK_S
            self._learn("notification")
        if self.rank == 0:
            self.check_peers()
        self.beat()
        if self.on_wait is not None:
            self.on_wait()

    # --- failures -----------------------------------------------------------------------------
    def _watch_launcher(self) -> None:
        """A rank blocked inside MPI never reaches ``check_launcher``; MPI calls release the GIL, so this
        thread still runs: once the launcher has been gone ORPHAN_WATCHDOG_S and the rank has not
        noticed (or ORPHAN_GRACE_S and it has not ended), it ends the process."""
        gone_since = math.inf
        while True:
            time.sleep(PARENT_CHECK_S)
            if os.getppid() == self.parent:
                continue
            gone_since = min(gone_since, time.monotonic())
            if time.monotonic() - gone_since > (ORPHAN_GRACE_S if self.orphaned else ORPHAN_WATCHDOG_S):
                try:
                    print(f"hpcbench: error: rank {self.rank} on {self.host}: the launcher that started it (pid "
                          f"{self.parent}) has gone and this rank is stuck; it ends now", file=sys.stderr, flush=True)
                finally:
                    os._exit(1)

    def check_launcher(self) -> None:
        """Raise ``LauncherGone`` if the process that started this rank has died (this rank was
        re-parented): the run ends, with a record, instead of running to the end of its budget."""
        if os.getppid() != self.parent:
            self.orphaned = True
            raise LauncherGone(f"the launcher that started this rank (pid {self.parent}) has gone, so nothing "
                               "would end this rank: it ends the run itself")

    def failed(self) -> frozenset[int]:
        """The ranks this rank knows to have failed: none without ULFM (a failure ends the run)."""
        if self.failures is None:
            return frozenset()
        self._learn("notification")
        return frozenset(self.failures.known)

    def _learn(self, how: str) -> None:
        """Ask ULFM which ranks have failed, and forget the new ones: their receives, heartbeats and
        sends. A worker that learns that rank 0 failed ends the run: rank 0 held the model and the
        run's record (its file keeps what it last wrote)."""
        assert self.failures is not None
        new = self.failures.learn(how)
        for rank in new:
            for channel in self.channels.values():
                channel.forget(rank)
            if rank in self._beat_from:
                i = self._beat_from.index(rank)
                self._forgotten.append(self._beats.pop(i))
                del self._beat_bufs[i], self._beat_from[i]
                self.last_heard.pop(rank, None)
        if 0 in new and self.rank != 0:
            raise PeerFailure(f"{self.name(0)} has failed (MPI reported it): it held the model and the run's "
                              "record, so the run ends; its result file keeps what it last wrote")

    def _survive(self, exc: BaseException, how: str) -> bool:
        """Whether ``exc`` is ULFM reporting a failure (then learned, found by ``how``), which the
        caller outlives; False for any other error, and for any error without ULFM."""
        if self.failures is None or not ulfm.is_failure(exc):
            return False
        self._learn(how)
        return True

    def failure_log(self) -> dict[int, tuple[float, str]]:
        return {} if self.failures is None else {r: (f.t, f.how) for r, f in self.failures.known.items()}

    def _gone(self, rank: int) -> bool:
        return self.failures is not None and rank in self.failures.known

    def check_peers(self) -> None:
        """Rank 0: raise ``PeerFailure`` if a worker has said it failed."""
        status = MPI.Status()
        if self._notice_req is None:
            return
        try:
            if not self._notice_req.Test(status):
                return
        except MPI.Exception as exc:  # a sender may have failed: acknowledged, the receive goes on
            if not self._survive(exc, "notice"):
                raise
            return
        self._notice_req = None
        notice = json.loads(self._notice[:status.Get_count(MPI.BYTE)].tobytes())
        raise PeerFailure(f"rank {status.Get_source()} on {notice['host']}: {notice['error']}", notice["status"])

    def start_heartbeats(self, every: float, deadline: float) -> None:
        """Training begins: rank 0 and the workers tell each other every ``every`` seconds that they are
        there; a peer silent for ``deadline`` seconds ends the run naming it (a stopped or lost rank
        that nobody happens to be waiting for, e.g. one worker of a parameter server)."""
        self._beat_every, self._beat_deadline = every, deadline
        now = time.monotonic()
        for src in (range(1, self.size) if self.rank == 0 else (0,)):
            buf = np.zeros(1, dtype=np.uint8)
            req = self.world.Recv_init([buf, MPI.BYTE], src, HEARTBEAT_TAG)
            req.Start()
            self._beats.append(req)
            self._beat_bufs.append(buf)
            self._beat_from.append(src)
            self.last_heard[src] = now
        self._next_beat = now

    def beat(self) -> None:
        if not self._beat_every:
            return
        now = time.monotonic()
        while self._beats:
            try:
                i, done = MPI.Request.Testany(self._beats)
            except MPI.Exception as exc:  # a watched rank failed: forgotten, the others are tested next tick
                if not self._survive(exc, "heartbeat"):
                    raise
                break
            if not done or i == MPI.UNDEFINED:
                break
            self.last_heard[self._beat_from[i]] = now
            self._beats[i].Start()
        if now >= self._next_beat:
            self._next_beat = now + self._beat_every
            for dst in list(self._beat_from):
                try:
                    self.world.Isend([BEAT, MPI.BYTE], dst, HEARTBEAT_TAG).Free()
                except MPI.Exception as exc:
                    if not self._survive(exc, "heartbeat"):
                        raise
            quiet = self.silent(self._beat_deadline, now)
            if quiet:  # all of them: a rank blocked in a transfer to a stopped one falls silent too
                raise stopped_answering(quiet, self.name)

    def silent(self, longer_than: float, now: float | None = None) -> list[tuple[int, float]]:
        """The peers not heard from for ``longer_than`` seconds, as (rank, seconds), longest first."""
        now = time.monotonic() if now is None else now
        quiet = [(r, now - t) for r, t in self.last_heard.items() if now - t > longer_than]
        return sorted(quiet, key=lambda q: -q[1])

    def _sent(self, req: Any) -> bool:
        """Whether a pickled send is done (or its destination failed)."""
        try:
            return bool(req.test()[0])
        except MPI.Exception as exc:
            if not self._survive(exc, "send"):
                raise
            return True

    def _stop_heartbeats(self) -> None:
        """Receive the heartbeats still unmatched (MPI_Finalize refuses a communicator that has some)
        and free the receives. Messages between two ranks arrive in order, so after a barrier every
        heartbeat sent before it is here."""
        self._beat_every = 0.0
        sink = np.zeros(1, dtype=np.uint8)
        for req, src in zip(self._beats, self._beat_from):
            if not req.Test():
                req.Cancel()
                req.Wait()
            req.Free()
            while self.world.Iprobe(src, HEARTBEAT_TAG):
                self.world.Recv([sink, MPI.BYTE], src, HEARTBEAT_TAG)
        self._beats.clear()
        self._beat_bufs.clear()
        self._beat_from.clear()

    def name(self, rank: int) -> str:
        return f"rank {rank} on {self.hosts[rank]}" if rank < len(self.hosts) else f"rank {rank}"

    def tell_failure(self, status: str, error: str, grace: float) -> None:
        """A worker that cannot go on: tell rank 0 why, then give it ``grace`` seconds to keep a record of
        the run (rank 0 ends every rank when it has; if it never answers, the caller aborts)."""
        if self._gone(0):  # no one to tell
            return
        text = json.dumps({"status": status, "host": self.host, "error": error[:1000]}).encode()
        buf = np.frombuffer(text[:NOTICE_BYTES], dtype=np.uint8).copy()
        deadline = time.monotonic() + grace
        try:
            req = self.world.Isend([buf, MPI.BYTE], 0, NOTICE_TAG)
            while time.monotonic() < deadline:
                req.Test()
                time.sleep(0.01)
        except MPI.Exception as exc:  # rank 0 failed meanwhile
            if not ulfm.is_failure(exc):
                raise

    def worker_barrier(self, timeout: float) -> None:
        self._collective([self.workers.Ibarrier()], timeout, "a barrier")

    def world_barrier(self, timeout: float, what: str = "a barrier") -> None:
        """Every rank here; rank 0 names a rank that does not come within ``timeout``."""
        self.exchange(None, timeout, what)

    def collect(self, obj: object, timeout: float, what: str) -> list[Any] | None:
        """Every rank's ``obj`` on rank 0 (None elsewhere), each wait bounded: rank 0 names a rank
        that has not sent within ``timeout``; a worker gives up after ``timeout`` + margin."""
        if self.rank != 0:
            req = self.objects.isend(obj, 0, GATHER_TAG)
            self._wait(lambda: True if self._sent(req) else None, timeout + WORKER_MARGIN_S,
                       f"rank 0 to take part in {what}", peer=0)
            return None
        out: list[Any] = [obj] + [None] * (self.size - 1)
        for src in range(1, self.size):
            msg = self._wait(lambda: self._probe(src, GATHER_TAG), timeout,
                             f"{self.name(src)} to take part in {what}", peer=src)
            assert msg is not None
            out[src] = None if msg is GONE else msg.recv()  # a failed rank's part is None
        return out

    def _probe(self, src: int, tag: int) -> Any:
        """A message of ``src``'s under ``tag`` that has come (to receive), GONE if ``src`` has failed,
        else None."""
        if self._gone(src):
            return GONE
        try:
            return self.objects.improbe(src, tag)
        except MPI.Exception as exc:
            if not self._survive(exc, "receive"):
                raise
            return GONE if self._gone(src) else None

    def exchange(self, obj: object, timeout: float, what: str) -> list[Any]:
        """Every rank's ``obj`` on every rank, in rank order, through rank 0 (see ``collect``)."""
        gathered = self.collect(obj, timeout, what)
        if self.rank == 0:
            reqs = [self.objects.isend(gathered, dst, SCATTER_TAG) for dst in range(1, self.size) if not self._gone(dst)]
            self._wait(lambda: True if all(self._sent(r) for r in reqs) else None, timeout,
                       f"every rank to receive {what}")
            assert gathered is not None
            return gathered
        msg = self._wait(lambda: self._probe(0, SCATTER_TAG), timeout + WORKER_MARGIN_S,
                         f"rank 0 to answer in {what}", peer=0)
        assert msg is not None and msg is not GONE  # a worker ends the run when rank 0 fails
        return msg.recv()

    # --- clocks and placement -----------------------------------------------------------------
    @staticmethod
    def wtime() -> float:
        return MPI.Wtime()

    def clock_offsets(self, timeout: float, rounds: int = 8) -> np.ndarray | None:
        """On rank 0: each rank's clock minus rank 0's, from the ping-pong with the shortest round trip."""
        ping = np.zeros(1, dtype=np.float64)

        def transfer(start: Callable[..., MPI.Request], peer: int, limit: float) -> None:
            req = start([ping, MPI.DOUBLE], peer, CLOCK_TAG)
            who = self.name(peer)
            self._wait(lambda: True if req.Test() else None, limit, f"{who} in the clock synchronisation",
                       spin=limit, peer=peer)

        if self.rank != 0:
            for _ in range(rounds):
                transfer(self.world.Irecv, 0, timeout + WORKER_MARGIN_S)
                ping[0] = MPI.Wtime()
                transfer(self.world.Isend, 0, timeout + WORKER_MARGIN_S)
            return None
        offsets = np.zeros(self.size)
        for rank in range(1, self.size):
            best = np.inf
            for _ in range(rounds):
                t0 = MPI.Wtime()
                transfer(self.world.Isend, rank, timeout)
                transfer(self.world.Irecv, rank, timeout)
                t1 = MPI.Wtime()
                if t1 - t0 < best:
                    best = t1 - t0
                    offsets[rank] = ping[0] - (t0 + t1) / 2
        return offsets

    def oversubscribed(self, ranks_per_core: float) -> None:
        """More ranks than cores on this node: never spin while waiting, and workers sleep longer
        between tests the more ranks share a core (rank 0 serves them all, so it stays prompt)."""
        if ranks_per_core > 1:
            self.spin = self.spin_collective = 0.0
            if self.rank != 0:
                self.nap = MAX_SLEEP_S * ranks_per_core
        if ranks_per_core > YIELDING_RANKS_PER_CORE:  # so many yielding ranks would take turns for nothing
            self.patience_collective = YIELD_S

    def node_local(self) -> tuple[int, int]:
        """(rank among the ranks on this node, number of ranks on this node)."""
        return self.local_rank, self.local_size

    def abort(self, code: int) -> None:
        # MPI_Abort asks the launcher, which is gone; or, under ULFM, rank 0 has failed and every worker
        # learns it and ends by itself (an abort then hung Open MPI 5's launcher in 2 of 10 runs here):
        # end this process directly.
        if self.orphaned or (self.failures is not None and 0 in self.failures.known):
            time.sleep(ABORT_PAUSE_S)
            os._exit(code)
        # Hydra reads a rank's stderr and its abort on different sockets: a line printed just before
        # MPI_Abort was lost in 3 of 40 runs here (and once in CI, leaving a failed run with no reason).
        time.sleep(ABORT_PAUSE_S)
        self.world.Abort(code)

    def _stop_listening(self) -> None:
        if self._notice_req is not None:
            self._notice_req.Cancel()
            self._notice_req.Wait()
            self._notice_req = None

    def finalize(self) -> None:
        self._stop_heartbeats()
        self._stop_listening()
        self.workers.Free()
        if self.failures is not None and self.failures.known:
            # Open MPI 5.0's fault-tolerant MPI_Finalize (it agrees over the survivors, then fences with the
            # runtime) hung in 1 of 12 runs that had outlived a worker here, every survivor inside it: a rank
            # whose run is done and recorded ends without it, which ULFM's launcher takes as a clean end.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        MPI.Finalize()


_BF16_SUM: list[MPI.Op] = []


def bf16_sum() -> MPI.Op:
    """The bfloat16 sum as an MPI reduction over uint16 bit patterns (MPI has no bfloat16 type)."""
    if not _BF16_SUM:
        def add(into: Any, inout: Any, _datatype: Any) -> None:
            target = np.frombuffer(inout, np.uint16)
            target[...] = add_bf16(np.frombuffer(into, np.uint16), target)

        _BF16_SUM.append(MPI.Op.Create(add, commute=True))
    return _BF16_SUM[0]
