"""The reference parameter server: hpcbench asgd's protocol in plain mpi4py + numpy, nothing else.

Rank 0 publishes (version, parameters, version) in an RMA window; each worker reads it with a
passive-target Get under a shared lock, writes a gradient of N float32 (zero compute), sends it with
its version into rank 0's pre-posted receives and waits for the acknowledgement. Rank 0 applies
θ -= lr·g in arrival order, publishes under an exclusive lock, acknowledges, and re-posts the
receive, until steps × workers updates. No timeline, no records, no evaluations, no heartbeats.
Prints updates/s on rank 0. Run: mpiexec -n WORLD python benchmarks/bare_ps.py --params 100000
"""
import argparse

import numpy as np
from mpi4py import MPI

GO, STOP = 0, 1


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--params", type=int, default=100_000)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    n, d = comm.size - 1, args.params
    # The window's layout: int64 version, d float32, int64 check (d even keeps the trailer aligned).
    words = 2 + d // 2 + 2
    win = MPI.Win.Allocate(words * 8 if comm.rank == 0 else 0, 8, comm=comm)
    grad_msg = np.zeros(1 + d // 2 + 1, np.int64)  # version, then the gradient's float32 pairs
    if comm.rank == 0:
        theta = np.zeros(d, np.float32)
        buf = np.frombuffer(win.tomemory(), np.int64)
        buf[:] = 0
        recvs = [np.zeros_like(grad_msg) for _ in range(n)]
        reqs = [comm.Irecv(recvs[w], source=w + 1, tag=1) for w in range(n)]
        ack = np.zeros(1, np.int64)
        comm.Barrier()
        t0 = MPI.Wtime()
        applied, stopped, target = 0, 0, args.steps * n
        while stopped < n:
            w = MPI.Request.Waitany(reqs)
            if applied < target:
                grad = recvs[w][1:1 + d // 2].view(np.float32)
                theta -= args.lr * grad
                applied += 1
                win.Lock(0, MPI.LOCK_EXCLUSIVE)
                buf[0] = applied
                buf[1:1 + d // 2].view(np.float32)[:] = theta
                buf[-1] = applied
                win.Unlock(0)
                end = t0 if applied < target else MPI.Wtime()
            ack[0] = GO if applied < target else STOP
            comm.Send(ack, dest=w + 1, tag=2)
            if ack[0] == STOP:
                stopped += 1
            else:
                reqs[w] = comm.Irecv(recvs[w], source=w + 1, tag=1)
        print(f"updates_per_s={applied / (end - t0):.3f}")
    else:
        params = np.zeros(words, np.int64)
        ack = np.zeros(1, np.int64)
        comm.Barrier()
        while True:
            win.Lock(0, MPI.LOCK_SHARED)
            win.Get(params, 0)
            win.Unlock(0)
            assert params[0] == params[-1], "torn read"
            grad = np.full(d, 1e-6, np.float32)  # the payload's gradient, written as a real one is
            grad_msg[0] = params[0]
            grad_msg[1:1 + d // 2].view(np.float32)[:] = grad
            comm.Send(grad_msg, dest=0, tag=1)
            comm.Recv(ack, source=0, tag=2)
            if ack[0] == STOP:
                break
    win.Free()


if __name__ == "__main__":
    main()
