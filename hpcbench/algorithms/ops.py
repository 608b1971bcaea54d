"""Operations an algorithm program yields; a driver (real MPI or simulated) carries each one out.

A program is a generator: ``result = yield op``. Programs never touch MPI, clocks or global RNGs,
which is what lets the same code run under ``hpcbench run`` and ``hpcbench simulate``.
Arrays handed to a driver are copied or consumed before the program resumes, so a program may
reuse its buffers; arrays handed back are the program's to keep. Operations are immutable
NamedTuples rather than frozen dataclasses: they are built on every step of every rank, and a
NamedTuple is several times cheaper to create.
"""
from __future__ import annotations

import math
import re
from typing import NamedTuple

import numpy as np

from hpcbench.lost import Lost as Lost  # not an operation: what one hands back when ranks failed

SERVER = 0  # rank 0: parameter server or coordinator
ANY = -1  # any sender, in arrival order


class Compute(NamedTuple):
    """Worker: gradient of the loss on the next local batch, taken at ``params``. → ``Gradient``.

    With ``buckets`` (flat ranges of the model's vector, in the order the backward pass finishes
    them; every worker at once): the gradient summed over the workers, each bucket all-reduced as
    soon as it is ready while the backward pass goes on (PyTorch DDP's overlap). Without buckets,
    ``out`` (float32, the gradient's size, e.g. a field of the message it goes out in) receives the
    gradient, and the result holds it there: the program is spared a copy of its own."""

    params: np.ndarray
    buckets: tuple[tuple[int, int], ...] = ()
    out: np.ndarray | None = None


class Gradient(NamedTuple):
    grad: np.ndarray
    loss: float  # mean training loss on the batch
    samples: int
    correct: int  # batch samples the model classified right (training accuracy, for free)

    def into(self, out: np.ndarray | None) -> Gradient:
        """This gradient with its vector written into ``out`` (itself when None): ``Compute.out``."""
        if out is None:
            return self
        np.copyto(out, self.grad)
        return self._replace(grad=out)


class Publish(NamedTuple):
    """Overwrite this rank's own ``window`` from byte ``offset`` on; readers see the old or the new
    bytes, never a mix. → None."""

    window: str
    data: np.ndarray
    offset: int = 0


class Read(NamedTuple):
    """One-sided read of ``nbytes`` (-1: all) of ``window`` from byte ``offset`` on, on each rank.
    → list of arrays.

    ``observe``: the read only measures (rank 0 collecting the models it evaluates, after the
    workers are done); the simulator charges it no virtual time.
    """

    window: str
    ranks: tuple[int, ...]
    nbytes: int = -1
    observe: bool = False
    offset: int = 0


class Accumulate(NamedTuple):
    """One-sided element-wise atomic add into ``window`` on ``rank``. → None.

    ``parts`` are (byte offset, typed array) pairs, so one call can add a float64 weight and a
    float32 vector into the same window.
    """

    window: str
    rank: int
    parts: tuple[tuple[int, np.ndarray], ...]


class FetchAdd(NamedTuple):
    """One-sided atomic fetch-and-add of ``value`` to the int64 at the start of ``window`` on ``rank``.

    → the int64 as it was before the add. Atomic across all ranks, with no work by the owner.
    """

    window: str
    rank: int
    value: int


class Drain(NamedTuple):
    """Read this rank's own ``window`` and zero it in one atomic step (a mailbox). → array."""

    window: str


class Send(NamedTuple):
    """Nonblocking send of ``data`` on ``channel`` to ``dest``. → None. ``given``: the program hands
    ``data`` over and never touches it again, so the transport sends it as it is instead of a copy
    (a model-sized message each step is a copy of the model less)."""

    channel: str
    dest: int
    data: np.ndarray
    given: bool = False


# A Recv timeout: wait as long as every rank is alive. For waits whose length follows the run's
# (a coordinator's next progress report): heartbeats end them when a rank stops answering for timeout_s.
WATCHED = math.inf


class Recv(NamedTuple):
    """Next message on ``channel`` from ``src`` (``ANY``: arrival order). → (src, array).

    With ``timeout`` (seconds of the driver's clock) it returns None when nothing came in time;
    0 means "only if already here"; ``WATCHED``: no deadline of its own. Without one the run's own
    timeout applies. ``calm_s``: for about this long no message that needs a prompt answer is
    expected, so a driver whose looks cost processor time may look less often meanwhile (a message
    that comes is still taken at the next look; the simulator, where waiting costs nothing, ignores it).
    """

    channel: str
    src: int = ANY
    timeout: float | None = None
    calm_s: float = 0.0


class Allreduce(NamedTuple):
    """Workers: element-wise sum of ``data`` over all workers, in its own type (float16 sums in
    float16). → array. When workers fail during it, the survivors agree on it and sum again among
    themselves (as a bucketed ``Compute`` does): ``Workers`` then says whom the sum spans."""

    data: np.ndarray
    bf16: bool = False  # ``data`` holds bfloat16 bit patterns (uint16), summed as bfloat16
    # Each worker's bytes as the simulator counts them, where they are not ``data``'s: a compression's
    # declared message, sent as a stand-in (the simulator without numerics); -1: ``data.nbytes``.
    wire: int = -1


class Allgather(NamedTuple):
    """Workers: every worker's ``data`` (one size and type on all), concatenated in worker order →
    array of workers × its size. When workers fail during it, the survivors gather again among
    themselves, as for ``Allreduce``: ``Workers`` then says whose parts it holds, in that order."""

    data: np.ndarray
    wire: int = -1  # as ``Allreduce.wire``


class Barrier(NamedTuple):
    """Workers: wait until every worker (every survivor, after a failure) reaches it. → None."""


class Evaluate(NamedTuple):
    """Rank 0: keep ``params`` as the global model at time ``at`` (a ``Timestamp``; NaN: now); it is scored
    on held-out data after the run. → None."""

    params: np.ndarray
    samples: int
    updates: int
    consensus: float = float("nan")
    at: float = float("nan")


class Timestamp(NamedTuple):
    """The driver's clock, in the seconds ``Evaluate.at`` takes. → float."""


class Poll(NamedTuple):
    """The messages on ``channel`` from ``src`` that are here already, in arrival order; takes no
    time worth a timeline row. → list of (src, array)."""

    channel: str
    src: int = ANY


class Failures(NamedTuple):
    """The worker ranks this rank knows to have failed, as MPI told it (it may learn of a failure a
    few milliseconds after another rank does). → frozenset."""


class Workers(NamedTuple):
    """Workers: the worker ranks the workers' collectives span now (all of them until a failure
    shrinks them to the survivors; every survivor shrinks at the same collective). → tuple."""


class Progress(NamedTuple):
    """Rank 0: how far the run is and how training goes (a driver may show it). → None."""

    samples: int
    loss: float
    accuracy: float


class Record(NamedTuple):
    """Append a row to a log table (the driver stamps the time). → None."""

    table: str
    values: tuple[float, ...]


Op = (Compute | Publish | Read | Accumulate | Drain | Send | Recv | Allreduce | Barrier | Evaluate | FetchAdd
      | Allgather | Progress | Record | Timestamp | Poll | Failures | Workers)
# Operations that take time, in the order of their timeline codes (result files store the codes:
# append new operations at the end, never reorder).
TIMED_OPS: tuple[type, ...] = (Compute, Publish, Read, Accumulate, Drain, Send, Recv, Allreduce, Barrier, Evaluate,
                               FetchAdd, Allgather)
# The workers' collectives with data: each driver carries them out by name (comm/collectives.py says how
# the parts combine, comm/mpi.py how MPI starts each, runtime/sim/costs.py what each costs).
COLLECTIVES: tuple[type, ...] = (Allreduce, Allgather)
# Bookkeeping a driver does between operations, at no cost: no timeline row.
UNTIMED_OPS: tuple[type, ...] = (Progress, Record, Timestamp, Poll, Failures, Workers)
ALL_OPS = TIMED_OPS + UNTIMED_OPS


def handler_name(op: type) -> str:
    """The driver method that carries out ``op``: ``FetchAdd`` → ``fetch_add``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", op.__name__).lower()
