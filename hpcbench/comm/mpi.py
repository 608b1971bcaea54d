"""The transport over MPI (``hpcbench.comm.transport.Cluster``): windows, channels and collectives of a
run, behind one facade, ``MpiComm``. Its parts: ``windows`` (RMA), ``channels`` (point to point),
``health`` (failures, notices, heartbeats), ``gathering`` (exchanges through rank 0, clocks) and
``polling`` (every blocking wait: a polling loop with a deadline). Only comm/ imports mpi4py
(``mpilib``, which sets Open MPI up first).
"""
from __future__ import annotations

import math
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np

from hpcbench.bfloat16 import add_bf16
from hpcbench.comm import openmpi, ulfm
from hpcbench.comm.channels import Channel
from hpcbench.comm.collectives import spoken
from hpcbench.comm.gathering import Gathering
from hpcbench.comm.health import ABORT_PAUSE_S
from hpcbench.comm.mpilib import MPI, pkl5
from hpcbench.comm.polling import (
    FIRST_SLEEP_S,
    IDLE_FIRST_SLEEP_S,
    IDLE_SLEEP_S,
    MAX_SLEEP_S,
    SPIN_S,
    YIELD_S,
    YIELDING_RANKS_PER_CORE,
    leave_together,
    wait_for,
)
from hpcbench.comm.process import keep_freed_memory, tighten_timer_slack
from hpcbench.comm.transport import Shrunk, message_bytes
from hpcbench.comm.windows import CounterWindow, VersionedWindow, Window
from hpcbench.errors import undeclared_add, undeclared_size
from hpcbench.lost import Lost

__all__ = ["MpiComm", "leave_together", "wait_for"]
T = TypeVar("T")
# Under ULFM, a count of readers on a versioned window that stays this long while readers have failed
# is taken to be theirs (a reader killed while it copied): the owner takes the slot all the same.
STALE_READERS_S = 2.0


def start_allreduce(comm: MPI.Comm, data: np.ndarray, bf16: bool) -> tuple[np.ndarray, MPI.Request]:
    out = np.empty_like(data)
    return out, comm.Iallreduce(data, out, op=bf16_sum() if bf16 else MPI.SUM)


def start_allgather(comm: MPI.Comm, data: np.ndarray, _bf16: bool) -> tuple[np.ndarray, MPI.Request]:
    out = np.empty(data.size * comm.Get_size(), data.dtype)
    return out, comm.Iallgather(data, out)


# Each of comm.collectives' operations as MPI starts it on the workers' communicator: → (the buffer that
# will hold its result, the request).
STARTS: dict[str, Callable[[MPI.Comm, np.ndarray, bool], tuple[np.ndarray, MPI.Request]]] = {
    "Allreduce": start_allreduce,
    "Allgather": start_allgather,
}


class MpiComm(Gathering):
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
        self._cut_short: MPI.Exception | None = None  # a workers' collective's failure met by advance()
        self.members = ulfm.members(self.workers, self.world) if self.rank else ()
        self.survives_failures = self.failures is not None
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
        self.windows: dict[str, Window | VersionedWindow | CounterWindow] = {}
        self.window_sizes: dict[str, int] = {}
        self.channels: dict[str, Channel] = {}
        self._sends: list[tuple[MPI.Request, np.ndarray]] = []  # (request, buffer it sends)
        self.objects = pkl5.Intracomm(self.world)  # pickled exchanges of any size
        self.hosts: list[str] = []  # every rank's host, once the set-up exchange told them
        self.on_wait: Callable[[], None] | None = None  # called on every test of every wait (faults, flushes)
        self.start_health()

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

    def recv(self, channel: str, src: int, timeout: float, told: frozenset[int] = frozenset(),
             calm: float = 0.0) -> tuple[int, np.ndarray] | Lost | None:
        """``told``: the failed workers the caller knows of; a receive from any rank hands back
        ``Lost`` naming the others once nothing else is there, one from a failed rank always.
        ``calm``: where nothing needs this rank inside MPI, it sleeps through that long in naps of
        at most IDLE_SLEEP_S before its usual looks (each look after a sleep costs ~0.1 ms of a core
        on a shared 2-core machine: a coordinator that looked for each report took 10% of a core).
        Not under ULFM: there a rank learns of a failure only when it looks, and the failure costs
        measured (detection, rank 0's wait) must not grow by a nap."""
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
            got = None
            if calm > 0 and self.failures is None:
                nap = calm / math.ceil(calm / IDLE_SLEEP_S)
                got = self._wait(poll, calm, what, fail=False, spin=0.0, patience=0.0, first=nap, nap=nap)
            if got is None:
                got = self._wait(poll, timeout, what, fail=False, spin=0.0, patience=0.0,
                                 first=IDLE_FIRST_SLEEP_S, nap=max(self.nap, IDLE_SLEEP_S))
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
    def collective(self, name: str, data: np.ndarray, timeout: float, bf16: bool = False) -> np.ndarray:
        out, request = STARTS[name](self.workers, data, bf16)
        self._collective([request], timeout, f"the workers' {spoken(name)}")
        return out

    def start_allreduce(self, data: np.ndarray, out: np.ndarray) -> MPI.Request:
        return self.workers.Iallreduce(data, out, op=MPI.SUM)  # a bucket of the gradient, in float32

    def advance(self, started: list[MPI.Request]) -> None:
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
        regrouping = self.wtime()
        if ulfm.agree(self.workers, ok, lambda test: wait(test, f"the survivors to agree on {what}")):
            return
        self.workers = ulfm.shrink(self.workers)
        self.members = ulfm.members(self.workers, self.world)
        raise Shrunk(regrouping)

    def _wait(self, test: Callable[[], T | None], timeout: float, what: str, fail: bool = True,
              spin: float = SPIN_S, peer: int | None = None, nap: float | None = None,
              patience: float = YIELD_S, first: float = FIRST_SLEEP_S) -> T | None:
        """``wait_for``; on rank 0 a failure notice from a worker ends the wait (``PeerFailure``); on
        every rank the ``on_wait`` hook and heartbeats run while it waits."""

        def watched() -> T | None:
            self.tick()
            return test()

        return wait_for(watched, timeout, what, fail, spin, peer, self.nap if nap is None else nap, patience, first)

    def worker_barrier(self, timeout: float) -> None:
        self._collective([self.workers.Ibarrier()], timeout, "a barrier")

    # --- clocks and placement -----------------------------------------------------------------
    @staticmethod
    def wtime() -> float:
        return MPI.Wtime()

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

    def finalize(self, code: int = 0) -> None:
        """As ``Cluster.finalize``: after a failure it outlived, the rank ends here with ``code`` (a run
        that lost every worker: 1, so that the launcher does not take it as a clean end)."""
        if self.failures is not None:
            # Open MPI 5.0's fault-tolerant MPI_Finalize (it agrees over the survivors, then fences with the
            # runtime) hung in 1 of 12 runs that had outlived a worker here, every survivor inside it, and in
            # 1 of 7 where a worker died after training, which the other workers may never hear of: under
            # ULFM a rank whose run is done and recorded ends without it, which ULFM's launcher takes as a
            # clean end. Nothing is tidied for a Finalize that will not come (a wait on a request that a
            # failure left pending is one more place to hang: once in CI, every survivor of a death in set-up
            # had printed its line and the run never ended).
            sys.stdout.flush()
            if code:  # a failed run's line, just printed: for the launcher to pass it on before this rank ends
                time.sleep(ABORT_PAUSE_S)
            openmpi.exit_now(code)
        self._stop_heartbeats()
        self._stop_listening()
        self.workers.Free()
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
