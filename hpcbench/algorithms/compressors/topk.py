"""Top-k sparsification with error feedback (Stich et al. 2018, "Sparsified SGD with memory"; as GRACE's
``topk`` compressor with residual memory): each worker sends the k = ⌈ratio·d⌉ elements of its vector
largest in magnitude, with the error of the last call added first, and keeps the rest as the next
error. The workers' choices differ, so the (value, index) pairs are all-gathered, not all-reduced;
every worker adds them up in worker order and divides by n."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hpcbench.algorithms.api import Sub
from hpcbench.algorithms.compressors.base import Compressor, Message, kept, register
from hpcbench.algorithms.ops import Allgather
from hpcbench.ranges import bounded


def largest(vector: np.ndarray, k: int) -> np.ndarray:
    """The indices of the ``k`` elements of ``vector`` largest in magnitude, ascending."""
    if k >= vector.size:
        return np.arange(vector.size)
    return np.sort(np.argpartition(np.abs(vector), vector.size - k)[vector.size - k:])


@register
class TopK(Compressor):
    name = "topk"
    summary = "top-k sparsification with error feedback: the ratio·d largest elements, all-gathered as pairs"
    keeps_error = True

    @dataclass(frozen=True)
    class Options:
        ratio: float = bounded(0.01, above=0, high=1)  # the share of the elements each worker sends

    def __init__(self, rank: int, options: object, size: int, bounds: Sequence[int],
                 shapes: Sequence[tuple[int, ...]], seed: int = 0) -> None:
        super().__init__(rank, options, size, bounds, shapes, seed)
        self.k = kept(self.model_size, self.opts.ratio)
        self.error = np.zeros(0 if self.stand_in else size, np.float32)

    def messages(self, workers: int) -> list[Message]:
        return [Message(Allgather, 8 * self.k)]  # k float32 values and k int32 indices

    def reduce(self, vector: np.ndarray, members: tuple[int, ...]) -> Sub[np.ndarray | None]:
        fed = vector + self.error if self.error_feedback else vector
        chosen = largest(fed, self.k)
        pairs = np.concatenate([fed[chosen].view(np.int32), chosen.astype(np.int32)])
        rows = yield from self.gathered(pairs, members)
        if rows is None:
            return None
        out = np.zeros_like(vector)
        np.add.at(out, rows[:, self.k:].ravel(), rows[:, :self.k].copy().view(np.float32).ravel())
        if self.error_feedback:
            self.error = fed.copy()
            self.error[chosen] = 0.0
        return out * np.float32(1.0 / len(members))
