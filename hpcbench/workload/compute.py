"""Modeled compute times (pure, seeded): the simulator's workers, and ``--model payload``'s under real MPI.

One model for both, so a payload run and its simulation draw the same time for every step of every worker.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

BLOCK = 256  # compute times drawn per numpy call


class ComputeSpec(Protocol):
    """What the compute model reads (the simulator's ``SimConfig`` has all of it)."""

    @property
    def workers(self) -> int: ...
    @property
    def compute_shape(self) -> float: ...
    @property
    def compute_mean_s(self) -> float: ...
    @property
    def heterogeneity(self) -> float: ...
    @property
    def pause_prob(self) -> float: ...
    @property
    def pause_s(self) -> float: ...


@dataclass(frozen=True)
class PlainSpec:
    """A ``ComputeSpec`` with no per-worker speeds and no pauses (a payload run's)."""

    workers: int
    compute_shape: float
    compute_mean_s: float
    heterogeneity: float = 0.0
    pause_prob: float = 0.0
    pause_s: float = 0.0


class ComputeModel:
    """Per-worker batch times: gamma(shape, mean × speed factor), straggler slow-down, random pauses."""

    def __init__(self, cfg: ComputeSpec, seed: int, slow: dict[int, float]) -> None:
        self.cfg = cfg
        self.slow = slow
        base = np.random.default_rng([seed, 0x5EED])
        if cfg.heterogeneity > 0:
            sigma = math.sqrt(math.log1p(cfg.heterogeneity**2))
            self.speed = base.lognormal(-sigma**2 / 2, sigma, size=cfg.workers + 1)  # mean 1
        else:
            self.speed = np.ones(cfg.workers + 1)
        self.rngs = [np.random.default_rng([seed, 0xC0DE, r]) for r in range(cfg.workers + 1)]
        self.pause_rngs = [np.random.default_rng([seed, 0xFA05, r]) for r in range(cfg.workers + 1)]
        self.scale = [float(c) * cfg.compute_mean_s / cfg.compute_shape * slow.get(r, 1.0)
                      for r, c in enumerate(self.speed)]
        self.draws: list[np.ndarray] = [np.zeros(0)] * (cfg.workers + 1)
        self.next = [0] * (cfg.workers + 1)

    def mean(self, rank: int) -> float:
        """Expected batch time of ``rank`` (for tests and reports)."""
        c = self.cfg
        return c.compute_mean_s * self.speed[rank] * self.slow.get(rank, 1.0) + c.pause_prob * c.pause_s

    def sample(self, rank: int) -> float:
        i = self.next[rank]
        if i == len(self.draws[rank]):
            # Drawn in blocks from each worker's own stream: the same sequence, far fewer numpy calls.
            self.draws[rank] = self.rngs[rank].standard_gamma(self.cfg.compute_shape, size=BLOCK)
            i = 0
        self.next[rank] = i + 1
        t = float(self.draws[rank][i]) * self.scale[rank]
        if self.cfg.pause_prob and self.pause_rngs[rank].random() < self.cfg.pause_prob:
            t += self.cfg.pause_s
        return t
