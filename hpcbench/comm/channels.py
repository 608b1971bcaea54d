"""Point-to-point channels: fixed-size messages under one tag, each into a buffer of its own."""
from __future__ import annotations

import numpy as np

from hpcbench.comm import ulfm
from hpcbench.comm.mpilib import MPI


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
        src, data = self.sources[i], self.bufs[i]
        self.reqs[i] = MPI.REQUEST_NULL  # (done: MPI made it so) nothing more to hand over from this one
        try:
            self.bufs[i], self.reqs[i] = self._receive(src)
        except MPI.Exception:  # the source failed: its next receive cannot be posted; this message stands
            self.arrived.append((src, data))
            raise
        return src, data

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
        """``src`` has failed: drop its receive, keeping a message that had come. A receive that
        ended already (taken, or failed with its source) holds nothing: its buffer's bytes are stale."""
        if src not in self.sources:  # none posted yet: a slot that never gets one
            self.sources.append(src)
            self.bufs.append(np.empty(0, dtype=np.uint8))
            self.reqs.append(MPI.REQUEST_NULL)
            return
        i = self.sources.index(src)
        req, self.reqs[i] = self.reqs[i], MPI.REQUEST_NULL
        if req == MPI.REQUEST_NULL:  # (a test of it would say "done")
            return
        try:
            done = req.Test()
        except MPI.Exception:
            done = False
        if done:
            self.arrived.append((src, self.bufs[i]))

    def close(self) -> None:
        for req in self.reqs:
            if req != MPI.REQUEST_NULL:
                req.Cancel()
                try:
                    req.Wait()
                except MPI.Exception as exc:  # a receive from a rank that failed unnoticed ends so: nothing lost
                    if not ulfm.is_failure(exc):
                        raise
