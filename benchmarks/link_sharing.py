"""How transfers through one link share it, in plain mpi4py (no hpcbench): K peers read one rank's
window at once (one-sided gets of MESSAGE bytes each, started together after a barrier), ROUNDS
times, and the time each needs, in order of finishing, in message times (bytes / rate). Equal
shares (processor sharing) finish all K together after K message times; first come, first served
one after another at 1, 2, ..., K. Printed beside them: the share of the link the first to finish
would need to have had, in a model where the j-th gets a weight ((1 - s) / s)^j, nearest the mean
measured times (0.5: equal shares); the simulator's ``sim.share_cv`` is chosen so that random
weights give the first of two that share on average (0.3: 58%). Run across the emulated cluster (rank 0 on a node of
its own, one peer per node):
    jobs/local/mpiexec-emulated -n 5 python benchmarks/link_sharing.py --rate 20mbit --peers 1,2,4
"""
import argparse

import numpy as np
from mpi4py import MPI

from hpcbench.runtime.sim.costs import link_bandwidth


def ordered_times(k: int, share: float) -> list[float]:
    """The model's finishing times of k equal transfers started together, in message times: the j-th
    oldest has weight ((1 - share) / share)^j (share 0.5: all k at k)."""
    r = (1 - share) / share
    left, t, out = [1.0] * k, 0.0, []
    while left:
        w = [r**j for j in range(len(left))]
        rates = [x / sum(w) for x in w]
        dt = min(x / v for x, v in zip(left, rates))
        t += dt
        left = [x - dt * v for x, v in zip(left, rates)]
        out += [t] * sum(x <= 1e-12 for x in left)
        left = [x for x in left if x > 1e-12]
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rate", required=True, help="the links' rate, as tc writes it (e.g. 20mbit)")
    p.add_argument("--bytes", type=int, default=1_200_000)
    p.add_argument("--peers", default="1,2,4")
    p.add_argument("--rounds", type=int, default=8)
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    rate = link_bandwidth(f"rate={args.rate}")
    unit = args.bytes / rate
    win = MPI.Win.Allocate(args.bytes if comm.rank == 0 else 0, 1, comm=comm)
    buf = np.empty(args.bytes, np.uint8)
    for k in (int(x) for x in args.peers.split(",")):
        if k >= comm.size:
            continue
        rounds = []
        for _ in range(args.rounds):
            comm.Barrier()
            t0 = MPI.Wtime()
            took = np.zeros(1)
            if 1 <= comm.rank <= k:
                win.Lock(0, MPI.LOCK_SHARED)
                win.Get(buf, 0)
                win.Unlock(0)
                took[0] = MPI.Wtime() - t0
            every = comm.gather(took[0], root=0)
            if comm.rank == 0:
                rounds.append(sorted(every[1:k + 1]))
        if comm.rank == 0:
            mean = np.mean(rounds, axis=0) / unit
            grid = np.round(np.arange(0.5, 0.99, 0.01), 2)
            best = (min(grid, key=lambda s: float(np.sum((np.array(ordered_times(k, s)) - mean) ** 2))) if k > 1
                    else float("nan"))
            print(f"{args.rate} {args.bytes} B, {k} peer(s): finishing, in message times ({unit * 1e3:.0f} ms): "
                  + " ".join(f"{x:.2f}" for x in mean)
                  + f" (spread of the first "
                    f"{np.min(rounds, axis=0)[0] / unit:.2f}-{np.max(rounds, axis=0)[0] / unit:.2f})"
                  + (f"; nearest share of the first {best:.2f} (model "
                     f"{' '.join(f'{x:.2f}' for x in ordered_times(k, best))})"
                     if k > 1 else ""), flush=True)
    win.Free()


if __name__ == "__main__":
    main()
