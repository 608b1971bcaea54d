"""Learning-rate schedule: linear warm-up from η/n to η, then step decay, as a pure function of samples."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    lr: float
    workers: int
    train_size: int
    warmup_epochs: float = 0.0
    decay_epochs: tuple[float, ...] = ()
    decay_factor: float = 0.1

    def at(self, samples: int) -> float:
        """Learning rate after ``samples`` samples have been consumed (over all workers)."""
        epoch = samples / self.train_size
        if epoch < self.warmup_epochs:
            start = self.lr / self.workers
            return start + (self.lr - start) * epoch / self.warmup_epochs
        drops = sum(1 for e in self.decay_epochs if epoch >= e)
        return self.lr * self.decay_factor**drops
