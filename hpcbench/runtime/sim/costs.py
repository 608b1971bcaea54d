"""Cost models of the virtual cluster (pure, seeded): compute times, network transfers, server work."""
from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np

from hpcbench.options.sim import SimConfig
from hpcbench.workload.compute import BLOCK


class Draws:
    """One seeded stream of random numbers, drawn in blocks: ``draw(rng, count)`` → an array."""

    def __init__(self, draw: Callable[[np.random.Generator, int], np.ndarray], seed: list[int]) -> None:
        self.draw, self.rng = draw, np.random.default_rng(seed)
        self.draws = np.zeros(0)
        self.next = 0

    def sample(self) -> float:
        if self.next == len(self.draws):
            self.draws = self.draw(self.rng, BLOCK)
            self.next = 0
        self.next += 1
        return float(self.draws[self.next - 1])


def jitter(cfg: SimConfig, seed: int) -> Draws | None:
    """Extra transfer delays: exponential with mean ``jitter_s`` (None when it is 0)."""
    mean = cfg.jitter_s
    return Draws(lambda rng, k: rng.exponential(mean, k), [seed, 0x7177]) if mean > 0 else None


def unit_gamma(cv: float, seed: list[int]) -> Draws | None:
    """Gamma draws of mean 1 and coefficient of variation ``cv`` (None when it is 0)."""
    return Draws(lambda rng, k: rng.gamma(1 / cv**2, cv**2, k), seed) if cv > 0 else None


def noise(cfg: SimConfig, seed: int) -> Draws | None:
    """Factors on each transfer's bytes: gamma of mean 1 and coefficient of variation ``noise``."""
    return unit_gamma(cfg.noise, [seed, 0x4015])


def shares(cfg: SimConfig, seed: int) -> Draws | None:
    """Each transfer's weight where transfers share a link: gamma of mean 1 and coefficient of
    variation ``share_cv`` (None when it is 0: equal shares)."""
    return unit_gamma(cfg.share_cv, [seed, 0x5A4E])


TC_UNITS = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8,
            "bps": 1.0, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}  # tc's rate units, in bytes per second


def link_bandwidth(network: str) -> float | None:
    """Bytes per second of the links a run's ``network`` provenance names ("emulated nodes=4,
    rate=100mbit,..."), or None when it names none."""
    match = re.search(r"rate=([0-9.]+)([a-z]+)", network)
    if match is None or match.group(2) not in TC_UNITS:
        return None
    return float(match.group(1)) * TC_UNITS[match.group(2)]


def allreduce_terms(p: int, algorithm: str) -> tuple[float, float]:
    """(latencies, vector lengths) one all-reduce of ``p`` ranks puts on each rank's critical path: its
    cost is latencies·α + lengths·n/BW. Ring: 2(p−1) and 2(p−1)/p. Rabenseifner over the largest power
    of two q ≤ p: 2·log2 q and 2(q−1)/q, plus, when q < p, 2 and 2 for folding the other ranks' vectors in
    before and sending the result back after (measured with MPICH over 100 Mbit/s links, 1 MB: 251 ms
    between 3 ranks where 3·n/BW is 240 ms and a ring would take 107; 314 ms between 5, model 280)."""
    if p <= 1:
        return 0.0, 0.0
    if algorithm == "ring":
        return 2.0 * (p - 1), 2.0 * (p - 1) / p
    q = 1 << (p.bit_length() - 1)
    folded = 2.0 if q < p else 0.0
    return 2.0 * math.log2(q) + folded, 2.0 * (q - 1) / q + folded


def allreduce_s(nbytes: float, p: int, alpha: float, bandwidth: float, algorithm: str = "rabenseifner") -> float:
    """Seconds for ``p`` ranks to all-reduce ``nbytes`` each (see ``allreduce_terms``)."""
    latencies, lengths = allreduce_terms(p, algorithm)
    return latencies * alpha + lengths * nbytes / bandwidth


def allgather_terms(p: int, algorithm: str) -> tuple[float, float]:
    """(latencies, vector lengths) one all-gather of ``p`` ranks, each giving a part, puts on each rank's
    critical path: its cost is latencies·α + lengths·n/BW for parts of n bytes. Every rank receives the
    other p − 1 parts whatever the algorithm: lengths p − 1. The ring takes p − 1 steps; recursive doubling
    (MPICH's for a power of two) and Bruck's (for other counts) ⌈log2 p⌉. ``algorithm``: the all-reduce's
    (``sim.allreduce``), whose library picks the all-gather alike: ring, or rabenseifner (logarithmic)."""
    if p <= 1:
        return 0.0, 0.0
    steps = p - 1 if algorithm == "ring" else math.ceil(math.log2(p))
    return float(steps), float(p - 1)


def allgather_s(nbytes: float, p: int, alpha: float, bandwidth: float, algorithm: str = "rabenseifner") -> float:
    """Seconds for ``p`` ranks to all-gather parts of ``nbytes`` each (see ``allgather_terms``)."""
    latencies, lengths = allgather_terms(p, algorithm)
    return latencies * alpha + lengths * nbytes / bandwidth


def barrier_s(p: int, alpha: float) -> float:
    return math.ceil(math.log2(p)) * alpha if p > 1 else 0.0


# Each of the workers' collectives with data (``ops.COLLECTIVES``), by name: seconds for ``p`` workers
# giving ``nbytes`` each, at latency α, link bandwidth and the library's algorithm (``sim.allreduce``).
COLLECTIVE_COSTS: dict[str, Callable[[float, int, float, float, str], float]] = {
    "Allreduce": allreduce_s,
    "Allgather": allgather_s,
}
