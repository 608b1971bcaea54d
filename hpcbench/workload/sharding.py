"""Disjoint per-worker shards of the training set and the batch stream each worker draws from."""
from __future__ import annotations

import numpy as np


def shard_indices(n_train: int, workers: int, index: int, seed: int) -> np.ndarray:
    """Worker ``index`` (0-based) of ``workers`` gets every workers-th sample of a seeded permutation."""
    if not 0 <= index < workers:
        raise ValueError(f"worker index {index} outside 0..{workers - 1}")
    order = np.random.default_rng([seed, 0x5A4D]).permutation(n_train)
    return order[index::workers]


class BatchStream:
    """An endless stream of batches from one shard, reshuffled each pass, seeded per worker.

    Batches may straddle a pass boundary so every batch has exactly ``batch_size`` samples and the
    sample count of a run is exactly steps × batch size.
    """

    def __init__(self, shard: np.ndarray, batch_size: int, seed: int, index: int) -> None:
        if len(shard) == 0:
            raise ValueError("empty shard: more workers than training samples")
        self.shard = shard
        self.batch_size = batch_size
        self.seed = seed
        self.index = index
        self.epoch = 0
        self._order = self._shuffle(0)
        self._pos = 0

    def _shuffle(self, epoch: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, self.index, epoch])
        return self.shard[rng.permutation(len(self.shard))]

    def next(self) -> np.ndarray:
        out = np.empty(self.batch_size, dtype=np.int64)
        filled = 0
        while filled < self.batch_size:
            if self._pos == len(self._order):
                self.epoch += 1
                self._order = self._shuffle(self.epoch)
                self._pos = 0
            take = min(self.batch_size - filled, len(self._order) - self._pos)
            out[filled:filled + take] = self._order[self._pos:self._pos + take]
            filled += take
            self._pos += take
        return out
