"""What the reference loops (``bare_allreduce.py``, ``ddp_allreduce.py``) share with each other and with
``hpcbench run --algo allreduce``: the arguments, each rank's shard and batch order, the timed loop
after an untimed warm-up, and the median step time over all ranks printed by rank 0."""
import argparse
from collections.abc import Callable

import numpy as np
import torch
from mpi4py import MPI

from hpcbench.workload.datasets import Dataset
from hpcbench.workload.sharding import BatchStream, shard_indices


def arguments() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn")
    p.add_argument("--dataset", default="digits")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    return p


def timed_steps(comm: MPI.Comm, args: argparse.Namespace, data: Dataset,
                step: Callable[[torch.Tensor, torch.Tensor], None]) -> None:
    """``step(x, y)`` on this rank's batches, warm-up then timed steps; rank 0 prints the median."""
    stream = BatchStream(shard_indices(len(data.y_train), comm.size, comm.rank, 0), args.batch_size, 0,
                         comm.rank + 1)
    times = []
    for i in range(args.warmup + args.steps):
        t0 = MPI.Wtime()
        idx = stream.next()
        step(torch.from_numpy(data.normalise(data.x_train[idx])), torch.from_numpy(data.y_train[idx]))
        if i >= args.warmup:
            times.append(MPI.Wtime() - t0)
    everything = comm.gather(times, root=0)
    if comm.rank == 0:
        print(f"median_step_s={np.median(np.concatenate(everything)):.6f}")
