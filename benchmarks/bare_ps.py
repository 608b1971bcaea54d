"""The reference parameter server: hpcbench asgd's protocol in plain mpi4py + numpy, nothing else.

Rank 0 publishes (version, parameters, version) in an RMA window; each worker reads it one-sidedly,
writes a gradient of N float32 (zero compute), sends it with its version into rank 0's pre-posted
receives and waits for the acknowledgement. Rank 0 applies θ -= lr·g in arrival order, publishes,
acknowledges and re-posts the receive, until steps × workers updates. Blocking MPI waits, as a user
would write them. No timeline, no records, no evaluations, no heartbeats. Prints updates/s on rank 0.

``--protocol versioned`` (hpcbench's now): two slots, each with an int64 word (sequence number above,
readers copying it below); every rank holds a NOCHECK shared lock on the window for the whole run;
rank 0 takes the slot readers are not pointed at with a compare-and-swap that needs no reader on it,
writes it and raises its number; a worker reads the words, adds one to the newest slot's with a
fetch-and-add (which says whether its number moved), copies the slot and takes its one back.
``--protocol locked`` (hpcbench's before): rank 0 publishes under an exclusive lock on its own
window, which waits out the readers' shared locks.
Run: mpiexec -n WORLD python benchmarks/bare_ps.py --params 100000 --protocol versioned
"""
import argparse

import numpy as np
from mpi4py import MPI

GO, STOP = 0, 1
BITS = 24  # a versioned slot's word: sequence number << BITS | readers copying it


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
    # two int64 words (sequence number << 24 | readers), then two slots.
    slot = 2 + d // 2
    header = 2 if versioned else 0
    words = header + (2 if versioned else 1) * slot
    win = MPI.Win.Allocate(words * 8 if comm.rank == 0 else 0, 8, comm=comm)
    if versioned:
        win.Lock_all(MPI.MODE_NOCHECK)
    grad_msg = np.zeros(1 + d // 2 + 1, np.int64)  # version, then the gradient's float32 pairs
    if comm.rank == 0:
        theta = np.zeros(d, np.float32)
        seqs = [0, 0]
        expected, mark, old = np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64)
        raise_ = np.array([1 << BITS], np.int64)
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
                    expected[0], mark[0] = seqs[s] << BITS, (2 * applied - 1) << BITS  # odd: being written
                    while True:  # until no reader is copying the slot
                        win.Compare_and_swap(mark, expected, old, 0, s)
                        win.Flush(0)
                        if old[0] == expected[0]:
                            break
                    buf[at] = applied
                    buf[at + 1:at + 1 + d // 2].view(np.float32)[:] = theta
                    buf[at + slot - 1] = applied
                    win.Sync()
                    win.Fetch_and_op(raise_, old, 0, s, op=MPI.SUM)  # even again, keeping readers' counts
                    win.Flush(0)
                    seqs[s] = 2 * applied
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
        words, was = np.zeros(2, np.int64), np.zeros(1, np.int64)
        plus, minus = np.ones(1, np.int64), -np.ones(1, np.int64)
        ack = np.zeros(1, np.int64)
        comm.Barrier()
        while True:
            if versioned:
                while True:
                    win.Get(words, 0, target=0)
                    win.Flush(0)
                    seqs = words >> BITS
                    s = int(np.argmax(seqs))
                    if seqs[s] % 2:  # being written: the other slot holds the version before
                        s = 1 - s
                    win.Fetch_and_op(plus, was, 0, s, op=MPI.SUM)
                    win.Flush(0)
                    held = was[0] >> BITS == seqs[s]
                    if held:
                        win.Get(params, 0, target=header + s * slot)
                        win.Flush(0)
                    win.Accumulate(minus, 0, target=s, op=MPI.SUM)
                    win.Flush(0)
                    if held:
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
