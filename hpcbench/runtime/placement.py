"""Where a rank computes: its torch device (one GPU per node-local worker) and its thread count."""
from __future__ import annotations

import os

from hpcbench.config import RunConfig


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


def worker_slot(rank: int, local_rank: int, on_rank0_node: bool) -> int:
    """Index of this worker among the workers on its node (rank 0 does not count)."""
    return local_rank - 1 if on_rank0_node and rank != 0 else local_rank


def gpu_index(rank: int, local_rank: int, on_rank0_node: bool, visible: int) -> int:
    """Which of the ``visible`` GPUs a rank uses: each worker its own, by its index among its node's
    workers (one GPU per task: the one it sees); rank 0 the first, which it shares with a worker."""
    return 0 if rank == 0 else worker_slot(rank, local_rank, on_rank0_node) % visible


def set_threads(cfg: RunConfig, threads: int) -> None:
    """torch's threads, for a model that trains (a payload run never imports torch)."""
    if cfg.model != "payload":
        import torch

        torch.set_num_threads(threads)


def choose_device(cfg: RunConfig, rank: int, local_rank: int, on_rank0_node: bool) -> str:
    if cfg.model == "payload":
        return "cpu"
    import torch  # only ranks that train need it: `hpcbench --help` and `report` stay fast

    if not torch.cuda.is_available():
        return "cpu"
    return f"cuda:{gpu_index(rank, local_rank, on_rank0_node, torch.cuda.device_count())}"
