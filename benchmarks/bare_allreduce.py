"""The reference loop: synchronous SGD with a flat-gradient Allreduce in plain mpi4py + torch.

Same model, data, shard and batch as ``hpcbench run --algo allreduce``; no timeline, no windows,
no coordinator. Prints the median step time over all ranks after an untimed warm-up. With
``--idle-rank`` rank 0 trains nothing and only waits for the end, testing every 10 ms as hpcbench's
idle coordinator does: the same number of processes as hpcbench on the same cores, so what is left
between the two is hpcbench's own cost.
Run: mpiexec -n WORKERS python benchmarks/bare_allreduce.py --model cnn --steps 200
"""
import time

import torch
from mpi4py import MPI
from reference_loop import arguments, timed_steps

from hpcbench.workload.datasets import load_dataset
from hpcbench.workload.networks import build_model


def main() -> None:
    p = arguments()
    p.add_argument("--idle-rank", action="store_true", help="rank 0 only waits (run on WORKERS + 1 ranks)")
    args = p.parse_args()
    world = MPI.COMM_WORLD
    idle = args.idle_rank and world.rank == 0
    comm = world.Split(0 if idle else 1, world.rank) if args.idle_rank else world
    torch.set_num_threads(1)
    if idle:
        done = world.Ibarrier()
        while not done.Test():
            time.sleep(0.01)
        return
    data = load_dataset(args.dataset)
    model = build_model(args.model, data.input_shape, data.classes, seed=0)
    params = list(model.parameters())

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
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

    timed_steps(comm, args, data, step)
    if args.idle_rank:
        world.Ibarrier().Wait()


if __name__ == "__main__":
    main()
