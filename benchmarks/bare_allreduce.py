"""The reference loop: synchronous SGD with a flat-gradient Allreduce in plain mpi4py + torch.

Same model, data, shard and batch as ``hpcbench run --algo allreduce``; no timeline, no windows,
no coordinator. Prints the median step time over all ranks after an untimed warm-up.
Run: mpiexec -n WORKERS python benchmarks/bare_allreduce.py --model cnn --steps 200
"""
import torch
from mpi4py import MPI

from hpcbench.workload.datasets import load_dataset
from hpcbench.workload.networks import build_model
from reference_loop import arguments, timed_steps


def main() -> None:
    args = arguments().parse_args()
    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
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


if __name__ == "__main__":
    main()
