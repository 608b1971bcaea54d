"""Learning-rate schedule: linear warm-up to the target rate, then step decay, as a pure function of samples."""
from __future__ import annotations

import math
from dataclasses import dataclass

SCALINGS = ("none", "linear", "sqrt")


def lr_scale(scaling: str, workers: int) -> float:
    """How a synchronous method's rate grows with the global batch n·B (Goyal et al. 2017: linear)."""
    return {"none": 1.0, "linear": float(workers), "sqrt": math.sqrt(workers)}[scaling]


@dataclass(frozen=True)
class Schedule:
    """``lr`` is the rate after warm-up; the warm-up rises linearly from ``warmup_from`` over ``warmup_epochs``."""

    lr: float
    warmup_from: float
    train_size: int
    warmup_epochs: float = 0.0
    decay_epochs: tuple[float, ...] = ()
    decay_factor: float = 0.1
    scaling: str = "none"  # the scaling rule that produced ``lr`` from the single-worker rate (recorded)

    def at(self, samples: int) -> float:
        """Learning rate after ``samples`` samples have been consumed (over all workers)."""
        epoch = samples / self.train_size
        if epoch < self.warmup_epochs:
            return self.warmup_from + (self.lr - self.warmup_from) * epoch / self.warmup_epochs
        if not self.decay_epochs:  # (a server asks twice per update: keep the common case cheap)
            return self.lr
        drops = sum(1 for e in self.decay_epochs if epoch >= e)
        return self.lr * self.decay_factor**drops

    def describe(self) -> str:
        """One line, for the run line and ``--dry-run``: what rate, from where, how it decays."""
        text = f"lr {self.lr:g}"
        if self.scaling != "none":
            text += f" ({self.scaling} scaling)"
        if self.warmup_epochs > 0 and self.warmup_from != self.lr:
            text += f", warm-up from {self.warmup_from:g} over {self.warmup_epochs:g} epochs"
        if self.decay_epochs:
            text += f", ×{self.decay_factor:g} at epochs {', '.join(f'{e:g}' for e in self.decay_epochs)}"
        return text
