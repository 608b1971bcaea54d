"""Ranks that outlive a failed one (Open MPI's ULFM): what MPI says failed, and the workers'
communicator agreed on and shrunk to the survivors.

Only ULFM detects failures here (hpcbench has no detector of its own): an operation that involves a
failed rank raises one of ``FAILURE_CLASSES``, and every rank learns of the failure within
milliseconds from the runtime, whatever it is doing, the next time it calls into MPI (measured here:
10-16 ms after a SIGKILL, 4 ranks on one node).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from hpcbench.comm.mpilib import MPI

# A rank this operation needed has failed; one (any source) may have; the communicator was revoked
# by a survivor that met a failure first, so that no one waits for a message that will not come.
FAILURE_CLASSES = (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING, MPI.ERR_REVOKED)
# A tag no message carries: a probe for it never matches, so it always runs MPI's progress (a probe
# that matches a message already queued returns without, and the runtime's news then never arrives
# while other ranks keep sending: Open MPI 5, 5 hangs in 16 runs of tests/mpi_programs/dead_reader.py).
NEVER_SENT_TAG = 32_767


def is_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is MPI saying that a rank failed (rather than a bug of ours or of MPI)."""
    return isinstance(exc, MPI.Exception) and exc.Get_error_class() in FAILURE_CLASSES


class Failure(NamedTuple):
    """A rank this rank learned has failed: when (its clock) and by what."""

    t: float
    how: str


class Failures:
    """The failed ranks of ``comm`` this rank knows of, learned from ULFM (acknowledged, so that
    receives from any source go on)."""

    def __init__(self, comm: MPI.Comm, clock: Callable[[], float]) -> None:
        self.comm, self.clock = comm, clock
        self.known: dict[int, Failure] = {}
        self._all = comm.Get_group()

    def learn(self, how: str) -> list[int]:
        """Ask MPI; → the ranks newly known to have failed (recorded as found by ``how``)."""
        try:  # the runtime's news of a failure reaches a rank only through MPI's progress
            self.comm.Iprobe(MPI.ANY_SOURCE, NEVER_SENT_TAG)
        except MPI.Exception as exc:
            if not is_failure(exc):
                raise
        self.comm.Ack_failed()
        group = self.comm.Get_failed()
        try:
            if group.Get_size() == len(self.known):
                return []
            ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), self._all)
        finally:
            group.Free()
        now = self.clock()
        new = sorted(r for r in ranks if r not in self.known)
        for rank in new:
            self.known[rank] = Failure(now, how)
        return new


def members(comm: MPI.Comm, world: MPI.Comm) -> tuple[int, ...]:
    """The world ranks ``comm`` spans, in its own rank order."""
    group, everyone = comm.Get_group(), world.Get_group()
    try:
        return tuple(MPI.Group.Translate_ranks(group, list(range(group.Get_size())), everyone))
    finally:
        group.Free()
        everyone.Free()


def agree(comm: MPI.Comm, ok: bool, wait: Callable[[Callable[[], Any]], Any]) -> bool:
    """Collective over the survivors of ``comm``: whether every one of them says ``ok``. A failure
    during the agreement itself is acknowledged and the agreement begins again; ``wait``: how to wait
    for a request (a test until it is done), so that the rank ticks meanwhile."""
    while True:
        flag = np.array([1 if ok else 0], dtype=np.int32)
        comm.Ack_failed()
        try:
            req = comm.Iagree(flag)
            wait(lambda: True if req.Test() else None)
        except MPI.Exception as exc:
            if not is_failure(exc):
                raise
            continue
        return bool(flag[0])


def shrink(comm: MPI.Comm) -> MPI.Comm:
    """Collective over the survivors: ``comm`` without its failed ranks (``comm`` is freed). Blocking:
    Open MPI 5.0's nonblocking shrink fails (MPI_ERR_INTERN, measured); the survivors come to it
    straight from their agreement, so none waits long."""
    while True:
        try:
            new = comm.Shrink()
        except MPI.Exception as exc:
            if not is_failure(exc):
                raise
            continue
        comm.Free()
        return new


def revoke(comm: MPI.Comm) -> None:
    """Make every survivor's pending and later operations on ``comm`` fail, so that none waits for a
    message the failed rank's neighbour will no longer send."""
    try:
        comm.Revoke()
    except MPI.Exception as exc:
        if not is_failure(exc):
            raise


def ended(req: MPI.Request) -> bool:
    """Whether ``req`` has ended, well or with an error (a collective that a failure cut short)."""
    try:
        return bool(req.Test())
    except MPI.Exception:
        return True
