"""The PyTorch reference: DistributedDataParallel over gloo, the same model, data, shard and batch as
``hpcbench run --algo allreduce``, launched by mpiexec (ranks from mpi4py, a TCP rendezvous on
this host). DDP buckets gradients (``--bucket-mb``) and all-reduces them during backward.
Prints the median step time over all ranks after an untimed warm-up.
Run: mpiexec -n WORKERS python benchmarks/ddp_allreduce.py --model cnn --steps 200 --port 29517
"""
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from mpi4py import MPI
from reference_loop import arguments, timed_steps

from hpcbench.workload.datasets import load_dataset
from hpcbench.workload.networks import build_model


def main() -> None:
    p = arguments()
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--port", type=int, default=29517)
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=comm.rank, world_size=comm.size, timeout=timedelta(seconds=120))
    data = load_dataset(args.dataset)
    model = torch.nn.parallel.DistributedDataParallel(build_model(args.model, data.input_shape, data.classes, seed=0),
                                                      bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()  # DDP averages the gradients
        opt.step()

    timed_steps(comm, args, data, step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
