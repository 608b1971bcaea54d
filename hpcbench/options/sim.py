"""The ``sim`` table: simulate's virtual cluster, and the flags that set it (``--workers``, ``--compute``,
``--network``, ``--pauses``, ``--heterogeneity``, ``--numerics``). Times in seconds, bandwidth in bytes
per second; the cost models that read it are in ``runtime/sim/models.py``."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hpcbench.errors import UsageError, one_of
from hpcbench.registry import rule

PROGRESS_MODES = ("async", "polling")
MAX_HETEROGENEITY = 10.0  # speeds spread far wider than any cluster's (and lognormal's sigma stays finite)
ALLREDUCE_ALGORITHMS = ("rabenseifner", "ring")


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
        if not self.heterogeneity <= MAX_HETEROGENEITY:
            raise UsageError(f"simulation heterogeneity (a coefficient of variation) must be at most "
                             f"{MAX_HETEROGENEITY:g}, got {self.heterogeneity:g}")
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
