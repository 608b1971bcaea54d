"""The reference parameter server: hpcbench asgd's protocol in plain mpi4py + numpy, nothing else.

Rank 0 publishes (version, parameters, version) in an RMA window; each worker reads it one-sidedly,
writes a gradient of N float32 (zero compute), sends it with its version into rank 0's pre-posted
receives and waits for the acknowledgement. Rank 0 applies θ -= lr·g in arrival order, publishes,
acknowledges and re-posts the receive, until steps × workers updates. Blocking MPI waits, as a user
would write them. No timeline, no records, no evaluations, no heartbeats. Prints updates/s on rank 0.

``--protocol versioned`` (hpcbench's now): two slots, each with a sequence number and a count of
readers; every rank holds a NOCHECK shared lock on the window for the whole run; rank 0 marks the slot
readers are not pointed at (odd number), and writes it once no reader counts on it; a worker counts
itself on the newest slot, checks its number did not move, copies it and lets go.
``--protocol locked`` (hpcbench's before): rank 0 publishes under an exclusive lock on its own
window, which waits out the readers' shared locks.
Run: mpiexec -n WORLD python benchmarks/bare_ps.py --params 100000 --protocol versioned
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
    p.add_argument("--protocol", choices=("versioned", "locked"), default="versioned")
    args = p.parse_args()
    versioned = args.protocol == "versioned"
    comm = MPI.COMM_WORLD
    n, d = comm.size - 1, args.params
    # A slot: int64 version, d float32, int64 check (d even keeps the trailer aligned); versioned:
    # two int64 sequence numbers and two reader counts, then two slots.
    slot = 2 + d // 2
    header = 4 if versioned else 0
    words = header + (2 if versioned else 1) * slot
    win = MPI.Win.Allocate(words * 8 if comm.rank == 0 else 0, 8, comm=comm)
    if versioned:
        win.Lock_all(MPI.MODE_NOCHECK)
    grad_msg = np.zeros(1 + d // 2 + 1, np.int64)  # version, then the gradient's float32 pairs
    if comm.rank == 0:
        theta = np.zeros(d, np.float32)
        one, count = np.ones(1, np.int64), np.zeros(1, np.int64)
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
                if versioned:
                    s = applied % 2  # the slot readers are not pointed at
                    at = header + s * slot
                    while True:
                        before = buf[s]
                        buf[s] = 2 * applied - 1  # odd: being written
                        win.Sync()
                        win.Fetch_and_op(one, count, 0, 2 + s, op=MPI.NO_OP)
                        win.Flush(0)
                        if count[0] == 0:
                            break
                        buf[s] = before  # a reader is still copying it: wait for it to let go
                        win.Sync()
                    buf[at] = applied
                    buf[at + 1:at + 1 + d // 2].view(np.float32)[:] = theta
                    buf[at + slot - 1] = applied
                    win.Sync()
                    buf[s] = 2 * applied
                    win.Sync()
                else:
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
        params = np.zeros(slot, np.int64)
        seqs, again = np.zeros(2, np.int64), np.zeros(2, np.int64)
        plus, minus = np.ones(1, np.int64), -np.ones(1, np.int64)
        ack = np.zeros(1, np.int64)
        comm.Barrier()
        while True:
            if versioned:
                while True:
                    win.Get(seqs, 0, target=0)
                    win.Flush(0)
                    s = int(np.argmax(seqs))
                    if seqs[s] % 2:  # being written: the other slot holds the version before
                        s = 1 - s
                    win.Accumulate(plus, 0, target=2 + s, op=MPI.SUM)
                    win.Flush(0)
                    win.Get(again, 0, target=0)
                    win.Flush(0)
                    if again[s] == seqs[s]:
                        win.Get(params, 0, target=header + s * slot)
                        win.Flush(0)
                    win.Accumulate(minus, 0, target=2 + s, op=MPI.SUM)
                    win.Flush(0)
                    if again[s] == seqs[s]:
                        break
            else:
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
    if versioned:
        win.Unlock_all()
    win.Free()


if __name__ == "__main__":
    main()
