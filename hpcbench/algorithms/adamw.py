"""AdamW as a worker's optimizer (Loshchilov and Hutter's decoupled weight decay, as torch.optim.AdamW):
DiLoCo's inner optimizer (``local-sgd.inner``) and its all-reduce baseline (``allreduce.optimizer``)."""
from __future__ import annotations

import numpy as np

ADAMW_BETAS, ADAMW_EPS = (0.9, 0.999), 1e-8


class AdamW:
    """A worker's AdamW state (first and second moments, steps taken) and its step: torch.optim.AdamW's
    rule, θ ← θ(1 − lr·λ) − lr·m̂/(√v̂ + ε) with bias-corrected moments, in place in float32."""

    def __init__(self, like: np.ndarray) -> None:
        self.m = np.zeros_like(like, dtype=np.float32)
        self.v = np.zeros_like(like, dtype=np.float32)
        self.t = 0

    def step(self, x: np.ndarray, grad: np.ndarray, lr: float, weight_decay: float) -> None:
        (b1, b2), self.t = ADAMW_BETAS, self.t + 1
        if weight_decay:
            x *= np.float32(1.0 - lr * weight_decay)
        self.m *= np.float32(b1)
        self.m += np.float32(1.0 - b1) * grad
        self.v *= np.float32(b2)
        self.v += np.float32(1.0 - b2) * grad * grad
        denom = np.sqrt(self.v) / np.float32(np.sqrt(1.0 - b2 ** self.t)) + np.float32(ADAMW_EPS)
        x -= np.float32(lr / (1.0 - b1 ** self.t)) * (self.m / denom)
