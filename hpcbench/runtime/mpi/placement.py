"""Where a rank computes: its torch device, one GPU per node-local worker."""
from __future__ import annotations

from hpcbench.config import RunConfig
from hpcbench.workload.models import MODELS


def worker_slot(rank: int, local_rank: int, on_rank0_node: bool) -> int:
    """Index of this worker among the workers on its node (rank 0 does not count)."""
    return local_rank - 1 if on_rank0_node and rank != 0 else local_rank


def gpu_index(rank: int, local_rank: int, on_rank0_node: bool, visible: int) -> int:
    """Which of the ``visible`` GPUs a rank uses: each worker its own, by its index among its node's
    workers (one GPU per task: the one it sees); rank 0 the first, which it shares with a worker."""
    return 0 if rank == 0 else worker_slot(rank, local_rank, on_rank0_node) % visible


def choose_device(cfg: RunConfig, rank: int, local_rank: int, on_rank0_node: bool) -> str:
    if not MODELS.get(cfg.model).trains:  # the payload: no torch, nothing to put on a GPU
        return "cpu"
    import torch  # only ranks that train need it: `hpcbench --help` and `report` stay fast

    if not torch.cuda.is_available():
        return "cpu"
    return f"cuda:{gpu_index(rank, local_rank, on_rank0_node, torch.cuda.device_count())}"
