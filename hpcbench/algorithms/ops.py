"""Operations an algorithm program yields; a driver (real MPI or simulated) carries each one out.

A program is a generator: ``result = yield op``. Programs never touch MPI, clocks or global RNGs,
which is what lets the same code run under ``hpcbench run`` and ``hpcbench simulate``.
Arrays handed to a driver are copied or consumed before the program resumes, so a program may
reuse its buffers; arrays handed back are the program's to keep.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SERVER = 0  # rank 0: parameter server or coordinator
ANY = -1  # any sender, in arrival order


@dataclass(frozen=True, slots=True)
class Compute:
    """Worker: gradient of the loss on the next local batch, taken at ``params``. → ``Gradient``."""

    params: np.ndarray


@dataclass(frozen=True, slots=True)
class Gradient:
    grad: np.ndarray
    loss: float
    samples: int


@dataclass(frozen=True, slots=True)
class Publish:
    """Overwrite this rank's own ``window``; readers see the old or the new bytes, never a mix. → None."""

    window: str
    data: np.ndarray


@dataclass(frozen=True, slots=True)
class Read:
    """One-sided read of the first ``nbytes`` (-1: all) of ``window`` on each rank. → list of arrays."""

    window: str
    ranks: tuple[int, ...]
    nbytes: int = -1


@dataclass(frozen=True, slots=True)
class Accumulate:
    """One-sided element-wise atomic add into ``window`` on ``rank``. → None.

    ``parts`` are (byte offset, typed array) pairs, so one call can add a float64 weight and a
    float32 vector into the same window.
    """

    window: str
    rank: int
    parts: tuple[tuple[int, np.ndarray], ...]


@dataclass(frozen=True, slots=True)
class Drain:
    """Read this rank's own ``window`` and zero it in one atomic step (a mailbox). → array."""

    window: str


@dataclass(frozen=True, slots=True)
class Send:
    """Nonblocking send of ``data`` on ``channel`` to ``dest``. → None."""

    channel: str
    dest: int
    data: np.ndarray


@dataclass(frozen=True, slots=True)
class Recv:
    """Next message on ``channel`` from ``src`` (``ANY``: arrival order). → (src, array).

    With ``timeout`` (seconds of the driver's clock) it returns None when nothing came in time;
    0 means "only if already here". Without one the run's own timeout applies.
    """

    channel: str
    src: int = ANY
    timeout: float | None = None


@dataclass(frozen=True, slots=True)
class Allreduce:
    """Workers: element-wise sum of ``data`` over all workers. → array."""

    data: np.ndarray


@dataclass(frozen=True, slots=True)
class Barrier:
    """Workers: wait until every worker reaches it. → None."""


@dataclass(frozen=True, slots=True)
class Evaluate:
    """Rank 0: snapshot ``params`` as the global model now; it is scored on held-out data later. → None."""

    params: np.ndarray
    samples: int
    updates: int
    consensus: float = float("nan")


@dataclass(frozen=True, slots=True)
class Record:
    """Append a row to a log table (the driver stamps the time). → None."""

    table: str
    values: tuple[float, ...]


Op = Compute | Publish | Read | Accumulate | Drain | Send | Recv | Allreduce | Barrier | Evaluate | Record
