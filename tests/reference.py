"""Naive single-process references the MPI runs are checked against (written out, not imported)."""
from __future__ import annotations

import numpy as np

from hpcbench.workload.datasets import load_dataset
from hpcbench.workload.sharding import BatchStream, shard_indices
from hpcbench.workload.trainer import Trainer


def streams(n_train: int, workers: int, batch: int, seed: int) -> list[BatchStream]:
    """The batch streams of workers 1..n exactly as the runs draw them."""
    return [BatchStream(shard_indices(n_train, workers, i, seed), batch, seed, i + 1) for i in range(workers)]


def naive_sgd(theta, grad, buf, lr, momentum, wd):
    d_p = grad + wd * theta
    if momentum:
        buf = d_p.copy() if buf is None else momentum * buf + d_p
        d_p = buf
    return theta - lr * d_p, buf


def union_batch_sgd(model: str, dataset: str, workers: int, steps: int, batch: int, lr: float,
                    momentum: float, wd: float, seed: int) -> np.ndarray:
    """Single-process SGD where step k uses the union of the n workers' k-th batches."""
    data = load_dataset(dataset)
    trainer = Trainer(model, data, seed)
    theta, buf = trainer.initial.astype(np.float32), None
    ss = streams(len(data.y_train), workers, batch, seed)
    for _ in range(steps):
        union = np.concatenate([s.next() for s in ss])
        grad, _, _ = trainer.gradient(theta, *trainer.batch(union))
        theta, buf = naive_sgd(theta, grad, buf, np.float32(lr), np.float32(momentum), np.float32(wd))
    return theta
