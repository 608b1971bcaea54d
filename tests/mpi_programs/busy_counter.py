"""Workers fetch-and-add into rank 0's counter while rank 0 computes outside MPI for BUSY_S.

``mode``: the window's declared mode ("count": lock-free atomics; "accumulate": each add under a
lock, which rank 0 grants only from inside MPI). Each worker prints how long its adds took and the
values they returned; rank 0 prints the counter's final value.
"""
import sys
import time

import numpy as np

from hpcbench.comm.mpi import MpiComm

ADDS = 50
BUSY_S = 1.5


def main(mode: str) -> None:
    comm = MpiComm()
    comm.open_window("budget", 8, owned=comm.rank == 0, mode=mode)
    comm.world.Barrier()
    if comm.rank == 0:
        start = time.monotonic()
        while time.monotonic() - start < BUSY_S:  # computing: no MPI call
            pass
    else:
        start = time.monotonic()
        seen = [comm.fetch_add("budget", 0, comm.rank) for _ in range(ADDS)]
        print(f"rank {comm.rank} adds_s={time.monotonic() - start:.3f} seen={len(set(seen))}", flush=True)
    comm.world.Barrier()
    if comm.rank == 0:
        print(f"counter={int(comm.windows['budget'].local.view(np.int64)[0])}", flush=True)
    comm.world.Barrier()
    comm.windows["budget"].free()


if __name__ == "__main__":
    main(sys.argv[1])
