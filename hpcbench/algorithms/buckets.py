"""Gradient buckets for an all-reduce overlapped with the backward pass, as PyTorch DDP builds them.

Pure functions: which flat ranges form the buckets, when in a step each is ready, and when the
last bucket's all-reduce ends. The MPI driver, the payload workload and the simulator all use them,
so a measured and a simulated overlap follow the same rules.
"""
from __future__ import annotations

from collections.abc import Sequence

# The share of a step's compute spent in the backward pass (forward ≈ one third of forward + backward,
# the usual estimate for convolutional networks): buckets become ready during it.
BACKWARD_SHARE = 2 / 3
FLOAT_BYTES = 4

Bucket = tuple[int, int]  # [start, stop) of the flat float32 parameter vector


def plan_buckets(bounds: Sequence[int], bucket_bytes: float) -> tuple[Bucket, ...]:
    """Buckets in the order the backward pass finishes them: the last parameters first, each bucket
    whole parameters adding up to at least ``bucket_bytes`` (the first parameters may make a smaller
    last bucket). ``bounds``: where each parameter starts in the flat vector, then its size."""
    if len(bounds) < 2 or bounds[0] != 0 or any(b <= a for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"parameter bounds must rise from 0, got {list(bounds[:5])}...")
    if bucket_bytes <= 0:
        raise ValueError(f"bucket size must be positive, got {bucket_bytes} bytes")
    buckets: list[Bucket] = []
    stop = bounds[-1]
    for start in reversed(bounds[:-1]):
        if (stop - start) * FLOAT_BYTES >= bucket_bytes or start == 0:
            buckets.append((start, stop))
            stop = start
    return tuple(buckets)


def ready_fractions(buckets: Sequence[Bucket], share: float = BACKWARD_SHARE) -> list[float]:
    """When each bucket is ready, as a fraction of the step's compute: the forward pass, then the
    backward pass producing gradients at an even rate per parameter, last parameters first."""
    size = sum(stop - start for start, stop in buckets)
    done, out = 0, []
    for start, stop in buckets:
        done += stop - start
        out.append(1 - share + share * done / size)
    return out


def overlapped_end(ready: Sequence[float], costs: Sequence[float]) -> float:
    """When the last bucket's all-reduce ends: each starts once it is ready and the one before it
    has ended (collectives on one communicator run in order), and takes its cost."""
    end = -float("inf")
    for at, cost in zip(ready, costs):
        end = max(at, end) + cost
    return end
