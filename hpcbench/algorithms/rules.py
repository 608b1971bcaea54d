"""Pure update math: momentum SGD, staleness and Gap-Aware penalties, DANA, the version ring.

Everything here works in place on numpy vectors and is unit-tested against naive re-implementations;
nothing here knows about MPI, time or programs. The papers: `hpcbench list` (the servers), the algorithm modules (the rest).
"""
from __future__ import annotations

from typing import Protocol

import numpy as np


def momentum_direction(d_p: np.ndarray, buf: np.ndarray | None, momentum: float, nesterov: bool) -> np.ndarray:
    """PyTorch SGD's step direction (dampening 0), updating the momentum buffer in place."""
    if buf is not None and momentum:
        buf *= np.float32(momentum)
        buf += d_p
        return d_p + np.float32(momentum) * buf if nesterov else buf
    return d_p


def sgd_step(theta: np.ndarray, d_p: np.ndarray, buf: np.ndarray | None, lr: float,
             momentum: float, nesterov: bool) -> None:
    """PyTorch SGD (dampening 0): ``d_p`` already includes weight decay and any penalty."""
    theta -= np.float32(lr) * momentum_direction(d_p, buf, momentum, nesterov)


class SecondMoment:
    """Gap-Aware's running average of the squared step direction, bias-corrected."""

    def __init__(self, size: int, beta: float) -> None:
        self.v = np.zeros(size, dtype=np.float32)
        self.beta = beta
        self.k = 0

    def update(self, u: np.ndarray) -> None:
        self.v *= np.float32(self.beta)
        self.v += np.float32(1.0 - self.beta) * u * u
        self.k += 1

    def corrected(self) -> np.ndarray:
        return self.v / np.float32(1.0 - self.beta**self.k)


def gap_divisor(delta: np.ndarray, v_hat: np.ndarray, lr_max: float, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(G, |Δ|/C) element-wise, with C = η_max·(√v̂ + ε) and G = 1 + |Δ|/C (Barkai et al. 2020)."""
    c = np.float32(lr_max) * (np.sqrt(v_hat) + np.float32(eps))
    ratio = np.abs(delta) / c
    return 1.0 + ratio, ratio


class VersionRing:
    """The last ``capacity`` published vectors by version, so Δ against any held version is exact.

    A version older than what is held returns None; the server then asks the worker for the vector
    it computed on (it never guesses a Δ and never drops the gradient).
    """

    def __init__(self, capacity: int, size: int) -> None:
        self.store = np.zeros((capacity, size), dtype=np.float32)
        self.versions = np.full(capacity, -1, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        return self.store.nbytes

    def put(self, version: int, vector: np.ndarray) -> None:
        slot = version % len(self.versions)
        self.store[slot] = vector
        self.versions[slot] = version

    def get(self, version: int) -> np.ndarray | None:
        slot = version % len(self.versions)
        return self.store[slot] if self.versions[slot] == version else None


class GapSettings(Protocol):
    @property
    def beta(self) -> float: ...

    @property
    def eps(self) -> float: ...


class ServerRule:
    """One applied gradient on the parameter server, for the whole asgd family.

    penalty: "none" (asgd, dana), "staleness" (sa-asgd: divide by max(τ, 1)) or "gap" (Gap-Aware).
    per_worker_momentum: DANA's buffers v_i and their sum S; the server publishes θ − ηγS.
    The penalty divides gradient and weight decay and comes before momentum. Gap-Aware's second
    moment follows the step direction: g without momentum, the shared buffer before this update
    with it (as the reference code does), and for DANA the worker's buffer as updated, γ·v_i + g.
    """

    def __init__(self, theta: np.ndarray, workers: int, momentum: float, nesterov: bool,
                 weight_decay: float, penalty: str, per_worker_momentum: bool,
                 gap: GapSettings | None = None, into: np.ndarray | None = None) -> None:
        """``gap``: Gap-Aware's β and ε, required with penalty "gap"; ``into``: float32 storage θ is
        kept in (e.g. the bytes the server publishes from, sparing a copy per update)."""
        if penalty not in ("none", "staleness", "gap") or (penalty == "gap") != (gap is not None):
            raise ValueError(f"penalty {penalty!r} with gap settings {gap!r}")
        self.theta = np.empty(theta.shape, np.float32) if into is None else into
        self.theta[...] = theta
        self.momentum = momentum
        self.nesterov = nesterov
        self.weight_decay = weight_decay
        self.penalty = penalty
        self.eps = gap.eps if gap is not None else 0.0
        self.lr_max = 0.0
        size = theta.size
        self.per_worker = per_worker_momentum
        if per_worker_momentum:
            self.bufs = np.zeros((workers, size), dtype=np.float32)
            self.total = np.zeros(size, dtype=np.float64)  # S = Σ v_i, wide so it does not drift
        else:
            self.buf = np.zeros(size, dtype=np.float32) if momentum else None
        self.moment = SecondMoment(size, gap.beta) if gap is not None else None

    def state_bytes(self) -> int:
        n = self.bufs.nbytes + self.total.nbytes if self.per_worker else (self.buf.nbytes if self.buf is not None else 0)
        return n + (self.moment.v.nbytes if self.moment is not None else 0)

    def published(self, lr: float) -> np.ndarray:
        """What workers read: θ, or DANA's look-ahead θ − ηγS (θ itself, not a copy: valid until the
        next ``apply``)."""
        if self.per_worker:
            return (self.theta - lr * self.momentum * self.total).astype(np.float32)
        return self.theta

    def direction_buffer(self, worker: int) -> np.ndarray | None:
        if self.per_worker:
            return self.bufs[worker] if self.momentum else None
        return self.buf

    def forget(self, worker: int) -> None:
        """``worker`` (0-based) has failed: DANA's momentum of it leaves the look-ahead (S ← S − v_i,
        v_i ← 0); the other rules keep no state per worker."""
        if self.per_worker:
            self.total -= self.bufs[worker]
            self.bufs[worker] = 0.0

    def apply(self, grad: np.ndarray, worker: int, staleness: int, delta: np.ndarray | None,
              lr: float) -> tuple[float, float]:
        """Apply one gradient from ``worker`` (0-based). Returns (mean divisor, mean |Δ|/C)."""
        self.lr_max = max(self.lr_max, lr)
        # Weight decay and the penalties change the direction in place: only then is a copy needed.
        changed = bool(self.weight_decay) or self.penalty != "none"
        d_p = grad.astype(np.float32, copy=changed)
        if self.weight_decay:
            d_p += np.float32(self.weight_decay) * self.theta
        penalty_mean, gap_mean = 1.0, float("nan")
        if self.penalty == "staleness":
            divisor = max(staleness, 1)
            d_p /= np.float32(divisor)
            penalty_mean = float(divisor)
        elif self.penalty == "gap":
            assert self.moment is not None and delta is not None
            direction = self.direction_buffer(worker)
            if self.per_worker and direction is not None:
                # DANA keeps one buffer per worker: the stored one is zero at a worker's first push and
                # n updates old after that, which starves v̂ (gaps of 1000s at the start). Use the buffer
                # as this gradient updates it, γ·v_i + g, computable before the penalty.
                direction = np.float32(self.momentum) * direction + grad
            self.moment.update(grad if direction is None else direction)
            # First update (or zero learning rate): v̂ is still zero and G would explode; skip it.
            if self.lr_max > 0 and self.moment.v.any():
                g_div, ratio = gap_divisor(delta, self.moment.corrected(), self.lr_max, self.eps)
                d_p /= g_div
                penalty_mean, gap_mean = float(g_div.mean()), float(ratio.mean())
        if self.per_worker:
            old = self.bufs[worker]
            new = np.float32(self.momentum) * old + d_p
            self.theta -= np.float32(lr) * new
            self.total += new
            self.total -= old
            old[...] = new
        else:
            sgd_step(self.theta, d_p, self.buf, lr, self.momentum, self.nesterov)
        return penalty_mean, gap_mean
