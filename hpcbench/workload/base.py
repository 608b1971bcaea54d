"""What a worker computes with: the interface ``Trainer`` (a real model) and ``Payload`` (messages only) share."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from hpcbench.workload.compute import ComputeModel
from hpcbench.workload.datasets import Dataset

# Called with (k, vector) as soon as bucket k of ``vector`` holds its final gradient, in bucket order.
Ready = Callable[[int, np.ndarray], None]


class Workload(Protocol):
    data: Dataset
    size: int  # float32 parameters in the flat vector the algorithms exchange
    initial: np.ndarray  # the initial flat parameters, identical on every rank
    bounds: tuple[int, ...]  # where each parameter starts in the flat vector, then ``size``
    shapes: tuple[tuple[int, ...], ...]  # each parameter's shape (compression views matrices as such)
    # Modeled compute: each worker's gradient lasts the time this draws (the payload); None: as long
    # as computing it takes.
    compute: ComputeModel | None

    @property
    def nbytes(self) -> int: ...

    def batch(self, indices: np.ndarray) -> tuple[Any, Any]: ...

    def gradient(self, params: np.ndarray, x: Any, y: Any, buckets: tuple[tuple[int, int], ...] = (),
                 ready: Ready | None = None, out: np.ndarray | None = None) -> tuple[np.ndarray, float, int]:
        """(flat float32 gradient at ``params``, loss, correctly classified samples). With ``ready``:
        called for each of ``buckets`` (flat ranges) once the returned vector holds its values. The
        vector is ``out`` when given (written in place), else a new one."""
        ...

    def warm_up(self, indices: np.ndarray, steps: int) -> float:
        """Untimed gradients before the run; → seconds the last one took (NaN for none)."""
        ...

    def evaluate(self, params: np.ndarray, test: int, val: int) -> tuple[float, float, float, float]:
        """(loss, accuracy, validation loss, validation accuracy) of ``params`` on at most ``test`` samples
        of the test set and ``val`` of the validation split (NaN where there is none or none is scored)."""
        ...


def last_of(steps: int, gradient: Callable[[], object]) -> float:
    """Call ``gradient`` ``steps`` times; → seconds the last call took (NaN for none): a warm-up."""
    last = float("nan")
    for _ in range(steps):
        t0 = time.perf_counter()
        gradient()
        last = time.perf_counter() - t0
    return last
