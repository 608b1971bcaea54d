"""The payload workload: real messages of a chosen size, modeled compute, no model and no torch.

Algorithms exchange real float32 vectors of ``payload.params`` elements through their real programs;
the runtime makes each gradient last the time the simulator's compute model draws for that worker
(the same seeded gamma stream), so a real run and a simulation of it can be compared step for step.
Nothing is learned: losses and accuracies are NaN, every other number in the result file is measured.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcbench.ranges import bounded
from hpcbench.workload.base import Ready, last_of
from hpcbench.workload.compute import ComputeModel, PlainSpec
from hpcbench.workload.datasets import Dataset

# The gradient's value: small and constant, so parameters drift slowly and stay finite for any budget.
GRADIENT_VALUE = 1e-6
SIDE = 256
PIECE = SIDE * SIDE  # floats per stand-in "parameter" (256 KiB), the unit buckets are built from
MAX_PARAMS = 2**31 // 4  # a message of at most 2 GiB: MPI counts are 32-bit in the calls every algorithm uses


@dataclass(frozen=True)
class PayloadOptions:
    """``--set payload.KEY=VALUE``; the compute model comes from ``--compute gamma:shape=K,mean=S``."""

    # float32 elements per message (25.6M: a ResNet-50-sized message; at most 2 GiB of float32)
    params: int = bounded(1_000_000, low=1, high=MAX_PARAMS, unit="floats")
    compute_shape: float = bounded(100.0, above=0)  # gamma shape of one batch's modeled compute time
    compute_mean_s: float = bounded(0.05, low=0, unit="seconds")  # its mean; 0 = no compute at all


class Payload:
    """What a worker computes with, for ``--model payload``: the ``Trainer`` interface without a model."""

    def __init__(self, options: PayloadOptions, data: Dataset, workers: int, seed: int, values: bool = True) -> None:
        """``values``: False for its sizes, shapes and compute model without its initial vector (a dry run,
        a simulation with numerics off), which at the largest size is 2 GiB."""
        self.options = options
        self.data = data
        # Each worker's compute times: the simulator's model, with the same seeded streams.
        self.compute: ComputeModel | None = ComputeModel(PlainSpec(workers, options.compute_shape,
                                                                 options.compute_mean_s), seed, {})
        self.size = options.params
        self.initial = np.zeros(self.size if values else 0, np.float32)
        # No parameters: pieces of PIECE floats stand in for them, so buckets come out near their size.
        self.bounds = tuple(range(0, self.size, PIECE)) + (self.size,)
        # Each whole piece a square matrix, as a layer's weights are; the rest a vector.
        self.shapes: tuple[tuple[int, ...], ...] = tuple((SIDE, SIDE) if stop - start == PIECE else (stop - start,)
                            for start, stop in zip(self.bounds, self.bounds[1:]))

    @property
    def nbytes(self) -> int:
        return self.size * 4

    def batch(self, indices: np.ndarray) -> tuple[np.ndarray, None]:
        return indices, None

    def gradient(self, params: np.ndarray, x: object, y: object, buckets: tuple[tuple[int, int], ...] = (),
                 ready: Ready | None = None, out: np.ndarray | None = None) -> tuple[np.ndarray, float, int]:
        """A vector of the payload's size (``out``, else a fresh one) filled, as a real gradient is
        written; NaN loss. The buckets are ready at once: when they are in a step is the compute
        model's (``ready_fractions``)."""
        grad = np.empty(self.size, np.float32) if out is None else out
        grad.fill(GRADIENT_VALUE)
        if ready is not None:
            for k in range(len(buckets)):
                ready(k, grad)
        return grad, float("nan"), 0

    def warm_up(self, indices: np.ndarray, steps: int) -> float:
        """Seconds the last of ``steps`` gradients took to write (the modeled compute comes on top)."""
        return last_of(steps, lambda: self.gradient(self.initial, indices, None))

    def evaluate(self, params: np.ndarray, test: int, val: int) -> tuple[float, float, float, float]:
        return (float("nan"),) * 4
