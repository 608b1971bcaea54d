"""``hpcbench comm``'s arithmetic (pure): the message sizes of a sweep, the bandwidth columns people
know from nccl-tests, and the α–β fit of a link class that ``simulate --network FILE`` takes.

Sizes: ``-b MIN -e MAX -f FACTOR`` as nccl-tests has them (8, 16 … up to MAX; K, M and G are powers of
1024). algbw = bytes / time; busbw = algbw × the operation's bus factor (an all-reduce moves 2(n−1)/n
of its vector through each rank's link: nccl-tests' factor; an all-gather of parts of that size brings
n−1 of them to each rank; one rank to one other: 1), so busbw of a
good all-reduce and a point-to-point transfer can be compared with the link's rate. The fit: time =
α + bytes / bandwidth by least squares over the medians per size (the tail is noise, fitted apart as
the coefficient of variation of each transfer's time above α at the largest sizes, the simulator's
``noise``).
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hpcbench.errors import UsageError

OPS = ("allreduce", "allgather", "sendrecv", "get", "put", "accumulate", "fetch_add")
COLLECTIVES = ("allreduce", "allgather")  # every rank takes part (no peer)
ONE_SIDED = ("get", "put", "accumulate", "fetch_add")
FIT_OPS = ("sendrecv", "get", "put")  # transfers of one message from one rank to one other
ATOMIC_BYTES = 8  # fetch_add moves one 64-bit integer whatever the sizes
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
MAX_BYTES = 4 << 30  # per buffer: beyond it a sweep is a test of the memory, not of the network
ELEMENT_BYTES = 4  # float32, as the algorithms' vectors
INTRA, INTER = "intra-node", "inter-node"


def parse_bytes(text: str, flag: str) -> int:
    """``"8"``, ``"64K"``, ``"16M"``, ``"1G"`` → bytes (one line naming the flag otherwise)."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", text.upper())
    if match is None:
        raise UsageError(f"{flag} {text!r}: a size in bytes, with K, M or G for 1024, 1024² or 1024³ (e.g. 8, 64K, "
                         f"16M)")
    return int(match.group(1)) * UNITS[match.group(2)]


def sweep_sizes(low: int, high: int, factor: int) -> list[int]:
    """low, low·factor, … up to high (high itself last when the steps miss it), each a whole number of
    float32 elements."""
    if low < ELEMENT_BYTES or low % ELEMENT_BYTES:
        raise UsageError(f"-b {low}: at least {ELEMENT_BYTES} bytes and a multiple of {ELEMENT_BYTES} (float32)")
    if high < low:
        raise UsageError(f"-e {high} is below -b {low}")
    if high > MAX_BYTES:
        raise UsageError(f"-e {high}: at most {MAX_BYTES >> 30}G per buffer")
    if factor < 2:
        raise UsageError(f"-f {factor}: a factor of at least 2 between sizes")
    sizes = [low]
    while sizes[-1] * factor <= high:
        sizes.append(sizes[-1] * factor)
    if sizes[-1] != high and high % ELEMENT_BYTES == 0:
        sizes.append(high)
    return sizes


def parse_ops(text: str) -> tuple[str, ...]:
    ops = tuple(dict.fromkeys(o.strip() for o in text.split(",") if o.strip()))
    unknown = [o for o in ops if o not in OPS]
    if unknown or not ops:
        raise UsageError(f"unknown operation {unknown[0] if unknown else text!r}; valid: {', '.join(OPS)}")
    return ops


def bus_factor(op: str, ranks: int) -> float:
    """The factor from algorithm bandwidth to bus bandwidth: nccl-tests' 2(n−1)/n for an all-reduce; for
    an all-gather, whose size is each rank's part (as OSU's osu_allgather has it), the n − 1 parts each
    rank receives."""
    if ranks <= 1:
        return 1.0
    return {"allreduce": 2 * (ranks - 1) / ranks, "allgather": float(ranks - 1)}.get(op, 1.0)


def bandwidths(op: str, nbytes: int, seconds: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes per second."""
    if seconds <= 0 or not math.isfinite(seconds):
        return math.nan, math.nan
    algbw = nbytes / seconds
    return algbw, algbw * bus_factor(op, ranks)


@dataclass(frozen=True)
class LinkFit:
    """A link class's α–β model: what ``simulate --network`` sets (alpha_s, bandwidth, noise)."""

    link: str
    alpha_s: float
    bandwidth: float  # bytes/s
    noise: float  # coefficient of variation of a transfer's time on the wire
    sizes: int  # how many sizes it was fitted on
    op: str  # the operation whose times it fits

    def network(self) -> str:
        return f"alpha={self.alpha_s:.4g},bandwidth={self.bandwidth:.4g},noise={self.noise:.3g}"


def fit_link(link: str, op: str, sizes: Sequence[int], times: Sequence[Sequence[float]]) -> LinkFit | None:
    """α–β from each size's per-iteration seconds (medians, least squares), and the noise: the spread of
    the time above α over the sizes where the wire dominates (the largest half). None with fewer than
    two sizes or times that do not grow with the bytes."""
    if len(sizes) < 2:
        return None
    x = np.asarray(sizes, dtype=np.float64)
    med = np.array([np.median(t) for t in times])
    slope, intercept = np.polyfit(x, med, 1)
    if not slope * x.max() > 1e-3 * med.max():  # the time does not grow with the bytes (to rounding)
        return None
    alpha = max(float(intercept), 0.0)
    large = [np.asarray(t, dtype=np.float64) - alpha for t in times[len(times) // 2:]]
    spreads = [float(w.std() / w.mean()) for w in large if len(w) > 1 and w.mean() > 0]
    noise = float(np.median(spreads)) if spreads else 0.0
    return LinkFit(link, alpha, float(1.0 / slope), noise, len(sizes), op)


def link_of(host_a: str, host_b: str) -> str:
    return INTRA if host_a == host_b else INTER


def chosen_fit(fits: Sequence[LinkFit]) -> LinkFit:
    """The fit ``simulate`` takes: the links between nodes where the sweep crossed them (every rank's
    traffic to another node goes through them), else within a node."""
    for link in (INTER, INTRA):
        for fit in fits:
            if fit.link == link:
                return fit
    raise UsageError("the sweep fitted no link (it needs two sizes or more of sendrecv, get or put)")
