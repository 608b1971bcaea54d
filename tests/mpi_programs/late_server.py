"""Rank 0 still at work after the workers have finished (as when it reads their kept snapshots after
a long run) must not be given up on, nor give up on them, while every rank is alive and heard.

Heartbeats every 0.1 s with a deadline of 1 s; rank 0 works 3 s more (waiting as the session does,
heartbeats going on), while the workers wait for it in ``close(1.0)``. Prints "rank R closed".
"""
from hpcbench.comm.mpi import MpiComm


def main() -> None:
    comm = MpiComm()
    comm.world_barrier(60)
    comm.start_heartbeats(every=0.1, deadline=1.0)
    if comm.rank == 0:
        comm._wait(lambda: None, 3.0, "its own last work", fail=False)
    comm.close(1.0)
    print(f"rank {comm.rank} closed", flush=True)


if __name__ == "__main__":
    main()
