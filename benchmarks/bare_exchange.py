"""What a network delivers to one message in and one out per rank, in plain mpi4py (no hpcbench).

Every rank sends MESSAGE bytes to one peer and receives as many from another, STEPS times, and the
median time of an exchange (and the spread of exchange times: sd and cv = sd / median; in lockstep,
the links' own noise, for `simulate --network ...,noise=CV`) is printed against the link's rate for
one message (bytes / rate):
- pairwise: peers in pairs, each sending to the one it receives from (as the all-reduce's
  recursive halving does), so one connection carries both directions;
- shifted: rank r sends to r + 2^k and receives from r − 2^k, k turning each step (SGP's
  exponential graph), so what a rank sends and what it receives go over different connections.
Each in lockstep (a barrier before every exchange) and free-running (each rank goes on as soon as
its own messages are done, as SGP's workers do). An α–β model with full-duplex links gives every
case the same time; the shifted pattern free-running is unstable (sends complete at once, so a rank
ahead shares its peer's link with the message the peer needs now) and drifts apart from small noise. Run across the
emulated cluster:
    jobs/local/mpiexec-emulated -n 8 python benchmarks/bare_exchange.py --rate 100mbit
"""
import argparse
import statistics
import time

import numpy as np
from mpi4py import MPI

from hpcbench.runtime.sim.costs import link_bandwidth


def exchange(comm: MPI.Intracomm, pattern: str, steps: int, nbytes: int, lockstep: bool) -> list[float]:
    """Each exchange's seconds; ``lockstep``: all ranks start each exchange together (a barrier),
    else each goes on to its next exchange as soon as its own two messages are done."""
    r, n = comm.rank, comm.size
    out, into = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)
    times = []
    for k in range(steps):
        if pattern == "pairwise":
            to = frm = r ^ 1 if (r ^ 1) < n else r
        else:
            shift = 2 ** (k % max(1, (n - 1).bit_length())) % n or 1
            to, frm = (r + shift) % n, (r - shift) % n
        if lockstep:
            comm.Barrier()
        t = time.perf_counter()
        if to != r:
            MPI.Request.Waitall([comm.Isend(out, to, k), comm.Irecv(into, frm, k)])
        times.append(time.perf_counter() - t)
    return times


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--message", type=int, default=1_000_000, help="bytes per message")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rate", default="", help="the links' tc rate, for bytes / rate (e.g. 100mbit)")
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    rate = link_bandwidth(f"rate={args.rate}") if args.rate else None
    for pattern in ("pairwise", "shifted"):
        exchange(comm, pattern, 2, args.message, True)  # connections set up, untimed
        for lockstep in (True, False):
            comm.Barrier()
            start = time.perf_counter()
            mine = exchange(comm, pattern, args.steps, args.message, lockstep)
            elapsed = comm.reduce(time.perf_counter() - start, MPI.MAX)  # the slowest rank's
            everyone = comm.gather(mine)
            if everyone is not None and elapsed is not None:  # rank 0
                each = [t for ts in everyone for t in ts]
                median, sd = statistics.median(each), statistics.stdev(each)
                ideal = f"; bytes / rate {1e3 * args.message / rate:.1f} ms" if rate else ""
                print(f"{pattern}, {'in lockstep' if lockstep else 'free-running'}: {comm.size} ranks, "
                      f"{args.message} B: median exchange {1e3 * median:.1f} ms (sd {1e3 * sd:.1f}, cv "
                      f"{sd / median:.2f}), "
                      f"{1e3 * elapsed / args.steps:.1f} ms an exchange overall{ideal}")


if __name__ == "__main__":
    main()
