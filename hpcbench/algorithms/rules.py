"""Pure update math: momentum SGD, the version ring, and the parts a parameter server's rule is made of.

Everything here works in place on numpy vectors and is unit-tested against naive re-implementations;
nothing here knows about MPI, time or programs. The papers: `hpcbench list` (the servers), the algorithm modules (the
rest).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

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


class Momentum:
    """The server's momentum: one shared buffer (PyTorch SGD, dampening 0; none at momentum 0)."""

    def __init__(self, size: int, momentum: float, nesterov: bool) -> None:
        self.momentum, self.nesterov = momentum, nesterov
        self.buf = np.zeros(size, dtype=np.float32) if momentum else None

    def state_bytes(self) -> int:
        return self.buf.nbytes if self.buf is not None else 0

    def published(self, theta: np.ndarray, lr: float) -> np.ndarray:
        """What workers read: θ itself (not a copy: valid until the next step)."""
        return theta

    def direction(self, worker: int, grad: np.ndarray) -> np.ndarray:
        """The step direction a rule that follows it sees: the buffer before this update, else g."""
        return grad if self.buf is None else self.buf

    def step(self, theta: np.ndarray, d_p: np.ndarray, worker: int, lr: float) -> None:
        sgd_step(theta, d_p, self.buf, lr, self.momentum, self.nesterov)

    def forget(self, worker: int) -> None:
        """A failed worker leaves nothing behind in a shared buffer."""


class WorkerMomentum(Momentum):
    """DANA's momentum: a buffer v_i per worker and their sum S; workers read the look-ahead θ − ηγS."""

    def __init__(self, size: int, momentum: float, workers: int) -> None:
        super().__init__(size, momentum, False)
        self.buf = None
        self.bufs = np.zeros((workers, size), dtype=np.float32)
        self.total = np.zeros(size, dtype=np.float64)  # S = Σ v_i, wide so it does not drift

    def state_bytes(self) -> int:
        return self.bufs.nbytes + self.total.nbytes

    def published(self, theta: np.ndarray, lr: float) -> np.ndarray:
        return (theta - lr * self.momentum * self.total).astype(np.float32)

    def direction(self, worker: int, grad: np.ndarray) -> np.ndarray:
        # The stored buffer is zero at a worker's first push and n updates old after that, which
        # starves a second moment (gaps of 1000s at the start): the buffer as this gradient updates
        # it, γ·v_i + g, computable before any penalty.
        return np.float32(self.momentum) * self.bufs[worker] + grad if self.momentum else grad

    def step(self, theta: np.ndarray, d_p: np.ndarray, worker: int, lr: float) -> None:
        old = self.bufs[worker]
        new = np.float32(self.momentum) * old + d_p
        theta -= np.float32(lr) * new
        self.total += new
        self.total -= old
        old[...] = new

    def forget(self, worker: int) -> None:
        """``worker`` (0-based) has failed: its momentum leaves the look-ahead (S ← S − v_i, v_i ← 0)."""
        self.total -= self.bufs[worker]
        self.bufs[worker] = 0.0


@dataclass
class Update:
    """One gradient as a rule part sees it. ``d_p`` is the step direction being built (g plus weight
    decay so far; a part changes it in place); ``recorded`` the values the part logs for it."""

    grad: np.ndarray
    d_p: np.ndarray
    worker: int  # 0-based
    staleness: int  # updates applied since the worker read
    delta: np.ndarray | None  # θ published now − θ the worker read (for parts that need it)
    lr: float
    lr_max: float  # the largest rate applied so far, this one included
    momentum: Momentum
    recorded: dict[str, float] = field(default_factory=dict)


class RulePart:
    """One piece of a parameter server's rule, applied to each gradient before momentum.

    ``columns``: what it records per update in the updates table, each a per-update mean named
    ``NAME_mean`` (beyond the table's own columns, it adds them to the table). ``needs_delta``: the
    server must hand it Δ = θ_now − θ_read, exactly (it keeps a history of published versions).
    """

    columns: tuple[str, ...] = ()
    needs_delta = False

    def adjust(self, update: Update) -> None:
        raise NotImplementedError

    def state_bytes(self) -> int:
        return 0


class StalenessDivisor(RulePart):
    """Zhang et al. 2016: the step divided by its staleness, max(τ, 1)."""

    columns = ("penalty_mean",)

    def adjust(self, update: Update) -> None:
        divisor = max(update.staleness, 1)
        update.d_p /= np.float32(divisor)
        update.recorded["penalty_mean"] = float(divisor)


class GapPenalty(RulePart):
    """Barkai et al. 2020: the step divided element-wise by G = 1 + |Δ|/C. Its second moment follows
    the momentum's step direction (g without momentum, as the reference code does)."""

    columns = ("penalty_mean", "gap_mean")
    needs_delta = True

    def __init__(self, size: int, beta: float, eps: float) -> None:
        self.moment = SecondMoment(size, beta)
        self.eps = eps

    def state_bytes(self) -> int:
        return self.moment.v.nbytes

    def adjust(self, update: Update) -> None:
        assert update.delta is not None
        self.moment.update(update.momentum.direction(update.worker, update.grad))
        # First update (or zero learning rate): v̂ is still zero and G would explode; skip it.
        if update.lr_max > 0 and self.moment.v.any():
            g_div, ratio = gap_divisor(update.delta, self.moment.corrected(), update.lr_max, self.eps)
            update.d_p /= g_div
            update.recorded.update(penalty_mean=float(g_div.mean()), gap_mean=float(ratio.mean()))


def diverging() -> np.errstate:
    """Where the programs run (a rank's whole run, a simulation): a model that diverges overflows float32
    on the way to inf and NaN, an outcome its accuracy and the run line report, not a reason for numpy to
    print a warning per update."""
    return np.errstate(over="ignore", invalid="ignore", divide="ignore")

# What the updates table records where no part says otherwise: no divisor, no gap.
NEUTRAL = {"penalty_mean": 1.0, "gap_mean": float("nan")}


class ServerRule:
    """One applied gradient on the parameter server: weight decay, then each part in order, then the
    momentum's step. Asgd has no parts; sa-asgd divides by staleness; Gap-Aware by G per element; DANA
    is a ``WorkerMomentum``."""

    def __init__(self, theta: np.ndarray, weight_decay: float, momentum: Momentum,
                 parts: Sequence[RulePart] = (), into: np.ndarray | None = None) -> None:
        """``into``: float32 storage θ is kept in (e.g. the bytes the server publishes from, sparing a
        copy per update)."""
        self.theta = np.empty(theta.shape, np.float32) if into is None else into
        self.theta[...] = theta
        self.weight_decay = weight_decay
        self.momentum = momentum
        self.parts = tuple(parts)
        self.lr_max = 0.0

    @property
    def needs_delta(self) -> bool:
        return any(part.needs_delta for part in self.parts)

    @property
    def columns(self) -> tuple[str, ...]:
        """What the parts record per update, in order, each once."""
        return tuple(dict.fromkeys(c for part in self.parts for c in part.columns))

    def state_bytes(self) -> int:
        return self.momentum.state_bytes() + sum(part.state_bytes() for part in self.parts)

    def published(self, lr: float) -> np.ndarray:
        """What workers read: θ, or DANA's look-ahead (θ itself, not a copy: valid until the next ``apply``)."""
        return self.momentum.published(self.theta, lr)

    def forget(self, worker: int) -> None:
        """``worker`` (0-based) has failed: its state leaves the server's."""
        self.momentum.forget(worker)

    def apply(self, grad: np.ndarray, worker: int, staleness: int, delta: np.ndarray | None,
              lr: float) -> dict[str, float]:
        """Apply one gradient from ``worker`` (0-based). Returns what the parts record for it."""
        self.lr_max = max(self.lr_max, lr)
        # Weight decay and the parts change the direction in place: only then is a copy needed.
        d_p = grad.astype(np.float32, copy=bool(self.weight_decay or self.parts))
        if self.weight_decay:
            d_p += np.float32(self.weight_decay) * self.theta
        update = Update(grad, d_p, worker, staleness, delta, lr, self.lr_max, self.momentum)
        for part in self.parts:
            part.adjust(update)
        self.momentum.step(self.theta, update.d_p, worker, lr)
        return update.recorded
