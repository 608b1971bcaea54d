"""The reference loop: synchronous SGD with a flat-gradient Allreduce in plain mpi4py + torch.

Same model, data, shard and batch as ``hpcbench run --algo allreduce``; no timeline, no windows,
no coordinator. Prints the median step time over all ranks after an untimed warm-up.
Run: mpiexec -n WORKERS python benchmarks/bare_allreduce.py --model cnn --steps 200
"""
import argparse

import numpy as np
import torch
from mpi4py import MPI

from hpcbench.workload.datasets import load_dataset
from hpcbench.workload.models import build_model
from hpcbench.workload.sharding import BatchStream, shard_indices


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn")
    p.add_argument("--dataset", default="digits")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
    data = load_dataset(args.dataset)
    model = build_model(args.model, data.input_shape, data.classes, seed=0)
    params = list(model.parameters())
    stream = BatchStream(shard_indices(len(data.y_train), comm.size, comm.rank, 0), args.batch_size, 0,
                         comm.rank + 1)
    times = []
    for step in range(args.warmup + args.steps):
        t0 = MPI.Wtime()
        idx = stream.next()
        x = torch.from_numpy(data.normalise(data.x_train[idx]))
        y = torch.from_numpy(data.y_train[idx])
        for q in params:
            q.grad = None
        torch.nn.functional.cross_entropy(model(x), y).backward()
        flat = torch.cat([q.grad.reshape(-1) for q in params]).numpy()
        comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
        flat /= comm.size
        with torch.no_grad():
            offset = 0
            for q in params:
                n = q.numel()
                q.sub_(args.lr * torch.from_numpy(flat[offset:offset + n]).view_as(q))
                offset += n
        if step >= args.warmup:
            times.append(MPI.Wtime() - t0)
    everything = comm.gather(times, root=0)
    if comm.rank == 0:
        print(f"median_step_s={np.median(np.concatenate(everything)):.6f}")


if __name__ == "__main__":
    main()
