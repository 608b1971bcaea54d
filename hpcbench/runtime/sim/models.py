"""Cost models of the virtual cluster (pure, seeded): compute times, network transfers, server work."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from hpcbench.errors import UsageError, one_of
from hpcbench.registry import rule
from hpcbench.workload.compute import BLOCK

PROGRESS_MODES = ("async", "polling")


@dataclass(frozen=True)
class SimConfig:
    """The virtual cluster. Times in seconds, bandwidth in bytes per second."""

    workers: int = 8
    numerics: bool = True  # run the real model math; off = timing only, for very large worker counts
    # With numerics: compute the gradients of workers whose computations overlap in virtual time in
    # one batched pass (same results to float rounding); false = one worker at a time.
    batch_gradients: bool = True
    # Bytes on the wire count as if the model had this many parameters (0: its own size): numerics on
    # a small model, messages (and the per-parameter costs of rank 0 and the workers) of a large one.
    message_params: int = rule(0, "the model's size")
    compute_shape: float = 100.0  # gamma shape of a batch's compute time (100: coefficient of variation 0.1)
    compute_mean_s: float = 0.05  # mean compute time of one batch on a worker of speed 1
    heterogeneity: float = 0.0  # coefficient of variation of fixed per-worker speed factors
    pause_prob: float = 0.0  # chance per step that a worker pauses (a transient straggler)
    pause_s: float = 0.0  # length of such a pause
    alpha_s: float = 5e-6  # network latency per message
    bandwidth: float = 1.25e9  # bytes per second of every rank's link (10 Gb/s)
    # Mean of an exponentially distributed extra delay on every point-to-point and one-sided
    # transfer: OS noise and targets slow to respond (ranks sharing cores); calibrate fits it.
    jitter_s: float = 0.0
    # Coefficient of variation of each point-to-point and one-sided transfer's time on the wire (a
    # gamma factor of mean 1 on its bytes): a real link's own spread (TCP's pacing, a switch's or token
    # bucket's bursts). It costs nothing on average, but lets ranks drift apart where the pattern
    # amplifies drift (SGP's shifted peers with sends that complete at once); bare_exchange measures it.
    noise: float = 0.0
    apply_s: float = rule(-1.0, "2 ns per model parameter")  # rank 0's work per received message
    update_s: float = rule(-1.0, "1 ns per model parameter")  # a worker's own math per step
    # How one-sided operations progress: "async" (without the target, as RDMA hardware or an
    # async-progress thread do) or "polling" (only while the target is inside MPI: a read of a
    # rank that is computing or applying waits for it, as with MPICH's default progress).
    progress: str = "async"
    # The all-reduce's algorithm: "rabenseifner" (MPICH's for messages over 2 KB: reduce-scatter then
    # all-gather by recursive halving and doubling, with one more send of the whole vector before and
    # after when the worker count is not a power of two) or "ring" (Open MPI's and NCCL's for large ones).
    allreduce: str = "rabenseifner"

    def validate(self) -> None:
        if not 1 <= self.workers <= 4096:
            raise UsageError(f"--workers must be between 1 and 4096, got {self.workers}")
        if self.message_params < 0:
            raise UsageError(f"simulation message_params must be >= 0 (0: the model's own size), got {self.message_params}")
        positive = {"compute_shape": self.compute_shape, "compute_mean_s": self.compute_mean_s,
                    "bandwidth": self.bandwidth}
        for name, value in positive.items():
            if not value > 0:
                raise UsageError(f"simulation {name} must be > 0, got {value}")
        for name, value in {"heterogeneity": self.heterogeneity, "pause_s": self.pause_s,
                            "alpha_s": self.alpha_s, "jitter_s": self.jitter_s, "noise": self.noise}.items():
            if not 0 <= value < math.inf:
                raise UsageError(f"simulation {name} must be a finite number >= 0, got {value}")
        if not 0 <= self.pause_prob <= 1:
            raise UsageError(f"simulation pause_prob must be in [0, 1], got {self.pause_prob}")
        if self.allreduce not in ALLREDUCE_ALGORITHMS:
            raise one_of("simulation allreduce", self.allreduce, ALLREDUCE_ALGORITHMS)
        if self.progress not in PROGRESS_MODES:
            raise UsageError(f"unknown simulation progress {self.progress!r}; valid: {', '.join(PROGRESS_MODES)}")


def parse_keyvals(text: str, what: str, valid: tuple[str, ...]) -> dict[str, float]:
    """``"shape=100,mean=0.05"`` → {"shape": 100.0, "mean": 0.05}, refusing unknown keys."""
    out: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key not in valid:
            raise UsageError(f"{what} {item!r}: expected KEY=VALUE with KEY one of {', '.join(valid)}")
        try:
            out[key] = float(value)
        except ValueError:
            raise UsageError(f"{what} {item!r}: {value!r} is not a number") from None
    return out


def parse_compute(text: str) -> dict[str, float]:
    """``--compute gamma:shape=K[,mean=S]``."""
    kind, _, rest = text.partition(":")
    if kind != "gamma":
        raise UsageError(f"--compute {text!r}: the compute model is gamma:shape=K,mean=SECONDS")
    values = parse_keyvals(rest, "--compute", ("shape", "mean"))
    return {{"shape": "compute_shape", "mean": "compute_mean_s"}[k]: v for k, v in values.items()}


def parse_network(text: str) -> dict[str, float]:
    """``--network alpha=SECONDS,bandwidth=BYTES_PER_S[,jitter=SECONDS][,noise=CV]``."""
    values = parse_keyvals(text, "--network", ("alpha", "bandwidth", "jitter", "noise"))
    return {{"alpha": "alpha_s", "bandwidth": "bandwidth", "jitter": "jitter_s", "noise": "noise"}[k]: v
            for k, v in values.items()}


def parse_pauses(text: str) -> dict[str, float]:
    """``--pauses PROB:SECONDS``."""
    try:
        prob, seconds = (float(x) for x in text.split(":"))
    except ValueError:
        raise UsageError(f"--pauses {text!r} is not PROB:SECONDS (for example 0.01:0.5)") from None
    return {"pause_prob": prob, "pause_s": seconds}


def flag_values(workers: int | None = None, numerics: str | None = None, compute: str | None = None,
                network: str | None = None, pauses: str | None = None,
                heterogeneity: float | None = None) -> dict[str, Any]:
    """``simulate``'s own flags as SimConfig fields (flags not given are left out)."""
    out: dict[str, Any] = {}
    if workers is not None:
        out["workers"] = workers
    if numerics is not None:
        out["numerics"] = numerics == "on"
    for text, parse in ((compute, parse_compute), (network, parse_network), (pauses, parse_pauses)):
        if text:
            out.update(parse(text))
    if heterogeneity is not None:
        out["heterogeneity"] = heterogeneity
    return out


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


def noise(cfg: SimConfig, seed: int) -> Draws | None:
    """Factors on each transfer's bytes: gamma of mean 1 and coefficient of variation ``noise``."""
    cv = cfg.noise
    return Draws(lambda rng, k: rng.gamma(1 / cv**2, cv**2, k), [seed, 0x4015]) if cv > 0 else None


ALLREDUCE_ALGORITHMS = ("rabenseifner", "ring")
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


def barrier_s(p: int, alpha: float) -> float:
    return math.ceil(math.log2(p)) * alpha if p > 1 else 0.0
