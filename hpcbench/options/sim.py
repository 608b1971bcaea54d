"""The ``sim`` table: simulate's virtual cluster, and the flags that set it (``--workers``, ``--compute``,
``--network``, ``--pauses``, ``--heterogeneity``, ``--numerics``). Times in seconds, bandwidth in bytes
per second; the cost models that read it are in ``runtime/sim/costs.py``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpcbench.errors import UsageError
from hpcbench.ranges import bounded, check_ranges, choice

PROGRESS_MODES = ("async", "polling")
MAX_WORKERS = 4096
MAX_HETEROGENEITY = 10.0  # speeds spread far wider than any cluster's (and lognormal's sigma stays finite)
ALLREDUCE_ALGORITHMS = ("rabenseifner", "ring")
# Virtual time is a float: a time of 1e308 s (finite) overflows as soon as another is added to it, and
# far below that a second keeps too few digits to tell one message from the next. Each time-like setting
# stays below a bound beyond any cluster's (a batch of 11 days, a message of 17 minutes).
MAX_STEP_S = 1e6
MAX_MESSAGE_S = 1e3
MAX_CV = 10.0  # a coefficient of variation beyond this is no link: the draws themselves overflow
# Gamma shape 1/CV²: compute times spread by a coefficient of variation of at most 10, as the links' noise.
# Below, nearly every draw rounds to 0 s (the mean no longer holds: at 1e-4 a run's compute vanished)
# and at 5e-324 mean/shape overflows, making every compute time NaN.
MIN_COMPUTE_SHAPE = 1 / MAX_CV**2
# Links shared by gamma weights spread at most as an exponential's. Wider, weights near 0 come often (below
# 1e-13 once in 8e5 transfers at 1.5, once in 2,300 at 2) and are lost to rounding in the link's sum of
# weights, and a transfer's time runs away (an asgd run 7x slower at 2, an sgp run 5e13 s at 3, at 10 a
# division by zero).
MAX_SHARE_CV = 1.0


@dataclass(frozen=True)
class SimConfig:
    """The virtual cluster. Times in seconds, bandwidth in bytes per second."""

    workers: int = bounded(8, low=1, high=MAX_WORKERS, unit="workers")
    numerics: bool = True  # run the real model math; off = timing only, for very large worker counts
    # With numerics: compute the gradients of workers whose computations overlap in virtual time in
    # one batched pass (same results to float rounding), from 3 workers on, where it pays (not for BatchNorm,
    # nor for convolutions on the CPU); false = one worker at a time.
    batch_gradients: bool = True
    # Bytes on the wire count as if the model had this many parameters (0: its own size): numerics on
    # a small model, messages (and the per-parameter costs of rank 0 and the workers) of a large one.
    message_params: int = bounded(0, low=0, unit="floats", resolves="the model's size")
    # gamma shape of a batch's compute time (100: coefficient of variation 0.1)
    compute_shape: float = bounded(100.0, low=MIN_COMPUTE_SHAPE)
    # mean compute time of one batch on a worker of speed 1
    compute_mean_s: float = bounded(0.05, above=0, high=MAX_STEP_S, unit="seconds")
    # coefficient of variation of fixed per-worker speed factors
    heterogeneity: float = bounded(0.0, low=0, high=MAX_HETEROGENEITY)
    pause_prob: float = bounded(0.0, low=0, high=1)  # chance per step that a worker pauses (a transient straggler)
    pause_s: float = bounded(0.0, low=0, high=MAX_STEP_S, unit="seconds")  # length of such a pause
    alpha_s: float = bounded(5e-6, low=0, high=MAX_MESSAGE_S, unit="seconds")  # network latency per message
    bandwidth: float = bounded(1.25e9, low=1, unit="bytes/s")  # bytes per second of every rank's link (10 Gb/s)
    # Mean of an exponentially distributed extra delay on every point-to-point and one-sided
    # transfer: OS noise and targets slow to respond (ranks sharing cores); calibrate fits it.
    jitter_s: float = bounded(0.0, low=0, high=MAX_MESSAGE_S, unit="seconds")
    # Coefficient of variation of each point-to-point and one-sided transfer's time on the wire (a
    # gamma factor of mean 1 on its bytes): a real link's own spread (TCP's pacing, a switch's or token
    # bucket's bursts). It costs nothing on average, but lets ranks drift apart where the pattern
    # amplifies drift (SGP's shifted peers with sends that complete at once); bare_exchange measures it.
    noise: float = bounded(0.0, low=0, high=MAX_CV)
    # How transfers through one direction of a link share it: in proportion to a weight each draws
    # (gamma, mean 1, this coefficient of variation; 0: equal shares; 0.3 measured over emulated
    # links, see docs/measurements.md). Alone, a transfer has the whole
    # link; together, TCP flows split it unevenly, and which one gets more changes from one to the
    # next (benchmarks/link_sharing.py) -- which is what keeps a parameter server's readers from
    # settling into convoys that read and send in step.
    share_cv: float = bounded(0.3, low=0, high=MAX_SHARE_CV)
    # rank 0's work per received message
    apply_s: float = bounded(-1.0, low=0, high=MAX_MESSAGE_S, unit="seconds", resolves="2 ns per model parameter")
    # a worker's own math per step
    update_s: float = bounded(-1.0, low=0, high=MAX_MESSAGE_S, unit="seconds", resolves="1 ns per model parameter")
    # How one-sided operations progress: "async" (without the target, as RDMA hardware or an
    # async-progress thread do) or "polling" (only while the target is inside MPI: a read of a
    # rank that is computing or applying waits for it, as with MPICH's default progress).
    progress: str = choice("async", PROGRESS_MODES)
    # The all-reduce's algorithm: "rabenseifner" (MPICH's for messages over 2 KB: reduce-scatter then
    # all-gather by recursive halving and doubling, with one more send of the whole vector before and
    # after when the worker count is not a power of two) or "ring" (Open MPI's and NCCL's for large ones).
    allreduce: str = choice("rabenseifner", ALLREDUCE_ALGORITHMS)
    # A worker that fails (--set fault=kill:RANK@SECONDS,...): how long until the others learn of it
    # (ULFM's notification); the survivors of a collective then agree on it and shrink their
    # communicator in regroup_s + regroup_log_s * log2(survivors): ULFM's agreement runs over a tree
    # of the survivors (its depth, log2 of their number, is the rounds of messages), and the shrink
    # is one more agreement and a new communicator. `hpcbench calibrate` fits all three from real runs
    # that lost a worker; these defaults are its fit of Open MPI 5.0 ULFM on one node
    # (benchmarks/failure_costs.py, docs/failures.md).
    detect_s: float = bounded(0.018, low=0, high=MAX_MESSAGE_S, unit="seconds")
    regroup_s: float = bounded(0.000165, low=0, high=MAX_MESSAGE_S, unit="seconds")
    regroup_log_s: float = bounded(0.00009, low=0, high=MAX_MESSAGE_S, unit="seconds")
    # Wall-clock time a simulation may take: one still going then ends as "timeout", with its record.
    deadline_s: float = bounded(21_600.0, above=0, unit="seconds")

    def validate(self) -> None:
        check_ranges(self, "sim.")


def parse_keyvals(text: str, what: str, valid: tuple[str, ...]) -> dict[str, float]:
    """``"shape=100,mean=0.05"`` → {"shape": 100.0, "mean": 0.05}, refusing unknown keys."""
    out: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key not in valid:
            raise UsageError(f"{what} {item!r}: expected KEY=VALUE with KEY one of {', '.join(valid)}")
        if key in out:
            raise UsageError(f"{what} {text!r} gives {key} twice: give each of {', '.join(valid)} once")
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
    """``--network alpha=SECONDS,bandwidth=BYTES_PER_S[,jitter=SECONDS][,noise=CV]``, or ``--network
    FILE.h5``: the fit of the file ``hpcbench comm`` wrote (its links between nodes where it crossed them)."""
    if "=" not in text and text.strip():
        return measured_network(text.strip())
    values = parse_keyvals(text, "--network", ("alpha", "bandwidth", "jitter", "noise"))
    return {{"alpha": "alpha_s", "bandwidth": "bandwidth", "jitter": "jitter_s", "noise": "noise"}[k]: v
            for k, v in values.items()}


def measured_network(path: str) -> dict[str, float]:
    """The α–β model and noise a network sweep (``hpcbench comm --out FILE``) fitted."""
    from hpcbench.results.commfile import measured_link

    fit = measured_link(path)
    return {"alpha_s": fit.alpha_s, "bandwidth": fit.bandwidth, "noise": fit.noise}


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
