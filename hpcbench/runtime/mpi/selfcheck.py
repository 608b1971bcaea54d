"""Launcher self-checks at start-up, each naming its fix (pure functions of what the ranks report)."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from hpcbench.comm.probe import srun_mpi_flag


def slurm_world_mismatch(env: Mapping[str, str], world_size: int, mpi_vendor: str) -> str | None:
    """Slurm started several tasks but each sees an MPI world of one: srun used the wrong --mpi."""
    tasks = env.get("SLURM_NTASKS", "")
    if tasks.isdigit() and int(tasks) > 1 and world_size == 1:
        flag = srun_mpi_flag(mpi_vendor)
        return (f"Slurm started {tasks} tasks but MPI sees a world of 1 (each task runs alone): launch with "
                f"srun --mpi={flag} for this MPI ({mpi_vendor}); `srun --mpi=list` shows what Slurm offers")
    return None


def shared_gpus(placements: list[tuple[int, str, str]]) -> list[str]:
    """Workers (rank, host, device) that share a GPU on one node."""
    users: dict[tuple[str, str], list[int]] = defaultdict(list)
    for rank, host, device in placements:
        if rank > 0 and device.startswith("cuda"):
            users[(host, device)].append(rank)
    return [f"ranks {', '.join(map(str, ranks))} share {device} on {host}: give each task its own GPU "
            f"(srun --gpus-per-task=1, or fewer tasks per node); their timings include the sharing"
            for (host, device), ranks in sorted(users.items()) if len(ranks) > 1]


def oversubscribed_nodes(nodes: Mapping[str, tuple[int, int]]) -> list[str]:
    """Nodes (host → (ranks, cores)) running more ranks than they have cores."""
    return [f"{ranks} ranks share {cores} cores on {host}: timings include CPU contention (fine for trying "
            f"things out; for measurements give each rank a core, e.g. srun --cpus-per-task)"
            for host, (ranks, cores) in sorted(nodes.items()) if ranks > cores]
