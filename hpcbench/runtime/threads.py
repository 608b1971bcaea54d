"""How many cores a rank computes with: its torch thread count (the MPI session's and the simulator's)."""
from __future__ import annotations

import os

from hpcbench.config import RunConfig
from hpcbench.workload.models import MODELS


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def thread_count(requested: int, ranks_on_node: int) -> int:
    """--threads, else SLURM_CPUS_PER_TASK, else OMP_NUM_THREADS, else this node's cores shared out."""
    if requested:
        return requested
    for var in ("SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return max(1, cpu_count() // max(1, ranks_on_node))


def set_threads(cfg: RunConfig, threads: int) -> None:
    """torch's threads, for a model that trains (a payload run never imports torch)."""
    if MODELS.get(cfg.model).trains:
        import torch

        torch.set_num_threads(threads)
