"""The workers' collectives with data, by the name of their operation (``algorithms/ops.py``): how the
workers' parts combine, taken in worker order. The loopback transport and the simulator compute this;
under MPI the library's own collective (started in ``comm/mpi.py``) computes the same."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from hpcbench.bfloat16 import summed


def gathered(parts: Sequence[np.ndarray], bf16: bool = False) -> np.ndarray:
    """Every worker's part, one after another (an all-gather; ``bf16`` changes nothing)."""
    return np.concatenate(list(parts))


# name → (the parts in worker order, whether they are bfloat16 bit patterns) → the result.
COMBINE: dict[str, Callable[..., np.ndarray]] = {
    "Allreduce": summed,
    "Allgather": gathered,
}


def spoken(name: str) -> str:
    """An operation's name as a sentence says it: ``Allreduce`` → all-reduce."""
    return "all-" + name[3:].lower() if name.startswith("All") else name.lower()
