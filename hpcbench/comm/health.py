"""A rank's health and its peers': failures MPI reports (under ULFM), failure notices from workers,
heartbeats, a launcher that has gone, and how a rank ends when the run cannot go on. A part of
``MpiComm`` (``comm/mpi.py``), which holds the state it declares below."""
from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable

import numpy as np

from hpcbench.comm import openmpi, ulfm
from hpcbench.comm.channels import Channel
from hpcbench.comm.mpilib import MPI
from hpcbench.errors import LauncherGone, PeerFailure, RunEnded, stopped_answering

NOTICE_TAG = 32_001  # a worker telling rank 0 how it failed, before it stops
HEARTBEAT_TAG = 32_004  # "still here", between rank 0 and each worker while training
END_TAG = 32_005  # rank 0 to every worker: the run has ended (rank 0 has said why and kept the record)
BEAT = np.zeros(1, dtype=np.uint8)  # what a heartbeat carries (never changes, so a send may outlive its call)
NOTICE_BYTES = 4096
ABORT_PAUSE_S = 0.2  # for the launcher to forward what this rank printed before it ends every rank
END_SEND_S = 1.0  # how long rank 0 gives its "the run has ended" messages to leave before it ends
END_WAIT_S = 30.0  # a worker told so, where MPI_Abort ends every rank: how long it waits for rank 0's to end it
CANCEL_TRIES = 3  # waits for the notices' cancelled receive, each after acknowledging the failures known
TICK_S = 0.001  # notices, heartbeats, faults and flushes are looked at this often, not at every operation
FAILURE_CHECK_S = 0.005  # under ULFM, how often a rank asks which ranks failed (10 us each time)
PARENT_CHECK_S = 0.5  # how often a rank looks whether its launcher is still there
# A rank whose launcher has gone and that has not noticed within this long is blocked inside MPI (an
# operation on a rank that has ended): a watchdog thread ends it. One that noticed gets longer to keep
# the run's record (rank 0) or tell rank 0 (a worker), then the watchdog ends it whatever it is doing.
ORPHAN_WATCHDOG_S = 2.0
ORPHAN_GRACE_S = 60.0


class Health:
    """Failures, notices and heartbeats of ``MpiComm``: its state is made by ``start_health``."""

    world: MPI.Intracomm
    rank: int
    size: int
    host: str
    hosts: list[str]
    channels: dict[str, Channel]
    failures: ulfm.Failures | None
    on_wait: Callable[[], None] | None

    def start_health(self) -> None:
        """Watch the launcher from a thread; on rank 0, listen for failure notices from the first moment
        (every wait checks for one); no heartbeats until ``start_heartbeats``."""
        self._next_tick = 0.0
        self._next_failure_check = 0.0
        self._forgotten: list[MPI.Request] = []  # receives from failed ranks, kept from the collector
        # The launcher's proxy that started this rank: if it dies (killed, its node's daemon gone),
        # the rank is re-parented and nothing would ever end it.
        self.parent = os.getppid()
        self._next_parent_check = 0.0
        self.orphaned = False
        threading.Thread(target=self._watch_launcher, name="hpcbench-launcher-watchdog", daemon=True).start()
        self._notice = np.zeros(NOTICE_BYTES, dtype=np.uint8)
        self._notice_req: MPI.Request | None = None
        if self.rank == 0:
            self._notice_req = self.world.Irecv([self._notice, MPI.BYTE], MPI.ANY_SOURCE, NOTICE_TAG)
        self._end = np.zeros(1, dtype=np.uint8)
        self._end_req: MPI.Request | None = None
        self.ended = False  # rank 0 said the run has ended
        if self.rank != 0:
            self._end_req = self.world.Irecv([self._end, MPI.BYTE], 0, END_TAG)
        self._beats: list[MPI.Prequest] = []  # one pre-posted receive per watched peer
        self._beat_bufs: list[np.ndarray] = []
        self.last_heard: dict[int, float] = {}  # when each watched peer last said it was there
        self._beat_from: list[int] = []  # the peers watched: every worker on rank 0, rank 0 on a worker
        self._beat_every = 0.0
        self._beat_deadline = 0.0
        self._next_beat = 0.0
        # Rank 0: each worker's heartbeats carry when the worker sent them (its clock), so a silence is
        # measured by the worker's own beats, whatever rank 0 was doing meanwhile: one longer than the
        # stall threshold, then a beat again, is a stall (worker, its clock when it fell silent, seconds).
        self._stall_s = math.inf
        self._beat_sent: dict[int, float] = {}
        self.stalls: list[tuple[int, float, float]] = []
        self._stamps: list[tuple[MPI.Request, np.ndarray]] = []  # a worker's beats on their way, with their stamps

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
        else:
            self.check_ended()
        self.beat()
        if self.on_wait is not None:
            self.on_wait()

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
                    openmpi.exit_now(1)

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

    def stall_log(self) -> list[tuple[int, float, float]]:
        return list(self.stalls)

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

    def start_heartbeats(self, every: float, deadline: float, stall: float = math.inf) -> None:
        """Training begins: rank 0 and the workers tell each other every ``every`` seconds that they are
        there; a peer silent for ``deadline`` seconds ends the run naming it (a stopped or lost rank
        that nobody happens to be waiting for, e.g. one worker of a parameter server); a worker silent
        for over ``stall`` seconds that is heard again is kept in ``stalls``."""
        self._beat_every, self._beat_deadline, self._stall_s = every, deadline, stall
        now = time.monotonic()
        for src in (range(1, self.size) if self.rank == 0 else (0,)):
            buf = np.zeros(1, dtype=np.float64)  # a worker's stamp; rank 0's beats are one byte
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
            src = self._beat_from[i]
            self.last_heard[src] = now
            self._heard_at(src, float(self._beat_bufs[i][0]))
            self._beats[i].Start()
        if now >= self._next_beat:
            self._next_beat = now + self._beat_every
            for dst in list(self._beat_from):
                try:
                    self._send_beat(dst)
                except MPI.Exception as exc:
                    if not self._survive(exc, "heartbeat"):
                        raise
            quiet = self.silent(self._beat_deadline, now)
            if quiet:  # all of them: a rank blocked in a transfer to a stopped one falls silent too
                raise stopped_answering(quiet, self.name)

    def _send_beat(self, dst: int) -> None:
        """Rank 0's beat is a byte; a worker's carries when it was sent (kept until it has left)."""
        if self.rank == 0:
            self.world.Isend([BEAT, MPI.BYTE], dst, HEARTBEAT_TAG).Free()
            return
        self._stamps = [(req, stamp) for req, stamp in self._stamps if not ulfm.ended(req)]
        stamp = np.array([MPI.Wtime()])
        self._stamps.append((self.world.Isend([stamp, MPI.BYTE], dst, HEARTBEAT_TAG), stamp))

    def _heard_at(self, src: int, sent: float) -> None:
        """Rank 0: a beat ``src`` sent at ``sent`` (its clock); after a silence past the threshold, a stall."""
        if self.rank != 0:
            return
        last = self._beat_sent.get(src)
        if last is not None and sent - last > self._stall_s:
            self.stalls.append((src, last, sent - last))
        self._beat_sent[src] = sent

    def check_ended(self) -> None:
        """A worker: raise ``RunEnded`` once rank 0 has said the run has ended."""
        if self._end_req is None:
            return
        try:
            done = self._end_req.Test()
        except MPI.Exception as exc:  # rank 0 failed: learned (and raised) as any failure of rank 0
            self._end_req = None
            if not self._survive(exc, "receive"):
                raise
            return
        if done:
            self._end_req, self.ended = None, True
            raise RunEnded("rank 0 ended the run")

    def silent(self, longer_than: float, now: float | None = None) -> list[tuple[int, float]]:
        """The peers not heard from for ``longer_than`` seconds, as (rank, seconds), longest first."""
        now = time.monotonic() if now is None else now
        quiet = [(r, now - t) for r, t in self.last_heard.items() if now - t > longer_than]
        return sorted(quiet, key=lambda q: -q[1])

    def _stop_heartbeats(self) -> None:
        """Receive the heartbeats still unmatched (MPI_Finalize refuses a communicator that has some)
        and free the receives. Messages between two ranks arrive in order, so after a barrier every
        heartbeat sent before it is here."""
        self._beat_every = 0.0
        sink = np.zeros(1, dtype=np.float64)
        for req, _ in self._stamps:
            req.Wait()
        self._stamps.clear()
        for req, buf, src in zip(self._beats, self._beat_bufs, self._beat_from):
            if req.Test():
                self._heard_at(src, float(buf[0]))
            else:
                req.Cancel()
                req.Wait()
            req.Free()
            while self.world.Iprobe(src, HEARTBEAT_TAG):
                self.world.Recv([sink, MPI.BYTE], src, HEARTBEAT_TAG)
                self._heard_at(src, float(sink[0]))
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
                self.check_ended()
                time.sleep(0.01)
        except MPI.Exception as exc:  # rank 0 failed meanwhile
            if not ulfm.is_failure(exc):
                raise
        except RunEnded:  # rank 0 kept the record and ended the run: this rank ends (``abort``)
            pass

    def abort(self, code: int) -> None:
        # This process ends directly where MPI_Abort would ask the launcher, which is gone; where rank 0 has
        # said the run ended (under ULFM: rank 0's MPI_Abort ends no other rank; elsewhere it is on its way,
        # and ends this rank first); or where, under ULFM, rank 0 has failed and every worker learns it and
        # ends by itself (an abort then hung Open MPI 5's launcher in 2 of 10 runs here).
        if self.ended and self.failures is None:  # unless the launcher that would end this rank has gone
            deadline = time.monotonic() + END_WAIT_S
            while time.monotonic() < deadline and os.getppid() == self.parent:
                time.sleep(0.05)
        if self.orphaned or self.ended or (self.failures is not None and 0 in self.failures.known):
            time.sleep(ABORT_PAUSE_S)
            openmpi.exit_now(code)
        if self.rank == 0:
            # Each worker learns first that the run has ended and ends without a line of its own (Open MPI's
            # launcher stops every rank with SIGTERM after an abort, and each said "stopped by SIGTERM"). Under
            # ULFM, MPI_Abort ends no other rank (measured with Open MPI 5.0: the workers went on until their
            # own timeouts, 20-30 s, and blamed rank 0 for the wait): this message is what ends them.
            self._tell_workers_the_run_ended()
            if self.failures is not None:
                time.sleep(ABORT_PAUSE_S)
                openmpi.exit_now(code)
        # Hydra reads a rank's stderr and its abort on different sockets: a line printed just before
        # MPI_Abort was lost in 3 of 40 runs here (and once in CI, leaving a failed run with no reason).
        time.sleep(ABORT_PAUSE_S)
        openmpi.settle()
        self.world.Abort(code)

    def _tell_workers_the_run_ended(self) -> None:
        """Rank 0: "the run has ended" to every worker not known to have failed, then up to END_SEND_S for
        the messages to leave (a stopped worker reads its message when it comes back)."""
        reqs = []
        for dst in range(1, self.size):
            if self._gone(dst):
                continue
            try:
                reqs.append(self.world.Isend([BEAT, MPI.BYTE], dst, END_TAG))
            except MPI.Exception as exc:
                if not ulfm.is_failure(exc):
                    raise
        deadline = time.monotonic() + END_SEND_S
        while reqs and time.monotonic() < deadline:
            reqs = [r for r in reqs if not ulfm.ended(r)]  # (a worker that failed meanwhile: nothing to send)
            time.sleep(0.01)

    def _stop_listening(self) -> None:
        if self._end_req is not None:  # a worker's: the run ended well, rank 0 sends nothing now
            end, self._end_req = self._end_req, None
            end.Cancel()
            end.Wait()
        if self._notice_req is None:
            return
        req, self._notice_req = self._notice_req, None
        req.Cancel()
        for _ in range(CANCEL_TRIES):
            try:
                req.Wait()
                return
            except MPI.Exception as exc:
                # Under ULFM a receive from any source that failures left pending (MPI_ERR_PROC_FAILED_PENDING:
                # every worker gone, the notices' receive still posted) ends once they are acknowledged.
                if not ulfm.is_failure(exc):
                    raise
                self.world.Ack_failed()
        # still pending: this rank ends without it (a rank that outlived failures skips MPI_Finalize)
