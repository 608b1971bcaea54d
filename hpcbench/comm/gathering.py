"""Exchanges through rank 0 with every wait bounded (set-up agreement, the final gather, barriers of
the world) and the clock synchronisation: a part of ``MpiComm`` (``comm/mpi.py``)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hpcbench.comm.health import Health
from hpcbench.comm.mpilib import MPI, pkl5
from hpcbench.comm.transport import WORKER_MARGIN_S

GONE = object()  # a probe's answer when the rank probed for has failed
CLOCK_TAG = 32_000
GATHER_TAG = 32_002  # set-up and final exchanges through rank 0 (which names a rank that never arrives)
SCATTER_TAG = 32_003


class Gathering(Health):
    """Pickled exchanges of any size (``objects``) and clock offsets, each wait through ``_wait``."""

    objects: pkl5.Intracomm
    _wait: Callable[..., Any]

    def _sent(self, req: Any) -> bool:
        """Whether a pickled send is done (or its destination failed)."""
        try:
            return bool(req.test()[0])
        except MPI.Exception as exc:
            if not self._survive(exc, "send"):
                raise
            return True

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
            reqs = [self.objects.isend(gathered, dst, SCATTER_TAG) for dst in range(1,
                                                                                    self.size) if not self._gone(dst)]
            self._wait(lambda: True if all(self._sent(r) for r in reqs) else None, timeout,
                       f"every rank to receive {what}")
            assert gathered is not None
            return gathered
        msg = self._wait(lambda: self._probe(0, SCATTER_TAG), timeout + WORKER_MARGIN_S,
                         f"rank 0 to answer in {what}", peer=0)
        assert msg is not None and msg is not GONE  # a worker ends the run when rank 0 fails
        return msg.recv()

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
